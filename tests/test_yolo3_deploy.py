"""Every deploy tool takes a trained YOLOv3 (issue 25, item 5): int8 ONNX models and
benchmarks/onnx_check.py, the TensorRT path up to the build (and a stand-in engine after it,
``tensorrt_stand_in``), DeepStream's config, ``gluondet infer``, ``evaluate``, ``benchmark``
and ``prune`` with a retraining of the pruned model.

The detector is ``yolo3_mobilenet0.5_custom`` at 128 px trained for 64 steps on 64 BCCD
photos (YOLO3Task and the engine, once per module); it finds many boxes with distinct scores
on BCCD images. Its pruned model retrains through train_yolo3.py's ``main``, in this process.
"""
import json
import os
import re
import sys

import numpy as np
import pytest

from gluondet.cli import main
from gluondet.data import VOCDetection
from gluondet.deploy import compare_detections
from gluondet.deploy.predictor import Predictor
from gluondet.engine import TrainConfig, fit
from gluondet.metrics import VOC07MApMetric
from gluondet.tasks import YOLO3Task
from gluondet.train import yolo3 as train_yolo3

from script_runs import SMALL_NETWORKS
from test_deploy_predictor import (BCCD_CLASSES, SMALL_SPLIT, SMALL_SPLIT_SIZE,
                                   assert_same_detections, small_bccd)

onnx = pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETWORK, NETWORK_FLAGS = SMALL_NETWORKS['train_yolo3.py']
DATA_SHAPE = 128
TRAIN_SPLIT, TRAIN_IMAGES = 'train64', 64       # the first BCCD training photos
CALIB_SPLIT, CALIB_IMAGES = 'calib', 16         # the next ones: int8 calibration


def _split(voc, name, ids):
    with open(os.path.join(voc, 'ImageSets', 'Main', name + '.txt'), 'w') as f:
        f.write('\n'.join(ids) + '\n')


def _image_folder(voc, split, folder):
    """``folder`` holding (links to) the images of a VOC split; returns it."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(voc, 'ImageSets', 'Main', split + '.txt')) as f:
        for name in f.read().split():
            os.symlink(os.path.realpath(os.path.join(voc, 'JPEGImages', name + '.jpg')),
                       os.path.join(folder, name + '.jpg'))
    return folder


def _train(argv, home):
    """``train_yolo3.py`` with ``argv``, in this process (GLUONDET_HOME ``home``)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('GLUONDET_HOME', home)
        return train_yolo3.main(argv)


def _retrain_flags(voc, prefix):
    """``train_yolo3.py``'s flags of a short training on the small split."""
    return NETWORK_FLAGS + [
        '--no-random-shape', '--dataset', 'voc', '--dataset-root', voc, '--classes',
        ','.join(BCCD_CLASSES), '--train-split', SMALL_SPLIT, '--val-split', SMALL_SPLIT,
        '--gpus', '', '--no-pretrained-base', '-j', '0', '--lr', '0.001', '--save-interval',
        '0', '--log-interval', '100', '--save-prefix', prefix]


@pytest.fixture(scope='module')
def trained(bccd_root, tmp_path_factory):
    """``(params, validation metrics, voc folder, folder of the small split's images,
    folder of calibration images)`` of a YOLOv3 trained for 64 steps of 8 images (without
    the zoom-out, which a training this short does not learn through)."""
    folder = str(tmp_path_factory.mktemp('yolo3_deploy'))
    voc, _ = small_bccd(bccd_root, folder)
    with open(os.path.join(bccd_root, 'BCCD', 'ImageSets', 'Main', 'train.txt')) as f:
        ids = f.read().split()
    _split(voc, TRAIN_SPLIT, ids[:TRAIN_IMAGES])
    _split(voc, CALIB_SPLIT, ids[TRAIN_IMAGES:TRAIN_IMAGES + CALIB_IMAGES])
    task = YOLO3Task(NETWORK, VOCDetection(voc, splits=TRAIN_SPLIT, classes=BCCD_CLASSES),
                     VOCDetection(voc, splits=SMALL_SPLIT, classes=BCCD_CLASSES), DATA_SHAPE,
                     random_shapes=None, zoom=False, pretrained_base=False, num_workers=0)
    prefix = os.path.join(folder, 'yolo3')
    result = fit(task, TrainConfig(
        batch_size=8, num_workers=0, epochs=8, lr=0.002, warmup_iters=10, lr_decay_epoch=(),
        log_interval=100, save_prefix=prefix, save_interval=0, val_interval=8, seed=1, gpus=''))
    return (prefix + '_best.params', result.metrics, voc,
            _image_folder(voc, SMALL_SPLIT, os.path.join(folder, 'small')),
            _image_folder(voc, CALIB_SPLIT, os.path.join(folder, 'calib')))


def _paths(folder):
    return sorted(os.path.join(folder, name) for name in os.listdir(folder))


def _detections(model, folder, batch_size=None):
    return [p.detections for p in Predictor.from_model(model).predict(_paths(folder),
                                                                      batch_size)]


def _onnx_meta(path):
    return {p.key: json.loads(p.value) for p in onnx.load(path).metadata_props}


@pytest.fixture
def no_tensorrt(monkeypatch):
    """``import tensorrt`` fails here, even on a machine that has it."""
    monkeypatch.setitem(sys.modules, 'tensorrt', None)


# ---------------------------------------------------------------- int8

def test_int8_onnx_finds_the_float_models_detections(trained, tmp_path):
    """``gluondet export --precision int8`` (ONNX Runtime's static quantization,
    ``quantize_onnx``): QDQ convolutions, YOLOv3's decoding and NMS in float, and detections
    near the float model's, which equals the Gluon network's."""
    params, _, _, small, calib = trained
    fp32, int8 = str(tmp_path / 'fp32.onnx'), str(tmp_path / 'int8.onnx')
    assert main(['export', '--network', params, '-o', fp32, '--dynamic-batch']) == 0
    assert main(['export', '--network', params, '-o', int8, '--batch-size', '2', '--precision',
                 'int8', '--calibration-images', calib]) == 0
    ops = [node.op_type for node in onnx.load(int8).graph.node]
    assert ops.count('DequantizeLinear') > ops.count('Conv') > 0 and 'NonMaxSuppression' in ops
    meta = _onnx_meta(int8)
    assert (meta['precision'], meta['postprocess_kind']) == ('int8', 'yolo3')
    assert meta['calibration'] == {'method': 'minmax', 'batches': 8, 'images': 16, 'skipped': 0}

    gluon, floats = _detections(params, small), _detections(fp32, small)
    quantized = _detections(int8, small, batch_size=2)
    assert_same_detections(gluon, floats)
    # the float model's best detections (a quarter of its top score and more), as ground
    # truth, are found by the int8 model
    metric = VOC07MApMetric(iou_thresh=0.5)
    for a, b in zip(floats, quantized):
        keep = a.scores >= a.scores.max() / 4
        metric.update(b.boxes[None], b.ids[None], b.scores[None], a.boxes[keep][None],
                      a.ids[keep][None])
    assert metric.get()[1] >= 0.75, metric.get()      # 0.91 measured


def test_onnx_check_takes_a_trained_yolo3(trained, tmp_path, monkeypatch, capsys):
    """benchmarks/onnx_check.py on the trained YOLOv3 at another size than its training's
    (a fixed-size model: the Gluon net runs at --data-shape too): every check passes."""
    params, metrics, voc = trained[:3]
    monkeypatch.syspath_prepend(os.path.join(ROOT, 'benchmarks'))
    import onnx_check
    monkeypatch.setattr(sys, 'argv', [
        'onnx_check.py', '--model', params, '--dataset-root', voc, '--split', SMALL_SPLIT,
        '--calib-split', CALIB_SPLIT, '--calib-batches', '2', '--data-shape', '160',
        '--workdir', str(tmp_path), '--int8-drop', '0.1'])
    assert onnx_check.main() == 0
    out = capsys.readouterr().out
    assert 'batch x 3 x 160 x 160 (dynamic: batch); each image resized to 160 x 160' in out
    assert 'onnx fp32 vs gluon on %d %s images: ' % (SMALL_SPLIT_SIZE, SMALL_SPLIT) in out
    assert 'VOC07 mAP: gluon ' in out and 'checks: all 3 passed' in out


# ---------------------------------------------------------------- TensorRT

def test_tensorrt_export_passes_every_check_up_to_the_build(trained, tmp_path, no_tensorrt,
                                                            capsys):
    """``gluondet export --format tensorrt`` of the YOLOv3, int8 with calibration images and
    a DeepStream config: the ONNX model, the config and every check of ``build_engine`` pass
    (TensorRT's TopK limits, the batch and calibration plan); only TensorRT is missing."""
    from gluondet.deploy import tensorrt as gt
    from gluondet.deploy.calibration import CalibrationBatches
    from gluondet.deploy.deepstream import CONFIG_FILE
    from test_deepstream import read_config
    params, _, _, _, calib = trained
    engine, cache = str(tmp_path / 'yolo3.engine'), str(tmp_path / 'yolo3.cache')
    assert main(['export', '--network', params, '--format', 'tensorrt', '-o', engine,
                 '--dynamic-batch', '--batch-size', '4', '--precision', 'int8',
                 '--calibration-images', calib, '--calibration-cache', cache,
                 '--gen-ds-config']) == 1
    onnx_path = str(tmp_path / 'yolo3.onnx')
    err = capsys.readouterr().err
    assert ('gluondet export: error: the ONNX model is written to %s (and its DeepStream '
            'config beside it), but the TensorRT engine cannot be built here' % onnx_path) in err
    assert 'NVIDIA GPU' in err
    spec = gt.read_onnx_input(onnx_path)
    assert spec.shape == (-1, 3, DATA_SHAPE, DATA_SHAPE)
    assert sum(op == 'TopK' for _, op in spec.nodes) >= 4
    gt.check_tensorrt_limits(onnx_path)
    batches = CalibrationBatches(calib, DATA_SHAPE, batch_size=4,
                                 preprocessing=_onnx_meta(onnx_path)['preprocessing'])
    chw = (3, DATA_SHAPE, DATA_SHAPE)
    assert gt._batch_plan(spec, True, 4, None, batches) == (
        ((1,) + chw, (4,) + chw, (4,) + chw), (4,) + chw)
    prop = read_config(str(tmp_path / CONFIG_FILE))['property']
    assert (prop['model-engine-file'], prop['onnx-file']) == ('yolo3.engine', 'yolo3.onnx')
    assert (prop['int8-calib-file'], prop['network-mode'], prop['batch-size']) == (
        'yolo3.cache', '1', '4')
    assert sorted(os.listdir(str(tmp_path))) == sorted([
        'yolo3.onnx', CONFIG_FILE, 'labels.txt'])


def test_a_tensorrt_engine_detects_as_the_network(trained, tmp_path, monkeypatch, capsys):
    """A stand-in engine of the exported YOLOv3 (its ONNX model behind TensorRT's API, with
    the profile ``build_engine`` would give it): the TensorRT runner and the Predictor around
    it give the Gluon network's detections, and ``gluondet evaluate`` its mAP."""
    import tensorrt_stand_in
    params, metrics, voc, small, _ = trained
    onnx_path = str(tmp_path / 'yolo3.onnx')
    assert main(['export', '--network', params, '-o', onnx_path, '--batch-size', '2']) == 0
    engine = tensorrt_stand_in.engine_beside(onnx_path)
    tensorrt_stand_in.install(monkeypatch)
    predictor = Predictor.from_model(engine)
    assert predictor.backend == 'tensorrt' and predictor.classes == BCCD_CLASSES
    assert_same_detections(_detections(params, small), _detections(engine, small))
    capsys.readouterr()
    assert main(['evaluate', '--model', engine, '--dataset', 'voc', '--dataset-root', voc,
                 '--split', SMALL_SPLIT]) == 0
    assert '(tensorrt) on %d images: %.4f' % (SMALL_SPLIT_SIZE, metrics['mAP']) in \
        capsys.readouterr().out


def test_trt_check_takes_a_trained_yolo3(trained, tmp_path, monkeypatch, capsys):
    """benchmarks/trt_check.py on the training output: the real ``build_engine`` up to
    TensorRT's import for each precision, then a stand-in engine; every engine's detections
    pair with ONNX Runtime's, and the check passes."""
    import tensorrt_stand_in
    from gluondet.deploy import tensorrt as gt
    params, _, _, small, _ = trained
    monkeypatch.syspath_prepend(os.path.join(ROOT, 'benchmarks'))
    import trt_check
    build = gt.build_engine

    def build_up_to_tensorrt(onnx_path, engine_path, **kwargs):
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(sys.modules, 'tensorrt', None)
            with pytest.raises(ImportError, match='NVIDIA GPU'):     # every check passed
                build(onnx_path, engine_path, **kwargs)
        with open(engine_path, 'wb') as f:
            f.write(tensorrt_stand_in.engine_bytes(onnx_path, None))
        built.append(kwargs['precision'])
        return engine_path
    built = []
    monkeypatch.setattr(gt, 'build_engine', build_up_to_tensorrt)
    monkeypatch.setattr(trt_check, '_missing_runtime', lambda: None)
    tensorrt_stand_in.install(monkeypatch)
    assert trt_check.main(['--network', params, '--images', small, '--num-images', '8',
                           '--calib-images', '4', '--repeat', '2', '--workdir',
                           str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert built == ['fp32', 'fp16', 'int8']
    assert '%s at %dx%d, 8 images' % (NETWORK, DATA_SHAPE, DATA_SHAPE) in out
    compared = re.findall(r'tensorrt (\w+) .* vs onnxruntime: (\d+) detections compared, 0 '
                          r'missing in a, 0 missing in b', out)
    assert [precision for precision, _ in compared] == built
    assert min(int(count) for _, count in compared) >= 20 * 8
    assert out.endswith('checks: all 1 passed\n')


# ---------------------------------------------------------------- DeepStream

def test_deepstream_config_of_a_yolo3(trained, tmp_path):
    """``gluondet export --gen-ds-config``: nvinfer's documented keys, every value the
    exported model's (a fixed-size model: stretched to its input), its NMS named."""
    from gluondet.deploy.deepstream import CONFIG_FILE, LABELS_FILE, nvinfer_properties
    from gluondet.deploy.postprocess import KINDS
    from test_deepstream import assert_documented, assert_normalization, onnx_io, read_config
    model = str(tmp_path / 'yolo3.onnx')
    assert main(['export', '--network', trained[0], '-o', model, '--batch-size', '2',
                 '--gen-ds-config']) == 0
    config = read_config(str(tmp_path / CONFIG_FILE))
    assert_documented(config)
    prop = config['property']
    dims, outputs, meta = onnx_io(model)
    assert_normalization(prop, meta['mean'], meta['std'])
    assert prop['infer-dims'] == '3;%d;%d' % (DATA_SHAPE, DATA_SHAPE) and dims[0] == 2
    assert prop['output-blob-names'] == ';'.join(outputs) == 'ids;scores;boxes'
    assert (prop['batch-size'], prop['num-detected-classes'], prop['cluster-mode']) == (
        '2', '3', '4')
    assert prop['maintain-aspect-ratio'] == '0' and 'symmetric-padding' not in prop
    with open(str(tmp_path / LABELS_FILE)) as f:
        assert tuple(f.read().splitlines()) == BCCD_CLASSES
    properties = nvinfer_properties(onnx.load(model), 'yolo3.onnx')[0]
    comment = next(c for key, _, c in properties if key == 'cluster-mode')
    assert KINDS['yolo3'].description in comment


# ---------------------------------------------------------------- infer, evaluate, benchmark

def test_infer_writes_the_predictors_detections(trained, tmp_path, capsys):
    params, _, _, small, _ = trained
    out = tmp_path / 'out'
    assert main(['infer', '--model', params, '--images', small, '--output',
                 str(out / 'det.json'), '--kitti-labels', str(out / 'kitti'), '--visualize',
                 str(out / 'drawn'), '--batch-size', '5', '--threshold', '0.1']) == 0
    assert '%d images written to' % SMALL_SPLIT_SIZE in capsys.readouterr().out
    with open(str(out / 'det.json')) as f:
        results = json.load(f)
    for index, found in enumerate(_detections(params, small)):
        rows = [r for r in results if r['image_id'] == index + 1]
        assert len(rows) == len(found.ids) > 0
        np.testing.assert_array_equal([r['category_id'] - 1 for r in rows], found.ids)
        np.testing.assert_array_equal([r['score'] for r in rows], found.scores.astype(float))
    names = sorted(os.listdir(small))
    assert sorted(os.listdir(str(out / 'drawn'))) == names
    assert sorted(os.listdir(str(out / 'kitti'))) == [n[:-4] + '.txt' for n in names]


def test_evaluate_gives_the_validation_of_training_on_every_backend(trained, tmp_path, capsys):
    """``gluondet evaluate`` of the training output gives the mAP its training's validation
    gave; its symbol and ONNX exports give it too."""
    params, metrics, voc = trained[:3]
    prefix, model = str(tmp_path / 'yolo3'), str(tmp_path / 'yolo3.onnx')
    assert main(['export', '--network', params, '--format', 'symbol', '-o', prefix]) == 0
    assert main(['export', '--network', params, '-o', model, '--dynamic-batch']) == 0
    capsys.readouterr()
    for source, backend in ((params, 'mxnet'), (prefix, 'mxnet'), (model, 'onnxruntime')):
        assert main(['evaluate', '--model', source, '--dataset', 'voc', '--dataset-root', voc,
                     '--split', SMALL_SPLIT]) == 0
        out = capsys.readouterr().out
        assert 'of %s (%s) on %d images: %.4f' % (source, backend, SMALL_SPLIT_SIZE,
                                                   metrics['mAP']) in out, out
        assert '  RBC       %.4f' % metrics['AP/RBC'] in out
    assert metrics['mAP'] > 0.05


@pytest.mark.parametrize('backend', ['mxnet', 'onnxruntime'])
def test_benchmark_a_trained_yolo3(trained, tmp_path, capsys, backend):
    params = trained[0]
    output = tmp_path / 'bench.json'
    assert main(['benchmark', '-m', params, '--backend', backend, '--batch-sizes', '1,2',
                 '--warmup', '1', '--iters', '2', '--output', str(output)]) == 0
    assert capsys.readouterr().out.startswith('%s on %s (weights: ' % (params, backend))
    record = json.loads(output.read_text())
    assert record['input_shape'] == [3, DATA_SHAPE, DATA_SHAPE]
    assert record['exported'] == (None if backend == 'mxnet' else 'onnx (dynamic batch)')
    assert [(row['batch_size'], row['iterations']) for row in record['results']] == [
        (1, 2), (2, 2)]


def test_benchmark_a_yolo3_zoo_name_with_detecting_weights(capsys):
    assert main(['benchmark', '-m', NETWORK, '--classes', 'a,b', '--data-shape', '96',
                 '--warmup', '1', '--iters', '2']) == 0
    assert capsys.readouterr().out.startswith('%s on mxnet (weights: random' % NETWORK)


# ---------------------------------------------------------------- prune

def test_prune_then_retrain(trained, tmp_path, capsys):
    """``gluondet prune`` of the YOLOv3 (a threshold of 0.9: a training this short leaves the
    filter norms near their initial spread): the heads lose filters too, their prediction
    layers keep their outputs; the pruned model runs, exports to ONNX with parity, retrains
    through train_yolo3.py --pruned-model and resumes."""
    params, _, voc, small, _ = trained
    out = str(tmp_path / 'pruned')
    assert main(['prune', '-m', params, '-o', out, '-pth', '0.9', '-nf', '8', '-g', '8']) == 0
    assert 'pruning ratio' in capsys.readouterr().out
    with open(out + '.json') as f:
        described = json.load(f)
    channels = described['meta']['pruned']['channels']
    assert described['prune']['params_after'] < 0.8 * described['prune']['params_before']
    for part in ('body', 'tip'):        # a norm layer changes with its filters
        assert any(p.startswith('yolo_blocks.') and '.%s.' % part in p and p.endswith('.1')
                   for p in channels), sorted(channels)
    for path, counts in channels.items():
        if path.endswith('.prediction'):
            assert counts['channels'] == 3 * (5 + len(BCCD_CLASSES))

    pruned = out + '.params'
    model = str(tmp_path / 'pruned.onnx')
    assert main(['export', '--network', pruned, '-o', model, '--dynamic-batch']) == 0
    # (the few steps' scores fell under 0.05 with the filters: compared from its own 0.01)
    result = compare_detections(_detections(pruned, small), _detections(model, small), 0.01)
    assert result.ok and result.compared >= 20 * SMALL_SPLIT_SIZE, str(result)

    home, prefix = str(tmp_path / 'home'), str(tmp_path / 'retrain_')
    argv = _retrain_flags(voc, prefix) + ['--pruned-model', pruned]
    assert _train(argv + ['--epochs', '1'], home).iteration == 3
    with open(prefix + NETWORK + '_last.json') as f:
        assert json.load(f)['meta']['pruned'] == {'channels': channels}
    retrained = Predictor.from_model(prefix + NETWORK + '_best.params')     # pruned widths
    assert retrained.classes == BCCD_CLASSES
    # resumed without --pruned-model: the checkpoint's meta.pruned rebuilds the network
    flag = argv.index('--pruned-model')
    assert _train(argv[:flag] + ['--epochs', '2', '--resume', 'auto'], home).iteration == 6
