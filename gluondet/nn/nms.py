"""Post-processing: per-class scores + boxes -> detections after NMS."""
from mxnet import gluon

__all__ = ['MultiClassNMS']


class MultiClassNMS(gluon.HybridBlock):
    """Turn class probabilities and boxes into ``(ids, scores, boxes)``.

    Every anchor gives one candidate per foreground class (so one anchor can
    yield a cat and a dog); candidates scoring at most ``score_thresh`` are
    dropped, the ``nms_topk`` best go through non-maximum suppression within
    each class, and the ``post_nms`` best are returned, sorted by score and
    padded with -1.

    Parameters
    ----------
    score_thresh : float
        Candidates with probability <= this are dropped.
    nms_thresh : float
        IoU above which a lower-scoring box of the same class is suppressed.
        Outside (0, 1) NMS is off and every candidate is returned unsorted.
    nms_topk : int
        Candidates kept before NMS, -1 for all.
    post_nms : int
        Detections returned, -1 for all.

    Inputs: ``probs`` ``B x A x (C + 1)`` (softmax, background first) and
    ``boxes`` ``B x A x 4``. Outputs: ``ids`` and ``scores`` ``B x K x 1``,
    ``boxes`` ``B x K x 4``, with ``K = post_nms`` (``C * A`` without NMS).
    """

    def __init__(self, score_thresh=0.01, nms_thresh=0.45, nms_topk=400, post_nms=100,
                 **kwargs):
        super().__init__(**kwargs)
        self.score_thresh = score_thresh
        self.nms_thresh = nms_thresh
        self.nms_topk = nms_topk
        self.post_nms = post_nms

    def hybrid_forward(self, F, probs, boxes):
        scores = F.transpose(F.slice_axis(probs, axis=-1, begin=1, end=None), (0, 2, 1))  # B x C x A
        ids = F.broadcast_add(F.zeros_like(scores),
                              F.contrib.arange_like(scores, axis=1).reshape((1, -1, 1)))
        boxes = F.broadcast_like(boxes.expand_dims(1), scores, lhs_axes=(1,), rhs_axes=(1,))
        keep = scores > self.score_thresh
        ids = F.where(keep, ids, F.ones_like(ids) * -1).reshape((0, -1, 1))
        scores = F.where(keep, scores, F.zeros_like(scores)).reshape((0, -1, 1))
        result = F.concat(ids, scores, boxes.reshape((0, -1, 4)), dim=-1)  # B x (C * A) x 6
        if 0 < self.nms_thresh < 1:
            result = F.contrib.box_nms(
                result, overlap_thresh=self.nms_thresh, topk=self.nms_topk,
                valid_thresh=self.score_thresh, id_index=0, score_index=1, coord_start=2,
                force_suppress=False)
            if self.post_nms > 0:
                result = F.slice_axis(result, axis=1, begin=0, end=self.post_nms)
        return (F.slice_axis(result, axis=-1, begin=0, end=1),
                F.slice_axis(result, axis=-1, begin=1, end=2),
                F.slice_axis(result, axis=-1, begin=2, end=6))
