"""Post-processing: per-class scores + boxes -> detections after NMS."""
from mxnet import gluon

from .boxops import batch_take

__all__ = ['MultiClassNMS', 'LevelTopKNMS', 'PerClassNMS', 'top_candidates']

# Every block below has ``candidates`` (default False): True returns the rows its NMS would
# take, in the NMS's order (by score, ties in table order), none suppressed and no post_nms
# cut, for an NMS run elsewhere (class-agnostic or soft NMS: gluondet.deploy.nms).
NO_SUPPRESSION = 2.0    # an IoU threshold no overlap passes


def _overlap(block):
    return NO_SUPPRESSION if block.candidates else block.nms_thresh


def _post_nms(block):
    return -1 if block.candidates else block.post_nms


class MultiClassNMS(gluon.HybridBlock):
    """Turn class probabilities and boxes into ``(ids, scores, boxes)``.

    Every anchor gives one candidate per foreground class (so one anchor can
    yield a cat and a dog); candidates scoring at most ``score_thresh`` are
    dropped, the ``nms_topk`` best go through non-maximum suppression within
    each class, and the ``post_nms`` best are returned, sorted by score and
    padded with -1. This is GluonCV's SSD post-processing; when ``nms_topk``
    and ``post_nms`` are positive the best candidates are picked before the
    candidate table is built, which gives the same detections (candidates
    keep their order, so tied scores resolve alike) without sorting all
    ``C x A`` of them.

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
    ``boxes`` ``B x K x 4``, with ``K = post_nms`` (without a cap or without NMS:
    ``C * A``).
    """

    def __init__(self, score_thresh=0.01, nms_thresh=0.45, nms_topk=400, post_nms=100,
                 **kwargs):
        super().__init__(**kwargs)
        self.score_thresh = score_thresh
        self.nms_thresh = nms_thresh
        self.nms_topk = nms_topk
        self.post_nms = post_nms
        self.candidates = False

    def hybrid_forward(self, F, probs, boxes):
        foreground = F.slice_axis(probs, axis=-1, begin=1, end=None)
        scores = F.transpose(foreground, (0, 2, 1))  # B x C x A, candidates class-major
        scores = F.where(scores > self.score_thresh, scores, F.zeros_like(scores))
        use_nms = 0 < self.nms_thresh < 1
        if use_nms and self.nms_topk > 0 and self.post_nms > 0:
            result = top_candidates(F, scores.reshape((0, -1)), boxes,
                                    max(self.nms_topk, self.post_nms))
        else:
            result = self._all_candidates(F, scores, boxes)
        return self._suppress(F, result)

    def _suppress(self, F, result):
        """``ids, scores, boxes`` of the candidate rows ``B x N x 6`` after the NMS."""
        if 0 < self.nms_thresh < 1:
            result = F.contrib.box_nms(
                result, overlap_thresh=_overlap(self), topk=self.nms_topk,
                valid_thresh=self.score_thresh, id_index=0, score_index=1, coord_start=2,
                force_suppress=False)
            if _post_nms(self) > 0:
                result = F.slice_axis(result, axis=1, begin=0, end=self.post_nms)
        return (F.slice_axis(result, axis=-1, begin=0, end=1),
                F.slice_axis(result, axis=-1, begin=1, end=2),
                F.slice_axis(result, axis=-1, begin=2, end=6))

    @staticmethod
    def _all_candidates(F, scores, boxes):
        """``B x (C * A) x 6`` rows ``(class id or -1, score, box)``, class-major."""
        ids = F.broadcast_add(F.zeros_like(scores),
                              F.contrib.arange_like(scores, axis=1).reshape((1, -1, 1)))
        ids = F.where(scores > 0, ids, F.ones_like(ids) * -1)
        boxes = F.broadcast_like(boxes.expand_dims(1), scores, lhs_axes=(1,), rhs_axes=(1,))
        return F.concat(ids.reshape((0, -1, 1)), scores.reshape((0, -1, 1)),
                        boxes.reshape((0, -1, 4)), dim=-1)

def top_candidates(F, scores, boxes, count):
    """The ``count`` best candidates as rows ``(class id or -1, score, box)``, in their
    original order (so tied scores resolve as in a table of all candidates); -1 rows when
    there are fewer than ``count`` scores above 0.

    ``scores`` ``B x (C * A)`` class-major (0 for a dropped candidate), ``boxes`` ``B x A x
    4``; returns ``B x count x 6``.
    """
    filler = F.broadcast_to(F.slice_axis(scores, axis=1, begin=0, end=1) * 0 - 1,
                            shape=(0, count))
    padded = F.concat(scores, filler, dim=1)                        # B x (C * A + count)
    index = F.topk(padded, axis=1, k=count, ret_typ='indices', dtype='int32')
    index = F.sort(index, axis=1)
    batch = F.broadcast_like(F.contrib.arange_like(index, axis=0).reshape((-1, 1)), index)
    best = F.gather_nd(padded, F.stack(batch, index))               # B x count
    num_anchors = F.cast(F.sum(F.ones_like(F.slice_axis(boxes, axis=-1, begin=0, end=1)),
                               axis=1), 'int32')                      # B x 1
    class_id = F.broadcast_div(index, num_anchors)
    anchor = index - F.broadcast_mul(class_id, num_anchors)
    picked = F.gather_nd(boxes, F.stack(batch, anchor))             # B x count x 4
    keep = best > 0
    ids = F.where(keep, F.cast(class_id, 'float32'), F.ones_like(best) * -1)
    best = F.where(keep, best, F.zeros_like(best))
    return F.concat(ids.expand_dims(-1), best.expand_dims(-1), picked, dim=-1)


class LevelTopKNMS(gluon.HybridBlock):
    """RetinaNet's post-processing over the maps of a pyramid.

    In each map, the ``nms_topk`` best (anchor, class) candidates scoring above
    ``score_thresh`` are kept; the kept candidates of all maps go through NMS
    within each class; the ``post_nms`` best are returned, sorted by score,
    padded with -1 (ODTK's and the paper's inference).

    Parameters
    ----------
    score_thresh : float
    nms_thresh : float
        IoU above which a lower-scoring box of the same class is suppressed.
    nms_topk : int
        Candidates kept per map.
    post_nms : int
        Detections returned, -1 for all.

    Inputs: ``probs_0 .. probs_{L-1}`` ``B x A_l x C`` (sigmoid scores, no background),
    then ``boxes_0 .. boxes_{L-1}`` ``B x A_l x 4``. Outputs: ``ids``, ``scores``
    ``B x K x 1``, ``boxes`` ``B x K x 4``, ``K = post_nms`` (-1: ``L * nms_topk``).
    """

    def __init__(self, score_thresh=0.05, nms_thresh=0.5, nms_topk=1000, post_nms=100,
                 **kwargs):
        super().__init__(**kwargs)
        self.score_thresh = score_thresh
        self.nms_thresh = nms_thresh
        self.nms_topk = nms_topk
        self.post_nms = post_nms
        self.candidates = False

    def hybrid_forward(self, F, *inputs):
        levels = len(inputs) // 2
        rows = []
        for probs, boxes in zip(inputs[:levels], inputs[levels:]):
            scores = F.transpose(probs, (0, 2, 1)).reshape((0, -1))    # class-major
            scores = F.where(scores > self.score_thresh, scores, F.zeros_like(scores))
            rows.append(top_candidates(F, scores, boxes, self.nms_topk))
        rows = F.contrib.box_nms(F.concat(*rows, dim=1), overlap_thresh=_overlap(self),
                                 topk=-1, valid_thresh=self.score_thresh, id_index=0,
                                 score_index=1, coord_start=2, force_suppress=False)
        if _post_nms(self) > 0:
            rows = F.slice_axis(rows, axis=1, begin=0, end=self.post_nms)
        return (F.slice_axis(rows, axis=-1, begin=0, end=1),
                F.slice_axis(rows, axis=-1, begin=1, end=2),
                F.slice_axis(rows, axis=-1, begin=2, end=6))


class PerClassNMS(gluon.HybridBlock):
    """Detections from class-specific boxes, as GluonCV's R-CNN post-processing.

    Each region proposes one box per foreground class. Candidates scoring at
    most ``score_thresh`` are dropped; within each class the ``nms_topk``
    best go through NMS (``force_nms``: one NMS over all classes instead); the
    ``post_nms`` best of all classes are returned, sorted by score, padded
    with -1. (GluonCV returns every class's block unsorted, ``C x N`` rows;
    sorted, its rows equal these.)

    Parameters
    ----------
    score_thresh : float
    nms_thresh : float
        IoU above which a lower-scoring box is suppressed; 1 or more suppresses nothing.
    nms_topk : int
        Candidates per class entering NMS, -1 for all.
    post_nms : int
        Detections returned, -1 for all ``C x N``.
    force_nms : bool
        Suppress across classes.

    Inputs: ``probs`` ``B x N x (C + 1)`` (softmax, background first) and
    ``boxes`` ``B x N x C x 4``. Outputs: ``ids``, ``scores`` ``B x K x 1``,
    ``boxes`` ``B x K x 4``.
    """

    def __init__(self, num_classes, score_thresh=0.01, nms_thresh=0.3, nms_topk=400,
                 post_nms=100, force_nms=False, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.score_thresh = score_thresh
        self.nms_thresh = nms_thresh
        self.nms_topk = nms_topk
        self.post_nms = post_nms
        self.force_nms = force_nms
        self.valid_thresh = 0.0001   # box_nms's, on scores already cut at score_thresh
        self.candidates = False

    def hybrid_forward(self, F, probs, boxes):
        scores = F.transpose(F.slice_axis(probs, axis=-1, begin=1, end=None), (0, 2, 1))
        keep = scores > self.score_thresh                                  # B x C x N
        ids = F.broadcast_like(F.contrib.arange_like(scores, axis=1).reshape((1, -1, 1)), scores)
        ids = F.where(keep, ids, F.ones_like(ids) * -1)
        scores = F.where(keep, scores, F.zeros_like(scores))
        rows = F.concat(ids.expand_dims(-1), scores.expand_dims(-1),
                        F.transpose(boxes, (0, 2, 1, 3)), dim=-1)          # B x C x N x 6
        rows = rows.reshape((0, -3, 0)) if self.force_nms else rows.reshape((-3, 0, 0))
        rows = F.contrib.box_nms(rows, overlap_thresh=_overlap(self), topk=self.nms_topk,
                                 valid_thresh=self.valid_thresh, id_index=0, score_index=1,
                                 coord_start=2,
                                 force_suppress=self.force_nms)
        if not self.force_nms:
            rows = rows.reshape((-4, -1, self.num_classes, -2)).reshape((0, -3, 0))
        best = F.slice_axis(rows, axis=-1, begin=1, end=2).reshape((0, -1))
        if _post_nms(self) > 0:
            order = F.topk(best, axis=1, k=self.post_nms, ret_typ='indices')
        else:
            order = F.argsort(best, axis=1, is_ascend=False)
        rows = batch_take(F, rows, order)
        return (F.slice_axis(rows, axis=-1, begin=0, end=1),
                F.slice_axis(rows, axis=-1, begin=1, end=2),
                F.slice_axis(rows, axis=-1, begin=2, end=6))
