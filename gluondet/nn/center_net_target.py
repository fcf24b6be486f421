"""CenterNet's training targets (Zhou et al. 2019, arXiv:1904.07850), as GluonCV makes them:
a gaussian peak per object on its class's heatmap, the object's size and the fraction of its
center at the center's cell. Numpy only, so they are made in the data workers.
"""
import numpy as np

__all__ = ['CenterNetTargetGenerator', 'gaussian_radius', 'draw_gaussian']


def gaussian_radius(height, width, min_overlap=0.7):
    """The radius of an object's heatmap peak: the smallest of the three corner shifts
    (CornerNet's cases: both corners inside, both outside, one of each) that keep a box of
    ``height x width`` at IoU ``min_overlap`` with the object, each the larger root of its
    quadratic. As GluonCV (and CornerNet) each root is ``(b + sqrt(b^2 - 4ac)) / 2``, without
    the division by ``a``.

    Parameters
    ----------
    height, width : float
        The object's size, in output-map pixels (GluonCV rounds both up first).
    min_overlap : float

    Returns
    -------
    float
    """
    height, width = np.float64(height), np.float64(width)
    size, area = height + width, height * width
    # (a, b, c) of each case's quadratic in the shift
    cases = ((1.0, size, area * (1 - min_overlap) / (1 + min_overlap)),
             (4.0, 2 * size, (1 - min_overlap) * area),
             (4 * min_overlap, -2 * min_overlap * size, (min_overlap - 1) * area))
    return min((b + np.sqrt(b * b - 4 * a * c)) / 2 for a, b, c in cases)


def _gaussian(radius):
    """A ``(2r + 1) x (2r + 1)`` gaussian of peak 1 and sigma ``(2r + 1) / 6``, values below
    ``eps * peak`` set to 0 (float64)."""
    sigma = (2 * radius + 1) / 6
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    kernel = np.exp(-(offsets[:, None] ** 2 + offsets[None, :] ** 2) / (2 * sigma * sigma))
    kernel[kernel < np.finfo(kernel.dtype).eps * kernel.max()] = 0
    return kernel


def draw_gaussian(heatmap, x, y, radius):
    """Raise ``heatmap`` (``H x W``, in place) to a gaussian of ``radius`` centered on the
    cell ``(x, y)`` (on the map) where the gaussian is higher; the part off the map is cut."""
    height, width = heatmap.shape
    left, right = min(x, radius), min(width - x, radius + 1)
    top, bottom = min(y, radius), min(height - y, radius + 1)
    region = heatmap[y - top:y + bottom, x - left:x + right]
    kernel = _gaussian(radius)[radius - top:radius + bottom, radius - left:radius + right]
    np.maximum(region, kernel, out=region)
    return heatmap


class CenterNetTargetGenerator:
    """CenterNet's targets of one image, GluonCV's ``CenterNetTargetGenerator`` (numpy in and
    out instead of its NDArrays).

    Each object of positive width and height whose center lies on the map is drawn on its
    class's heatmap as a gaussian of radius `gaussian_radius` (of its size rounded up,
    truncated to an integer) at the center's cell (the center's coordinates truncated), the
    maximum where objects overlap; at that cell its size goes to ``wh_target`` and the
    center's offset in the cell (0..1) to ``center_reg``, their masks set to 1. A later object
    of the same cell replaces an earlier one's size and offset. Other boxes (empty, not
    finite, centered off the map: GluonCV asserts on the last) and rows of negative class id
    (padding) are skipped.

    Parameters
    ----------
    num_class : int
    output_width, output_height : int
        The size of the network's output maps (the input's divided by its stride, 4).

    Call
    ----
    ``generator(boxes, ids)``: ``boxes`` ``N x 4`` corner boxes in output-map pixels,
    ``ids`` ``N`` (or ``N x 1``) class ids. Returns float32 ``(heatmap C x H x W, wh_target
    2 x H x W, wh_mask 2 x H x W, center_reg 2 x H x W, center_reg_mask 2 x H x W)``, channels
    of the last four ``(x, y)`` (width, height for ``wh_target``).
    """

    def __init__(self, num_class, output_width, output_height):
        self.num_class = int(num_class)
        self.width, self.height = int(output_width), int(output_height)

    def __call__(self, boxes, ids):
        shape = (self.height, self.width)
        heatmap = np.zeros((self.num_class,) + shape, np.float32)
        wh_target, wh_mask, center_reg, center_reg_mask = (
            np.zeros((2,) + shape, np.float32) for _ in range(4))
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        ids = np.asarray(ids, dtype=np.float32).reshape(-1)
        if len(ids) != len(boxes):
            raise ValueError('CenterNetTargetGenerator: %d boxes but %d class ids'
                             % (len(boxes), len(ids)))
        bad = ids >= self.num_class
        if bad.any():
            raise ValueError('CenterNetTargetGenerator: class id %g of a %d-class network'
                             % (ids[bad][0], self.num_class))
        for box, cid in zip(boxes, ids):
            if not (cid >= 0 and np.isfinite(box).all()):
                continue
            box_w, box_h = box[2] - box[0], box[3] - box[1]
            center = np.array([(box[0] + box[2]) / 2, (box[1] + box[3]) / 2], np.float32)
            if not (box_w > 0 and box_h > 0 and (center >= 0).all()
                    and center[0] < self.width and center[1] < self.height):
                continue
            cell = center.astype(np.int32)
            x, y = int(cell[0]), int(cell[1])
            radius = max(0, int(gaussian_radius(np.ceil(box_h), np.ceil(box_w))))
            draw_gaussian(heatmap[int(cid)], x, y, radius)
            wh_target[:, y, x] = box_w, box_h
            wh_mask[:, y, x] = 1
            center_reg[:, y, x] = center - cell
            center_reg_mask[:, y, x] = 1
        return heatmap, wh_target, wh_mask, center_reg, center_reg_mask
