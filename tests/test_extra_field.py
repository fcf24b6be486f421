"""The proof of issue 36 item 5: a detector defined here, whose network gives more
per-detection outputs (an ``embedding`` and ``keypoints``), goes through ``gluondet infer``
(its JSON lines carry the fields), ``Detector.predict``, tracking, slicing and test-time
augmentation with no edit of the library.

Its embedding of a detection is ``[score, class id, 2 x score]``, computed in the network
from the row's own outputs: every stage that keeps, drops, reorders or merges detections
(the final cut, the tracker, the tiles' NMS) must keep each row's embedding with its row.
Its keypoints are its box's two corners, in input pixels (a ``point_fields`` field): every
stage that moves boxes between pixel frames (the input's rescaling, a tile's window, a
view's shrinking and mirroring, weighted box fusion) must move them as the box.
"""
import json

import cv2
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

from gluondet import Detector
from gluondet.cli import main
from gluondet.data.demo import DEMO_CLASSES, render_demo_image
from gluondet.deploy import detecting_random_weights
from gluondet.deploy.views import TTA
from gluondet.model_zoo import get_model, register_model
from gluondet.model_zoo import registry

NAME = 'ssd_160_embedding_custom'
BASE = 'ssd_160_mobilenet0.5_custom'


def with_embeddings(net):
    """``net`` (an SSD of the zoo) giving ``(ids, scores, boxes, embedding)``."""
    base = type(net)

    class EmbeddingSSD(base):
        output_fields = ('embedding', 'keypoints')
        point_fields = ('keypoints',)

        def hybrid_forward(self, F, x):
            out = base.hybrid_forward(self, F, x)
            if autograd.is_training():
                return out
            ids, scores, boxes = out
            corners = F.stack(F.slice_axis(boxes, axis=-1, begin=0, end=2),
                              F.slice_axis(boxes, axis=-1, begin=2, end=4), axis=2)
            return ids, scores, boxes, F.concat(scores, ids, 2 * scores, dim=-1), corners

    net.__class__ = EmbeddingSSD
    return net


@pytest.fixture(scope='module')
def registered(tmp_path_factory):
    """The detector registered under NAME (removed after), its params file."""
    @register_model(NAME, None, (160, 160), 'mobilenet0.5', 'custom', has_weights=False)
    def build(classes=None, pretrained=False, pretrained_base=True, ctx=mx.cpu(), root=None,
              **kwargs):
        return with_embeddings(get_model(BASE, classes=classes, pretrained_base=False,
                                         ctx=ctx, **kwargs))
    try:
        net = get_model(NAME, classes=DEMO_CLASSES)
        detecting_random_weights(net, mx.nd.random.normal(shape=(1, 3, 128, 128)))
        params = str(tmp_path_factory.mktemp('model') / 'embedding.params')
        net.save_parameters(params)
        yield params
    finally:
        del registry._REGISTRY[NAME]


@pytest.fixture(scope='module')
def video(tmp_path_factory):
    """12 frames of demo shapes sliding right."""
    path = str(tmp_path_factory.mktemp('video') / 'shapes.avi')
    base = render_demo_image(0, 'val', 0, 256)[0]
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*'MJPG'), 10, (192, 144))
    for i in range(12):
        frame = np.ascontiguousarray(np.roll(base, 3 * i, axis=1)[:144, :192])
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def _consistent(score, class_id, embedding):
    return embedding == pytest.approx([score, class_id, 2 * score], abs=1e-4)


def _on_corners(boxes, keypoints, mirrored=False):
    """Whether each detection's keypoints are its box's corners: top left then bottom right,
    or, ``mirrored``, either those or the mirrored view's (top right then bottom left)."""
    boxes, keypoints = np.asarray(boxes, np.float64), np.asarray(keypoints, np.float64)
    corners = np.stack([boxes[:, :2], boxes[:, 2:]], axis=1)
    same = np.isclose(keypoints, corners, atol=1e-2).all(axis=(1, 2))
    if mirrored:
        swapped = corners.copy()
        swapped[:, :, 0] = corners[:, ::-1, 0]
        same |= np.isclose(keypoints, swapped, atol=1e-2).all(axis=(1, 2))
    return len(boxes) > 0 and bool(same.all())


def test_infer_writes_the_extra_field_with_tracking_and_slicing(registered, video, tmp_path):
    lines = str(tmp_path / 'det.jsonl')
    assert main(['infer', '--model', NAME, '--params', registered, '--classes',
                 ','.join(DEMO_CLASSES), '--data-shape', '128', '--source', video,
                 '--output', lines, '--track', '--slice', '96', '--max-det', '20']) == 0
    with open(lines) as f:
        found = [d for line in f for d in json.loads(line)['detections']]
    assert found and {'bbox', 'score', 'class_id', 'class', 'track_id', 'embedding',
                      'keypoints'} == set(found[0])
    assert all(_consistent(d['score'], d['class_id'], d['embedding']) for d in found)
    assert _on_corners([d['bbox'] for d in found], [d['keypoints'] for d in found])
    assert max(d['track_id'] for d in found) >= 1


def test_predict_carries_the_extra_field(registered, video):
    d = Detector(NAME, params=registered, classes=DEMO_CLASSES, data_shape=128)
    results = d.predict(video, track=True, slice=96, max_det=20)
    assert len(results) == 12
    for r in results:
        embedding = r.detections.embedding
        assert embedding.shape == (len(r), 3)
        np.testing.assert_allclose(embedding[:, 0], r.scores, atol=1e-6)
        np.testing.assert_array_equal(embedding[:, 1], r.class_ids)
        assert len(r.track_ids) == len(r)
        assert not len(r) or _on_corners(r.boxes, r.detections.keypoints)
    rows = results[-1].to_list()
    assert rows and all(_consistent(row['score'], row['class_id'], row['embedding'])
                        for row in rows)
    image = render_demo_image(0, 'val', 0, 256)[0]
    (whole,) = d.predict(image, conf=0.2)
    assert len(whole) and whole.detections.embedding[:, 0] == pytest.approx(whole.scores)
    assert _on_corners(whole.boxes, whole.detections.keypoints)
    # mirrored views merged by NMS: a mirrored view's kept box has its corners swapped
    (flipped,) = d.predict(image, conf=0.2, tta=TTA(scales=(1, 0.8), merge='nms'))
    assert _on_corners(flipped.boxes, flipped.detections.keypoints, mirrored=True)
    # fused boxes: each keypoint is the score-weighted mean of its cluster's, as the box
    (fused,) = d.predict(image, conf=0.2, tta=TTA(scales=(1, 0.8), flip=False))
    assert _on_corners(fused.boxes, fused.detections.keypoints)
