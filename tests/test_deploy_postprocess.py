"""Post-processing declared by the network (gluondet.deploy.postprocess): deploy exports,
compares and checks a network by the kind its class names, never by its class."""
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon
from mxnet.gluon import nn

from gluondet.deploy import compare, compare_detections, detecting_random_weights
from gluondet.deploy.postprocess import KINDS, postprocess_from_metadata, postprocess_of
from gluondet.deploy.sources import model_metadata
from gluondet.model_zoo import get_model
from gluondet.model_zoo.faster_rcnn import FasterRCNN
from gluondet.model_zoo.retinanet import RetinaNet
from gluondet.model_zoo.ssd import SSD

onnx = pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')
from gluondet.deploy import export_onnx, onnx as deploy_onnx  # noqa: E402
from gluondet.deploy.deepstream import nvinfer_properties  # noqa: E402
from export_checks import checked_detector, run_onnx  # noqa: E402

SIZE = 64
KNOWN = '(%s)' % ', '.join(sorted(KINDS))


class TinyFeatures(gluon.HybridBlock):
    """Two feature maps, strides 8 and 16: a backbone no zoo network has."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.stem = nn.HybridSequential()
            for channels in (8, 16, 16):
                self.stem.add(nn.Conv2D(channels, 3, 2, 1), nn.BatchNorm(), nn.Activation('relu'))
            self.down = nn.HybridSequential()
            self.down.add(nn.Conv2D(16, 3, 2, 1), nn.BatchNorm(), nn.Activation('relu'))

    def hybrid_forward(self, F, x):
        fine = self.stem(x)
        return [fine, self.down(fine)]


class TinySSD(SSD):
    """A new network whose inference is an existing kind's: deploy is not edited for it."""
    postprocess_kind = 'softmax_nms'


class AnchorFreeSSD(SSD):
    postprocess_kind = 'anchor_free_decode'


class UndeclaredSSD(SSD):
    postprocess_kind = None


def tiny(cls=TinySSD):
    return cls(TinyFeatures(), ['a', 'b', 'c'], sizes=[12, 24, 48], ratios=[1, 2, 0.5],
               steps=[8, 16], base_size=SIZE)


def images(batch=2, seed=0):
    return mx.nd.array(np.random.RandomState(seed).uniform(-2, 2, (batch, 3, SIZE, SIZE)))


def test_every_kind_has_its_onnx_builder_and_detecting_weights():
    assert set(deploy_onnx.GRAPHS) == set(compare.DETECTING) == set(KINDS)
    for kind, row in KINDS.items():
        assert row.kind == kind and row.description
        assert set(row.topk_settings) <= {'proposals', 'postprocess'}, kind


def test_the_zoo_detectors_declare_their_kinds():
    assert {cls: cls.postprocess_kind for cls in (SSD, RetinaNet, FasterRCNN)} == {
        SSD: 'softmax_nms', RetinaNet: 'sigmoid_topk_nms', FasterRCNN: 'rcnn'}
    assert postprocess_of(tiny()) is KINDS['softmax_nms']


@pytest.mark.parametrize('cls, message', [
    (AnchorFreeSSD, "AnchorFreeSSD: post-processing kind 'anchor_free_decode' is not one deploy "
                    "knows " + KNOWN),
    (UndeclaredSSD, "UndeclaredSSD declares no postprocess_kind: deploy needs one of "
                    + KNOWN[1:-1]),
])
def test_a_network_of_no_known_kind_is_refused_by_name(cls, message, tmp_path):
    net = tiny(cls)
    with pytest.raises(ValueError) as err:      # before initializing anything
        detecting_random_weights(net, images())
    assert str(err.value).startswith(message)
    with pytest.raises(RuntimeError, match='not been initialized'):
        net.class_predictors[0].weight.data()
    net.initialize()
    with pytest.raises(ValueError, match='^' + message.replace('(', r'\(').replace(')', r'\)')):
        export_onnx(net, str(tmp_path / 'x.onnx'), SIZE)
    assert not (tmp_path / 'x.onnx').exists()
    with pytest.raises(ValueError, match='not one deploy knows|declares no postprocess_kind'):
        model_metadata(net, 'tiny', SIZE)


def test_a_new_network_of_a_known_kind_exports_as_gluon_runs_it(tmp_path):
    net, x = tiny(), images()
    detecting_random_weights(net, x)
    net.hybridize()
    path = str(tmp_path / 'tiny.onnx')
    export_onnx(net, path, SIZE, batch_size=2)
    _, meta = checked_detector(path, 2, (SIZE, SIZE), 100)
    assert meta['postprocess_kind'] == 'softmax_nms'
    result = compare_detections(net(x), run_onnx(path, x))
    assert result.ok and result.compared >= 2 * 50, str(result)
    # its kind's graph has the anchors of one size: no export for any size
    with pytest.raises(ValueError, match=r"TinySSD takes one input size \(its softmax_nms "
                                         r"graph"):
        export_onnx(net, path, SIZE, dynamic_size=True)

    properties = dict((key, comment) for key, _, comment in nvinfer_properties(
        onnx.load(path), 'tiny.onnx', source=path)[0])
    assert KINDS['softmax_nms'].description in properties['cluster-mode']


def test_an_exported_model_of_an_unknown_kind_is_refused_by_its_readers(tmp_path):
    net = get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False)
    net.initialize()
    path = str(tmp_path / 'ssd.onnx')
    export_onnx(net, path, 300)
    model = onnx.load(path)
    meta = {p.key: json.loads(p.value) for p in model.metadata_props}
    assert postprocess_from_metadata(meta, path) is KINDS['softmax_nms']
    assert postprocess_from_metadata(dict(meta, postprocess_kind=None), path) is None  # older
    for prop in model.metadata_props:
        if prop.key == 'postprocess_kind':
            prop.value = json.dumps('anchor_free_decode')
    with pytest.raises(ValueError, match=r"ssd.onnx: post-processing kind 'anchor_free_decode' "
                                         r"is not one deploy knows " + KNOWN.replace(
                                             '(', r'\(').replace(')', r'\)')):
        nvinfer_properties(model, 'ssd.onnx', source=path)
