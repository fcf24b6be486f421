"""ONNX export of Mask R-CNN (the ``mask_rcnn`` kind, FPN and C4): ONNX Runtime's and OpenVINO's
detections and masks equal the Gluon network's, at batch 1 and 2 and at several sizes; int8's
agreement measured; TensorRT's checks and a stand-in engine; a GluonCV-sized export.

Each network has random weights made to detect (``detecting_random_weights``: the mask
predictor scaled so that masks hold probabilities from about 0.05 to 0.95, none all 0 or 1).
Masks are compared on the paired detections (``compare_masks``): probabilities within 1e-4,
and their IoU pasted into the input at 0.5.
"""
import json
import time

import cv2
import mxnet as mx
import numpy as np
import pytest

from gluondet.deploy import detecting_random_weights
from gluondet.deploy.compare import compare_masks
from gluondet.model_zoo import get_model

onnx = pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')
from gluondet.deploy import export_onnx  # noqa: E402
from export_checks import run_onnx, save_training_output, sweep_names  # noqa: E402

SHAPE = (128, 160)
CLASSES = ['a', 'b', 'c']
FPN = 'mask_rcnn_fpn_resnet18_v1b_custom'
C4 = 'mask_rcnn_resnet18_v1b_custom'
# C4 runs layer4 on each region twice (box head, mask head): 64 regions keep it fast; the FPN
# network keeps its 300, and resizes to short side 128, max size 160 (its training output's
# exports: SHAPE images are then fed as they are, calibration images too)
NETWORKS = {'fpn': (FPN, dict(short=128, max_size=160)), 'c4': (C4, dict(rpn_test_post_nms=64))}


def _images(batch, seed=0, shape=SHAPE):
    return mx.nd.array(np.random.RandomState(seed).uniform(-2, 2, (batch, 3) + tuple(shape)))


def _outputs(net, x):
    return [o.asnumpy() for o in net(x)]


def _assert_masks_equal(expected, got, shape, min_per_image):
    """``got`` (ids, scores, boxes, masks) has ``expected``'s detections and masks."""
    result = compare_masks(expected, got, shape[::-1])
    assert result.ok, str(result)
    assert result.detections.compared >= min_per_image * len(got[0]), str(result)
    assert result.mean_iou > 0.999, str(result)
    return result


@pytest.fixture(scope='module', params=sorted(NETWORKS))
def detector(request):
    """``(kind, net, x)``: a network detecting on two images at SHAPE."""
    name, kwargs = NETWORKS[request.param]
    net = get_model(name, classes=CLASSES, pretrained_base=False, **kwargs)
    x = _images(2)
    detecting_random_weights(net, x, seed=0)
    net.hybridize()
    return request.param, net, x


@pytest.fixture(scope='module')
def training_output(tmp_path_factory):
    """The FPN network as a training output (``.params`` and its json), and the network."""
    name, kwargs = NETWORKS['fpn']
    net = get_model(name, classes=CLASSES, pretrained_base=False, **kwargs)
    x = _images(2)
    detecting_random_weights(net, x, seed=0)
    net.hybridize()
    path = str(tmp_path_factory.mktemp('fpn') / 'model.params')
    return save_training_output(net, path, name, kwargs), net, x


# ---------------------------------------------------------------- ONNX Runtime vs Gluon

def _dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_onnx_masks_equal_gluon_at_batch_1_and_2(detector, tmp_path):
    kind, net, x = detector
    count, size = net.rcnn_max_dets, list(net.mask_size)
    expected = _outputs(net, x)
    assert expected[3].shape == (2, count, 14, 14)
    dynamic = str(tmp_path / 'dynamic.onnx')
    model = export_onnx(net, dynamic, SHAPE, dynamic_batch=True)
    assert [(o.name, _dims(o)) for o in model.graph.output] == [
        ('ids', ['batch', count, 1]), ('scores', ['batch', count, 1]),
        ('boxes', ['batch', count, 4]), ('masks', ['batch', count] + size)]
    meta = {p.key: json.loads(p.value) for p in model.metadata_props}
    assert meta['postprocess_kind'] == 'mask_rcnn' and meta['mask_size'] == size
    assert meta['max_detections'] == count and meta['rpn']['post_nms'] == net.proposal.counts(
        False)[1]
    ops = [node.op_type for node in model.graph.node]
    assert ops.count('RoiAlign') == (2 if kind == 'c4' else 8)   # FPN: 4 levels, twice
    print(kind, 'nodes', len(ops), 'initializers', len(model.graph.initializer))
    for batch in (1, 2):
        static = str(tmp_path / ('static%d.onnx' % batch))
        export_onnx(net, static, SHAPE, batch_size=batch)
        for path in (static, dynamic):
            got = run_onnx(path, x[:batch])
            result = _assert_masks_equal([e[:batch] for e in expected], got, SHAPE,
                                         min_per_image=count)
            print(kind, path.rsplit('/', 1)[1], 'batch', batch, result)
    # the comparison sees a wrong mask
    got[3][0, 0] = np.clip(got[3][0, 0] + 1e-3, 0, 1)
    assert not compare_masks(expected, got, SHAPE[::-1]).ok


def test_exported_masks_reach_the_predictors_detections_as_the_gluon_nets(training_output,
                                                                           tmp_path):
    """The export's metadata names ``masks`` a grid field: the ONNX predictor's detections
    carry them as the Gluon predictor's, and their COCO segmentations are the same."""
    from gluondet.deploy import Predictor
    path, net, _ = training_output
    onnx_path = str(tmp_path / 'masks.onnx')
    export_onnx(net, onnx_path, SHAPE, dynamic_batch=True)
    images = [np.random.RandomState(s).randint(0, 255, (120, 150, 3), np.uint8) for s in (1, 2)]
    gluon = Predictor.from_model(path).detect(images)
    exported = Predictor.from_model(onnx_path).detect(images)
    for ours, theirs in zip(gluon, exported):
        assert theirs.grid_fields == ours.grid_fields == ('masks',)
        confident = ours.scores > 0.3
        assert confident.sum() >= 5
        np.testing.assert_allclose(theirs.scores[confident], ours.scores[confident], atol=1e-4)
        a, b = ours[confident].pasted_masks((150, 120)), theirs[confident].pasted_masks((150,
                                                                                         120))
        assert (a != b).mean() < 1e-3
        assert theirs[confident].coco_results(1, (150, 120))[0]['segmentation']['size'] == [
            120, 150]


@pytest.mark.slow
@pytest.mark.parametrize('name', sweep_names('mask_rcnn'))
def test_onnx_masks_equal_gluon_for_every_zoo_network(name, tmp_path):
    """Every Mask R-CNN of the zoo (80 classes; the syncbn ones with BatchNorm in the mask
    head), with 64 regions (C4, whose layer4 runs twice on each: 32) and 50 detections at
    most: at GluonCV's 1000 their mask heads take about a TFLOP an image."""
    regions = 64 if '_fpn_' in name else 32
    net = get_model(name, pretrained_base=False, rpn_test_post_nms=regions, rcnn_max_dets=50)
    x = _images(2)
    detecting_random_weights(net, x, seed=0)
    net.hybridize()
    path = str(tmp_path / 'model.onnx')
    export_onnx(net, path, SHAPE, batch_size=2)
    result = _assert_masks_equal(_outputs(net, x), run_onnx(path, x), SHAPE,
                                 min_per_image=net.rcnn_max_dets)
    print(name, result)


def test_onnx_of_any_size_masks_equal_gluon_at_each_size(detector, tmp_path):
    """One model for any input up to 224 x 224 (dynamic height, width and batch): the Gluon
    network's masks at two sizes, landscape and portrait."""
    kind, net, _ = detector
    path = str(tmp_path / 'any_size.onnx')
    model = export_onnx(net, path, (224, 224), dynamic_batch=True, dynamic_size=True)
    assert _dims(model.graph.input[0]) == ['batch', 3, 'height', 'width']
    for seed, shape in enumerate([SHAPE, (160, 96)]):
        x = _images(2, seed + 1, shape)
        result = _assert_masks_equal(_outputs(net, x), run_onnx(path, x), shape,
                                     min_per_image=net.rcnn_max_dets // 2)
        print(kind, shape, result)


def test_export_without_nms_is_refused(detector, tmp_path):
    _, net, _ = detector
    with pytest.raises(ValueError, match='computes its masks on the detections after the NMS'):
        export_onnx(net, str(tmp_path / 'candidates.onnx'), SHAPE, nms=False)


# ---------------------------------------------------------------- OpenVINO

def test_openvino_masks_equal_gluon(detector, tmp_path):
    """The any-size ONNX model on OpenVINO (its runner, converted from the ONNX model): the
    Gluon network's masks, batch 1 and 2, two sizes."""
    pytest.importorskip('openvino')
    from gluondet.deploy.openvino import OpenVINORunner
    kind, net, _ = detector
    path = str(tmp_path / 'any_size.onnx')
    export_onnx(net, path, (224, 224), dynamic_batch=True, dynamic_size=True)
    runner = OpenVINORunner(path, threads=1)
    assert runner.output_fields == ('masks',)
    assert runner.metadata['mask_size'] == list(net.mask_size)
    for seed, shape in enumerate([SHAPE, (160, 96)]):
        x = _images(2, seed + 1, shape)
        expected = _outputs(net, x)
        for batch in (1, 2):
            got = runner(x[:batch].asnumpy())
            result = _assert_masks_equal([e[:batch] for e in expected], got, shape,
                                         min_per_image=net.rcnn_max_dets // 2)
            print(kind, 'openvino', shape, 'batch', batch, result)


# ---------------------------------------------------------------- int8

def test_int8_masks_agree_with_gluon(training_output, tmp_path):
    """``export_model`` int8 (ONNX Runtime's static quantization of the convolutions, the mask
    head's too), calibrated on 8 noise images distributed as the input: its detections and
    masks measured against the Gluon network's on another such batch.

    Measured: 165 of the 200 confident detections matched (box IoU 0.89), their masks' IoU
    0.63. Random weights made to detect are hard on int8 (see test_openvino's int8 test); the
    loss is the backbone's: measured apart (ONNX Runtime's quantize_static excluding nodes),
    the backbone and box head quantized alone cost the masks as much (IoU 0.59, FPN), the mask
    head quantized alone, on the float boxes, little (0.98; C4 with its layer4: 0.99).
    """
    from gluondet.deploy.commands import export_model
    from gluondet.deploy.compare import mask_agreement
    params, net, _ = training_output
    folder = tmp_path / 'calibration'
    folder.mkdir()
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    rng = np.random.RandomState(1)
    for i in range(8):
        pixels = ((rng.uniform(-2, 2, SHAPE + (3,)) * std + mean) * 255).clip(0, 255)
        cv2.imwrite(str(folder / ('%d.png' % i)), pixels.astype(np.uint8)[:, :, ::-1])
    int8 = str(tmp_path / 'int8.onnx')
    export_model(params, int8, 'onnx', batch_size=2, data_shape=SHAPE, precision='int8',
                 calibration_images=str(folder), verbose=False)
    model = onnx.load(int8)
    quantized = [n.input[0] for n in model.graph.node if n.op_type == 'DequantizeLinear'
                 and '_maskhead' in n.input[0] and n.input[0].endswith('weight_quantized')]
    assert len(quantized) == 3, quantized       # the mask head's 3 x 3 and 1 x 1 convolutions
    meta = {p.key: json.loads(p.value) for p in model.metadata_props}
    assert meta['precision'] == 'int8' and meta['mask_size'] == [14, 14]
    assert meta['calibration']['images'] == 8
    x = _images(2, seed=2)
    expected, got = _outputs(net, x), run_onnx(int8, x)
    assert got[3].shape == expected[3].shape
    result = mask_agreement(expected, got, SHAPE[::-1])
    print('int8', result)
    assert result.reference >= 150 and result.matched >= 0.75 * result.reference, str(result)
    assert result.mean_box_iou >= 0.8 and result.mean_iou >= 0.5, str(result)


# ---------------------------------------------------------------- TensorRT

@pytest.fixture
def no_tensorrt(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, 'tensorrt', None)


def test_tensorrt_checks_and_a_stand_in_engine(training_output, tmp_path, monkeypatch, capsys):
    """``gluondet export --format tensorrt`` writes the ONNX model and passes every check up to
    TensorRT's import; a stand-in engine of it (its ONNX model behind TensorRT's API) gives
    the masks through the TensorRT runner and the predictor."""
    import sys
    import tensorrt_stand_in
    from gluondet.cli import main
    from gluondet.deploy import tensorrt as gt
    from gluondet.deploy.predictor import Predictor
    params, _, _ = training_output
    engine = str(tmp_path / 'mask.engine')
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, 'tensorrt', None)
        assert main(['export', '--network', params, '--format', 'tensorrt', '-o', engine,
                     '--batch-size', '2']) == 1
        onnx_path = str(tmp_path / 'mask.onnx')
        assert 'the ONNX model is written to %s' % onnx_path in capsys.readouterr().err
        gt.check_tensorrt_limits(onnx_path)
        with pytest.raises(ImportError, match='NVIDIA GPU'):     # every check before it passed
            gt.build_engine(onnx_path, engine, max_batch_size=2)
    stand_in = tensorrt_stand_in.engine_beside(onnx_path)
    tensorrt_stand_in.install(monkeypatch)
    predictor = Predictor.from_model(stand_in)
    assert predictor.backend == 'tensorrt' and predictor.runner.output_fields == ('masks',)
    rng = np.random.RandomState(1)
    images = [rng.randint(0, 256, size + (3,)).astype(np.uint8) for size in [(150, 200),
                                                                            (220, 140)]]
    reference = Predictor.from_model(onnx_path).detect(images, batch_size=2)
    found = predictor.detect(images, batch_size=2)
    for want, got in zip(reference, found):
        assert len(got) == len(want) >= 20 and got.masks.shape == (len(got), 14, 14)
        np.testing.assert_allclose(got.masks, want.masks, atol=1e-6)
        np.testing.assert_allclose(got.boxes, want.boxes, atol=1e-4)


def test_tensorrt_refuses_a_topk_beyond_its_limit_naming_the_setting(tmp_path, no_tensorrt):
    from gluondet.deploy import tensorrt as gt
    net = get_model(FPN, classes=['a'], pretrained_base=False, rpn_test_pre_nms=5000)
    net.initialize()
    path = str(tmp_path / 'mask.onnx')
    export_onnx(net, path, SHAPE)
    with pytest.raises(ValueError, match=r"TopK with k <= 3840, and\n  node 'proposals/TopK_"
                                         r"\d+:0': k = 5000, set by the RPN's pre-NMS top-k"):
        gt.build_engine(path, str(tmp_path / 'mask.engine'))


# ---------------------------------------------------------------- GluonCV's size

def test_export_of_a_gluoncv_sized_mask_rcnn(tmp_path):
    """mask_rcnn_fpn_resnet50_v1b_coco (80 classes, 1000 regions, 1000 detections with 28 x 28
    masks) exports for any input up to 800 x 1344. (Its weights are set by a forward at
    64 x 64 with 10 detections first: at 1000, its mask head alone is about a TFLOP.)"""
    net = get_model('mask_rcnn_fpn_resnet50_v1b_coco', pretrained_base=False)
    net.initialize()
    net.set_nms(nms_thresh=0.5, nms_topk=-1, post_nms=10)
    net(mx.nd.zeros((1, 3, 64, 64)))[3].wait_to_read()
    net.set_nms(nms_thresh=0.5, nms_topk=-1, post_nms=-1)
    start = time.time()
    model = export_onnx(net, str(tmp_path / 'coco.onnx'), (800, 1344), dynamic_batch=True,
                        dynamic_size=True)
    print('mask_rcnn_fpn_resnet50_v1b_coco: exported in %.1f s, %d nodes'
          % (time.time() - start, len(model.graph.node)))
    assert [(o.name, _dims(o)) for o in model.graph.output][3] == (
        'masks', ['batch', 1000, 28, 28])
    meta = {p.key: json.loads(p.value) for p in model.metadata_props}
    assert meta['mask_size'] == [28, 28] and len(meta['classes']) == 80
