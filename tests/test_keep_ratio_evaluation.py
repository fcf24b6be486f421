"""The keep-ratio detectors (Faster R-CNN, RetinaNet) on the one evaluation path: the
training's validation, ``gluondet evaluate`` of its output and of its exported symbol, and
``gluondet infer``, all through the Predictor.

A short run of each detector's small network on 128 px demo images; the val images are demo
images resized to four shapes (a LabelImg folder), so each is resized by its own factor and
a batch is padded (to 32 for Faster R-CNN's FPN, to 128 for RetinaNet's P7).
"""
import json
import math
import os

import cv2
import numpy as np
import pytest

from gluondet.cli import main
from gluondet.data import DemoDetection, resolve_dataset
from gluondet.data import transforms as T
from gluondet.data.base import read_image
from gluondet.data.preprocess import keep_ratio
from gluondet.deploy import compare_detections
from gluondet.deploy.commands import evaluate_model, export_model
from gluondet.deploy.predictor import Predictor
from gluondet.engine import TrainConfig, fit
from gluondet.metrics import evaluation
from gluondet.tasks import FasterRCNNTask, RetinaNetTask

# detector: (task, network, padding multiple, an export's input: short x max size rounded up to
# the multiple, the task's model_kwargs: RetinaNet's from the demo recipe, to detect in 2 epochs)
DETECTORS = {
    'faster_rcnn': (FasterRCNNTask, 'faster_rcnn_fpn_resnet18_v1b_custom', 32, (128, 160), {}),
    'retinanet': (RetinaNetTask, 'retinanet_resnet18_v1b_custom', 128, (128, 256),
                  dict(anchor_base=2, head_channels=64, head_layers=2, head_init='msra',
                       head_norm='group'))}
VAL_SHAPES = [(128, 128), (96, 128), (128, 80), (112, 144)]   # (height, width) of val images
SHORT, MAX_SIZE = 128, 160


def write_labelimg(folder, dataset, shapes):
    """``dataset``'s images resized to ``shapes`` in turn, as JPEGs with a VOC xml beside."""
    os.makedirs(folder, exist_ok=True)
    for i in range(len(dataset)):
        image, label = dataset[i]
        height, width = shapes[i % len(shapes)]
        image, label = T.resize(image, label, (width, height))
        stem = os.path.join(folder, 'val%03d' % i)
        cv2.imwrite(stem + '.jpg', cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        objects = ''.join(
            '<object><name>%s</name><difficult>0</difficult><bndbox><xmin>%d</xmin><ymin>%d'
            '</ymin><xmax>%d</xmax><ymax>%d</ymax></bndbox></object>'
            % ((dataset.classes[int(row[4])],) + tuple(int(round(v)) + 1 for v in row[:4]))
            for row in label)
        with open(stem + '.xml', 'w') as f:
            f.write('<annotation><filename>val%03d.jpg</filename><size><width>%d</width>'
                    '<height>%d</height><depth>3</depth></size>%s</annotation>'
                    % (i, width, height, objects))


@pytest.fixture(scope='module', params=sorted(DETECTORS))
def trained(request, tmp_path_factory):
    """``(fit result, task, best params, LabelImg root)`` of a short training run."""
    make_task, network, _, _, model_kwargs = DETECTORS[request.param]
    folder = tmp_path_factory.mktemp(request.param + '_evaluation')
    demo = str(folder / 'demo')
    train = DemoDetection('train', num_images=8, image_size=128, seed=0, root=demo)
    root = str(folder / 'labelimg')
    write_labelimg(os.path.join(root, 'val'),
                   DemoDetection('val', num_images=4, image_size=128, seed=0, root=demo),
                   VAL_SHAPES)
    val = resolve_dataset('voc', root, 'val', train.classes)
    task = make_task(network, train, val, short=SHORT, max_size=MAX_SIZE, pretrained_base=False,
                     model_kwargs=model_kwargs)
    prefix = str(folder / request.param)
    config = TrainConfig(batch_size=2, num_workers=0, epochs=2, lr=0.02, lr_decay_epoch=(),
                         save_prefix=prefix, save_interval=0, val_interval=2, log_interval=10,
                         seed=7, gpus='')
    return fit(task, config), task, prefix + '_best.params', root


def _same(a, b):
    return a.keys() == b.keys() and all(a[k] == b[k] or math.isnan(a[k]) and math.isnan(b[k])
                                        for k in a)


def _images(root):
    return sorted(os.path.join(root, 'val', name) for name in os.listdir(os.path.join(root, 'val'))
                  if name.endswith('.jpg'))


def test_validation_equals_gluondet_evaluate_of_the_training_output(trained, monkeypatch,
                                                                      capsys):
    result, task, params, root = trained
    with open(os.path.splitext(params)[0] + '.json') as f:
        meta = json.load(f)['meta']
    assert meta['task'] == task.name and (meta['short'], meta['max_size']) == (SHORT, MAX_SIZE)
    multiple = DETECTORS[task.name][2]
    calls = []
    real = evaluation.evaluate
    monkeypatch.setattr(evaluation, 'evaluate', lambda predictor, *args, **kwargs: (
        calls.append(predictor), real(predictor, *args, **kwargs))[1])
    assert main(['evaluate', '--model', params, '--dataset', 'voc', '--dataset-root', root,
                 '--split', 'val']) == 0
    assert 'on 4 images: %.4f' % result.metrics['mAP'] in capsys.readouterr().out
    assert _same(evaluate_model(params, 'voc', root, 'val', progress=False), result.metrics)
    assert _same(task.validate(result.net, [__import__('mxnet').cpu()]), result.metrics)
    assert [p.preprocessing for p in calls] == [keep_ratio(SHORT, MAX_SIZE, multiple)] * 3
    # the model detects: every val image gets boxes, in its own pixels (clipped to it)
    found = Predictor.from_model(params).predict(_images(root))
    for item in found:
        assert len(item.detections.ids) > 0
        height, width = item.image.shape[:2]
        assert item.detections.boxes.min() >= 0
        assert item.detections.boxes[:, [0, 2]].max() <= width - 1
        assert item.detections.boxes[:, [1, 3]].max() <= height - 1


def test_exported_symbol_gives_the_validation(trained, tmp_path):
    result, task, params, root = trained
    prefix = str(tmp_path / task.name)
    export_model(params, prefix, 'symbol')
    with open(prefix + '-meta.json') as f:
        meta = json.load(f)
    multiple = DETECTORS[task.name][2]
    assert meta['preprocessing'] == keep_ratio(SHORT, MAX_SIZE, multiple)
    assert meta['data_shape'] == list(DETECTORS[task.name][3])   # traced at short x max size
    symbol = Predictor.from_model(prefix)
    assert symbol.preprocessing == keep_ratio(SHORT, MAX_SIZE, multiple)
    assert symbol.data_shape is None
    assert _same(evaluate_model(prefix, 'voc', root, 'val', progress=False), result.metrics)
    arrays = [read_image(path).asnumpy() for path in _images(root)]
    expected = task.predictor(result.net, [__import__('mxnet').cpu()]).detect(arrays)
    for batch_size in (1, 3):   # each image at its own padded size, whatever its batch
        got = symbol.detect(arrays, batch_size=batch_size)
        comparison = compare_detections(expected, got)
        assert comparison.ok and comparison.compared >= len(arrays), str(comparison)
    alone = task.predictor(result.net, [__import__('mxnet').cpu()]).detect(arrays, batch_size=1)
    for a, b in zip(alone, expected):
        np.testing.assert_array_equal(a.boxes, b.boxes)


def test_infer_and_the_model_sources(trained, tmp_path, capsys):
    result, task, params, root = trained
    output = str(tmp_path / 'detections.json')
    assert main(['infer', '--model', task.network, '--params', params, '--images',
                 os.path.join(root, 'val'), '--output', output]) == 0
    with open(output) as f:
        rows = json.load(f)
    paths = _images(root)
    expected = Predictor.from_model(params).detect([read_image(p).asnumpy() for p in paths])
    assert len(rows) == sum(len(d.ids) for d in expected) > 0
    assert {row['image_id'] for row in rows} <= set(range(1, len(paths) + 1))
    with pytest.raises(ValueError, match='keeping its aspect ratio .*data_shape is for '
                                         'fixed-size models'):
        Predictor.from_model(params, data_shape=128)
    assert main(['evaluate', '--model', params, '--data-shape', '128', '--dataset', 'voc',
                 '--dataset-root', root, '--split', 'val']) == 1
    assert 'keeping its aspect ratio' in capsys.readouterr().err


def test_an_onnx_export_takes_each_image_at_its_own_size(trained, tmp_path):
    """By default the ONNX model's height and width are dynamic, up to ``max_size`` on both
    sides (rounded up to the multiple): each image runs at its own padded size, as in Gluon,
    so every image's detections, and the mAP, are the Gluon network's."""
    onnx = pytest.importorskip('onnx')
    pytest.importorskip('onnxruntime')
    result, task, params, root = trained
    multiple = DETECTORS[task.name][2]
    path = str(tmp_path / (task.name + '.onnx'))
    export_model(params, path, 'onnx', dynamic_batch=True, verbose=False)
    dims = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ['batch', 3, 'height', 'width']
    model = Predictor.from_model(path)
    assert model.data_shape is None
    assert model.preprocessing == keep_ratio(SHORT, MAX_SIZE, multiple)
    largest = -(-MAX_SIZE // multiple) * multiple
    assert model.runner.metadata['data_shape'] == [largest, largest]
    assert model.runner.metadata['fixed_input_size'] is False
    arrays = [read_image(p).asnumpy() for p in _images(root)]
    expected = Predictor.from_model(params).detect(arrays)
    comparison = compare_detections(expected, model.detect(arrays, batch_size=2))
    assert comparison.ok and comparison.compared >= len(arrays), str(comparison)
    assert abs(evaluate_model(path, 'voc', root, 'val', progress=False)['mAP']
               - result.metrics['mAP']) <= 0.002


def test_an_onnx_export_at_one_size_takes_each_image_fitted_into_its_input(trained, tmp_path):
    """With ``data_shape`` (``short x max_size`` rounded up to the multiple, 128 x 160 or
    128 x 256) the input is fixed: an image is resized keeping its ratio to fit it and
    padded to it. Where that is the image's own padded size (the 96 x 128 and 112 x 144
    images, resized to 120 x 160 and 124 x 160) the detections are the Gluon net's."""
    pytest.importorskip('onnxruntime')
    result, task, params, root = trained
    _, _, multiple, input_shape, _ = DETECTORS[task.name]
    path = str(tmp_path / (task.name + '.onnx'))
    export_model(params, path, 'onnx', data_shape=input_shape, dynamic_batch=True,
                 verbose=False)
    model = Predictor.from_model(path)
    assert model.data_shape == input_shape
    assert model.preprocessing == keep_ratio(SHORT, MAX_SIZE, multiple)
    assert model.runner.metadata['fixed_input_size'] is True
    arrays = [read_image(p).asnumpy() for p in _images(root)]
    expected = Predictor.from_model(params).detect(arrays)
    got = model.detect(arrays, batch_size=2)
    for i, (height, width) in enumerate(VAL_SHAPES):
        if (height, width) in ((96, 128), (112, 144)):
            comparison = compare_detections([expected[i]], [got[i]])
            assert comparison.ok and comparison.compared > 0, str(comparison)
        else:   # fitted (128 x 80 stays 128 x 80), the padding cut off
            assert got[i].boxes[:, [0, 2]].max() <= width - 1
    assert 0 <= evaluate_model(path, 'voc', root, 'val', progress=False)['mAP'] <= 1
