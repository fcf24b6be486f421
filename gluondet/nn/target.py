"""Training targets of single-stage detectors (SSD, RetinaNet): which anchor learns which box."""
from mxnet import gluon

from .coder import BoxCenterEncoder, center_to_corner
from .matcher import BipartiteMatcher, CompositeMatcher, MaximumMatcher

__all__ = ['AnchorTargetGenerator', 'SSDTargetGenerator']


class AnchorTargetGenerator(gluon.HybridBlock):
    """Match anchors to ground truths and encode the class and box targets.

    Each ground truth first takes its best anchor (bipartite matching, ties
    included), then every other anchor whose best IoU reaches ``iou_thresh``
    takes that ground truth. Matched anchors get ``class id + 1`` and the
    encoded box; with ``ignore_thresh``, an unmatched anchor whose best IoU is at
    least that is ignored (-1: RetinaNet's band between 0.4 and 0.5); all others
    are background (0). Box targets are zero where the class target is not
    positive. SSD's hard-negative mining happens in
    :class:`gluondet.losses.SSDMultiBoxLoss`, as in GluonCV's SSD training transform.

    Parameters
    ----------
    iou_thresh : float
        IoU from which an anchor is matched to its best ground truth.
    stds : 4 floats
        Box-coding divisors.
    ignore_thresh : float or None
        IoU from which an unmatched anchor is ignored rather than background.

    Inputs
    ------
    anchors : ``1 x A x 4`` (or ``A x 4``), center format, as the SSD network returns them.
    gt_boxes : ``B x M x 4`` corner boxes in input pixels; padding rows may hold anything.
    gt_ids : ``B x M x 1`` (or ``B x M``) class ids; rows with id < 0 are padding and ignored.

    Outputs
    -------
    cls_targets : ``B x A``, 0 background, ``k + 1`` for class ``k``, -1 ignored.
    box_targets : ``B x A x 4``, zero where ``cls_targets`` is not positive.
    """

    def __init__(self, iou_thresh=0.5, stds=(0.1, 0.1, 0.2, 0.2), ignore_thresh=None,
                 **kwargs):
        super().__init__(**kwargs)
        if ignore_thresh is not None and not ignore_thresh <= iou_thresh:
            raise ValueError('ignore_thresh %r must not exceed iou_thresh %r'
                             % (ignore_thresh, iou_thresh))
        self._ignore_thresh = ignore_thresh
        with self.name_scope():
            self.matcher = CompositeMatcher([BipartiteMatcher(share_max=False),
                                             MaximumMatcher(iou_thresh)])
            self.encoder = BoxCenterEncoder(stds)

    def hybrid_forward(self, F, anchors, gt_boxes, gt_ids):
        anchors = center_to_corner(F, anchors.reshape((-1, 4)))        # A x 4
        gt_ids = gt_ids.reshape((0, -1))                                # B x M
        ious = F.transpose(F.contrib.box_iou(anchors, gt_boxes), (1, 0, 2))  # B x A x M
        valid = (gt_ids >= 0).reshape((0, 1, -1))
        ious = F.broadcast_sub(F.broadcast_mul(ious, valid), 1 - valid)  # padding -> -1
        matches = self.matcher(ious)                                    # B x A
        index = F.maximum(matches, 0)
        positive = matches >= 0
        matched_ids = F.pick(_per_anchor(F, gt_ids, matches), index, axis=2)
        matched_boxes = F.concat(*[
            F.pick(_per_anchor(F, coord.reshape((0, -1)), matches), index, axis=2, keepdims=True)
            for coord in F.split(gt_boxes, axis=-1, num_outputs=4)], dim=-1)
        cls_targets = F.where(positive, matched_ids + 1, F.zeros_like(matched_ids))
        if self._ignore_thresh is not None:
            ignored = (1 - positive) * (F.max(ious, axis=-1) >= self._ignore_thresh)
            cls_targets = F.where(ignored, F.ones_like(cls_targets) * -1, cls_targets)
        codes = self.encoder(matched_boxes, anchors.reshape((1, -1, 4)))
        box_targets = F.where(F.broadcast_like(positive.expand_dims(-1), codes),
                              codes, F.zeros_like(codes))
        return cls_targets, box_targets


def _per_anchor(F, values, matches):
    """Repeat ``B x M`` values for every anchor: ``B x A x M``."""
    return F.broadcast_like(values.reshape((0, 1, -1)), matches, lhs_axes=(1,), rhs_axes=(1,))


SSDTargetGenerator = AnchorTargetGenerator   # the name SSD's code and GluonCV users know
