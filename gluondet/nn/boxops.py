"""Batched box operations written with symbol-friendly MXNet ops (no per-image loops)."""

__all__ = ['pairwise_iou', 'batch_take', 'rank']


def pairwise_iou(F, a, b):
    """IoU of every box of ``a`` with every box of ``b``, image by image.

    ``a`` ``B x N x 4`` and ``b`` ``B x M x 4`` corner boxes; returns ``B x N x M``.
    Areas are ``(xmax - xmin) * (ymax - ymin)``, as ``contrib.box_iou``; a pair
    whose union is empty has IoU 0.
    """
    ax1, ay1, ax2, ay2 = [v.expand_dims(2) for v in F.split(a, axis=-1, num_outputs=4,
                                                            squeeze_axis=True)]
    bx1, by1, bx2, by2 = [v.expand_dims(1) for v in F.split(b, axis=-1, num_outputs=4,
                                                            squeeze_axis=True)]
    width = F.relu(F.broadcast_minimum(ax2, bx2) - F.broadcast_maximum(ax1, bx1))
    height = F.relu(F.broadcast_minimum(ay2, by2) - F.broadcast_maximum(ay1, by1))
    inter = width * height
    union = F.broadcast_add((ax2 - ax1) * (ay2 - ay1), (bx2 - bx1) * (by2 - by1)) - inter
    return F.where(union > 0, inter / F.maximum(union, 1e-12), F.zeros_like(inter))


def batch_take(F, data, index):
    """``data[b, index[b, k]]`` for every image ``b``: ``B x N x ...`` by ``B x K`` gives
    ``B x K x ...``."""
    batch = F.broadcast_like(F.contrib.arange_like(index, axis=0).reshape((-1, 1)), index)
    return F.gather_nd(data, F.stack(batch, F.cast(index, 'float32')))


def rank(F, keys):
    """Rank (0 = smallest) of every key within its row of ``B x N`` keys, as float."""
    order = F.argsort(keys, axis=1)
    return F.argsort(order, axis=1)
