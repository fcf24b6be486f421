"""Every deploy tool takes a CenterNet (issue 28, item 5): ``gluondet export`` (ONNX, symbol,
int8, TensorRT up to the build and a stand-in engine after it, DeepStream's config),
``infer``, ``evaluate``, ``benchmark`` and ``prune``.

The model is ``center_net_mobilenet0.5_custom`` at 128 px with BCCD's classes and random
weights that detect (:func:`~gluondet.deploy.detecting_random_weights`), saved as a training
output (its json records ``model_kwargs`` ``size``, as CenterNetTask's does): what matters
here is that each tool runs and gives the Gluon network's detections; the accuracy of the
int8 model is for a trained one.
"""
import json
import os
import sys

import mxnet as mx
import numpy as np
import pytest

from gluondet.cli import main
from gluondet.deploy import detecting_random_weights
from gluondet.deploy.predictor import Predictor
from gluondet.model_zoo import get_model

from test_deploy_predictor import (BCCD_CLASSES, SMALL_SPLIT, SMALL_SPLIT_SIZE,
                                   assert_same_detections, small_bccd)

onnx = pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')

NETWORK = 'center_net_mobilenet0.5_custom'
SIZE = 128


@pytest.fixture(scope='module')
def model(bccd_root, tmp_path_factory):
    """``(params, voc folder, folder of the small split's images)``."""
    folder = str(tmp_path_factory.mktemp('center_net_deploy'))
    voc, _ = small_bccd(bccd_root, folder)
    net = get_model(NETWORK, classes=BCCD_CLASSES, size=SIZE, pretrained_base=False)
    x = mx.nd.array(np.random.RandomState(0).uniform(-2, 2, (2, 3, SIZE, SIZE)))
    detecting_random_weights(net, x, 0)
    params = os.path.join(folder, 'center_net.params')
    net.save_parameters(params)
    with open(params[:-len('.params')] + '.json', 'w') as f:
        json.dump({'meta': {'network': NETWORK, 'classes': list(BCCD_CLASSES),
                            'model_kwargs': {'size': SIZE}}}, f)
    images = os.path.join(folder, 'small')
    os.makedirs(images)
    with open(os.path.join(voc, 'ImageSets', 'Main', SMALL_SPLIT + '.txt')) as f:
        for name in f.read().split():
            os.symlink(os.path.realpath(os.path.join(voc, 'JPEGImages', name + '.jpg')),
                       os.path.join(images, name + '.jpg'))
    return params, voc, images


def _paths(folder):
    return sorted(os.path.join(folder, name) for name in os.listdir(folder))


def _detections(source, folder, batch_size=None, **kwargs):
    return [p.detections for p in Predictor.from_model(source, **kwargs).predict(
        _paths(folder), batch_size)]


def _meta(path):
    return {p.key: json.loads(p.value) for p in onnx.load(path).metadata_props}


def test_export_onnx_takes_any_size_and_gives_the_networks_detections(model, tmp_path):
    params, _, images = model
    path = str(tmp_path / 'cn.onnx')
    assert main(['export', '--network', params, '-o', path, '--dynamic-batch']) == 0
    meta = _meta(path)
    assert meta['postprocess_kind'] == 'center_net' and meta['fixed_input_size'] is False
    assert meta['preprocessing']['resize'] == 'keep_ratio' and meta['data_shape'] == [SIZE,
                                                                                       SIZE]
    assert_same_detections(_detections(params, images), _detections(path, images, 3), 50)


def test_int8_export_builds_and_runs(model, tmp_path):
    params, _, images = model
    int8 = str(tmp_path / 'int8.onnx')
    assert main(['export', '--network', params, '-o', int8, '--batch-size', '2', '--precision',
                 'int8', '--calibration-images', images]) == 0
    ops = [node.op_type for node in onnx.load(int8).graph.node]
    assert ops.count('DequantizeLinear') > ops.count('Conv') > 0 and 'TopK' in ops
    meta = _meta(int8)
    assert (meta['precision'], meta['postprocess_kind']) == ('int8', 'center_net')
    found = _detections(int8, images, batch_size=2)
    assert len(found) == SMALL_SPLIT_SIZE and all(len(d.ids) > 0 for d in found)


@pytest.fixture
def no_tensorrt(monkeypatch):
    monkeypatch.setitem(sys.modules, 'tensorrt', None)


def test_tensorrt_export_and_deepstream_config(model, tmp_path, no_tensorrt, capsys):
    """Every check of ``build_engine`` passes up to TensorRT's import; DeepStream's config
    names the post-processing and keeps the aspect ratio."""
    from gluondet.deploy import tensorrt as gt
    from gluondet.deploy.deepstream import CONFIG_FILE
    from gluondet.deploy.postprocess import KINDS
    from test_deepstream import assert_documented, read_config
    params = model[0]
    engine = str(tmp_path / 'cn.engine')
    assert main(['export', '--network', params, '--format', 'tensorrt', '-o', engine,
                 '--dynamic-batch', '--batch-size', '4', '--gen-ds-config']) == 1
    assert 'but the TensorRT engine cannot be built here' in capsys.readouterr().err
    onnx_path = str(tmp_path / 'cn.onnx')
    spec = gt.read_onnx_input(onnx_path)
    assert spec.shape == (-1, 3, -1, -1)
    gt.check_tensorrt_limits(onnx_path)
    config = read_config(str(tmp_path / CONFIG_FILE))
    assert_documented(config)
    prop = config['property']
    assert (prop['output-blob-names'], prop['num-detected-classes'], prop['batch-size']) == (
        'ids;scores;boxes', '3', '4')
    assert prop['maintain-aspect-ratio'] == '1'
    with open(str(tmp_path / CONFIG_FILE)) as f:
        assert ' '.join(KINDS['center_net'].description.split()[:4]) in ' '.join(f.read().split())


def test_a_tensorrt_engine_detects_as_the_network(model, tmp_path, monkeypatch, capsys):
    import tensorrt_stand_in
    params, voc, images = model
    onnx_path = str(tmp_path / 'cn.onnx')
    assert main(['export', '--network', params, '-o', onnx_path, '--batch-size', '2']) == 0
    engine = tensorrt_stand_in.engine_beside(onnx_path)
    tensorrt_stand_in.install(monkeypatch)
    predictor = Predictor.from_model(engine)
    assert predictor.backend == 'tensorrt' and predictor.classes == BCCD_CLASSES
    assert_same_detections(_detections(params, images), _detections(engine, images), 50)


def test_infer_writes_the_predictors_detections(model, tmp_path, capsys):
    params, _, images = model
    out = tmp_path / 'out'
    assert main(['infer', '--model', params, '--images', images, '--output',
                 str(out / 'det.json'), '--visualize', str(out / 'drawn'), '--batch-size',
                 '5', '--threshold', '0.1']) == 0
    assert '%d images written to' % SMALL_SPLIT_SIZE in capsys.readouterr().out
    with open(str(out / 'det.json')) as f:
        results = json.load(f)
    for index, found in enumerate(_detections(params, images)):
        rows = [r for r in results if r['image_id'] == index + 1]
        assert len(rows) == len(found.ids) > 0
        np.testing.assert_array_equal([r['score'] for r in rows], found.scores.astype(float))
    assert sorted(os.listdir(str(out / 'drawn'))) == sorted(os.listdir(images))


def test_evaluate_gives_one_map_on_every_backend(model, tmp_path, capsys):
    params, voc, _ = model
    prefix, path = str(tmp_path / 'cn'), str(tmp_path / 'cn.onnx')
    assert main(['export', '--network', params, '--format', 'symbol', '-o', prefix]) == 0
    assert main(['export', '--network', params, '-o', path, '--dynamic-batch']) == 0
    capsys.readouterr()
    maps = []
    for source, backend in ((params, 'mxnet'), (prefix, 'mxnet'), (path, 'onnxruntime')):
        assert main(['evaluate', '--model', source, '--dataset', 'voc', '--dataset-root', voc,
                     '--split', SMALL_SPLIT]) == 0
        out = capsys.readouterr().out
        head = 'of %s (%s) on %d images: ' % (source, backend, SMALL_SPLIT_SIZE)
        assert head in out, out
        maps.append(out.split(head)[1].split()[0])
    assert len(set(maps)) == 1, maps


def test_evaluate_with_a_host_nms(model, capsys):
    """--iou runs an NMS over the peaks; --agnostic-nms alone is refused in one line."""
    params, voc, _ = model
    argv = ['evaluate', '--model', params, '--dataset', 'voc', '--dataset-root', voc,
            '--split', SMALL_SPLIT]
    assert main(argv + ['--iou', '0.5', '--agnostic-nms']) == 0
    assert main(argv + ['--agnostic-nms']) != 0
    err = capsys.readouterr().err
    assert '--agnostic-nms: CenterNet has no NMS of its own' in err and 'give --iou' in err


@pytest.mark.parametrize('backend', ['mxnet', 'onnxruntime'])
def test_benchmark(model, tmp_path, capsys, backend):
    output = tmp_path / 'bench.json'
    assert main(['benchmark', '-m', model[0], '--backend', backend, '--batch-sizes', '1,2',
                 '--warmup', '1', '--iters', '2', '--output', str(output)]) == 0
    record = json.loads(output.read_text())
    assert [(row['batch_size'], row['iterations']) for row in record['results']] == [
        (1, 2), (2, 2)]
    assert 'sigmoid heatmap, its peaks' in record['timed']   # its own, not an NMS's
    assert 'NMS within each class' not in record['timed']


def test_benchmark_a_zoo_name_with_detecting_weights(capsys):
    assert main(['benchmark', '-m', NETWORK, '--classes', 'a,b',
                 '--warmup', '1', '--iters', '2']) == 0
    assert capsys.readouterr().out.startswith('%s on mxnet (weights: random' % NETWORK)


def test_prune_then_export_and_retrain(model, tmp_path, capsys):
    """``gluondet prune``: the neck and heads lose filters, the heads' outputs stay; the
    pruned model exports to ONNX with the network's detections, retrains through
    train_center_net.py --pruned-model and resumes without the flag (the checkpoint's
    meta.pruned rebuilds the network)."""
    params, voc, images = model
    out = str(tmp_path / 'pruned')
    assert main(['prune', '-m', params, '-o', out, '-pth', '0.9', '-nf', '8', '-g', '8']) == 0
    assert 'pruning ratio' in capsys.readouterr().out
    with open(out + '.json') as f:
        described = json.load(f)
    assert described['prune']['params_after'] < 0.9 * described['prune']['params_before']
    pruned, path = out + '.params', str(tmp_path / 'pruned.onnx')
    assert main(['export', '--network', pruned, '-o', path, '--dynamic-batch']) == 0
    assert_same_detections(_detections(pruned, images), _detections(path, images), 20)

    channels = described['meta']['pruned']['channels']
    prefix = str(tmp_path / 'retrain_')
    argv = ['--network', 'mobilenet0.5', '--data-shape', str(SIZE), '--dataset', 'voc',
            '--dataset-root', voc, '--classes', ','.join(BCCD_CLASSES), '--train-split',
            SMALL_SPLIT, '--val-split', SMALL_SPLIT, '--gpus', '', '--no-pretrained-base',
            '-j', '0', '--batch-size', '8', '--lr', '0.001', '--save-interval', '0',
            '--log-interval', '100', '--save-prefix', prefix]
    steps = SMALL_SPLIT_SIZE // 8     # (the last partial batch is dropped)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('GLUONDET_HOME', str(tmp_path / 'home'))
        from gluondet.train import center_net
        first = center_net.main(argv + ['--pruned-model', pruned, '--epochs', '1'])
        assert first.iteration == steps
        with open(prefix + NETWORK + '_last.json') as f:
            assert json.load(f)['meta']['pruned'] == {'channels': channels}
        retrained = Predictor.from_model(prefix + NETWORK + '_best.params')   # pruned widths
        assert retrained.classes == BCCD_CLASSES
        assert center_net.main(argv + ['--epochs', '2', '--resume', 'auto']).iteration == \
            2 * steps
