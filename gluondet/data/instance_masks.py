"""Instance masks as data: one segmentation per label row, moved with the boxes.

A dataset built with ``masks=True`` gives each image an :class:`InstanceMasks` beside its
label: instance ``i`` of the masks is the object of label row ``i``. An instance is kept as
COCO polygons (float coordinates, so resizing, flipping, cropping and padding stay exact)
or as a bitmap (from RLE), and moves with the geometry that
:mod:`gluondet.data.transforms` applies to the boxes; :meth:`InstanceMasks.bitmaps`
rasterizes them at the end (polygons as pycocotools rasterizes them).

Polygon coordinates are continuous: pixel ``i`` covers ``[i, i + 1)``, as pycocotools
reads them. A flip maps ``x`` to ``width - x``, which sends pixel ``i`` to ``width - 1 -
i``, as the image's flip does; boxes (GluonCV's inclusive pixel frame) flip to ``width -
x`` for both corners, so a flipped box lies about a pixel right of its mask's tight box.
"""
import cv2
import numpy as np

from .. import masks as rle_codec

__all__ = ['InstanceMasks', 'pack_runs', 'polygons_empty', 'rle_counts', 'unpack_runs']

MAX_RUN = 1 << 24   # the longest run length a float32 holds exactly


def _polygon(part, where):
    """A ``K x 2`` float64 array of one polygon (flat list or ``K x 2``), K >= 3."""
    points = np.asarray(part, dtype=np.float64)
    if points.ndim == 1:
        if points.size % 2:
            raise ValueError('%s: a polygon needs x, y pairs, got %d numbers'
                             % (where, points.size))
        points = points.reshape(-1, 2)
    if points.ndim != 2 or points.shape[1] != 2 or len(points) < 3:
        raise ValueError('%s: a polygon needs at least 3 points (x, y), got shape %s'
                         % (where, points.shape))
    if not np.isfinite(points).all():
        raise ValueError('%s: polygon coordinates must be finite' % where)
    return points


def _instance(value, index):
    """The stored form of one instance: a tuple of polygons, or an ``H x W`` uint8 bitmap."""
    where = 'instance %d' % index
    if isinstance(value, dict):
        size = value.get('size')
        if not (isinstance(size, (list, tuple)) and len(size) == 2):
            raise ValueError('%s: an RLE needs a size [height, width], got %r' % (where, size))
        return rle_codec.decode(rle_codec.to_rle(value, int(size[0]), int(size[1]), where))
    if isinstance(value, np.ndarray) and value.ndim == 2:
        return (value != 0).astype(np.uint8)
    if isinstance(value, (list, tuple)):
        return tuple(_polygon(part, where) for part in value)
    raise ValueError('%s: expected polygons, an H x W bitmap or an RLE dict, got %s'
                     % (where, type(value).__name__))


def _place(bitmap, x, y, width, height):
    """``bitmap`` on a zero ``height x width`` canvas with its origin at ``(x, y)`` (ints)."""
    out = np.zeros((height, width), np.uint8)
    h, w = bitmap.shape
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, width), min(y + h, height)
    if x1 > x0 and y1 > y0:
        out[y0:y1, x0:x1] = bitmap[y0 - y:y1 - y, x0 - x:x1 - x]
    return out


def _clip_half(points, axis, bound, below):
    """Sutherland-Hodgman: the part of a polygon on one side of ``x[axis] = bound``."""
    side = points[:, axis] - bound if below else bound - points[:, axis]   # inside: <= 0
    out = []
    for p, q, a, b in zip(points, np.roll(points, -1, axis=0), side, np.roll(side, -1)):
        if a <= 0:
            out.append(p)
        if (a <= 0) != (b <= 0):
            out.append(p + (a / (a - b)) * (q - p))
    return np.array(out, np.float64).reshape(-1, 2)


def _clip(points, x0, y0, x1, y1):
    """A polygon clipped to the rectangle ``[x0, x1] x [y0, y1]``, or None if nothing is left."""
    if (points.min(axis=0) >= (x0, y0)).all() and (points.max(axis=0) <= (x1, y1)).all():
        return points
    for axis, bound, below in ((0, x0, False), (0, x1, True), (1, y0, False), (1, y1, True)):
        points = _clip_half(points, axis, bound, below)
        if len(points) < 3:
            return None
    return points


class InstanceMasks:
    """The masks of one image's objects, one per label row, as polygons or bitmaps.

    Every method returns a new object; none changes this one. Sizes are ``(width,
    height)`` and windows are as :mod:`gluondet.data.transforms` returns them.

    Parameters
    ----------
    instances : sequence, or numpy.ndarray ``N x H x W``
        One entry per object: COCO polygons (a list of flat ``[x1, y1, x2, y2, ...]``
        lists or of ``K x 2`` arrays, each of 3 points or more), an ``H x W`` bitmap (nonzero
        inside, a numpy array) or a COCO RLE dict (compressed or not; decoded to a bitmap).
        A bitmap's frame is the image's: its pixel ``(0, 0)`` is the image's.
    """

    def __init__(self, instances=()):
        if isinstance(instances, np.ndarray) and instances.ndim == 3:
            instances = list(instances)
        self._items = [_instance(value, i) for i, value in enumerate(instances)]

    @classmethod
    def _of(cls, items):
        out = cls.__new__(cls)
        out._items = items
        return out

    def __len__(self):
        return len(self._items)

    def __getitem__(self, index):
        """The instances an int, a slice, an index array or a boolean mask selects, in that
        order (an int gives one instance)."""
        picked = np.arange(len(self._items))[index]
        return self._of([self._items[i] for i in np.atleast_1d(picked)])

    @property
    def kinds(self):
        """``'polygons'`` or ``'bitmap'`` per instance."""
        return tuple('bitmap' if isinstance(item, np.ndarray) else 'polygons'
                     for item in self._items)

    def __repr__(self):
        kinds = self.kinds
        return 'InstanceMasks(%d: %d polygons, %d bitmaps)' % (
            len(kinds), kinds.count('polygons'), kinds.count('bitmap'))

    def _map(self, polygon_fn, bitmap_fn):
        """Apply ``polygon_fn`` to each polygon (None drops it) and ``bitmap_fn`` to each
        bitmap."""
        items = []
        for item in self._items:
            if isinstance(item, np.ndarray):
                items.append(bitmap_fn(item))
            else:
                moved = (polygon_fn(points) for points in item)
                items.append(tuple(points for points in moved if points is not None))
        return self._of(items)

    def resize(self, in_size, out_size):
        """The masks of an image resized from ``in_size`` to ``out_size`` (as ``bbox_resize``).

        Bitmaps are resized as the image (bilinear, or area averaging when both sides
        shrink) and kept where at least half covered.
        """
        (in_w, in_h), (out_w, out_h) = in_size, (int(out_size[0]), int(out_size[1]))
        scale = np.array([out_w / in_w, out_h / in_h])
        interp = cv2.INTER_AREA if (scale < 1).all() else cv2.INTER_LINEAR

        def bitmap(b):
            fitted = _place(b, 0, 0, int(in_w), int(in_h)) * np.uint8(255)
            return (cv2.resize(fitted, (out_w, out_h), interpolation=interp) >= 128).astype(
                np.uint8).reshape(out_h, out_w)

        return self._map(lambda p: p * scale, bitmap)

    def flip(self, size, flip_x=False, flip_y=False):
        """The masks of an image of ``size`` mirrored left-right and/or up-down."""
        width, height = int(size[0]), int(size[1])

        def polygon(p):
            p = p.copy()
            if flip_x:
                p[:, 0] = width - p[:, 0]
            if flip_y:
                p[:, 1] = height - p[:, 1]
            return p

        def bitmap(b):
            b = _place(b, 0, 0, width, height)
            return np.ascontiguousarray(b[::-1 if flip_y else 1, ::-1 if flip_x else 1])

        return self._map(polygon, bitmap)

    def crop(self, crop_box):
        """The masks seen through a window ``(x, y, width, height)`` (as ``bbox_crop``):
        polygons clipped to it and moved to its origin, bitmaps cut (offsets rounded to
        whole pixels). Instances are not dropped: index the result as the labels were."""
        x, y, w, h = (float(v) for v in crop_box)

        def polygon(p):
            clipped = _clip(p, x, y, x + w, y + h)
            return None if clipped is None else clipped - (x, y)

        return self._map(polygon, lambda b: _place(b, -int(round(x)), -int(round(y)),
                                                   int(round(w)), int(round(h))))

    def expand(self, size, window):
        """The masks of an image of ``size`` placed on a larger canvas, ``window`` =
        ``(x_offset, y_offset, canvas_width, canvas_height)`` as ``random_expand`` returns
        it; what lay outside the image stays outside (polygons are clipped to it)."""
        width, height = int(size[0]), int(size[1])
        x, y, canvas_w, canvas_h = (int(v) for v in window)

        def polygon(p):
            clipped = _clip(p, 0, 0, width, height)
            return None if clipped is None else clipped + (x, y)

        return self._map(polygon, lambda b: _place(_place(b, 0, 0, width, height), x, y,
                                                   canvas_w, canvas_h))

    def bitmaps(self, height, width):
        """The masks rasterized on a ``height x width`` image: ``N x height x width`` uint8
        (1 inside); polygons with :func:`gluondet.masks.from_polygons`."""
        out = np.zeros((len(self._items), int(height), int(width)), np.uint8)
        for i, item in enumerate(self._items):
            if isinstance(item, np.ndarray):
                out[i] = _place(item, 0, 0, int(width), int(height))
            elif item:
                rle = rle_codec.from_polygons([p.ravel().tolist() for p in item], int(height),
                                              int(width))
                out[i] = rle_codec.decode(rle)
        return out


def rle_counts(bitmap):
    """The uncompressed COCO RLE counts of an ``H x W`` mask: run lengths in column-major
    order, starting with a run of zeros (possibly empty), as int64."""
    flat = np.asarray(bitmap).T.ravel() != 0
    edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    counts = np.diff(np.concatenate([[0], edges, [flat.size]]))
    return np.concatenate([[0], counts]) if flat.size and flat[0] else counts


def pack_runs(bitmaps):
    """``N`` masks as one vector of integers that float32 holds exactly: the ``N`` run
    counts, then each mask's :func:`rle_counts`, a run longer than ``MAX_RUN`` split by runs
    of length 0 (float64; :func:`unpack_runs` reads it back)."""
    runs = []
    for mask in bitmaps:
        counts = []
        for count in rle_counts(mask).tolist():
            while count > MAX_RUN:
                counts += [MAX_RUN, 0]
                count -= MAX_RUN
            counts.append(count)
        runs.append(counts)
    return np.array([len(r) for r in runs] + [v for r in runs for v in r], np.float64)


def unpack_runs(values, count):
    """The RLE counts (int64 arrays) of the ``count`` masks of a :func:`pack_runs` vector;
    ValueError if ``values`` is not one."""
    values = np.asarray(values, np.float64)
    if values.size < count or not (np.isfinite(values).all() and (values >= 0).all()
                                   and (values == np.floor(values)).all()):
        raise ValueError('%d values for %d masks are not run counts and run lengths'
                         % (values.size, count))
    lengths = values[:count].astype(np.int64)
    if lengths.sum() != values.size - count:
        raise ValueError('the run counts add up to %d but %d run lengths follow'
                         % (lengths.sum(), values.size - count))
    return np.split(values[count:].astype(np.int64), np.cumsum(lengths)[:-1])


_PROBES = [(.5, .5)] + [(a, b) for a in (1 / 6, .5, 5 / 6) for b in (1 / 6, .5, 5 / 6)
                        if (a, b) != (.5, .5)]


def _surely_filled(instances, width, height):
    """Per instance, whether one of 9 pixel centres spread over its bounds (the middle one
    first) lies inside its polygons (even-odd, as pycocotools fills them) half a pixel or
    more from every edge: a pixel pycocotools surely fills. Every instance at once."""
    parts = [p for polygons in instances for p in polygons]
    (sx, sy), (ex, ey) = np.concatenate(parts).T, np.concatenate(
        [np.roll(p, -1, axis=0) for p in parts]).T
    owner = np.repeat(np.repeat(np.arange(len(instances)), [len(i) for i in instances]),
                      [len(p) for p in parts])
    first = np.searchsorted(owner, np.arange(len(instances)))
    low_x, low_y = np.maximum(np.minimum.reduceat(sx, first), 0), np.maximum(
        np.minimum.reduceat(sy, first), 0)
    high_x, high_y = np.minimum(np.maximum.reduceat(sx, first), width), np.minimum(
        np.maximum.reduceat(sy, first), height)
    sure = np.zeros(len(instances), bool)
    open_ = (high_x > low_x) & (high_y > low_y)
    dx, dy = ex - sx, ey - sy
    length = np.maximum(dx * dx + dy * dy, 1e-12)
    for fx, fy in _PROBES:
        cx = (np.floor(low_x + fx * (high_x - low_x)).clip(0, width - 1) + .5)[owner]
        cy = (np.floor(low_y + fy * (high_y - low_y)).clip(0, height - 1) + .5)[owner]
        with np.errstate(divide='ignore', invalid='ignore'):
            cross = ((sy > cy) != (ey > cy)) & (cx < sx + (cy - sy) * dx / dy)
        t = np.clip(((cx - sx) * dx + (cy - sy) * dy) / length, 0, 1)
        far = np.minimum.reduceat(np.hypot(sx + t * dx - cx, sy + t * dy - cy), first) >= .5
        sure |= open_ & far & (np.add.reduceat(cross.astype(np.int64), first) % 2 == 1)
        if sure.all():
            break
    return sure


def polygons_empty(instances, width, height):
    """Which instances fill no pixel of a ``width x height`` image, exactly as pycocotools
    rasterizes them (self-intersecting polygons included: even-odd).

    Parameters
    ----------
    instances : sequence of sequences of ``K x 2`` arrays
        Each instance's polygons (3 points or more each; none: empty).

    Returns
    -------
    numpy.ndarray of bool, one per instance

    A cheap test of all instances at once clears almost all of them; the rest (tiny, thin
    or outside the image) are rasterized with :func:`gluondet.masks.from_polygons`.
    """
    empty = np.array([not len(polygons) for polygons in instances], bool)
    some = np.flatnonzero(~empty)
    if not len(some):
        return empty
    sure = _surely_filled([instances[i] for i in some], width, height)
    for i in some[~sure]:
        rle = rle_codec.from_polygons([p.ravel().tolist() for p in instances[i]], height, width)
        empty[i] = rle_codec.area(rle) == 0
    return empty
