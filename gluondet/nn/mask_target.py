"""Mask R-CNN's mask targets: the ground-truth masks pooled on the sampled regions."""
from mxnet import gluon

__all__ = ['MaskTargetGenerator']


class MaskTargetGenerator(gluon.HybridBlock):
    """Each region's target mask: ROI Align (sample ratio 2, as GluonCV) of the full-image
    mask of its matched ground truth over its box, on the ``M x M`` grid of the network's
    masks; soft values in ``[0, 1]`` at the object's border, as GluonCV's targets.

    Parameters
    ----------
    size : (int, int)
        The mask grid (the network's ``mask_size``).

    Inputs: ``rois`` ``B x P x 4`` in the input image's pixels, ``matches`` ``B x P``
    (indices of ground truths, any value for regions that are not positives),
    ``gt_masks`` ``B x G x H x W`` (0 or 1, the input images' size, padding masks zero).
    Output ``B x P x M x M``.
    """

    def __init__(self, size, **kwargs):
        super().__init__(**kwargs)
        self.size = tuple(size)

    def hybrid_forward(self, F, rois, matches, gt_masks):
        gt_masks = F.cast(gt_masks, 'float32')
        masks = gt_masks.reshape((-3, -2)).expand_dims(1)                  # (B * G) x 1 x H x W
        column = F.slice_axis(F.slice_axis(gt_masks, axis=3, begin=0, end=1), axis=2, begin=0,
                              end=1).reshape((0, -1))                      # B x G
        num_gt = F.sum(F.ones_like(column), axis=1, keepdims=True)         # B x 1: G
        first = F.contrib.arange_like(column, axis=0).reshape((-1, 1)) * num_gt
        own = F.broadcast_minimum(F.relu(matches), num_gt - 1)
        rows = F.concat(F.broadcast_add(first, own).expand_dims(-1), rois, dim=-1)
        pooled = F.contrib.ROIAlign(masks, rows.reshape((-1, 5)), self.size, 1.0,
                                    sample_ratio=2)                        # (B * P) x 1 x M x M
        return F.reshape_like(pooled.reshape((-3, -2)), matches, lhs_begin=0, lhs_end=1,
                              rhs_begin=0, rhs_end=2)
