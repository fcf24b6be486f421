"""ONNX export of YOLOv3: ONNX Runtime gives the Gluon network's detections at batch 1 and 2,
at any input size, for every zoo network."""
import json

import mxnet as mx
import numpy as np
import pytest

from gluondet.deploy import compare_detections, detecting_random_weights
from gluondet.model_zoo import get_model

onnx = pytest.importorskip('onnx')
ort = pytest.importorskip('onnxruntime')
from gluondet.deploy import export_onnx  # noqa: E402
from gluondet.deploy.tensorrt import check_tensorrt_limits  # noqa: E402
from export_checks import (assert_symbol_round_trip, checked_detector, run_onnx,  # noqa: E402
                           sweep_names)

SMALL = 'yolo3_mobilenet0.5_custom'
SHAPE = (160, 192)


def _detector(name, batch=2, seed=0, shape=SHAPE, **kwargs):
    """``name`` with random weights that detect on ``batch`` random images of ``shape``."""
    if name.endswith('_custom'):
        kwargs.setdefault('classes', ['a', 'b', 'c'])
    net = get_model(name, pretrained_base=False, **kwargs)
    x = mx.nd.array(np.random.RandomState(seed).uniform(-2, 2, (batch, 3) + shape))
    detecting_random_weights(net, x, seed)
    net.hybridize()
    return net, x


def _assert_same(net, x, path, min_per_image=50):
    result = compare_detections(net(x), run_onnx(path, x))
    assert result.ok, '%s: %s' % (path.name, result)
    assert result.compared >= min_per_image * x.shape[0], str(result)


@pytest.fixture(scope='module')
def small():
    return _detector(SMALL)


def test_onnx_detections_equal_gluon(small, tmp_path):
    net, x = small
    dynamic = tmp_path / 'dynamic.onnx'
    export_onnx(net, str(dynamic), SHAPE, dynamic_batch=True)
    checked_detector(dynamic, 'batch', SHAPE, 100)
    for batch in (1, 2):
        static = tmp_path / ('static%d.onnx' % batch)
        export_onnx(net, str(static), SHAPE, batch_size=batch)
        for path in (static, dynamic):
            _assert_same(net, x[:batch], path)
    meta = {p.key: json.loads(p.value) for p in onnx.load(str(dynamic)).metadata_props}
    assert meta['postprocess_kind'] == 'yolo3' and meta['classes'] == ['a', 'b', 'c']
    assert meta['nms'] == {'score_thresh': 0.01, 'nms_thresh': 0.45, 'nms_topk': 400,
                           'post_nms': 100}
    assert check_tensorrt_limits(str(dynamic)) is None       # every TopK within TensorRT's


def test_one_graph_takes_any_size_up_to_the_export(small, tmp_path):
    net, _ = small
    path = tmp_path / 'sizes.onnx'
    export_onnx(net, str(path), (256, 256), dynamic_batch=True, dynamic_size=True)
    checked_detector(path, 'batch', ['height', 'width'], 100)
    for shape in ((256, 256), (160, 192), (100, 130)):      # the last off the stride
        x = mx.nd.array(np.random.RandomState(3).uniform(-2, 2, (2, 3) + shape))
        _assert_same(net, x, path, min_per_image=20)


def test_nms_settings_are_exported(small, tmp_path):
    net, x = small
    net.set_nms(nms_thresh=0.3, nms_topk=50, post_nms=20)
    try:
        path = tmp_path / 'nms.onnx'
        export_onnx(net, str(path), SHAPE, dynamic_batch=True)
        _assert_same(net, x, path, min_per_image=10)
        assert run_onnx(path, x)[0].shape == (2, 20, 1)
        net.set_nms(nms_thresh=0)
        with pytest.raises(ValueError, match='ONNX export needs 0 < nms_thresh < 1'):
            export_onnx(net, str(tmp_path / 'no_nms.onnx'), SHAPE)
    finally:
        net.set_nms()


def test_export_symbol_gives_identical_outputs(small, tmp_path):
    net, x = small
    assert_symbol_round_trip(net, x, str(tmp_path / 'yolo3'), SHAPE)


@pytest.mark.parametrize('name', sweep_names('yolo3_'))
def test_every_zoo_network_exports_exactly(name, tmp_path):
    net, x = _detector(name, shape=(128, 128))
    path = tmp_path / 'model.onnx'
    export_onnx(net, str(path), (128, 128), dynamic_batch=True)
    _assert_same(net, x, path)
