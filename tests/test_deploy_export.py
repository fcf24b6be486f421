"""Symbol and ONNX export of SSD (gluondet.deploy): round trips, ONNX Runtime parity, errors."""
import json

import cv2
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon
from mxnet.gluon import nn

from gluondet.deploy import compare_detections, detecting_random_weights
from gluondet.model_zoo import get_model, get_model_info
from gluondet.model_zoo.ssd import SSD

onnx = pytest.importorskip('onnx')
ort = pytest.importorskip('onnxruntime')
from gluondet.deploy import UnsupportedOperatorError, export_onnx  # noqa: E402
from export_checks import (sweep_names, assert_symbol_round_trip, checked_detector,  # noqa: E402
                           run_onnx)

FAST_NAME = 'ssd_300_mobilenet0.25_voc'


def _images(batch, height, width, seed=0):
    return mx.nd.array(np.random.RandomState(seed).uniform(-2, 2, (batch, 3, height, width)))


def _fixed_gammas(net):
    """The gammas of ``BatchNorm(scale=False)`` (``fix_gamma``: MXNet uses 1 instead)."""
    return [p for p in net.collect_params().values()
            if p.name.endswith('gamma') and p.grad_req == 'null']


def _detector(name, batch=4, seed=0):
    """``name`` with random weights that give many detections on random images.

    Fixed gammas get random values last (MXNet's non-MKLDNN BatchNorm resets them to 1
    when it runs, the hybridized graph leaves them): the export must ignore them too.
    """
    kwargs = {'classes': ['a', 'b', 'c']} if name.endswith('_custom') else {}
    net = get_model(name, pretrained_base=False, **kwargs)
    data_shape = get_model_info(name).data_shape
    x = _images(batch, *data_shape, seed=seed)
    detecting_random_weights(net, x, seed)
    net.hybridize()
    rng = np.random.RandomState(seed)
    for gamma in _fixed_gammas(net):
        gamma.set_data(mx.nd.array(rng.uniform(0.5, 1.5, gamma.shape)))
    return net, x, data_shape


def _assert_parity(net, path, x, min_per_image=50, expected=None):
    result = compare_detections(net(x) if expected is None else expected, run_onnx(path, x))
    assert result.ok, str(result)
    assert result.compared >= min_per_image * x.shape[0], str(result)
    return result


# ---------------------------------------------------------------------------- symbol

def test_export_symbol_round_trip(tmp_path):
    net, x, data_shape = _detector(FAST_NAME, batch=2)
    expected = assert_symbol_round_trip(net, x, str(tmp_path / 'ssd'), data_shape)
    assert (expected[1] >= 0.05).sum() >= 100


# ---------------------------------------------------------------------------- ONNX

@pytest.mark.parametrize('dynamic', [False, True])
def test_onnx_model_checks_and_describes_itself(tmp_path, dynamic):
    net, _, data_shape = _detector(FAST_NAME, batch=1)
    path = str(tmp_path / 'ssd.onnx')
    export_onnx(net, path, data_shape, batch_size=2, dynamic_batch=dynamic,
                metadata={'mean': [0.485, 0.456, 0.406]})
    _, meta = checked_detector(path, 'batch' if dynamic else 2, (300, 300), 100)
    assert meta['classes'] == list(net.classes) and meta['data_shape'] == [300, 300]
    assert meta['batch_size'] == (None if dynamic else 2)
    assert meta['nms'] == {'score_thresh': 0.01, 'nms_thresh': 0.45, 'nms_topk': 400,
                           'post_nms': 100}
    assert meta['mean'] == [0.485, 0.456, 0.406]
    if not dynamic:
        with pytest.raises(Exception, match='invalid dimensions for input: data'):
            run_onnx(path, _images(1, 300, 300))


def test_onnx_names_do_not_depend_on_earlier_networks(tmp_path):
    # Gluon numbers top-level prefixes per process (ssd0_, ssd1_, ...); the export does not
    paths = []
    for _ in range(2):
        net = get_model(FAST_NAME, pretrained_base=False)
        mx.random.seed(0)
        net.initialize()
        paths.append(str(tmp_path / ('%d.onnx' % len(paths))))
        export_onnx(net, paths[-1], 300)
    first, second = (onnx.load(p) for p in paths)
    assert [n.name for n in second.graph.node] == [n.name for n in first.graph.node]
    assert first.graph.node[0].name.startswith('mobilenet0_')
    assert second.SerializeToString() == first.SerializeToString()


ALL_CASES = (('static', 1), ('static', 4), ('dynamic', 1), ('dynamic', 4))
# Every name: both modes, batch 1 and a larger one, in two exports (to fit in CI; the fast
# name takes every case).
SWEEP_CASES = (('static', 1), ('dynamic', 2))


def _parity(name, tmp_path, cases):
    """ONNX Runtime vs Gluon for ``(mode, batch)`` cases; returns the comparisons."""
    net, x, data_shape = _detector(name, batch=max(batch for _, batch in cases))
    expected = {batch: net(x[:batch]) for batch in {batch for _, batch in cases}}
    results = {}
    for mode, batch in cases:
        path = tmp_path / ('%s%d.onnx' % (mode, batch))
        if mode == 'dynamic':
            path = tmp_path / 'dynamic.onnx'
            if not path.exists():
                export_onnx(net, str(path), data_shape, dynamic_batch=True)
        else:
            export_onnx(net, str(path), data_shape, batch_size=batch)
        results[mode, batch] = _assert_parity(net, path, x[:batch], expected=expected[batch])
    return results


def test_onnx_detections_equal_gluon_static_and_dynamic_batch_1_and_4(tmp_path):
    for key, result in _parity(FAST_NAME, tmp_path, ALL_CASES).items():
        print(FAST_NAME, key, result)


@pytest.mark.slow
@pytest.mark.parametrize('name', sweep_names('ssd_'))
def test_onnx_detections_equal_gluon_for_every_zoo_network(name, tmp_path):
    for key, result in _parity(name, tmp_path, SWEEP_CASES).items():
        print(name, key, result)


def test_onnx_ignores_fixed_gamma_like_mxnet(tmp_path):
    net, x, data_shape = _detector(FAST_NAME, batch=1)
    path = tmp_path / 'ssd.onnx'
    export_onnx(net, str(path), data_shape)
    _assert_parity(net, path, x)
    gammas = _fixed_gammas(net)
    assert gammas and all(abs(g.data().asnumpy() - 1).max() > 0.1 for g in gammas)


def test_onnx_uniform_images_tie_like_gluon(tmp_path):
    # uniform areas give equal predictions at many anchors: the order of tied candidates
    # decides which one NMS keeps
    net, x, data_shape = _detector(FAST_NAME, batch=1)
    path = tmp_path / 'ssd.onnx'
    export_onnx(net, str(path), data_shape, dynamic_batch=True)
    half = mx.nd.concat(x[:, :, :150], mx.nd.ones((1, 3, 150, 300)) * 0.5, dim=2)
    images = mx.nd.concat(mx.nd.zeros((1, 3, 300, 300)), half, dim=0)
    expected = net(images)
    scores = expected[1].asnumpy()
    assert len(np.unique(scores[0][scores[0] >= 0])) < (scores[0] >= 0).sum()
    got = run_onnx(path, images)
    np.testing.assert_array_equal(got[0], expected[0].asnumpy())
    result = compare_detections(expected, got)
    assert result.ok and result.compared >= 100, str(result)


@pytest.mark.parametrize('nms_topk, post_nms', [(50, 120), (400, -1)])
def test_onnx_nms_settings(tmp_path, nms_topk, post_nms):
    net, x, data_shape = _detector(FAST_NAME, batch=2)
    net.set_nms(nms_thresh=0.45, nms_topk=nms_topk, post_nms=post_nms)
    ids = net(x)[0].asnumpy()
    rows = post_nms if post_nms > 0 else 20 * 2268
    assert ids.shape == (2, rows, 1)
    # NMS removed some of the nms_topk candidates (all above 0.01 here)
    assert 0 < (ids >= 0).sum(axis=1).max() < nms_topk
    path = tmp_path / 'ssd.onnx'
    export_onnx(net, str(path), data_shape, batch_size=2)
    got = run_onnx(path, x)
    assert got[0].shape == ids.shape
    np.testing.assert_array_equal(got[0] >= 0, ids >= 0)
    _assert_parity(net, path, x, min_per_image=nms_topk // 2)


@pytest.mark.parametrize('settings', [dict(nms_thresh=0), dict(nms_topk=-1)])
def test_onnx_refuses_nms_without_a_cap(tmp_path, settings):
    net = get_model(FAST_NAME, pretrained_base=False)
    net.initialize()
    net.set_nms(**settings)
    with pytest.raises(ValueError, match='nms_topk > 0'):
        export_onnx(net, str(tmp_path / 'ssd.onnx'), 300)


class _TinyFeatures(gluon.HybridBlock):
    """Maps of strides 8 and 16; ``act(F, x)`` follows the first convolution (no bias)."""

    def __init__(self, act, **kwargs):
        super().__init__(**kwargs)
        self._act = act
        with self.name_scope():
            self.conv1 = nn.Conv2D(16, 3, strides=8, padding=1, use_bias=False)
            self.conv2 = nn.Conv2D(16, 3, strides=2, padding=1)

    def hybrid_forward(self, F, x):
        first = self._act(F, self.conv1(x))
        return [first, F.relu(self.conv2(first))]


def _tiny_ssd(act):
    net = SSD(_TinyFeatures(act), ['a', 'b'], sizes=[16, 32, 64], ratios=[1, 2, 0.5],
              steps=[8, 16], base_size=64)
    return net


def test_onnx_l2_normalization_keeps_mxnet_eps(tmp_path):
    # mx2onnx's LpNormalization has no eps: on the dim half of this image (features
    # ~1e-3, channel norm ~ sqrt(eps)) its scores would be far off
    net = _tiny_ssd(lambda F, x: F.L2Normalization(F.relu(x), mode='channel', eps=1e-5))
    x = _images(2, 64, 64, seed=1)
    x[:, :, :, 32:] *= 1e-3
    detecting_random_weights(net, x, class_std=3.0)
    path = tmp_path / 'tiny.onnx'
    export_onnx(net, str(path), 64, batch_size=2)
    _assert_parity(net, path, x, min_per_image=20)


def test_onnx_names_the_operator_it_cannot_convert(tmp_path):
    net = _tiny_ssd(lambda F, x: F.softsign(x))
    net.initialize()
    net(_images(1, 64, 64))
    with pytest.raises(UnsupportedOperatorError, match=r'softsign \(nodes [^)]*softsign'):
        export_onnx(net, str(tmp_path / 'tiny.onnx'), 64)


def test_onnx_refuses_other_opsets_and_an_ssd_of_any_size(tmp_path):
    with pytest.raises(ValueError, match='only opset 13'):
        export_onnx(_tiny_ssd(lambda F, x: x), str(tmp_path / 'tiny.onnx'), 64, opset=17)
    with pytest.raises(ValueError, match='SSD takes one input size .*: no dynamic_size'):
        export_onnx(_tiny_ssd(lambda F, x: x), str(tmp_path / 'tiny.onnx'), 64,
                    dynamic_size=True)


# ---------------------------------------------------------------------------- compare

def _outputs(rows):
    rows = np.asarray(rows, np.float32).reshape(1, -1, 6)
    return rows[..., :1], rows[..., 1:2], rows[..., 2:]


def test_compare_detections_pairs_by_class_and_box_in_any_order():
    a = _outputs([[0, 0.9, 0, 0, 10, 10], [1, 0.5, 5, 5, 20, 20], [0, 0.04, 1, 1, 2, 2],
                  [-1, -1, -1, -1, -1, -1]])
    b = _outputs([[1, 0.50003, 5, 5, 20.004, 20], [0, 0.9, 0, 0, 10, 10],
                  [-1, -1, -1, -1, -1, -1], [-1, -1, -1, -1, -1, -1]])
    result = compare_detections(a, b)
    assert result.ok and result.compared == 2
    assert result.max_score_diff == pytest.approx(3e-5, abs=1e-6)
    assert result.max_box_diff == pytest.approx(0.004, abs=1e-4)


def test_compare_detections_reports_missing_and_far_detections():
    a = _outputs([[0, 0.9, 0, 0, 10, 10], [2, 0.3, 0, 0, 5, 5]])
    b = _outputs([[0, 0.9, 0, 0, 10, 10.5], [1, 0.3, 0, 0, 5, 5]])
    result = compare_detections(a, b)
    assert not result.ok
    assert (result.compared, result.missing_in_a, result.missing_in_b) == (1, 1, 1)
    assert result.max_box_diff == pytest.approx(0.5)
    assert 'missing' in str(result)


# ---------------------------------------------------------------------------- int8

def test_quantize_onnx_checks_its_arguments_and_keeps_detecting(tmp_path):
    from gluondet.deploy.calibration import CalibrationBatches
    from gluondet.deploy.quantize import quantize_onnx
    net = _tiny_ssd(lambda F, x: F.relu(x))
    x = _images(2, 64, 64, seed=2)
    detecting_random_weights(net, x)
    path, out = str(tmp_path / 'tiny.onnx'), str(tmp_path / 'int8.onnx')
    export_onnx(net, path, 64, batch_size=2)
    rng = np.random.RandomState(0)
    images = []
    for i in range(4):
        images.append(str(tmp_path / ('%d.png' % i)))
        cv2.imwrite(images[-1], rng.randint(0, 256, (64, 64, 3)).astype(np.uint8))
    with pytest.raises(ValueError, match="method must be one of .*got 'kl'"):
        quantize_onnx(path, out, CalibrationBatches(images, 64, batch_size=2), method='kl')
    with pytest.raises(ValueError, match='takes batches of 2 images; calibrate with batch_size=2'):
        quantize_onnx(path, out, CalibrationBatches(images, 64, batch_size=4))
    assert not (tmp_path / 'int8.onnx').exists()

    quantize_onnx(path, out, CalibrationBatches(images, 64, batch_size=2), method='percentile')
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ['tiny.onnx', 'int8.onnx'] + [p.split('/')[-1] for p in images])
    meta = {p.key: json.loads(p.value) for p in onnx.load(out).metadata_props}
    assert meta['calibration'] == {'method': 'percentile', 'batches': 2, 'images': 4,
                                   'skipped': 0}
    assert meta['classes'] == ['a', 'b'] and meta['precision'] == 'int8'
    ids, scores, _ = run_onnx(out, x)
    assert ids.shape == (2, 100, 1) and (scores > 0.05).sum() >= 40
