"""TAO RetinaNet specs (issue 26 item 3): variances as the box coding (against TAO's numpy
encoding), model_ema, COCO data sources, and every field that would train another model
refused with its line."""
import json
import os

import mxnet as mx
import numpy as np
import pytest

from gluondet import cli as gluondet_cli
from gluondet.model_zoo import get_model
from gluondet.nn import BoxCenterEncoder
from gluondet.tools import spec as specs, tao

from test_spec import TAO_SAMPLE, _tao_spec

VARIANCES = (0.1, 0.1, 0.2, 0.2)


def _tao_encode(gt, anchors, variances):
    """TAO's RetinaNet InputEncoder, 'centroids' coords: corners -> (cx, cy, w, h), then
    ((cx - acx) / aw / v0, (cy - acy) / ah / v1, log(w / aw) / v2, log(h / ah) / v3)."""
    def centroids(b):
        return np.stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2,
                         b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], axis=1)
    g, a, v = centroids(gt), centroids(anchors), np.asarray(variances)
    return np.stack([(g[:, 0] - a[:, 0]) / a[:, 2] / v[0], (g[:, 1] - a[:, 1]) / a[:, 3] / v[1],
                     np.log(g[:, 2] / a[:, 2]) / v[2], np.log(g[:, 3] / a[:, 3]) / v[3]], axis=1)


def _boxes(rng, n):
    xy = rng.uniform(0, 200, (n, 2))
    return np.concatenate([xy, xy + rng.uniform(4, 120, (n, 2))], axis=1)


def _kitti_spec(tmp_path, text=TAO_SAMPLE):
    """The sample spec on empty KITTI folders (what `specs.train` links before the script
    reads them)."""
    for split in ('train', 'val'):
        for sub in ('image_2', 'label_2'):
            os.makedirs(str(tmp_path / split / sub), exist_ok=True)
    return _tao_spec(tmp_path, str(tmp_path / 'train'), str(tmp_path / 'val'), text)


def test_variances_are_the_box_coding_of_training_and_of_the_network():
    rng = np.random.default_rng(0)
    gt, anchors = _boxes(rng, 50), _boxes(rng, 50)
    expected = _tao_encode(gt, anchors, VARIANCES)
    # the targets' encoder of a network built with TAO's variances
    net = get_model('retinanet_resnet18_v1b_custom', classes=['a'], pretrained_base=False,
                    stds=VARIANCES)
    assert net.box_decoder.stds == VARIANCES
    encoded = BoxCenterEncoder(net.box_decoder.stds)(mx.nd.array(gt[None]),
                                                     mx.nd.array(anchors[None]))
    np.testing.assert_allclose(encoded.asnumpy()[0], expected, rtol=1e-4, atol=1e-4)
    # and the network's decoding inverts TAO's encoding
    centre = np.concatenate([(anchors[:, :2] + anchors[:, 2:]) / 2,
                             anchors[:, 2:] - anchors[:, :2]], axis=1)   # the net's anchors
    decoded = net.box_decoder(mx.nd.array(expected[None]), mx.nd.array(centre[None]))
    np.testing.assert_allclose(decoded.asnumpy()[0], gt, rtol=1e-4, atol=1e-3)


def test_the_task_trains_the_coding_the_network_decodes(monkeypatch, tmp_path):
    """--box-stds (a TAO spec's variances) reaches the network, the targets and the json
    that rebuilds the network for evaluate and export."""
    from gluondet.tasks import RetinaNetTask
    from test_spec import _captured_fit
    seen = _captured_fit(monkeypatch, 'retinanet')
    path = _kitti_spec(tmp_path)
    with pytest.raises(SystemExit):
        specs.train(path, str(tmp_path / 'out'), log=lambda line: None)
    task = seen['task']
    assert isinstance(task, RetinaNetTask) and task.model_kwargs['stds'] == VARIANCES
    net = task.build_net([mx.cpu()])
    assert net.box_decoder.stds == VARIANCES and task.targets.encoder._stds == VARIANCES
    assert task._meta()['model_kwargs']['stds'] == VARIANCES


def test_exported_onnx_decodes_with_the_variances(tmp_path):
    pytest.importorskip('onnxruntime')
    from test_deploy_export_retinanet import FAST_NAME, _detector, _parity
    net, x = _detector(FAST_NAME, stds=VARIANCES)
    _parity(net, x, tmp_path)


def test_model_ema_is_the_ema_flag(tmp_path, monkeypatch):
    from test_spec import _captured_fit
    seen = _captured_fit(monkeypatch, 'retinanet')
    path = _kitti_spec(tmp_path, TAO_SAMPLE.replace('enable_qat: False',
                                                    'enable_qat: False\n  model_ema: true'))
    assert tao.translate(tao.read_tao_spec(path), path).flags['ema'] is True
    with pytest.raises(SystemExit):
        specs.train(path, str(tmp_path / 'out'), log=lambda line: None)
    assert seen['config'].ema is True
    path = _tao_spec(tmp_path, text=TAO_SAMPLE.replace('enable_qat: False',
                                                       'enable_qat: False\n  model_ema: false'))
    assert 'ema' not in tao.translate(tao.read_tao_spec(path), path).flags


# each field that would train another model than the spec says: (change, its line's text)
REFUSED = [
    (('two_boxes_for_ar1: false', 'two_boxes_for_ar1: true'), 'two_boxes_for_ar1: not '
     'supported'),
    (('clip_boxes: false', 'clip_boxes: true'), 'clip_boxes: not supported'),
    (('variances: "[0.1, 0.1, 0.2, 0.2]"', 'variances: "[0.1, 0.2]"'), 'variances: 4 positive'),
    (('arch: "resnet"', 'arch: "resnet"\n  steps: "[8, 16, 32, 64, 100]"'), 'steps: not '
     'supported'),
    (('arch: "resnet"', 'arch: "resnet"\n  offsets: "[0.5, 0.5, 0.5, 0.5, 0]"'), 'offsets: not'),
    (('arch: "resnet"', 'arch: "resnet"\n  aspect_ratios: "[[1.0], [1.0], [1.0], [1.0], '
      '[1.0]]"'), 'aspect_ratios: not supported'),
    (('scales: "[0.045, 0.09, 0.2, 0.4, 0.55, 0.7]"', 'scales: "[0.045, 0.09]"'),
     'scales: needs 5 positive scales'),
    (('sgd {\n      momentum: 0.9\n      nesterov: True\n    }', 'adam { epsilon: 1e-7 }'),
     'training_config.optimizer.adam: not supported'),
    (('enable_qat: False', 'enable_qat: True'), 'enable_qat: not supported'),
    (('enable_qat: False', 'enable_qat: False\n  pretrain_model_path: "/m/resnet_18.hdf5"'),
     'pretrain_model_path: /m/resnet_18.hdf5 is not readable'),
    (('enable_qat: False', 'enable_qat: False\n  resume_model_path: "/m/model.tlt"'),
     'resume_model_path: /m/model.tlt is not readable'),
    (('learning_rate {\n    soft_start_annealing_schedule {\n      min_learning_rate: 4e-5\n'
      '      max_learning_rate: 1.5e-2\n      soft_start: 0.1\n      annealing: 0.3\n    }',
      'learning_rate {\n    soft_start_cosine_annealing_schedule {\n      max_learning_rate: '
      '0.01\n      soft_start: 0.1\n    }'), 'soft_start: not supported'),
    (('output_channel: 3', 'output_channel: 1'), 'output_channel: not supported'),
    (('output_channel: 3', 'output_channel: 3\n  random_flip: 0.0'), 'random_flip: not'),
    (('output_channel: 3', 'output_channel: 3\n  hue: 18'), 'hue: not supported'),
    (('output_channel: 3', 'output_channel: 3\n  zoom_out_max_scale: 4.0'), 'zoom_out_max_scale'),
    (('output_channel: 3', 'output_channel: 3\n  image_mean { key: "l" value: 117.3 }'),
     "image_mean: not supported: gluondet's backbones take ImageNet's mean"),
    ((('  output_height: 64\n', ''), ('  scales: "[0.045, 0.09, 0.2, 0.4, 0.55, 0.7]"\n', '')),
     'output_width: give output_width and output_height'),
    (('random_seed: 42', 'random_seed: 42\nclass_weighting_config { enable_auto: true }'),
     'enable_auto: not supported'),
    ((('dataset_config {', 'dataset_config {\n  type: "coco"'), ('value: "WBC"', 'value: "RBC"')),
     'target_class_mapping: COCO categories are classes by name: map each to itself'),
]


@pytest.mark.parametrize('change, message', REFUSED, ids=[m.split(':')[0] for _, m in REFUSED])
def test_fields_that_would_train_another_model_are_refused_with_their_line(
        tmp_path, capsys, change, message):
    text = TAO_SAMPLE
    for old, new in (change if isinstance(change[0], tuple) else [change]):
        assert old in text
        text = text.replace(old, new)
    path = _tao_spec(tmp_path, text=text)
    code = gluondet_cli.main(['train', '-e', path, '-r', str(tmp_path / 'out')])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith('gluondet train: error: %s:' % path) and message in err, err
    line = int(err[len('gluondet train: error: %s:' % path):].split(':')[0])
    assert message.split(':')[0].split('.')[-1] in text.splitlines()[line - 1], (err, text)
    assert not os.path.exists(str(tmp_path / 'out' / specs.RESOLVED_SPEC))


def test_fields_matching_gluondet_are_taken_silently(tmp_path):
    text = TAO_SAMPLE.replace('arch: "resnet"', 'arch: "resnet"\n  steps: "[8, 16, 32, 64, '
                              '128]"\n  offsets: "[0.5, 0.5, 0.5, 0.5, 0.5]"\n  '
                              'pos_iou_thresh: 0.6\n  neg_iou_thresh: 0.3')
    path = _tao_spec(tmp_path, text=text)
    t = tao.translate(tao.read_tao_spec(path), path)
    assert t.warnings == [] and (t.flags['fg_iou'], t.flags['bg_iou']) == (
        pytest.approx(0.6), pytest.approx(0.3))


# -- COCO data sources --------------------------------------------------------------------

COCO_SOURCES = '''dataset_config {
  type: "coco"
  data_sources: {
    image_directory_path: "IMAGES"
    label_directory_path: "ANNOTATIONS"
  }
  validation_data_sources: {
    image_directory_path: "IMAGES"
    label_directory_path: "ANNOTATIONS"
  }
  target_class_mapping { key: "RBC" value: "RBC" }
  target_class_mapping { key: "WBC" value: "WBC" }
  target_class_mapping { key: "Platelets" value: "Platelets" }
}
'''


def _coco_spec(tmp_path, images, annotations):
    text = TAO_SAMPLE[:TAO_SAMPLE.index('dataset_config {')] + COCO_SOURCES
    return _tao_spec(tmp_path, text=text.replace('IMAGES', images).replace(
        'ANNOTATIONS', annotations))


def test_coco_sources_map_to_gluondets_coco_layout(tmp_path):
    """TAO's CocoDataSequence: the json of a source is label_directory_path's
    instances_train2017.json (validation: instances_val2017.json), or the json named."""
    path = _coco_spec(tmp_path, '/data/train2017', '/data/annotations')
    t = tao.translate(tao.read_tao_spec(path), path, '/links')
    assert {k: t.flags[k] for k in ('dataset', 'dataset_root', 'train_split', 'val_split',
                                    'classes')} == dict(
        dataset='coco', dataset_root='/links', train_split='training', val_split='val',
        classes=['RBC', 'WBC', 'Platelets'])
    assert 'class_mapping' not in t.flags and t.warnings == []
    assert [t.data[role][0]['annotation_file'] for role in ('train', 'val')] == [
        '/data/annotations/instances_train2017.json', '/data/annotations/instances_val2017.json']
    with open(path) as f:
        text = f.read().replace('label_directory_path: "/data/annotations"',
                                'label_directory_path: "ann/val.json" root_path: "/r"', 1)
    with open(path, 'w') as f:
        f.write(text)
    t = tao.translate(tao.read_tao_spec(path), path, '/links')
    assert (t.data['train'][0]['annotation_file'], t.data['train'][0]['image_directory_path']) \
        == ('/r/ann/val.json', '/data/train2017')     # joined as os.path.join, as TAO


def _bccd_coco(bccd_root, folder, count):
    """BCCD's COCO json cut to its first ``count`` images (TAO's file names), images in
    ``bccd_root/BCCD``."""
    with open(os.path.join(bccd_root, 'coco', 'instances_val.json')) as f:
        data = json.load(f)
    for role, images in (('train', data['images'][:count]),
                         ('val', data['images'][count:count + 3])):
        ids = {image['id'] for image in images}
        part = dict(data, images=images,
                    annotations=[a for a in data['annotations'] if a['image_id'] in ids])
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, 'instances_%s2017.json' % role), 'w') as f:
            json.dump(part, f)


def test_a_coco_spec_trains_evaluates_and_infers(tmp_path, bccd_root, capsys):
    annotations = str(tmp_path / 'annotations')
    _bccd_coco(bccd_root, annotations, 6)
    path = _coco_spec(tmp_path, os.path.join(bccd_root, 'BCCD'), annotations)
    results = str(tmp_path / 'results')
    assert gluondet_cli.main(['train', '-e', path, '-r', results]) == 0
    out = capsys.readouterr()
    assert '--dataset=coco' in out.err and 'final: AP/RBC=' in out.out
    assert os.path.islink(os.path.join(results, 'tao_data', 'training'))
    model = os.path.join(results, 'retinanet_resnet18_v1b_custom_best.params')
    with open(model[:-len('.params')] + '.json') as f:
        assert json.load(f)['meta']['model_kwargs']['stds'] == list(VARIANCES)
    assert gluondet_cli.main(['evaluate', '-e', path, '-m', model]) == 0
    assert 'on 3 images' in capsys.readouterr().out
    drawn = str(tmp_path / 'drawn')
    assert gluondet_cli.main(['inference', '-e', path, '-m', model, '-i',
                              os.path.join(bccd_root, 'BCCD', 'JPEGImages',
                                           'BloodImage_00000.jpg'), '-o', drawn]) == 0
    assert os.path.isfile(os.path.join(drawn, 'detections.json'))


def test_records_converted_from_coco_train_with_either_type(tmp_path):
    """TAO's coco_tfrecords sample: type coco with tfrecords_path (here records of gluondet
    convert, from a COCO json or any other data) trains on the records."""
    for kind in ('coco', 'kitti'):
        text = TAO_SAMPLE.replace('dataset_config {', 'dataset_config {\n  type: "%s"' % kind)
        text = text.replace('image_directory_path: "TRAIN/image_2"\n    label_directory_path: '
                            '"TRAIN/label_2"', 'tfrecords_path: "/recs/train*"')
        text = text.replace('image_directory_path: "VAL/image_2"\n    label_directory_path: '
                            '"VAL/label_2"', 'tfrecords_path: "/recs/val*"')
        path = _tao_spec(tmp_path, text=text.replace('value: "RBC"', 'value: "rbc"').replace(
            'value: "WBC"', 'value: "wbc"').replace('value: "Platelets"', 'value: "platelets"'))
        flags = tao.translate(tao.read_tao_spec(path), path).flags
        assert (flags['dataset'], flags['train_rec'], flags['val_rec']) == (
            'rec', '/recs/train*', '/recs/val*'), kind
