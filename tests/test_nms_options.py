"""NMS options (gluondet.deploy.nms): soft NMS by hand, class-agnostic NMS, conf and max_det;
``export --no-nms`` equal to the export with NMS for every detector (ONNX Runtime); the
MXNet backend's agnostic and soft NMS equal to those of the --no-nms export (ONNX Runtime,
and TensorRT's runner on a stand-in engine, and OpenVINO); refusals."""
import argparse
import importlib.util
import math

import mxnet as mx
import numpy as np
import pytest

from gluondet.bbox import bbox_nms
from gluondet.cli import main
from gluondet.deploy import Predictor, detecting_random_weights
from gluondet.deploy.networks import apply_nms
from gluondet.deploy.nms import HostNMS, NMSOptions, nms_keep, nms_options, soft_nms_keep
from gluondet.inference_flags import add_nms_arguments
from gluondet.model_zoo import get_model

pytest.importorskip('onnxruntime')
from gluondet.deploy.commands import export_model  # noqa: E402
import tensorrt_stand_in  # noqa: E402
from export_checks import by_class_and_box, save_training_output  # noqa: E402

# A, then B (IoU 1/3 with A), C (apart), D (IoU 5/6 with A, 7/15 with B)
BOXES = np.array([[0, 0, 10, 10], [0, 5, 10, 15], [20, 20, 30, 30], [0, 0, 10, 12]],
                 np.float32)
SCORES = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
IDS = np.array([0, 0, 1, 0])


# ---------------------------------------------------------------- the host NMS

def test_gaussian_soft_nms_by_hand():
    sigma, g = 0.5, lambda s, iou: s * math.exp(-iou * iou / sigma)    # noqa: E731
    b = g(0.8, 1 / 3)           # A kept first: B and D decay by their IoU with A
    d = g(g(0.6, 5 / 6), 7 / 15)    # C (0.7 > b = 0.64) kept next, then B: D decays again
    keep, scores = soft_nms_keep(BOXES, SCORES, IDS, 0.3, 'gaussian', sigma, conf=0.06)
    assert keep.tolist() == [0, 2, 1, 3]
    np.testing.assert_allclose(scores, [0.9, 0.7, b, d], rtol=1e-6)
    keep, scores = soft_nms_keep(BOXES, SCORES, IDS, 0.3, 'gaussian', sigma, 0.06, max_det=2)
    assert keep.tolist() == [0, 2]


def test_linear_soft_nms_by_hand_drops_what_falls_under_conf():
    keep, scores = soft_nms_keep(BOXES, SCORES, IDS, 0.3, 'linear', conf=0.06)
    b = 0.8 * (1 - 1 / 3)       # IoU 1/3 >= 0.3: scaled by 1 - IoU
    assert keep.tolist() == [0, 2, 1]       # D: 0.6 * (1 - 5/6) * (1 - 7/15) = 0.053 <= 0.06
    np.testing.assert_allclose(scores, [0.9, 0.7, b], rtol=1e-6)
    keep, scores = soft_nms_keep(BOXES, SCORES, IDS, 0.5, 'linear', conf=0.06)
    assert keep.tolist() == [0, 1, 2, 3]    # B's IoU 1/3 under 0.5: B untouched
    np.testing.assert_allclose(scores, [0.9, 0.8, 0.7, 0.1], rtol=1e-6)


def test_agnostic_and_per_class_differ_where_classes_overlap():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [0, 0, 10, 9]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    ids = np.array([0, 1, 1])
    assert nms_keep(boxes, scores, ids, 0.5).tolist() == [0, 1]     # 2 under 1, same class
    assert nms_keep(boxes, scores, ids, 0.5, agnostic=True).tolist() == [0]
    keep, _ = soft_nms_keep(boxes, scores, ids, 0.5, 'linear')
    assert keep.tolist() == [0, 1, 2]
    _, decayed = soft_nms_keep(boxes, scores, ids, 0.5, 'linear', agnostic=True)
    np.testing.assert_allclose(decayed[0], 0.9)
    assert (decayed[1:] < scores[1:] - 0.5).all()   # both decay by their IoU with box 0


def _greedy(boxes, scores, iou):
    """Textbook greedy NMS: the best left is kept, those overlapping it by more than iou go."""
    order, kept = list(np.argsort(-scores, kind='stable')), []
    while order:
        best = order.pop(0)
        kept.append(best)
        order = [i for i in order if _iou(boxes[best], boxes[i]) <= iou]
    return kept


def _iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_nms_keep_is_greedy_nms_best_first():
    rng = np.random.RandomState(0)
    corner = rng.uniform(0, 50, (200, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(5, 30, (200, 2))], 1).astype(np.float32)
    scores = rng.uniform(0, 1, 200).astype(np.float32)
    ids = rng.randint(0, 3, 200)
    for iou in (0.3, 0.6):
        assert nms_keep(boxes, scores, ids, iou, agnostic=True).tolist() == _greedy(
            boxes, scores, iou)
        for c in range(3):
            mine = nms_keep(boxes, scores, ids, iou)
            picked = np.flatnonzero(ids == c)
            assert [i for i in mine if ids[i] == c] == picked[_greedy(
                boxes[picked], scores[picked], iou)].tolist()


def test_host_cut_of_detections_keeps_conf_and_max_det():
    ids = np.array([1, 0, 2, 1, -1, -1])
    scores = np.array([0.9, 0.5, 0.3, 0.2, -1, -1], np.float32)
    boxes = np.zeros((6, 4), np.float32)
    keep, kept = HostNMS(0.25, -1, nms=False)(ids, scores, boxes)
    assert keep.tolist() == [0, 1, 2] and kept.tolist() == scores[:3].tolist()
    assert HostNMS(-np.inf, 2, nms=False)(ids, scores, boxes)[0].tolist() == [0, 1]
    assert HostNMS(0.3, -1, nms=False)(ids, scores, boxes)[0].tolist() == [0, 1]   # > conf


def test_flags_and_options():
    parser = argparse.ArgumentParser()
    add_nms_arguments(parser)
    assert nms_options(parser.parse_args([])) is None
    options = nms_options(parser.parse_args(['--conf', '0.2', '--iou', '0.6', '--max-det', '50',
                                             '--agnostic-nms', '--soft-nms', 'linear',
                                             '--soft-sigma', '0.3']))
    assert (options.conf, options.iou, options.max_det, options.agnostic, options.soft,
            options.sigma) == (0.2, 0.6, 50, True, 'linear', 0.3)
    for args, flag in ((['--iou', '0'], '--iou'), (['--max-det', '0'], '--max-det'),
                       (['--conf', '1.5'], '--conf'), (['--soft-nms', 'gaussian',
                                                        '--soft-sigma', '-1'], '--soft-sigma')):
        with pytest.raises(ValueError, match=flag):
            nms_options(parser.parse_args(args))


# ---------------------------------------------------------------- exports and backends

# (zoo name, input height x width, architecture arguments): small nets, random weights that
# detect many overlapping boxes on random inputs
DETECTORS = {
    'ssd': ('ssd_300_mobilenet0.25_voc', (300, 300), {}),
    'retinanet': ('retinanet_resnet18_v1b_custom', (128, 160), {'classes': ('a', 'b', 'c')}),
    'faster_rcnn_fpn': ('faster_rcnn_fpn_resnet18_v1b_custom', (128, 160),
                        {'classes': ('a', 'b', 'c'), 'rpn_test_post_nms': 300}),
    'yolo3': ('yolo3_mobilenet0.5_custom', (160, 192), {'classes': ('a', 'b', 'c')}),
}


def _detector(kind, tmp_path):
    """The detecting network, two inputs, and its weights as a training output."""
    name, shape, kwargs = DETECTORS[kind]
    net = get_model(name, pretrained_base=False, **kwargs)
    x = mx.nd.array(np.random.RandomState(0).uniform(-2, 2, (2, 3) + shape))
    detecting_random_weights(net, x, 0)
    net.hybridize()
    architecture = {k: v for k, v in kwargs.items() if k != 'classes'}
    params = save_training_output(net, str(tmp_path / ('%s.params' % kind)), name, architecture)
    return net, x, params


def _detections(predictor, x):
    """Each input's ``(ids, scores, boxes)`` from the predictor's runner and its host part."""
    ids, scores, boxes = (np.asarray(o) for o in predictor.runner(x.asnumpy()))
    found = []
    for i in range(len(ids)):
        if predictor.nms is None:
            keep = np.flatnonzero(ids[i, :, 0] >= 0)
            kept = scores[i, keep, 0]
        else:
            keep, kept = predictor.nms(ids[i, :, 0], scores[i, :, 0], boxes[i])
        found.append((ids[i, keep, 0], kept, boxes[i, keep]))
    return found


def _assert_same(got, want, exact=True):
    """The same detections; in the same order if ``exact``, else within float noise, whose
    order may swap two of nearly equal scores (7e-6 apart on Faster R-CNN FPN's)."""
    for (ids, scores, boxes), (ids0, scores0, boxes0) in zip(got, want):
        assert len(ids) >= 20
        if not exact:
            (ids, scores, boxes), (ids0, scores0, boxes0) = (
                by_class_and_box(*d) for d in ((ids, scores, boxes), (ids0, scores0, boxes0)))
        np.testing.assert_array_equal(ids, ids0)
        if exact:
            np.testing.assert_array_equal(scores, scores0)
            np.testing.assert_array_equal(boxes, boxes0)
        else:
            np.testing.assert_allclose(scores, scores0, atol=1e-4)
            np.testing.assert_allclose(boxes, boxes0, atol=2e-3)


@pytest.mark.parametrize('kind', sorted(DETECTORS))
def test_no_nms_export_gives_the_detections_of_the_export_with_nms(kind, tmp_path):
    net, x, params = _detector(kind, tmp_path)
    shape = DETECTORS[kind][1]
    paths = {}
    for with_nms in (True, False):
        paths[with_nms] = str(tmp_path / ('%s_nms%d.onnx' % (kind, with_nms)))
        export_model(params, paths[with_nms], 'onnx', data_shape=shape, batch_size=2,
                     with_nms=with_nms, verbose=False)
    inside, host = (Predictor.from_model(paths[flag]) for flag in (True, False))
    assert inside.nms is None and host.nms.nms
    assert host.runner.metadata['nms_applied'] is False
    assert host.runner.metadata['nms'] == inside.runner.metadata['nms']
    expected = _detections(inside, x)
    _assert_same(_detections(host, x), expected)
    _assert_same(_detections(Predictor.from_model(net), x), expected, exact=False)


def test_mxnet_agnostic_and_soft_nms_equal_those_of_the_no_nms_export(tmp_path, capsys,
                                                                       monkeypatch):
    net, x, params = _detector('ssd', tmp_path)
    path = str(tmp_path / 'ssd.onnx')
    assert main(['export', '-m', params, '-o', path, '--batch-size', '2', '--no-nms']) == 0
    assert 'the candidates of the NMS, which the predictor runs' in capsys.readouterr().out
    tensorrt_stand_in.install(monkeypatch)      # TensorRT's runner on a stand-in engine
    engine = tensorrt_stand_in.engine_beside(path)
    default = _detections(Predictor.from_model(net), x)
    for options in (NMSOptions(agnostic=True), NMSOptions(soft='gaussian', sigma=0.3),
                    NMSOptions(soft='linear', iou=0.3, conf=0.05, max_det=50)):
        gluon = Predictor.from_model(params, nms=options)
        assert gluon.runner.block.postprocess.candidates
        found = _detections(gluon, x)
        exported = _detections(Predictor.from_model(path, nms=options), x)
        _assert_same(found, exported, exact=False)
        _assert_same(_detections(Predictor.from_model(engine, nms=options), x), exported)
        if importlib.util.find_spec('openvino'):    # the candidates on OpenVINO too
            _assert_same(_detections(Predictor.from_model(path, 'openvino', nms=options), x),
                         exported, exact=False)
        assert [len(f[0]) for f in found] != [len(d[0]) for d in default] or any(
            not np.array_equal(f[1], d[1]) for f, d in zip(found, default))
    # class-agnostic: the reference is box_nms over all classes of the candidates
    gluon = Predictor.from_model(params, nms=NMSOptions(agnostic=True))
    ids, scores, boxes = (o.asnumpy() for o in gluon.runner.block(x))
    rows = bbox_nms(np.concatenate([ids, scores, boxes], -1), overlap_thresh=0.45,
                    valid_thresh=0.01, post_nms=100, force_suppress=True)
    for (got_ids, got_scores, got_boxes), *want in zip(_detections(gluon, x), *rows):
        valid = want[0][:, 0] >= 0
        np.testing.assert_array_equal(got_ids, want[0][valid, 0])
        np.testing.assert_array_equal(got_scores, want[1][valid, 0])
        np.testing.assert_array_equal(got_boxes, want[2][valid])
    # the network's own NMS where it has the setting: no host part
    assert Predictor.from_model(net, nms=NMSOptions(conf=0.2, iou=0.3, max_det=10)).nms is None
    assert (net.postprocess.score_thresh, net.nms_thresh, net.post_nms,
            net.postprocess.candidates) == (0.2, 0.3, 10, False)
    rcnn = get_model('faster_rcnn_fpn_resnet18_v1b_custom', classes=('a', 'b'),
                     pretrained_base=False)
    assert Predictor.from_model(rcnn, nms=NMSOptions(agnostic=True)).nms is None
    assert rcnn.force_nms is True
    apply_nms(rcnn, {'post_nms': 50})     # a spec's nms_config keeps force_nms
    assert (rcnn.force_nms, rcnn.post_nms) == (True, 50)


def test_symbol_without_nms_and_refusals_of_an_export_with_nms(tmp_path, capsys):
    net, x, params = _detector('ssd', tmp_path)
    for with_nms in (True, False):
        export_model(params, str(tmp_path / ('sym%d' % with_nms)), 'symbol', with_nms=with_nms,
                     verbose=False)
    _assert_same(_detections(Predictor.from_model(str(tmp_path / 'sym0')), x),
                 _detections(Predictor.from_model(str(tmp_path / 'sym1')), x))
    path = str(tmp_path / 'ssd.onnx')
    export_model(params, path, 'onnx', batch_size=2, verbose=False)
    for options, flag in ((NMSOptions(iou=0.3), '--iou'), (NMSOptions(agnostic=True),
                                                           '--agnostic-nms'),
                          (NMSOptions(soft='linear'), '--soft-nms'),
                          (NMSOptions(conf=0.001), '--conf 0.001'),
                          (NMSOptions(max_det=500), '--max-det 500')):
        with pytest.raises(ValueError, match=flag) as err:
            Predictor.from_model(path, nms=options)
        assert '\n' not in str(err.value)
    assert main(['benchmark', '-m', path, '--soft-nms', 'gaussian', '--iters', '1']) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and 'export it with --no-nms' in error, error
    # a stricter conf and max_det act on the detections
    stricter = _detections(Predictor.from_model(path, nms=NMSOptions(conf=0.3, max_det=5)), x)
    for (_, scores, _), (_, scores0, _) in zip(stricter, _detections(
            Predictor.from_model(path), x)):
        expected = scores0[scores0 > 0.3][:5]
        assert len(expected) and scores.tolist() == expected.tolist()
