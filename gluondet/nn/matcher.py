"""Anchor-to-ground-truth matching from an IoU matrix.

Every matcher takes IoUs ``B x N x M`` (N anchors, M ground truths; padding
ground truths should carry IoU -1) and returns ``B x N`` indices into the
ground truths, -1 where an anchor is unmatched.
"""
from mxnet import gluon
from mxnet.gluon import nn

__all__ = ['BipartiteMatcher', 'MaximumMatcher', 'CompositeMatcher']


class BipartiteMatcher(gluon.HybridBlock):
    """Give every ground truth its best anchor (greedy bipartite matching).

    Pairs are taken greedily in decreasing IoU, each anchor and each ground
    truth used once. An anchor left over is also matched to its best ground
    truth when it ties (within ``eps``) that ground truth's best IoU, so equal
    anchors are treated alike.

    Parameters
    ----------
    threshold : float
        Pairs with IoU below this are never matched.
    eps : float
        Tolerance of the tie test.
    share_max : bool
        Tie test against the best IoU of any ground truth (True) or only of
        the anchor's own best ground truth (False, SSD's choice).
    """

    def __init__(self, threshold=1e-12, eps=1e-12, share_max=False, **kwargs):
        super().__init__(**kwargs)
        self._threshold = threshold
        self._eps = eps
        self._share_max = share_max

    def hybrid_forward(self, F, ious):
        greedy = F.contrib.bipartite_matching(ious, threshold=self._threshold)[0]
        best_gt = F.argmax(ious, axis=-1)                       # B x N
        best_iou = F.pick(ious, best_gt, axis=-1, keepdims=True)  # B x N x 1
        gt_max = F.max(ious, axis=-2, keepdims=True)            # B x 1 x M
        ties = F.broadcast_greater_equal(
            (ious if self._share_max else best_iou) + self._eps, gt_max)
        if self._share_max:
            tied = F.sum(ties, axis=-1) > 0
        else:
            tied = F.pick(ties, best_gt, axis=-1)
        tied = tied * (best_iou.reshape((0, -1)) >= self._threshold)
        forced = F.where(tied, best_gt, F.ones_like(best_gt) * -1)
        return F.where(greedy < 0, forced, greedy)


class MaximumMatcher(gluon.HybridBlock):
    """Match each anchor to its best ground truth when their IoU >= ``threshold``."""

    def __init__(self, threshold=0.5, **kwargs):
        super().__init__(**kwargs)
        self._threshold = threshold

    def hybrid_forward(self, F, ious):
        best_gt = F.argmax(ious, axis=-1)
        good = F.pick(ious, best_gt, axis=-1) >= self._threshold
        return F.where(good, best_gt, F.ones_like(best_gt) * -1)


class CompositeMatcher(gluon.HybridBlock):
    """Apply matchers in order; each fills only the anchors still unmatched.

    Parameters
    ----------
    matchers : list of HybridBlock
        Matchers as above.
    """

    def __init__(self, matchers, **kwargs):
        super().__init__(**kwargs)
        if not matchers:
            raise ValueError('CompositeMatcher needs at least one matcher')
        with self.name_scope():
            self.matchers = nn.HybridSequential()
            for matcher in matchers:
                self.matchers.add(matcher)

    def hybrid_forward(self, F, ious):
        result = None
        for matcher in self.matchers:
            match = matcher(ious)
            result = match if result is None else F.where(result >= 0, result, match)
        return result
