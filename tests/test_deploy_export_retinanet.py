"""Symbol and ONNX export of RetinaNet: ONNX Runtime parity with Gluon for every zoo name at
batch 1 and 2, the post-processing graph against LevelTopKNMS, int8 and TensorRT checks."""
import mxnet as mx
import numpy as np
import pytest

from gluondet.deploy import compare_detections, detecting_random_weights
from gluondet.model_zoo import get_model

onnx = pytest.importorskip('onnx')
ort = pytest.importorskip('onnxruntime')
from gluondet.deploy import export_onnx  # noqa: E402
from export_checks import sweep_names, assert_symbol_round_trip, checked_detector, run_onnx  # noqa: E402

FAST_NAME = 'retinanet_resnet18_v1b_custom'
SHAPE = (128, 160)


def _detector(name, batch=2, seed=0, **kwargs):
    """``name`` with random weights that detect on ``batch`` random SHAPE images."""
    if name.endswith('_custom'):
        kwargs.setdefault('classes', ['a', 'b', 'c'])
    net = get_model(name, pretrained_base=False, **kwargs)
    x = mx.nd.array(np.random.RandomState(seed).uniform(-2, 2, (batch, 3) + SHAPE))
    detecting_random_weights(net, x, seed)
    net.hybridize()
    return net, x


def _parity(net, x, tmp_path, min_per_image=20):
    """ONNX Runtime vs Gluon: a static export at batch 1 and 2, and a dynamic one for both."""
    dynamic = tmp_path / 'dynamic.onnx'
    export_onnx(net, str(dynamic), SHAPE, dynamic_batch=True)
    for batch in (1, 2):
        expected = net(x[:batch])
        static = tmp_path / ('static%d.onnx' % batch)
        export_onnx(net, str(static), SHAPE, batch_size=batch)
        for path in (static, dynamic):
            result = compare_detections(expected, run_onnx(path, x[:batch]))
            assert result.ok, '%s batch %d: %s' % (path.name, batch, result)
            assert result.compared >= min_per_image * batch, str(result)


@pytest.fixture(scope='module')
def detector():
    return _detector(FAST_NAME)


def test_onnx_detections_equal_gluon(detector, tmp_path):
    _parity(*detector, tmp_path)


@pytest.mark.parametrize('head_norm', ['group', 'batch'])
def test_onnx_detections_equal_gluon_with_normalized_heads(head_norm, tmp_path):
    """GroupNorm has no mx2onnx translation: gluondet's own (standard ops) is exact too."""
    net, x = _detector(FAST_NAME, head_norm=head_norm, head_channels=64)
    _parity(net, x, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize('name', [n for n in sweep_names('retinanet_') if n != FAST_NAME])
def test_onnx_detections_equal_gluon_for_every_zoo_network(name, tmp_path):
    _parity(*_detector(name), tmp_path)


def test_onnx_of_any_size_equals_gluon_at_each_size(detector, tmp_path):
    """``dynamic_size``: one model for every input up to 256 x 256; at 64 x 96 the coarse
    levels have fewer candidates than their top-k cut (P7: 1 x 1 x 9 anchors x 3 classes)."""
    net, _ = detector
    path = tmp_path / 'any_size.onnx'
    export_onnx(net, str(path), (256, 256), dynamic_size=True)
    checked_detector(path, 1, ('height', 'width'), 100)
    for seed, shape in enumerate([SHAPE, (160, 96), (256, 256), (64, 96)]):
        x = mx.nd.array(np.random.RandomState(seed).uniform(-2, 2, (1, 3) + shape))
        result = compare_detections(net(x), run_onnx(path, x))
        assert result.ok and result.compared >= 20, '%s: %s' % (shape, result)


@pytest.mark.parametrize('settings', [dict(nms_thresh=0.3, nms_topk=50, post_nms=20),
                                      dict(nms_thresh=0.7, nms_topk=2000, post_nms=-1)])
def test_onnx_nms_settings(detector, tmp_path, settings):
    net, x = detector
    try:
        net.set_nms(**settings)
        expected = net(x)
        path = tmp_path / 'm.onnx'
        export_onnx(net, str(path), SHAPE, batch_size=2)
        got = run_onnx(path, x)
        assert got[0].shape == expected[0].shape
        result = compare_detections(expected, got)
        assert result.ok and result.compared > 20, str(result)
    finally:
        net.set_nms()


def test_onnx_model_checks_and_describes_itself(detector, tmp_path):
    net, _ = detector
    path = tmp_path / 'm.onnx'
    export_onnx(net, str(path), SHAPE, batch_size=2)
    _, meta = checked_detector(path, 2, SHAPE, 100)
    assert meta['classes'] == ['a', 'b', 'c'] and meta['data_shape'] == list(SHAPE)
    assert meta['nms'] == {'score_thresh': 0.05, 'nms_thresh': 0.5, 'nms_topk': 1000,
                           'post_nms': 100}


def test_export_symbol_gives_identical_outputs(detector, tmp_path):
    net, x = detector
    assert_symbol_round_trip(net, x, str(tmp_path / 'sym'), SHAPE)


@pytest.fixture
def no_tensorrt(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, 'tensorrt', None)


def test_tensorrt_limits_name_the_setting_and_768_per_level_fits(tmp_path, no_tensorrt):
    from gluondet.deploy import tensorrt as gt
    net = get_model(FAST_NAME, classes=['a', 'b', 'c'], pretrained_base=False)
    net.initialize()
    path = str(tmp_path / 'default.onnx')
    export_onnx(net, path, (512, 512))        # 4 levels x 1000 + P7's 432 sorted together
    with pytest.raises(ValueError, match=r"k = 4432, set by the detection NMS .*"
                                         r"set_nms\(nms_topk=768\) for its five levels"):
        gt.check_tensorrt_limits(path)
    net.set_nms(nms_topk=768)
    export_onnx(net, path, (512, 512))
    gt.check_tensorrt_limits(path)
    spec = gt.read_onnx_input(path)
    assert spec.shape == (1, 3, 512, 512)
    assert 'NonMaxSuppression' in ' '.join(op for _, op in spec.nodes)
