"""Experiment specs (gluondet.tools.spec, .prototxt, .tao): the text-format reader, TAO's schema
and its mapping onto the scripts' flags, YAML/JSON specs as the scripts' command lines, and
`gluondet train/evaluate/inference -e` from TAO's documented sample spec on a KITTI copy of
BCCD."""
import json
import os

import pytest

from gluondet import detectors
from gluondet import cli as gluondet_cli
from gluondet.tools import prototxt, spec as specs, tao

SCHEMA = {'Top': {'a': 'float', 'b': ('repeated', 'int32'), 'c': 'Inner', 's': 'string',
                  'e': ('enum', ('SAMPLE', 'INTEGRATE')), 'f': 'bool',
                  'm': ('map', 'string', 'float'), 'r': ('repeated', 'Inner'),
                  'x': 'string', 'y': 'string', '__oneof__': [('x', 'y')]},
          'Inner': {'v': 'uint32', 'w': 'string'}}


def _read(text, message='Top'):
    return prototxt.validate(prototxt.parse(text, 'spec.txt'), SCHEMA, message, 'spec.txt')


def test_text_format_reads_every_form():
    spec = _read('''# a comment
a: -2.5e-3  b: 1 b: [2, 3];  b: 0x10,
c { v: 7 w: "x" 'y' }  # adjacent strings are one
s: "tab\\there \\"q\\" \\101"
e: INTEGRATE f: True
m { key: "car" value: 2 } m < key: 'van' value: 1.5 >
r: { v: 1 } r { v: 2 }
''')
    assert spec == {'a': -0.0025, 'b': [1, 2, 3, 16], 'c': {'v': 7, 'w': 'xy'},
                    's': 'tab\there "q" A', 'e': 'INTEGRATE', 'f': True,
                    'm': {'car': 2.0, 'van': 1.5}, 'r': [{'v': 1}, {'v': 2}]}
    assert spec.lines == {'a': 2, 'b': 2, 'c': 3, 's': 4, 'e': 5, 'f': 5, 'm': 6, 'r': 7}
    assert _read('a: 1 f: 0 e: 1') == {'a': 1.0, 'f': False, 'e': 'INTEGRATE'}
    assert _read('a: inf')['a'] == float('inf') and _read('a: 2.5f')['a'] == 2.5


@pytest.mark.parametrize('text, message', [
    ('a: 1\nc { v: 1 \n vv: 2 }', "spec.txt:3: unknown field vv in c (did you mean 'v'?)"),
    ('\n\naa: 1', "spec.txt:3: unknown field aa in the spec (did you mean 'a'?)"),
    ('e: SAMPEL', "spec.txt:1: e takes one of SAMPLE, INTEGRATE, got SAMPEL (did you mean "
                  "'SAMPLE'?)"),
    ('a: 1\na: 2', 'spec.txt:2: a is set more than once'),
    ('c { v: -1 }', 'spec.txt:1: c.v is unsigned'),
    ('c { v: 1.5 }', 'spec.txt:1: c.v takes an integer, got 1.5'),
    ('s: bare', 'spec.txt:1: s takes a quoted string, got bare'),
    ('a: "1"', 'spec.txt:1: a takes a number'),
    ('f: yes', 'spec.txt:1: f takes true or false, got yes'),
    ('x: "1" y: "2"', 'spec.txt:1: x and y are alternatives: set one'),
    ('c: 3', 'spec.txt:1: c is a message'),
    ('a { }', 'spec.txt:1: a takes a value, not a block'),
    ('c {\n v: 1\n', "spec.txt:3: missing '}' at the end of the file"),
    ('a 1', "spec.txt:1: expected ':' or '{' after a, got '1'"),
    ('s: "open', 'spec.txt:1: unexpected'),
    ('b: [1 2]', "spec.txt:1: expected ',' or ']' in the list of b, got '2'"),
])
def test_text_format_errors_name_the_line(text, message):
    with pytest.raises(prototxt.ProtoTextError) as err:
        _read(text)
    assert str(err.value).startswith(message), str(err.value)


# TAO's documented sample RetinaNet spec (the RetinaNet page of TAO's docs), its data paths
# and sizes made ours: KITTI folders of BCCD, 96x64 inputs, one epoch of a small network.
TAO_SAMPLE = '''random_seed: 42
retinanet_config {
  aspect_ratios_global: "[1.0, 2.0, 0.5]"
  scales: "[0.045, 0.09, 0.2, 0.4, 0.55, 0.7]"
  two_boxes_for_ar1: false
  clip_boxes: false
  loss_loc_weight: 0.8
  focal_loss_alpha: 0.25
  focal_loss_gamma: 2.0
  variances: "[0.1, 0.1, 0.2, 0.2]"
  arch: "resnet"
  nlayers: 18
  n_kernels: 1
  n_anchor_levels: 1
  feature_size: 32
  freeze_bn: false
  freeze_blocks: 0
}
training_config {
  enable_qat: False
  batch_size_per_gpu: 2
  num_epochs: 1
  n_workers: 0
  optimizer {
    sgd {
      momentum: 0.9
      nesterov: True
    }
  }
  learning_rate {
    soft_start_annealing_schedule {
      min_learning_rate: 4e-5
      max_learning_rate: 1.5e-2
      soft_start: 0.1
      annealing: 0.3
    }
  }
  regularizer {
    type: L1
    weight: 2e-6
  }
}
eval_config {
  validation_period_during_training: 1
  average_precision_mode: SAMPLE
  batch_size: 2
  matching_iou_threshold: 0.5
}
nms_config {
  confidence_threshold: 0.01
  clustering_iou_threshold: 0.6
  top_k: 200
}
augmentation_config {
  output_width: 96
  output_height: 64
  output_channel: 3
}
dataset_config {
  data_sources: {
    image_directory_path: "TRAIN/image_2"
    label_directory_path: "TRAIN/label_2"
  }
  target_class_mapping {
    key: "rbc"
    value: "RBC"
  }
  target_class_mapping {
    key: "wbc"
    value: "WBC"
  }
  target_class_mapping {
    key: "platelets"
    value: "Platelets"
  }
  validation_data_sources: {
    image_directory_path: "VAL/image_2"
    label_directory_path: "VAL/label_2"
  }
}
'''


def _tao_spec(folder, train='/data/train', val='/data/val', text=TAO_SAMPLE):
    path = os.path.join(str(folder), 'retinanet_spec.txt')
    with open(path, 'w') as f:
        f.write(text.replace('TRAIN', train).replace('VAL', val))
    return path


def test_tao_sample_maps_onto_the_retinanet_flags(tmp_path):
    path = _tao_spec(tmp_path)
    t = tao.translate(tao.read_tao_spec(path), path, '/links', devices=2,
                      results_dir='/results')
    flags = dict(t.flags)
    assert flags.pop('anchor_base') == pytest.approx(0.356)    # 0.045 x 64 px / stride 8 ...
    assert flags == dict(
        seed=42, network='resnet18_v1b', anchor_ratios=[1.0, 0.5, 2.0], anchor_scales=[1.0],
        loss_loc_weight=0.8, focal_alpha=0.25, focal_gamma=2.0, freeze_bn=False,
        head_layers=1, freeze_blocks=[0], fpn_channels=32, head_channels=32, batch_size=4,
        epochs=1, num_workers=0, lr_mode='soft_start_annealing', lr=0.015, lr_min=4e-5,
        soft_start=0.1, annealing=0.3, regularizer='l1', reg_weight=2e-6, momentum=0.9,
        nesterov=True, pretrained_base=False, val_interval=1, resize=64, max_size=96,
        lr_warmup=0, box_stds=[0.1, 0.1, 0.2, 0.2],
        class_mapping={'rbc': 'RBC', 'wbc': 'WBC', 'platelets': 'Platelets'},
        dataset='kitti', dataset_root='/links', train_split='training', val_split='val')
    assert t.evaluation == {'ap': '11point', 'batch_size': 2, 'iou_thresh': 0.5,
                            'nms': {'score_thresh': 0.01, 'nms_thresh': 0.6, 'post_nms': 200}}
    assert t.warnings == []
    assert any(n.startswith('retinanet_config.scales: anchors of') for n in t.notes)
    # and every key is a flag of train_retinanet.py (those of other changes aside)
    schema = specs.Schema(specs.load_script('retinanet').build_parser())
    assert not set(t.flags) - set(schema.keys)


def test_tao_typo_is_an_error_naming_the_line(tmp_path):
    path = _tao_spec(tmp_path, text=TAO_SAMPLE.replace('    sgd {', '    sgdd {'))
    with pytest.raises(prototxt.ProtoTextError, match=r"retinanet_spec.txt:25: unknown field "
                       r"sgdd in training_config.optimizer \(did you mean 'sgd'\?\)"):
        tao.read_tao_spec(path)


def test_tao_fields_that_leave_the_model_alone_are_warned(tmp_path):
    text = TAO_SAMPLE.replace('enable_qat: False', 'enable_qat: False\n  max_queue_size: 8\n'
                              '  visualizer { enabled: true num_images: 3 '
                              'weight_histograms: true }\n  early_stopping { monitor: '
                              '"validation_loss" patience: 2 min_delta: 0.01 }')
    text = text.replace('output_channel: 3', 'output_channel: 3\n  random_flip: 0.5\n'
                        '  image_mean { key: "b" value: 103.9 } image_mean { key: "g" value: '
                        '116.8 } image_mean { key: "r" value: 123.7 }')
    path = _tao_spec(tmp_path, text=text)
    t = tao.translate(tao.read_tao_spec(path), path, '/links', results_dir='/r')
    named = sorted(w.split(': ')[1] for w in t.warnings)
    assert named == ['training_config.max_queue_size',
                     'training_config.visualizer.weight_histograms']
    assert (t.flags['logdir'], t.flags['tb_images']) == ('/r/tensorboard', 3)
    assert (t.flags['early_stop_monitor'], t.flags['early_stop_patience'],
            t.flags['early_stop_min_delta']) == ('validation_loss', 2, pytest.approx(0.01))
    line = next(w for w in t.warnings if 'max_queue_size' in w)
    assert line.startswith(path + ":21: ")


@pytest.mark.parametrize('change, message', [
    (('nlayers: 18', 'nlayers: 10'), 'gluondet has no RetinaNet on arch resnet nlayers 10'),
    (('arch: "resnet"', 'arch: "darknet"'), 'gluondet has no RetinaNet on arch darknet'),
    (('image_directory_path: "VAL/image_2"', 'tfrecords_path: "/r/val*"'),
     'must be of one kind'),
    (('dataset_config {', 'dataset_config {\n  type: "voc"'),
     'dataset_config.type voc'),
    (('learning_rate {', 'learning_rate {\n soft_start_cosine_annealing_schedule { '
      'max_learning_rate: 0.1 }'), 'are alternatives'),
])
def test_tao_specs_gluondet_cannot_train_are_refused(tmp_path, change, message):
    path = _tao_spec(tmp_path, text=TAO_SAMPLE.replace(*change))
    with pytest.raises(ValueError, match=message):
        tao.translate(tao.read_tao_spec(path), path)


def test_tao_records_map_to_the_rec_flags(tmp_path):
    text = TAO_SAMPLE.replace('image_directory_path: "TRAIN/image_2"\n    label_directory_path: '
                              '"TRAIN/label_2"', 'tfrecords_path: "/recs/train*"')
    text = text.replace('image_directory_path: "VAL/image_2"\n    label_directory_path: '
                        '"VAL/label_2"', 'tfrecords_path: "/recs/val*"')
    path = _tao_spec(tmp_path, text=text)
    flags = tao.translate(tao.read_tao_spec(path), path).flags
    assert (flags['dataset'], flags['train_rec'], flags['val_rec']) == (
        'rec', '/recs/train*', '/recs/val*')
    assert 'dataset_root' not in flags


def test_kitti_sources_are_linked_as_one_kitti_folder(tmp_path):
    def source(name, stems):
        for sub in ('images', 'labels'):
            os.makedirs(str(tmp_path / name / sub))
        for stem in stems:
            (tmp_path / name / 'images' / (stem + '.png')).write_bytes(b'')
            (tmp_path / name / 'labels' / (stem + '.txt')).write_text('')
        return {'image_directory_path': str(tmp_path / name / 'images'),
                'label_directory_path': str(tmp_path / name / 'labels')}
    t = tao.Translation()
    t.data = {'kind': 'kitti', 'train': [source('a', ['1', '2']), source('b', ['3'])],
              'val': [source('c', ['4'])]}
    tao.link_kitti(t, str(tmp_path / 'links'))
    tao.link_kitti(t, str(tmp_path / 'links'))      # again: the links are made anew
    assert sorted(os.listdir(str(tmp_path / 'links' / 'training' / 'label_2'))) == [
        '1.txt', '2.txt', '3.txt']
    assert os.path.islink(str(tmp_path / 'links' / 'val' / 'image_2'))
    assert os.listdir(str(tmp_path / 'links' / 'val' / 'image_2')) == ['4.png']
    assert os.path.isdir(str(tmp_path / 'c' / 'images'))   # the data itself is left alone
    t.data['train'].append(source('d', ['1']))
    with pytest.raises(ValueError, match='two data sources have 1.png'):
        tao.link_kitti(t, str(tmp_path / 'links'))


def test_without_validation_sources_the_training_data_validates(tmp_path):
    text = TAO_SAMPLE[:TAO_SAMPLE.index('  validation_data_sources')] + '}\n'
    path = _tao_spec(tmp_path, text=text)
    t = tao.translate(tao.read_tao_spec(path), path)
    assert t.data['val'] == t.data['train']
    assert any('no validation_data_sources' in w for w in t.warnings)


RETINANET = ['--network', 'resnet18_v1b', '--dataset', 'kitti', '--dataset-root', '/k',
             '--class-mapping', 'van=car,car=car', '--gpus', '', '--epochs', '3',
             '--no-pretrained-base', '--jitter', '64', '96', '--freeze-bn', '--lr-warmup', '-1',
             '--anchor-ratios', '0.5,1,2', '--lr-mode', 'soft_start_annealing', '--lr-min', '1e-5',
             '--nesterov']
SPEC = {'detector': 'retinanet', 'network': 'resnet18_v1b', 'dataset': 'kitti',
        'dataset-root': '/k', 'class_mapping': {'van': 'car', 'car': 'car'}, 'gpus': '',
        'epochs': 3, 'pretrained_base': False, 'jitter': [64, 96], 'freeze_bn': True,
        'lr_warmup': -1, '--anchor-ratios': [0.5, 1, 2], 'lr_mode': 'soft_start_annealing',
        'lr-min': 1e-5, 'nesterov': True}


def _captured_fit(monkeypatch, detector):
    """Run the script's main up to fit: the (task, config) it would train."""
    script = specs.load_script(detector)
    seen = {}

    def fit(task, config, hooks=()):
        seen['task'], seen['config'] = task, config
        raise SystemExit(0)

    monkeypatch.setattr(script, 'fit', fit)
    monkeypatch.setattr(script.common, 'build_datasets', lambda args: (_Tiny(), _Tiny()))
    return seen


class _Tiny:
    """A dataset stand-in: the scripts only read its classes before fit."""
    classes = ('car',)

    def __len__(self):
        return 1


@pytest.mark.parametrize('fmt', ['yaml', 'json'])
def test_a_spec_and_its_command_line_give_the_same_config(tmp_path, monkeypatch, fmt):
    import yaml
    path = str(tmp_path / ('spec.' + fmt))
    with open(path, 'w') as f:
        f.write(yaml.safe_dump(SPEC) if fmt == 'yaml' else json.dumps(SPEC))
    seen = _captured_fit(monkeypatch, 'retinanet')
    script = specs.load_script('retinanet')
    with pytest.raises(SystemExit):
        script.main(RETINANET + ['--save-prefix', os.path.join(str(tmp_path / 'out'), '')])
    by_flags = seen.pop('config'), vars(seen.pop('task')).copy()
    with pytest.raises(SystemExit):
        specs.train(path, str(tmp_path / 'out'), log=lambda line: None)
    by_spec = seen.pop('config'), vars(seen.pop('task')).copy()
    assert by_spec[0] == by_flags[0]
    assert by_spec[0].lr_mode == 'soft_start_annealing' and by_spec[0].optimizer == 'nag'
    assert by_spec[0].warmup_iters == 0 and by_spec[0].epochs == 3
    same = ('short', 'max_size', 'freeze_bn', 'model_kwargs', 'pretrained_base')
    assert {k: by_spec[1][k] for k in same} == {k: by_flags[1][k] for k in same}
    # the resolved spec: every flag's final value, and it trains the same again
    with open(str(tmp_path / 'out' / specs.RESOLVED_SPEC)) as f:
        resolved = json.load(f)
    schema = specs.Schema(script.build_parser())
    assert set(resolved) == set(schema.actions) | {'detector'}
    assert resolved['jitter'] == [64, 96] and resolved['lr'] is None and resolved['hybridize']
    assert resolved['class_mapping'] == {'van': 'car', 'car': 'car'}
    again = str(tmp_path / 'again.json')
    with open(again, 'w') as f:
        json.dump(resolved, f)
    with pytest.raises(SystemExit):
        specs.train(again, str(tmp_path / 'out'), log=lambda line: None)
    assert seen['config'] == by_flags[0]
    # flags after the spec (gluondet train -e SPEC -r DIR -- --epochs 5) win, and are resolved
    with pytest.raises(SystemExit):
        specs.train(path, str(tmp_path / 'more'), ['--epochs', '5'], log=lambda line: None)
    assert seen['config'].epochs == 5
    with open(str(tmp_path / 'more' / specs.RESOLVED_SPEC)) as f:
        assert json.load(f)['epochs'] == 5


@pytest.mark.parametrize('detector, spec, argv', [
    ('ssd', {'network': 'mobilenet0.25', 'data_shape': 128, 'classes': 'car', 'gpus': '',
             'pretrained_base': False, 'lr_decay_epoch': '2,3', 'lr': 0.02, 'seed': 3},
     ['--network', 'mobilenet0.25', '--data-shape', '128', '--classes', 'car', '--gpus', '',
      '--no-pretrained-base', '--lr-decay-epoch', '2,3', '--lr', '0.02', '--seed', '3']),
    ('faster_rcnn', {'backbone': 'resnet18_v1b', 'use_fpn': True, 'classes': 'car',
                     'gpus': '', 'no-pretrained-base': True, 'image_short': '96,128',
                     'mixup': True, 'lr_warmup': -1, 'kv_store': 'device'},
     ['--network', 'resnet18_v1b', '--use-fpn', '--classes', 'car', '--gpus', '',
      '--no-pretrained-base', '--image-short', '96,128', '--mixup', '--lr-warmup', '-1',
      '--kv-store', 'device']),
])
def test_ssd_and_faster_rcnn_specs_are_their_command_lines(tmp_path, monkeypatch, detector,
                                                          spec, argv):
    path = str(tmp_path / 'spec.json')
    with open(path, 'w') as f:
        json.dump(dict(spec, detector=detector), f)
    seen = _captured_fit(monkeypatch, detector)
    with pytest.raises(SystemExit):
        specs.load_script(detector).main(argv + ['--save-prefix', str(tmp_path / 'out') + '/'])
    config, task = seen.pop('config'), seen.pop('task')
    with pytest.raises(SystemExit):
        specs.train(path, str(tmp_path / 'out'), log=lambda line: None)
    assert seen['config'] == config and seen['task'].network == task.network


@pytest.mark.parametrize('detector', detectors.names())
def test_every_flag_of_every_script_is_a_key(detector):
    parser = specs.load_script(detector).build_parser()
    schema = specs.Schema(parser)
    for action in parser._actions[1:]:     # after --help
        for option in action.option_strings:
            if option.startswith('--'):
                assert schema.keys[option[2:]][0] is action
                assert schema.keys[option[2:].replace('-', '_')][0].dest == action.dest
        if action.option_strings and action.dest != 'help':
            assert action.dest in schema.keys
    # every default round-trips through the command line
    values = {dest: a.default for dest, a in schema.actions.items() if a.default is not None}
    assert schema.resolve(schema.argv(values)) == schema.resolve([])


@pytest.mark.parametrize('detector', detectors.names())
def test_a_namespace_of_values_is_what_their_command_line_parses_to(detector):
    # Detector.train sets the values over the network's flags without writing a command line
    parser = specs.load_script(detector).build_parser()
    schema = specs.Schema(parser)
    given = {'epochs': 3, 'lr': 0.5, 'batch_size': '4', 'no_wd': True, 'classes': ['a', 'b c'],
             'gpus': '', 'save_prefix': 'x/', 'hflip': False, 'val_interval': 2,
             'freeze_bn': True, 'jitter': [1, 2], 'amp': True, 'pretrained_base': False}
    values = schema.normalize({k: v for k, v in given.items() if k in schema.keys})
    assert len(values) >= 8
    assert vars(schema.namespace(values)) == vars(parser.parse_args(schema.argv(values)))
    with pytest.raises(specs.SpecError, match="^Detector.train: epochs: invalid literal for int"):
        schema.namespace({'epochs': 'three'}, source='Detector.train')


@pytest.mark.parametrize('spec, message', [
    ({'detector': 'retinanet', 'lr_mod': 'cosine'}, "unknown key 'lr_mod' (did you mean lr_mode"),
    ({'detector': 'ssd', 'netwrok': 'x'}, "unknown key 'netwrok' (did you mean network"),
    ({'detector': 'ssd', 'data_shape': 'big'}, "data_shape: invalid literal"),
    ({'detector': 'retinanet', 'head_norm': 'layer'}, "head_norm: 'layer' is not one of"),
    ({'detector': 'faster_rcnn', 'lr': 0.1, '--lr': 0.2}, 'set the same flag (lr)'),
    ({'detector': 'retinanet_x'}, "detector 'retinanet_x': one of ssd, faster_rcnn, retinanet, "
                                  "yolo3, center_net, mask_rcnn (did you mean retinanet"),
    ({'network': 'x'}, 'name the detector'),
    ({'detector': 'ssd', 'no-wd': 'yes'}, 'no-wd is a switch'),
])
def test_bad_specs_are_refused_in_one_line(tmp_path, spec, message, capsys):
    path = str(tmp_path / 'spec.json')
    with open(path, 'w') as f:
        json.dump(spec, f)
    code = gluondet_cli.main(['train', '-e', path, '-r', str(tmp_path / 'out')])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not os.path.exists(str(tmp_path / 'out' / specs.RESOLVED_SPEC))


def test_evaluate_takes_the_data_from_the_spec_or_the_flags(tmp_path, capsys):
    path = _tao_spec(tmp_path)
    assert gluondet_cli.main(['evaluate', '-e', path, '-m', 'm.params', '--dataset',
                              'voc']) == 2
    assert '-e takes the data from the spec: no --dataset' in capsys.readouterr().err
    assert gluondet_cli.main(['evaluate', '-m', 'm.params']) == 1
    assert capsys.readouterr().err == 'gluondet evaluate: error: give --dataset (or -e SPEC)\n'
    assert gluondet_cli.main(['inference', '-e', path, '-m', 'm.params', '-i', '.']) == 2
    assert 'give -o' in capsys.readouterr().err


def _subset(dataset, indices):
    """``dataset`` cut to ``indices`` (what `write_kitti` reads of it)."""
    class Subset:
        classes = dataset.classes

        def __len__(self):
            return len(indices)

        def image_path(self, i):
            return dataset.image_path(indices[i])

        def label(self, i):
            return dataset.label(indices[i])
    return Subset()


def _kitti_bccd(bccd_root, folder):
    """A KITTI copy of a few BCCD images (types lower-cased, as TAO's class mapping reads
    them): ``folder/train`` (6) and ``folder/val`` (3)."""
    from gluondet.data import VOCDetection
    from gluondet.data.kitti import write_kitti
    voc = VOCDetection(os.path.join(bccd_root, 'BCCD'), splits=('trainval',),
                       classes=('RBC', 'WBC', 'Platelets'))
    lower = _subset(voc, list(range(9)))
    lower.classes = tuple(c.lower() for c in voc.classes)
    write_kitti(_subset(lower, list(range(6))), os.path.join(folder, 'train'))
    write_kitti(_subset(lower, [6, 7, 8]), os.path.join(folder, 'val'))


@pytest.mark.slow
def test_tao_sample_spec_trains_evaluates_prunes_retrains_exports(tmp_path, bccd_root, capsys):
    """TAO's workflow on KITTI BCCD: train -e -r -k, evaluate -e -m, inference -e -m -i -o -l
    -t, prune, train with pruned_model_path, export -m -o -e --gen_ds_config."""
    data = str(tmp_path / 'kitti')
    _kitti_bccd(bccd_root, data)
    path = _tao_spec(tmp_path, os.path.join(data, 'train'), os.path.join(data, 'val'))
    results = str(tmp_path / 'results')
    assert gluondet_cli.main(['train', '-e', path, '-r', results, '-k', 'tlt_encode']) == 0
    out = capsys.readouterr()
    assert '-k: ignored' in out.err and '--box-stds=0.1,0.1,0.2,0.2' in out.err
    assert 'final: AP/RBC=' in out.out
    with open(os.path.join(results, specs.RESOLVED_SPEC)) as f:
        resolved = json.load(f)
    assert (resolved['detector'], resolved['network'], resolved['gpus'], resolved['batch_size'],
            resolved['resize'], resolved['max_size']) == ('retinanet', 'resnet18_v1b', '', 2,
                                                          64, 96)
    model = os.path.join(results, 'retinanet_resnet18_v1b_custom_best.params')
    assert os.path.isfile(model)

    assert gluondet_cli.main(['evaluate', '-e', path, '-m', model]) == 0
    out = capsys.readouterr().out
    assert 'VOC07 mAP (IoU 0.5) of' in out and 'on 3 images' in out
    assert "nms_config: {'score_thresh': 0.01" in out
    area = path.replace('.txt', '_area.txt')
    with open(path) as f, open(area, 'w') as g:
        g.write(f.read().replace('SAMPLE', 'INTEGRATE'))
    assert gluondet_cli.main(['evaluate', '-e', area, '-m', model]) == 0
    assert 'VOC area mAP (IoU 0.5)' in capsys.readouterr().out
    # a gluondet spec names the same validation data with the scripts' flags
    flat = str(tmp_path / 'spec.yaml')
    with open(flat, 'w') as f:
        f.write('detector: retinanet\ndataset: kitti\ndataset_root: %s\ntrain_split: train\n'
                'class_mapping: {rbc: RBC, wbc: WBC, platelets: Platelets}\n' % data)
    assert gluondet_cli.main(['evaluate', '-e', flat, '-m', model, '--ap', 'area',
                              '--iou-thresh', '0.3']) == 0
    assert 'VOC area mAP (IoU 0.3)' in capsys.readouterr().out and 'on 3 images' in out

    drawn, labels = str(tmp_path / 'drawn'), str(tmp_path / 'labels')
    assert gluondet_cli.main(['inference', '-e', path, '-m', model, '-i',
                              os.path.join(data, 'val', 'image_2'), '-o', drawn, '-l', labels,
                              '-t', '0.02']) == 0
    images = sorted(os.listdir(os.path.join(data, 'val', 'image_2')))
    assert sorted(f for f in os.listdir(drawn) if not f.endswith('.json')) == images
    assert sorted(os.listdir(labels)) == sorted(os.path.splitext(i)[0] + '.txt' for i in images)
    for name in os.listdir(labels):
        with open(os.path.join(labels, name)) as f:
            assert all(float(line.split()[-1]) >= 0.02 for line in f)
    # TAO 5's form: -r RESULTS_DIR for both
    out = str(tmp_path / 'inferred')
    assert gluondet_cli.main(['inference', '-e', path, '-m', model, '-i',
                              os.path.join(data, 'val', 'image_2'), '-r', out]) == 0
    assert sorted(os.listdir(out)) == ['images_annotated', 'labels']
    assert len(os.listdir(os.path.join(out, 'labels'))) == 3

    # TAO's prune and retrain: pruned_model_path is the pruning's output
    pruned = str(tmp_path / 'pruned' / 'model.params')
    assert gluondet_cli.main(['prune', '-m', model, '-o', pruned, '-pth', '0.95', '-nf', '8',
                              '-g', '8']) == 0
    retrain = path.replace('.txt', '_retrain.txt')
    with open(path) as f, open(retrain, 'w') as g:
        g.write(f.read().replace('  enable_qat: False', '  enable_qat: False\n'
                                 '  pruned_model_path: "%s"' % pruned))
    capsys.readouterr()
    assert gluondet_cli.main(['train', '-e', retrain, '-r', str(tmp_path / 'retrained')]) == 0
    assert '--pruned-model=%s' % pruned in capsys.readouterr().err
    retrained = str(tmp_path / 'retrained' / os.path.basename(model))
    assert os.path.isfile(retrained)

    # TAO's export -m -o -e -k --gen_ds_config: the graph carries the spec's nms_config and
    # detects what the retrained Gluon network with those settings does
    import mxnet as mx
    import numpy as np
    from export_checks import checked_detector, run_onnx
    from gluondet.deploy.compare import compare_detections
    from gluondet.deploy.networks import apply_nms, load_network
    onnx_file = str(tmp_path / 'export' / 'model.onnx')
    assert gluondet_cli.main(['export', '-m', retrained, '-o', onnx_file, '-e', retrain, '-k',
                              'tlt_encode', '--gen_ds_config']) == 0
    assert sorted(os.listdir(str(tmp_path / 'export'))) == ['labels.txt', 'model.onnx',
                                                             'nvinfer_config.txt']
    _, meta = checked_detector(onnx_file, 1, ('height', 'width'), 200)    # any size
    assert meta['nms']['score_thresh'] == pytest.approx(0.01)
    assert meta['nms']['nms_thresh'] == pytest.approx(0.6)
    net, _ = load_network(retrained)
    apply_nms(net, {'score_thresh': 0.01, 'nms_thresh': 0.6, 'post_nms': 200})
    x = mx.nd.array(np.random.RandomState(0).uniform(-2, 2, (1, 3, 128, 128)))
    same = compare_detections(run_onnx(onnx_file, x), net(x), min_score=0.01)
    assert same.ok and same.compared > 0, same
