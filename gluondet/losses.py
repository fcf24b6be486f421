"""Detection losses."""
from mxnet import gluon, nd

__all__ = ['SSDMultiBoxLoss']


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


class SSDMultiBoxLoss(gluon.Block):
    r"""SSD loss: softmax cross-entropy with hard-negative mining + smooth L1.

    For every image the negatives (class target 0) with the highest
    cross-entropy are kept, ``negative_mining_ratio`` times as many as the
    image's positives (at least ``min_hard_negatives``); the others do not
    count. The box loss is smooth L1 (``rho`` the L1/L2 transition) over the
    positives. Both are summed per image and divided by the number of
    positives over all images of all contexts (at least 1), so the result does
    not depend on how a batch is split over devices.

    Parameters
    ----------
    negative_mining_ratio : float
        Hard negatives per positive.
    rho : float
        Smooth L1 transition point.
    lambd : float
        Weight of the box loss in the sum: ``cls + lambd * box``.
    min_hard_negatives : int
        Negatives kept per image even without positives.

    Inputs (each an NDArray or a list over contexts)
    ------------------------------------------------
    cls_pred : ``B x A x (C + 1)`` logits.
    box_pred : ``B x A x 4`` encoded box offsets.
    cls_target : ``B x A``, 0 background, ``k + 1`` class ``k``, -1 ignored.
    box_target : ``B x A x 4``.

    Outputs
    -------
    sum_losses, cls_losses, box_losses : lists (one per context) of ``B`` arrays.
    """

    def __init__(self, negative_mining_ratio=3, rho=1.0, lambd=1.0, min_hard_negatives=0,
                 **kwargs):
        super().__init__(**kwargs)
        self._ratio = max(0, negative_mining_ratio)
        self._rho = rho
        self._lambd = lambd
        self._min_hard_negatives = max(0, min_hard_negatives)

    def forward(self, cls_pred, box_pred, cls_target, box_target):
        cls_pred, box_pred, cls_target, box_target = [
            _as_list(x) for x in (cls_pred, box_pred, cls_target, box_target)]
        num_pos = [(ct > 0).sum() for ct in cls_target]
        total = sum(n.as_in_context(num_pos[0].context) for n in num_pos)
        total = nd.maximum(total, 1)
        sum_losses, cls_losses, box_losses = [], [], []
        for cp, bp, ct, bt in zip(cls_pred, box_pred, cls_target, box_target):
            norm = total.as_in_context(cp.context)
            cls_loss = nd.broadcast_div(self._cls_loss(cp, ct).sum(axis=1), norm)
            box_loss = nd.broadcast_div(self._box_loss(bp, bt, ct > 0).sum(axis=(1, 2)), norm)
            cls_losses.append(cls_loss)
            box_losses.append(box_loss)
            sum_losses.append(cls_loss + self._lambd * box_loss)
        return sum_losses, cls_losses, box_losses

    def _cls_loss(self, pred, target):
        """Cross-entropy of positives and hard negatives, ``B x A``, 0 elsewhere."""
        loss = -nd.pick(nd.log_softmax(pred, axis=-1), target, axis=-1)
        pos = target > 0
        neg = target == 0
        num_neg = nd.maximum(pos.sum(axis=1) * self._ratio, self._min_hard_negatives)
        neg_loss = nd.where(neg, loss, nd.ones_like(loss) * -1)
        ranked = nd.sort(neg_loss, axis=1, is_ascend=False)
        last = nd.clip(num_neg - 1, 0, loss.shape[1] - 1)
        cutoff = nd.pick(ranked, last, axis=1, keepdims=True)
        hard = neg * nd.broadcast_greater_equal(neg_loss, cutoff) * (num_neg > 0).expand_dims(1)
        return nd.where(pos + hard > 0, loss, nd.zeros_like(loss))

    def _box_loss(self, pred, target, pos):
        """Smooth L1 over positive anchors, ``B x A x 4``."""
        diff = nd.abs(pred.reshape_like(target) - target)
        loss = nd.where(diff > self._rho, diff - 0.5 * self._rho,
                        (0.5 / self._rho) * nd.square(diff))
        pos = nd.broadcast_like(pos.expand_dims(-1), loss)
        return nd.where(pos, loss, nd.zeros_like(loss))
