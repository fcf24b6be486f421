"""Every detector and backend returns boxes clipped to the image (issue 23): ``[0, width - 1]
x [0, height - 1]``, gluondet's (GluonCV's) inclusive pixels.

Each detector gets random weights made to detect (many boxes, some across the image's edge)
and runs on a portrait and a landscape photo of the cards set through the Gluon network,
its exported symbol, its ONNX model in ONNX Runtime, and a TensorRT engine. TensorRT cannot
run here (no GPU): the engine is a stand-in that runs the ONNX model behind TensorRT's API
(``tensorrt_stand_in``), with the optimization profile ``build_engine`` would give it, so
the TensorRT runner and the Predictor around it are the real ones. For each, the runner's
own boxes cross the image's edges, and the Predictor's do not.
"""
import os

import mxnet as mx
import numpy as np
import pytest

from gluondet.data.base import empty_label, read_image
from gluondet.deploy import detecting_random_weights
from gluondet.deploy.commands import export_model
from gluondet.deploy.predictor import Predictor, clip_boxes, rescale_boxes
from gluondet.model_zoo import get_model

import tensorrt_stand_in
from export_checks import save_training_output

onnx = pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')

CLASSES = ['a', 'b', 'c']
DETECTORS = {       # network, its arguments (small, fast sizes)
    'ssd': ('ssd_160_mobilenet0.5_custom', {}),
    'faster_rcnn': ('faster_rcnn_fpn_resnet18_v1b_custom', dict(short=128, max_size=160)),
    'retinanet': ('retinanet_resnet18_v1b_custom',
                  dict(short=128, max_size=160, fpn_channels=64, head_channels=64,
                       head_layers=2)),
}
PHOTOS = ('test/IMG_2383.JPG', 'test/cam_image2.jpg')      # 378 x 504 and 960 x 540


class Recording:
    """A runner passing batches to ``runner`` and keeping the boxes it returns (``calls``)."""

    def __init__(self, runner):
        self.runner = runner
        self.batch_range = runner.batch_range
        self.input_shape = getattr(runner, 'input_shape', None)
        self.calls = []

    def __call__(self, batch):
        outputs = self.runner(batch)
        self.calls.append(np.asarray(outputs[2]))
        return outputs


@pytest.fixture(scope='module', params=sorted(DETECTORS))
def exported(request, tmp_path_factory):
    """``(params, symbol prefix, onnx path, engine path)`` of one detector with random
    detecting weights, saved as a training output."""
    network, kwargs = DETECTORS[request.param]
    net = get_model(network, classes=CLASSES, pretrained_base=False, **kwargs)
    detecting_random_weights(net, mx.nd.array(np.random.RandomState(0).uniform(
        -2, 2, (1, 3, 128, 160))))
    folder = tmp_path_factory.mktemp(request.param)
    params = save_training_output(net, str(folder / 'model.params'), network, {
        key: value for key, value in kwargs.items() if key not in ('short', 'max_size')})
    symbol, onnx_path = str(folder / 'symbol'), str(folder / 'model.onnx')
    for output, fmt in ((symbol, 'symbol'), (onnx_path, 'onnx')):
        export_model(params, output, fmt, verbose=False)
    return params, symbol, onnx_path, tensorrt_stand_in.engine_beside(onnx_path)


def test_every_backend_clips_boxes_to_the_image(exported, cards_root, monkeypatch):
    tensorrt_stand_in.install(monkeypatch)
    images = [read_image(os.path.join(cards_root, 'images', p)).asnumpy() for p in PHOTOS]
    predictors = [Predictor.from_model(model) for model in exported]
    assert [p.backend for p in predictors] == ['mxnet', 'mxnet', 'onnxruntime', 'tensorrt']
    assert len({p.data_shape for p in predictors}) == 1     # keep-ratio: None, each its own
    for predictor in predictors:
        predictor.runner = Recording(predictor.runner)
        found = predictor.detect(images, batch_size=1)
        outside = 0
        for image, detections, boxes in zip(images, found, predictor.runner.calls):
            height, width = image.shape[:2]
            assert len(detections.boxes) >= 20
            assert detections.boxes.min() >= 0
            assert detections.boxes[:, [0, 2]].max() <= width - 1
            assert detections.boxes[:, [1, 3]].max() <= height - 1
            resized = predictor.transform(image, empty_label())[0].shape[1:]
            unclipped = rescale_boxes(boxes[:, :len(detections.boxes)], [[height, width]],
                                      [resized])
            outside += int((unclipped != clip_boxes(unclipped, [[height, width]])).sum())
        assert outside > 0, '%s: no box crossed an edge, nothing was clipped' % predictor
