"""ONNX export of CenterNet (issue 28, item 5): standard ops only, ONNX Runtime gives the Gluon
network's detections at batch 1 and 2, at any input size, with flip_test, for every exportable
zoo network; the _dcnv2 ones are refused; the NMS options on a model without NMS."""
import json

import mxnet as mx
import numpy as np
import pytest

from gluondet.deploy import compare_detections, detecting_random_weights
from gluondet.deploy.nms import NMSOptions, configure_network, export_plan, nms_keep
from gluondet.model_zoo import get_model

onnx = pytest.importorskip('onnx')
ort = pytest.importorskip('onnxruntime')
from gluondet.deploy import export_onnx  # noqa: E402
from gluondet.deploy.onnx import UnsupportedOperatorError  # noqa: E402
from gluondet.deploy.tensorrt import check_tensorrt_limits  # noqa: E402
from export_checks import (assert_symbol_round_trip, checked_detector, run_onnx,  # noqa: E402
                           sweep_names)

SMALL = 'center_net_mobilenet0.5_custom'
SHAPE = (128, 160)


def _detector(name, batch=2, seed=0, shape=SHAPE, **kwargs):
    """``name`` with random weights that detect on ``batch`` random images of ``shape``."""
    if name.endswith('_custom'):
        kwargs.setdefault('classes', ['a', 'b', 'c'])
    net = get_model(name, pretrained_base=False, **kwargs)
    x = mx.nd.array(np.random.RandomState(seed).uniform(-2, 2, (batch, 3) + shape))
    detecting_random_weights(net, x, seed)
    net.hybridize()
    return net, x


def _assert_same(net, x, path, min_per_image=None):
    """ONNX Runtime's detections are the network's: every row that is a peak (``K`` of them,
    or ``min_per_image``), scores within 1e-4, boxes within 0.01 px. Returns the comparison."""
    result = compare_detections(net(x), run_onnx(path, x))
    assert result.ok, '%s: %s' % (path.name, result)
    least = net.postprocess.k if min_per_image is None else min_per_image
    assert result.compared >= least * x.shape[0], str(result)
    return result


@pytest.fixture(scope='module')
def small():
    return _detector(SMALL)


def test_onnx_detections_equal_gluon_in_standard_ops(small, tmp_path):
    net, x = small
    dynamic = tmp_path / 'dynamic.onnx'
    export_onnx(net, str(dynamic), SHAPE, dynamic_batch=True)
    model, meta = checked_detector(dynamic, 'batch', SHAPE, 100)
    ops = {node.op_type for node in model.graph.node}
    assert {'MaxPool', 'Equal', 'TopK', 'GatherND', 'Conv', 'ConvTranspose'} <= ops
    assert 'NonMaxSuppression' not in ops        # the peak search is CenterNet's NMS
    assert {node.domain for node in model.graph.node} == {''}
    assert [o.domain for o in model.opset_import] == ['']
    for batch in (1, 2):
        static = tmp_path / ('static%d.onnx' % batch)
        export_onnx(net, str(static), SHAPE, batch_size=batch)
        for path in (static, dynamic):
            _assert_same(net, x[:batch], path)
    assert meta['postprocess_kind'] == 'center_net' and meta['classes'] == ['a', 'b', 'c']
    assert meta['nms'] == {'topk': 100, 'nms_thresh': 0, 'nms_topk': 400, 'post_nms': 100}
    assert check_tensorrt_limits(str(dynamic)) is None


def test_one_graph_takes_any_size(small, tmp_path):
    """Keep-ratio inputs of other sizes (a multiple of 32, as the predictor pads them, and one
    off it), and an input with fewer classes x places than K: rows of -1 after its peaks."""
    net, _ = small
    path = tmp_path / 'sizes.onnx'
    export_onnx(net, str(path), (256, 256), dynamic_batch=True, dynamic_size=True)
    checked_detector(path, 'batch', ['height', 'width'], 100)
    for shape in ((256, 256), (96, 160), (160, 96), (100, 130)):
        x = mx.nd.array(np.random.RandomState(3).uniform(-2, 2, (2, 3) + shape))
        _assert_same(net, x, path)
    # 3 classes x 4 x 8 places = 96 < 100 (the Gluon decoder's topk refuses it)
    ids, scores, boxes = run_onnx(path, np.random.RandomState(4).uniform(
        -2, 2, (1, 3, 16, 32)).astype(np.float32))
    peaks = scores[0, :, 0] > 0
    assert 0 < peaks.sum() < 96 and not peaks[peaks.sum():].any()
    assert (ids[0, ~peaks] == -1).all() and (boxes[0, ~peaks] == -1).all()


def test_set_nms_caps_the_rows(small, tmp_path):
    net, x = small
    net.set_nms(post_nms=20)
    try:
        path = tmp_path / 'capped.onnx'
        export_onnx(net, str(path), SHAPE, dynamic_batch=True)
        _assert_same(net, x, path, 20)
        assert run_onnx(path, x)[0].shape == (2, 20, 1)
    finally:
        net.set_nms()


def test_flip_test_is_exported(tmp_path):
    net, x = _detector(SMALL, flip_test=True)
    path = tmp_path / 'flip.onnx'
    export_onnx(net, str(path), (256, 256), dynamic_batch=True, dynamic_size=True)
    _assert_same(net, x, path)
    net.flip_test = False
    assert not compare_detections(net(x), run_onnx(path, x)).ok    # the flip counts


def test_export_symbol_gives_identical_outputs(small, tmp_path):
    net, x = small
    assert_symbol_round_trip(net, x, str(tmp_path / 'center_net'), SHAPE)


def test_dcnv2_is_refused_in_one_line(tmp_path):
    net = get_model('center_net_resnet18_v1b_dcnv2_custom', classes=['a'], pretrained_base=False)
    net.initialize()
    with pytest.raises(UnsupportedOperatorError) as err:
        export_onnx(net, str(tmp_path / 'dcn.onnx'), (128, 128))
    message = str(err.value)
    assert '\n' not in message and 'deformable' in message and 'DeformConv at 19' in message
    assert not (tmp_path / 'dcn.onnx').exists()


@pytest.mark.parametrize('name', [n for n in sweep_names('center_net_') if '_dcnv2' not in n])
def test_every_zoo_network_exports_exactly(name, tmp_path):
    net, x = _detector(name, shape=(128, 128))
    path = tmp_path / 'model.onnx'
    export_onnx(net, str(path), (128, 128), dynamic_batch=True, dynamic_size=True)
    for batch in (1, 2):
        _assert_same(net, x[:batch], path)


# ---------------------------------------------------------------- NMS options

def _rows(outputs, image=0):
    ids, scores, boxes = (np.asarray(o.asnumpy() if hasattr(o, 'asnumpy') else o)
                          for o in outputs)
    return ids[image, :, 0], scores[image, :, 0], boxes[image]


def test_nms_options_run_on_the_host_over_the_peaks(small, tmp_path):
    """A model without NMS: its outputs are the candidates, exported with or without
    --no-nms (the same graph); --iou runs box_nms over them, --conf and --max-det cut them."""
    net, x = small
    path, candidates = tmp_path / 'model.onnx', tmp_path / 'no_nms.onnx'
    export_onnx(net, str(path), SHAPE, dynamic_batch=True)
    export_onnx(net, str(candidates), SHAPE, dynamic_batch=True, nms=False)
    for a, b in zip(run_onnx(path, x), run_onnx(candidates, x)):
        np.testing.assert_array_equal(a, b)
    meta = {p.key: json.loads(p.value) for p in onnx.load(str(candidates)).metadata_props}
    assert meta['nms_applied'] is False
    ids, scores, boxes = _rows(run_onnx(path, x))
    for source in (meta, dict(meta, nms_applied=True)):
        assert export_plan(None, source, 'm.onnx') is None     # the peaks as they are
        host = export_plan(NMSOptions(iou=0.3), source, 'm.onnx')
        keep, kept = host(ids, scores, boxes)
        np.testing.assert_array_equal(keep, nms_keep(boxes, scores, ids, 0.3))
        assert 0 < len(keep) < len(ids)
        host = export_plan(NMSOptions(conf=0.3, max_det=10), source, 'm.onnx')
        keep, kept = host(ids, scores, boxes)
        assert len(keep) == 10 and kept.min() > 0.3 and not host.nms
        keep, _ = export_plan(NMSOptions(soft='gaussian', agnostic=True), source,
                              'm.onnx')(ids, scores, boxes)
        assert len(keep) > 0
        for options, flag in ((NMSOptions(agnostic=True), '--agnostic-nms'),
                              (NMSOptions(soft='linear'), '--soft-nms linear')):
            with pytest.raises(ValueError, match='^%s: m.onnx has no NMS of its own .* give '
                                                 '--iou' % flag):
                export_plan(options, source, 'm.onnx')


def test_nms_options_on_the_gluon_network(small):
    net, x = small
    try:
        assert not configure_network(net, NMSOptions(max_det=30)).nms
        assert net(x)[0].shape == (2, 30, 1)        # its post_nms caps the peaks
        net.set_nms()
        host = configure_network(net, NMSOptions(iou=0.3, agnostic=True, max_det=30))
        assert net.postprocess.k == 100 and (host.iou, host.agnostic, host.max_det) == (
            0.3, True, 30)
        ids, scores, boxes = _rows(net(x))
        keep, _ = host(ids, scores, boxes)
        np.testing.assert_array_equal(keep, nms_keep(boxes, scores, ids, 0.3, True)[:30])
        with pytest.raises(ValueError, match='^--agnostic-nms: CenterNet has no NMS'):
            configure_network(net, NMSOptions(agnostic=True))
    finally:
        net.set_nms()
