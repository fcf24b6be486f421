"""Training targets of the two stages of Faster R-CNN, batched on the device.

GluonCV makes the RPN targets in numpy inside its data transform and samples
the R-CNN targets with a Python loop over the images of a device; here both
are HybridBlocks over the whole batch (random choices from ``mx.random``,
which the engine seeds every step).
"""
import numpy as np
from mxnet import gluon

from .boxops import batch_take, pairwise_iou, rank
from .coder import BoxCenterEncoder

__all__ = ['RPNTargetGenerator', 'RCNNTargetSampler', 'RCNNTargetGenerator']

_EPS = float(np.spacing(np.float32(1.0)))


def _encode(F, encoder, positive, matches, boxes, gt_boxes):
    """Box targets of the ``positive`` boxes (``B x N``) to their matched ground truths, and
    the ``B x N x 4`` mask; zero elsewhere (as ``contrib.box_encode``)."""
    codes = encoder(batch_take(F, gt_boxes, matches), boxes)
    mask = F.broadcast_like(positive.expand_dims(-1), codes)
    return F.where(mask, codes, F.zeros_like(codes)), mask


def _valid_gt_ious(F, ious, gt_ids):
    """IoUs with padding ground truths (id < 0) set to -1; also returns the ``B x 1 x M`` mask."""
    valid = (gt_ids.reshape((0, -1)) >= 0).reshape((0, 1, -1))
    return F.broadcast_sub(F.broadcast_mul(ious, valid), 1 - valid), valid


class RPNTargetGenerator(gluon.HybridBlock):
    """Which anchors teach the RPN, and what (GluonCV's ``RPNTargetGenerator``, batched).

    An anchor wholly inside its image is positive when its best IoU reaches
    ``pos_iou_thresh`` or when it is (within float32 spacing) the best anchor
    of some ground truth; it is negative when its best IoU is below
    ``neg_iou_thresh`` (this overrides the best-anchor rule, as GluonCV).
    Anchors crossing the image border are ignored. Then at most ``num_sample
    * pos_ratio`` positives are kept at random, and negatives up to
    ``num_sample`` samples in all. One deliberate difference from GluonCV: an
    anchor outside the image is never a ground truth's "best" anchor (GluonCV
    makes every outside anchor positive for a ground truth no inside anchor
    overlaps).

    Parameters
    ----------
    num_sample, pos_iou_thresh, neg_iou_thresh, pos_ratio
        As above (GluonCV: 256, 0.7, 0.3, 0.5).
    stds : 4 floats
        Box-coding divisors (GluonCV's RPN: 1).

    Inputs
    ------
    anchors : ``1 x A x 4`` corner anchors (all levels).
    gt_boxes : ``B x M x 4``; gt_ids : ``B x M x 1``, padding rows have id < 0.
    sizes : ``B x 2`` ``(height, width)`` of each image before padding.

    Outputs
    -------
    cls_targets : ``B x A``: 1 positive, 0 negative, -1 ignored.
    box_targets, box_masks : ``B x A x 4``; the mask is 1 on positives.
    """

    def __init__(self, num_sample=256, pos_iou_thresh=0.7, neg_iou_thresh=0.3, pos_ratio=0.5,
                 stds=(1., 1., 1., 1.), **kwargs):
        super().__init__(**kwargs)
        self._num_sample = num_sample
        self._max_pos = int(round(num_sample * pos_ratio))
        self._pos_iou_thresh = pos_iou_thresh
        self._neg_iou_thresh = neg_iou_thresh
        with self.name_scope():
            self.encoder = BoxCenterEncoder(stds)

    def candidates(self, F, anchors, gt_boxes, gt_ids, sizes):
        """``(samples, matches)`` before subsampling: ``B x A`` 1 / -1 / 0, and best gt index."""
        anchors = F.broadcast_like(anchors, gt_boxes, lhs_axes=(0,), rhs_axes=(0,))
        ious, valid = _valid_gt_ious(F, pairwise_iou(F, anchors, gt_boxes), gt_ids)
        xmin, ymin, xmax, ymax = F.split(anchors, axis=-1, num_outputs=4, squeeze_axis=True)
        height = F.slice_axis(sizes, axis=1, begin=0, end=1)
        width = F.slice_axis(sizes, axis=1, begin=1, end=2)
        inside = ((xmin >= 0) * (ymin >= 0) * F.broadcast_lesser(xmax, width)
                  * F.broadcast_lesser(ymax, height))                         # B x A
        ious = F.where(F.broadcast_like(inside.expand_dims(-1), ious), ious,
                       F.ones_like(ious) * -1)
        best = F.max(ious, axis=-1)
        matches = F.argmax(ious, axis=-1)
        gt_best = F.max(ious, axis=1, keepdims=True)                         # B x 1 x M
        is_best = F.broadcast_mul(F.broadcast_greater(ious + _EPS, gt_best), valid) * (ious >= 0)
        positive = F.maximum(F.sum(is_best, axis=-1) > 0, best >= self._pos_iou_thresh)
        negative = (best < self._neg_iou_thresh) * inside
        samples = F.where(negative, F.ones_like(best) * -1, positive)
        return samples, matches

    def hybrid_forward(self, F, anchors, gt_boxes, gt_ids, sizes):
        samples, matches = self.candidates(F, anchors, gt_boxes, gt_ids, sizes)
        noise = F.random.uniform_like(samples)
        positive = samples > 0
        pos_rank = rank(F, F.where(positive, noise, noise + 2))
        keep_pos = positive * (pos_rank < self._max_pos)
        max_neg = self._num_sample - F.sum(keep_pos, axis=1, keepdims=True)
        negative = samples < 0
        neg_rank = rank(F, F.where(negative, noise, noise + 2))
        keep_neg = negative * F.broadcast_lesser(neg_rank, max_neg)
        cls_targets = keep_pos - (1 - keep_pos - keep_neg)                   # 1 / 0 / -1
        anchors = F.broadcast_like(anchors, gt_boxes, lhs_axes=(0,), rhs_axes=(0,))
        box_targets, box_masks = _encode(F, self.encoder, keep_pos, matches, anchors, gt_boxes)
        return cls_targets, box_targets, box_masks


class RCNNTargetSampler(gluon.HybridBlock):
    """Choose the proposals the R-CNN head learns from (GluonCV's ``RCNNTargetSampler``, batched).

    The ground truths join the proposals. A proposal is positive if its best
    IoU reaches ``pos_iou_thresh``, a negative candidate otherwise, ignored if
    its score is negative (padding). In random order, up to ``num_sample *
    pos_ratio`` positives are taken, then the other slots are filled with
    negatives first, then leftover positives, then ignored ones; a proposal
    is never taken twice (GluonCV's second pass can take one again, or skip
    one, since it cuts its shuffled list by position). The sample is ordered
    by box area, as GluonCV.

    Parameters
    ----------
    num_sample, pos_iou_thresh, pos_ratio
        GluonCV: 128 (512 for FPN), 0.5, 0.25.

    Inputs: ``rois`` ``B x N x 4``, ``scores`` ``B x N x 1`` (padding: -1),
    ``gt_boxes`` ``B x M x 4``, ``gt_ids`` ``B x M x 1``.
    Outputs: ``rois`` ``B x S x 4``, ``samples`` ``B x S`` (1 positive, -1
    negative, 0 ignored), ``matches`` ``B x S`` (gt index), ``S = num_sample``.
    """

    def __init__(self, num_sample=128, pos_iou_thresh=0.5, pos_ratio=0.25, **kwargs):
        super().__init__(**kwargs)
        self.num_sample = num_sample
        self.max_pos = int(round(num_sample * pos_ratio))
        self._pos_iou_thresh = pos_iou_thresh

    def hybrid_forward(self, F, rois, scores, gt_boxes, gt_ids):
        gt_scores = (gt_ids >= 0) * 2 - 1
        all_rois = F.concat(rois, gt_boxes, dim=1)
        all_scores = F.concat(scores, gt_scores, dim=1).reshape((0, -1))
        ious, _ = _valid_gt_ious(F, pairwise_iou(F, all_rois, gt_boxes), gt_ids)
        best = F.max(ious, axis=-1)
        matches = F.argmax(ious, axis=-1)
        mask = F.where(all_scores < 0, F.zeros_like(best), F.ones_like(best) * 2)
        mask = F.where(best >= self._pos_iou_thresh, F.ones_like(best) * 3, mask)
        order = F.argsort(F.random.uniform_like(best), axis=1)       # a random permutation
        mask = batch_take(F, mask, order)
        ranked = F.argsort(mask, axis=1, is_ascend=False)
        head = F.slice_axis(ranked, axis=1, begin=0, end=self.max_pos)
        taken = F.argsort(ranked, axis=1) < self.max_pos
        rest = F.where(taken, F.ones_like(mask) * -1,
                       F.where(mask == 2, F.ones_like(mask) * 4, mask))
        tail = F.slice_axis(F.argsort(rest, axis=1, is_ascend=False), axis=1, begin=0,
                            end=self.num_sample - self.max_pos)
        index = batch_take(F, order, F.concat(head, tail, dim=1))
        chosen = F.concat(batch_take(F, mask, head), batch_take(F, rest, tail), dim=1)
        samples = (chosen == 3) - (chosen == 2) - (chosen == 4)
        picked = batch_take(F, all_rois, index)
        matches = batch_take(F, matches, index)
        xmin, ymin, xmax, ymax = F.split(picked, axis=-1, num_outputs=4, squeeze_axis=True)
        by_area = F.argsort((xmax - xmin) * (ymax - ymin), axis=1)
        return (batch_take(F, picked, by_area), batch_take(F, samples, by_area),
                batch_take(F, matches, by_area))


class RCNNTargetGenerator(gluon.HybridBlock):
    """Class and box targets of the sampled proposals (GluonCV's ``RCNNTargetGenerator``).

    Parameters
    ----------
    max_pos : int
        Box targets are made for the first ``max_pos`` samples, positives first.
    stds : 4 floats
        Box-coding divisors (GluonCV: 0.1, 0.1, 0.2, 0.2).

    Inputs: ``rois`` ``B x S x 4``, ``samples``, ``matches`` ``B x S`` (from
    :class:`RCNNTargetSampler`), ``gt_boxes`` ``B x M x 4``, ``gt_ids`` ``B x M x 1``.

    Outputs
    -------
    cls_targets : ``B x S``: ``class + 1`` positive, 0 negative, -1 ignored.
    box_targets, box_masks : ``B x P x 4`` for the samples ``indices``, mask 1 on positives.
    box_classes : ``B x P`` class of each of those samples (0 where not positive).
    indices : ``B x P`` positions in the sample, ``P = max_pos``.
    """

    def __init__(self, max_pos, stds=(.1, .1, .2, .2), **kwargs):
        super().__init__(**kwargs)
        self._max_pos = max_pos
        with self.name_scope():
            self.encoder = BoxCenterEncoder(stds)

    def hybrid_forward(self, F, rois, samples, matches, gt_boxes, gt_ids):
        labels = batch_take(F, gt_ids.reshape((0, -1)).expand_dims(-1), matches).reshape((0, -1))
        cls_targets = F.where(samples > 0.5, labels + 1,
                              F.where(samples < -0.5, F.zeros_like(labels),
                                      F.ones_like(labels) * -1))
        targets, masks = _encode(F, self.encoder, samples > 0.5, matches, rois, gt_boxes)
        indices = F.slice_axis(F.argsort(F.slice_axis(masks, axis=-1, begin=0, end=1)
                                         .reshape((0, -1)), axis=1, is_ascend=False),
                               axis=1, begin=0, end=self._max_pos)
        box_classes = F.relu(batch_take(F, labels, indices)) * batch_take(
            F, samples > 0.5, indices)
        return (cls_targets, batch_take(F, targets, indices), batch_take(F, masks, indices),
                box_classes, indices)
