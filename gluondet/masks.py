"""Instance masks in COCO's formats, with pycocotools' numbers (and GluonCV's pasting,
:mod:`gluondet.mask_paste`).

A mask is a run-length encoding (RLE) ``{'size': [height, width], 'counts': ...}``: the
lengths of the alternating runs of 0s and 1s down the columns (pixel ``(y, x)`` is number
``x * height + y``), a run of 0s first. ``counts`` is a list of ints (uncompressed) or
pycocotools' compressed string (6 bits a character, characters 48 to 111); what this module
returns is the string, as ``str``. Polygons rasterize as pycocotools' ``frPyObjects`` +
``merge``, so areas, boxes and IoUs are pycocotools' to the pixel.

Inside, masks are :class:`Runs`, the runs of 1s of many masks in flat arrays, on which
decoding, union and IoU are array operations (no pixel loops, no full bitmaps for IoU).
"""
import numpy as np

from .chunking import chunked
from .mask_paste import paste

__all__ = ['encode', 'decode', 'from_polygons', 'to_rle', 'area', 'to_bbox', 'merge', 'iou',
           'paste', 'Runs']

SCALE = 5           # pycocotools traces polygon edges on a 5x finer grid
CHUNK = 1 << 22     # runs looked up at once in an IoU, to bound memory


def _ranges(first, count):
    """Concatenated ``arange(first[i], first[i] + count[i])`` and the ``i`` of each value."""
    group, place = _within(count)
    return place + np.asarray(first, np.int64)[group], group


def _within(lengths):
    """The group of each element of groups of ``lengths`` laid end to end, and its place in
    its group."""
    lengths = np.asarray(lengths, np.int64)
    group = np.repeat(np.arange(len(lengths)), lengths)
    return group, np.arange(len(group)) - np.repeat(np.cumsum(lengths) - lengths, lengths)


class Runs:
    """The runs of 1s of several masks, as flat arrays.

    Parameters
    ----------
    height, width : array-like of int
        Each mask's size.
    start, stop : array-like of int
        First and one-past-last pixel number (``x * height + y``) of each run; a mask's
        runs are sorted and apart (at least one 0 between two runs).
    first : array-like of int
        Mask ``i``'s runs are ``start[first[i]:first[i + 1]]``.
    """

    def __init__(self, height, width, start, stop, first):
        self.height, self.width = np.asarray(height, np.int64), np.asarray(width, np.int64)
        self.start, self.stop = np.asarray(start, np.int64), np.asarray(stop, np.int64)
        self.first = np.asarray(first, np.int64)

    def __len__(self):
        return len(self.first) - 1

    @classmethod
    def of(cls, segmentations, height=None, width=None, name=None):
        """The masks of COCO ``segmentation`` values (polygon lists, uncompressed or compressed
        RLEs), built together.

        ``height``, ``width`` (one int or one per mask) are the image sizes, needed for
        polygons; an RLE must have that size. Without them an RLE's own size is taken.
        ``name(i)`` names value ``i`` in error messages (default ``rles[i]``).
        """
        name = name or 'rles[%d]'.__mod__
        sized, n = height is not None, len(segmentations)
        height, width = (np.zeros(n, np.int64) if v is None else
                         np.broadcast_to(np.asarray(v, np.int64), (n,)).copy()
                         for v in (height, width))
        rles, polygons = [], []
        for i, seg in enumerate(segmentations):
            if isinstance(seg, dict) and 'counts' in seg and 'size' in seg:
                rles.append(i)
            elif isinstance(seg, (list, tuple)) and sized:
                polygons.append(i)
            else:
                raise ValueError('%s: %s, got %s' % (name(i), (
                    'a list of polygons or an RLE dict with "size" and "counts"' if sized else
                    'an RLE dict with "size" and "counts"'), type(seg).__name__))
        runs = [np.zeros((3, 0), np.int64)]
        if rles:
            counts, number, height[rles], width[rles] = _rle_counts(
                [segmentations[i] for i in rles], height[rles] if sized else None,
                width[rles] if sized else None, lambda k: name(rles[k]))
            runs.append(_count_runs(counts, number))
            runs[-1][0] = np.asarray(rles)[runs[-1][0]]
        if polygons:
            runs.append(_polygon_runs([segmentations[i] for i in polygons], height[polygons],
                                      width[polygons], lambda k: name(polygons[k])))
            runs[-1][0] = np.asarray(polygons)[runs[-1][0]]
        return _union(*np.concatenate(runs, axis=1), height, width)

    def count(self):
        """Runs of each mask."""
        return np.diff(self.first)

    def owner(self):
        """The mask of each run."""
        return np.repeat(np.arange(len(self)), self.count())

    def base(self):
        """Each mask's offset on one line holding all masks one after the other (a pixel
        apart), where the runs of all masks are sorted."""
        return np.concatenate([[0], np.cumsum(self.height * self.width + 1)[:-1]])

    def area(self):
        """Pixels in each mask (int64)."""
        cum = np.concatenate([[0], np.cumsum(self.stop - self.start)])
        return cum[self.first[1:]] - cum[self.first[:-1]]

    def bounds(self):
        """Each mask's first and last column and row, ``N x 4`` (``x0, y0, x1, y1``, inclusive;
        ``-1`` for an empty mask)."""
        h = np.repeat(self.height, self.count())
        col0, col1 = self.start // np.maximum(h, 1), (self.stop - 1) // np.maximum(h, 1)
        tall = col0 != col1
        row0 = np.where(tall, 0, self.start % np.maximum(h, 1))
        row1 = np.where(tall, h - 1, (self.stop - 1) % np.maximum(h, 1))
        out = np.full((len(self), 4), -1, np.int64)
        full = np.flatnonzero(self.count() > 0)
        if len(full):
            heads = self.first[full]
            out[full] = np.stack([col0[heads], np.minimum.reduceat(row0, heads),
                                  col1[self.first[full + 1] - 1],
                                  np.maximum.reduceat(row1, heads)], axis=1)
        return out

    def counts(self):
        """Canonical RLE counts of every mask, concatenated, and the length of each's."""
        count, size = self.count(), self.height * self.width
        ends = np.cumsum(2 * count + 2)
        points = np.empty(ends[-1] if len(ends) else 0, np.int64)
        points[ends - 2 * count - 2] = 0
        points[ends - 1] = size
        runs, owner = _ranges(self.first[:-1], count)
        slot = ends[owner] - 2 * count[owner] - 1 + 2 * (runs - self.first[owner])
        points[slot], points[slot + 1] = self.start[runs], self.stop[runs]
        counts = np.delete(np.diff(points), ends[:-1] - 1)
        lengths = 2 * count + 1
        # no trailing empty run of 0s after a run of 1s reaching the end (as pycocotools)
        last = self.stop[np.maximum(self.first[1:] - 1, 0)] if len(self.stop) else size
        tail = (count > 0) & (last == size)
        counts = np.delete(counts, (np.cumsum(lengths) - 1)[tail])
        return counts, lengths - tail

    def rles(self):
        """Compressed RLE dicts of the masks."""
        counts, lengths = self.counts()
        return [{'size': [int(h), int(w)], 'counts': s} for h, w, s in
                zip(self.height, self.width, _compress(counts, lengths))]

    def pair_iou(self, other, rows, cols, crowd):
        """IoU of mask ``rows[k]`` of these with mask ``cols[k]`` of ``other``, as
        pycocotools' ``iou``: where ``crowd[k]``, the union is the area of ``self``'s mask.
        """
        rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        differ = (self.height[rows] != other.height[cols]) | (self.width[rows] !=
                                                              other.width[cols])
        if differ.any():
            a, b = rows[np.argmax(differ)], cols[np.argmax(differ)]
            raise ValueError('IoU of masks of different sizes: %d x %d and %d x %d (height x '
                             'width)' % (self.height[a], self.width[a], other.height[b],
                                         other.width[b]))
        mine, theirs = self.bounds()[rows], other.bounds()[cols]
        near = ((mine[:, 0] >= 0) & (theirs[:, 0] >= 0) &
                (mine[:, :2] <= theirs[:, 2:]).all(1) & (theirs[:, :2] <= mine[:, 2:]).all(1))
        inter = np.zeros(len(rows), np.int64)
        swap = other.count()[cols] < self.count()[rows]  # look up the fewer runs
        for pick, args in ((near & ~swap, (self, rows, other, cols)),
                           (near & swap, (other, cols, self, rows))):
            query, qi, target, ti = args
            inter[pick] = _intersections(query, qi[pick], target, ti[pick])
        mine = self.area()[rows]
        union = np.where(crowd, mine, mine + other.area()[cols] - inter)
        return np.where(inter > 0, inter / np.maximum(union, 1), 0.)


def _intersections(query, rows, target, cols):
    """Pixels shared by ``query`` mask ``rows[k]`` and ``target`` mask ``cols[k]``.

    The target's runs of all masks lie on one line (`Runs.base`), where the number of its
    pixels before any point is a search away; a query run adds that number at its stop
    less that at its start. Only query runs within the target mask's first and last
    pixel are looked at.
    """
    out = np.zeros(len(rows), np.int64)
    tbase, qbase = target.base(), query.base()
    tstart = np.concatenate([[-1], target.start + tbase[target.owner()]])
    tlen = np.concatenate([[0], target.stop - target.start])
    tcum = np.concatenate([[0], np.cumsum(tlen)[:-1]])
    qowner = query.owner()
    qstart, qstop = query.start + qbase[qowner], query.stop + qbase[qowner]
    # the pairs are of nonempty masks (`Runs.pair_iou` asks only those whose bounds meet)
    lo = np.searchsorted(qstop, qbase[rows] + target.start[target.first[cols]], side='right')
    hi = np.searchsorted(qstart, qbase[rows] + target.stop[target.first[cols + 1] - 1])
    n = np.maximum(hi - lo, 0)

    def below(x):       # target pixels before x
        p = np.searchsorted(tstart, x, side='right') - 1
        return tcum[p] + np.minimum(x - tstart[p], tlen[p])

    for a, b in chunked(n, CHUNK):
        runs, k = _ranges(lo[a:b], n[a:b])
        shift = (tbase[cols[a:b]] - qbase[rows[a:b]])[k]
        part = below(qstop[runs] + shift) - below(qstart[runs] + shift)
        out[a:b] = np.bincount(k, weights=part, minlength=b - a).round().astype(np.int64)
    return out


def _union(owner, start, stop, height, width):
    """`Runs` of each mask's union of (unsorted, overlapping) runs; ``owner`` names the mask
    of each run, ``height`` and ``width`` give one size per mask."""
    n = len(height)
    size = np.asarray(height, np.int64) * np.asarray(width, np.int64)
    base = np.concatenate([[0], np.cumsum(size + 1)[:-1]])
    keep = np.flatnonzero(stop > start)
    keep = keep[np.argsort(start[keep] + base[owner[keep]], kind='stable')]
    owner, start, stop = owner[keep], start[keep] + base[owner[keep]], stop[keep] + base[
        owner[keep]]
    reach = np.maximum.accumulate(stop) if len(stop) else stop
    heads = np.flatnonzero(np.r_[True, start[1:] > reach[:-1]]) if len(start) else keep
    tails = np.append(heads[1:], len(start)) - 1 if len(heads) else heads
    owner = owner[heads]
    first = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=n))])
    return Runs(height, width, start[heads] - base[owner], reach[tails] - base[owner], first)


def _count_runs(counts, lengths):
    """Mask, start and stop (3 x R) of the runs of 1s of RLE counts (concatenated, with each
    mask's number of counts), empty ones included."""
    owner, place = _within(lengths)
    total = np.concatenate([[0], np.cumsum(counts)])
    stop = total[1:] - total[np.cumsum(lengths) - lengths][owner]
    ones = place % 2 == 1
    return np.stack([owner[ones], (stop - counts)[ones], stop[ones]])


# -- compressed strings -------------------------------------------------------------------


def _compress(counts, lengths):
    """pycocotools' compressed strings of RLE counts (concatenated, and each's length)."""
    owner, place = _within(lengths)
    values = counts.astype(np.int64)
    later = np.flatnonzero(place > 2)
    values[later] -= counts[later - 2]   # from the 4th on, the change from two before
    shifts = 5 * np.arange(8)
    chunk = (values[:, None] >> shifts) & 0x1f
    rest = values[:, None] >> (shifts + 5)
    more = np.where(chunk & 0x10, rest != -1, rest != 0)
    used = np.argmin(more, axis=1) + 1              # characters of each value
    chars = (chunk | np.where(more, 0x20, 0)) + 48
    text = chars[np.arange(8) < used[:, None]].astype(np.uint8).tobytes().decode('ascii')
    ends = np.cumsum(np.bincount(owner, weights=used, minlength=len(lengths))).astype(np.int64)
    return [text[a:b] for a, b in zip(np.concatenate([[0], ends[:-1]]), ends)]


def _decompress(strings, name):
    """RLE counts of compressed strings (bytes), concatenated, and each's number of counts."""
    lengths = np.array([len(s) for s in strings], np.int64)
    code = np.frombuffer(b''.join(strings), np.uint8).astype(np.int64) - 48
    owner = np.repeat(np.arange(len(strings)), lengths)
    bad = (code < 0) | (code > 63)
    if bad.any():
        raise ValueError('%s: counts has a character outside "0".."o" (not pycocotools\' '
                         'compressed RLE)' % name(owner[np.argmax(bad)]))
    last = code & 0x20 == 0                         # the last character of a value
    ends = np.cumsum(lengths) - 1
    cut = (lengths > 0) & ~last[np.maximum(ends, 0)] if len(code) else lengths < 0
    if cut.any():
        raise ValueError('%s: counts is cut short in the middle of a value' % name(
            np.argmax(cut)))
    heads = np.concatenate([[0], np.flatnonzero(last)[:-1] + 1]) if len(code) else owner
    digit = np.arange(len(code)) - np.repeat(heads, np.diff(np.concatenate([heads, [len(code)]])))
    if (digit > 7).any():
        raise ValueError('%s: counts has a value longer than 8 characters' % name(
            owner[np.argmax(digit > 7)]))
    values = np.add.reduceat((code & 0x1f) << (5 * digit), heads) if len(code) else code
    tails = np.flatnonzero(last)
    negative = (code[tails] & 0x10) != 0
    values[negative] -= np.int64(1) << (5 * (digit[tails][negative] + 1))
    counts_of = np.bincount(owner[tails], minlength=len(strings))
    string, place = _within(counts_of)
    for chain in (place % 2 == 1, (place % 2 == 0) & (place >= 2)):   # x[m] += x[m - 2]
        picked = values[chain]
        group = string[chain]
        total = np.cumsum(picked)
        head = np.concatenate([[True], group[1:] != group[:-1]]) if len(group) else chain[:0]
        at = np.maximum.accumulate(np.where(head, np.arange(len(group)), 0))
        values[chain] = total - total[at] + picked[at]
    return values, counts_of


def _rle_counts(rles, height, width, name):
    """Counts (concatenated), number of counts, height and width of RLE dicts, checked."""
    n = len(rles)
    heights, widths = np.zeros(n, np.int64), np.zeros(n, np.int64)
    strings, pieces = [], [None] * n
    for i, rle in enumerate(rles):
        if not (isinstance(rle, dict) and 'size' in rle and 'counts' in rle):
            raise ValueError('%s: an RLE is a dict with "size" and "counts", got %s'
                             % (name(i), type(rle).__name__))
        size = rle['size']
        if (not isinstance(size, (list, tuple, np.ndarray)) or len(size) != 2 or not all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0
                for v in size)):
            raise ValueError('%s: size must be [height, width] (two ints >= 0), got %r'
                             % (name(i), size))
        heights[i], widths[i] = size
        if height is not None and (heights[i], widths[i]) != (height[i], width[i]):
            raise ValueError('%s: RLE size %s is not the image size [%d, %d]' % (
                name(i), list(size), height[i], width[i]))
        counts = rle['counts']
        if isinstance(counts, (str, bytes)):
            try:
                strings.append((i, counts.encode('ascii') if isinstance(counts, str) else counts))
            except UnicodeEncodeError:
                raise ValueError('%s: counts has a character outside "0".."o" (not '
                                 'pycocotools\' compressed RLE)' % name(i)) from None
        elif isinstance(counts, (list, tuple, np.ndarray)):
            pieces[i] = np.asarray(counts)
            if pieces[i].ndim != 1 or not (pieces[i].size == 0 or np.issubdtype(
                    pieces[i].dtype, np.integer)):
                raise ValueError('%s: uncompressed counts must be a flat list of ints' % name(i))
        else:
            raise ValueError('%s: counts must be a compressed string or a list of ints, got %s'
                             % (name(i), type(counts).__name__))
    if strings:
        values, lengths = _decompress([s for _, s in strings], lambda k: name(strings[k][0]))
        for (i, _), part in zip(strings, np.split(values, np.cumsum(lengths)[:-1])):
            pieces[i] = part
    number = np.array([len(p) for p in pieces], np.int64)
    counts = np.concatenate(pieces).astype(np.int64) if n else np.zeros(0, np.int64)
    owner = np.repeat(np.arange(n), number)
    if ((counts < 0) | (counts >= 1 << 32)).any():
        raise ValueError('%s: RLE counts must be >= 0 and < 2**32' % name(
            owner[np.argmax((counts < 0) | (counts >= 1 << 32))]))
    sums = np.bincount(owner, weights=counts, minlength=n)
    wrong = sums != heights * widths
    if wrong.any():
        i = int(np.argmax(wrong))
        raise ValueError('%s: RLE counts add up to %d, not height * width = %d * %d'
                         % (name(i), sums[i], heights[i], widths[i]))
    return counts, number, heights, widths


# -- polygons -----------------------------------------------------------------------------


def _polygon_points(polygon, name):
    """One COCO polygon (flat ``x1, y1, x2, y2, ...``) as a K x 2 float64 array, checked."""
    if isinstance(polygon, (str, bytes, dict)) or not hasattr(polygon, '__len__'):
        raise ValueError('%s: a polygon is a flat list [x1, y1, x2, y2, ...] (segmentation '
                         'is a list of them), got %s' % (name, type(polygon).__name__))
    try:
        points = np.asarray(polygon, np.float64)
    except (TypeError, ValueError):
        raise ValueError('%s: a polygon holds numbers only' % name) from None
    if points.ndim != 1:
        raise ValueError('%s: a polygon is a flat list [x1, y1, x2, y2, ...], got shape %s'
                         % (name, points.shape))
    if len(points) % 2:
        raise ValueError('%s: a polygon has an odd number of coordinates (%d)'
                         % (name, len(points)))
    if len(points) < 6:
        raise ValueError('%s: a polygon needs at least 3 points, got %d'
                         % (name, len(points) // 2))
    if not np.isfinite(points).all():
        raise ValueError('%s: a polygon has a non-finite coordinate' % name)
    if np.abs(points).max() * SCALE >= 2 ** 31 - 1:
        raise ValueError('%s: a polygon coordinate is beyond +-4e8' % name)
    return points.reshape(-1, 2)


def _polygon_runs(instances, height, width, name):
    """Instance, start and stop (3 x R) of the runs of 1s of instances' polygons (their union
    is the instance), rasterized as pycocotools' ``rleFrPoly``: edges traced on a 5x grid,
    a boundary crossing in every pixel column the trace passes, a pixel inside where an odd
    number of crossings come at or before it (column by column)."""
    polygons, owner = [], []
    for i, polys in enumerate(instances):
        if not len(polys):
            raise ValueError('%s: no polygons' % name(i))
        for j, polygon in enumerate(polys):
            polygons.append(_polygon_points(polygon, '%s[%d]' % (name(i), j)))
            owner.append(i)
    owner = np.array(owner, np.int64)
    k = np.array([len(p) for p in polygons], np.int64)
    points = np.concatenate(polygons)
    poly = np.repeat(np.arange(len(k)), k)
    x = np.trunc(SCALE * points[:, 0] + .5).astype(np.int64)
    y = np.trunc(SCALE * points[:, 1] + .5).astype(np.int64)
    after = np.arange(len(x)) + 1
    after[np.cumsum(k) - 1] = np.cumsum(k) - k      # the last point goes back to the first
    xs, ys, xe, ye = x, y, x[after], y[after]
    dx, dy = np.abs(xe - xs), np.abs(ys - ye)
    along_x = dx >= dy
    flip = (along_x & (xs > xe)) | (~along_x & (ys > ye))
    xs, xe = np.where(flip, xe, xs), np.where(flip, xs, xe)
    ys, ye = np.where(flip, ye, ys), np.where(flip, ys, ye)
    steps = np.where(along_x, dx, dy)
    with np.errstate(divide='ignore', invalid='ignore'):
        slope = np.where(along_x, (ye - ys) / dx, (xe - xs) / dy)
    slope[steps == 0] = 0.   # a repeated point: its y is never read
    d, edge = _ranges(np.zeros(len(steps), np.int64), steps + 1)
    t = np.where(flip[edge], steps[edge] - d, d)
    major, slope = along_x[edge], slope[edge]
    u = np.where(major, t + xs[edge], np.trunc(xs[edge] + slope * t + .5)).astype(np.int64)
    v = np.where(major, np.trunc(ys[edge] + slope * t + .5), t + ys[edge]).astype(np.int64)
    in_poly = poly[edge]
    moved = np.flatnonzero((u[1:] != u[:-1]) & (in_poly[1:] == in_poly[:-1])) + 1
    col = np.where(u[moved] < u[moved - 1], u[moved], u[moved] - 1).astype(np.float64)
    col = (col + .5) / SCALE - .5
    which = in_poly[moved]
    h, w = height[owner[which]], width[owner[which]]
    ok = (np.floor(col) == col) & (col >= 0) & (col <= w - 1)
    row = np.minimum(v[moved], v[moved - 1]).astype(np.float64)
    row = np.ceil(np.clip((row + .5) / SCALE - .5, 0, h))
    which = which[ok]
    pixel = col[ok].astype(np.int64) * h[ok] + row[ok].astype(np.int64)
    # inside: an odd number of crossings at or before the pixel (those at the end count not)
    size = height[owner] * width[owner]
    key, times = np.unique(which * (size.max() + 1) + pixel, return_counts=True)
    which, pixel = key // (size.max() + 1), key % (size.max() + 1)
    odd = (times % 2 == 1) & (pixel < size[which])
    which, pixel = which[odd], pixel[odd]
    closing = np.flatnonzero(np.bincount(which, minlength=len(k)) % 2 == 1)
    which = np.concatenate([which, closing])          # inside to the end of the image
    pixel = np.concatenate([pixel, size[closing]])
    order = np.lexsort((pixel, which))
    which, pixel = which[order], pixel[order]
    return np.stack([owner[which[0::2]], pixel[0::2], pixel[1::2]])


# -- the API ------------------------------------------------------------------------------


def encode(bitmaps):
    """Compressed RLE of an ``H x W`` mask (nonzero inside), or a list of them for an
    ``N x H x W`` array: pycocotools' ``encode`` strings, as ``str``."""
    masks = np.asarray(bitmaps)
    if masks.ndim not in (2, 3):
        raise ValueError('encode: an H x W or N x H x W array, got shape %s' % (masks.shape,))
    one = masks.ndim == 2
    masks = masks[None] if one else masks
    n, h, w = masks.shape
    columns = masks.any(axis=1)                     # only the columns with 1s are read
    starts, stops, count = [], [], np.zeros(n, np.int64)
    for i in np.flatnonzero(columns.any(axis=1)):
        left, right = np.flatnonzero(columns[i])[[0, -1]] + [0, 1]
        line = np.zeros(h * (right - left) + 2, bool)     # 0s around the columns
        line[1:-1] = masks[i, :, left:right].T.ravel() != 0
        change = np.flatnonzero(line[1:] != line[:-1]) + h * left
        starts.append(change[0::2])
        stops.append(change[1::2])
        count[i] = len(change) // 2
    first = np.concatenate([[0], np.cumsum(count)])
    start, stop = (np.concatenate(v) if v else np.zeros(0, np.int64) for v in (starts, stops))
    rles = Runs(np.full(n, h), np.full(n, w), start, stop, first).rles()
    return rles[0] if one else rles


def _one_size(rles, what):
    """Counts, number of counts and the size of RLEs that must share one size."""
    counts, number, height, width = _rle_counts(rles, None, None, 'rles[%d]'.__mod__)
    if (height != height[:1]).any() or (width != width[:1]).any():
        raise ValueError('%s: RLEs of different sizes' % what)
    return counts, number, height, width


def _as_list(rles, what):
    if isinstance(rles, dict):
        return [rles], True
    if isinstance(rles, (list, tuple)):
        return list(rles), False
    raise ValueError('%s: an RLE dict or a list of them, got %s' % (what, type(rles).__name__))


def decode(rles, size=None):
    """``H x W`` uint8 mask (0/1) of an RLE, or ``N x H x W`` of a list of RLEs of one size.

    RLE counts may be compressed (``str`` or ``bytes``) or a list of ints. An empty list
    gives ``0 x H x W`` when ``size`` = ``(height, width)`` is given, else a ValueError.
    """
    rles, one = _as_list(rles, 'decode')
    counts, number, height, width = _one_size(rles, 'decode')
    if not rles:
        if size is None:
            raise ValueError('decode: no RLEs and no size: pass size=(height, width)')
        return np.zeros((0,) + tuple(size), np.uint8)
    h, w = int(height[0]), int(width[0])
    if size is not None and tuple(size) != (h, w):
        raise ValueError('decode: RLE size [%d, %d] is not size %s' % (h, w, tuple(size)))
    flat = np.repeat((_within(number)[1] % 2).astype(np.uint8), counts)
    masks = flat.reshape(len(rles), w, h).transpose(0, 2, 1)
    return np.ascontiguousarray(masks[0] if one else masks)


def to_rle(segmentation, height, width, source='segmentation'):
    """Compressed RLE of any COCO ``segmentation`` value of an image ``height x width``.

    Polygons (a list of flat ``[x1, y1, x2, y2, ...]``) rasterize as pycocotools'
    ``frPyObjects`` + ``merge``; an uncompressed RLE's counts are compressed as they are;
    a compressed RLE is checked and returned with ``str`` counts. Bad input is a
    ValueError naming ``source``: an RLE whose size is not ``[height, width]`` or whose
    counts do not add up to ``height * width``, a polygon with fewer than 3 points, an odd
    number of coordinates or a non-finite one, or a value of another type.
    """
    name = lambda i: source  # noqa: E731
    if isinstance(segmentation, (list, tuple)):
        return Runs.of([segmentation], height, width, name).rles()[0]
    if not (isinstance(segmentation, dict) and 'counts' in segmentation
            and 'size' in segmentation):
        raise ValueError('%s: a list of polygons or an RLE dict with "size" and "counts", got '
                         '%s' % (source, type(segmentation).__name__))
    counts, number, _, _ = _rle_counts([segmentation], np.array([height]), np.array([width]),
                                       name)
    text = segmentation['counts']
    if isinstance(text, bytes):
        text = text.decode('ascii')
    elif not isinstance(text, str):
        text = _compress(counts, number)[0]
    return {'size': [int(height), int(width)], 'counts': text}


def from_polygons(polygons, height, width):
    """Compressed RLE of one instance's COCO polygons: their union, as pycocotools'
    ``merge(frPyObjects(polygons, height, width))``."""
    if not isinstance(polygons, (list, tuple)):
        raise ValueError('polygons: a list of flat [x1, y1, ...] lists, got %s'
                         % type(polygons).__name__)
    return to_rle(polygons, height, width, 'polygons')


def area(rles):
    """Pixels inside an RLE (an int), or each of a list of RLEs (int64 array), as
    pycocotools' ``area``."""
    rles, one = _as_list(rles, 'area')
    counts, number, _, _ = _rle_counts(rles, None, None, 'rles[%d]'.__mod__)
    owner, place = _within(number)
    areas = np.bincount(owner, weights=counts * (place % 2), minlength=len(rles))
    areas = areas.astype(np.int64)
    return int(areas[0]) if one else areas


def to_bbox(rles):
    """COCO box ``[x, y, w, h]`` (float64) of an RLE, or ``N x 4`` of a list, as pycocotools'
    ``toBbox``: the pixels' bounds; 0s for an empty mask (where pycocotools 2.0.11 gives
    overflowed numbers if the counts hold an empty run of 1s)."""
    rles, one = _as_list(rles, 'to_bbox')
    bounds = Runs.of(rles, name='rles[%d]'.__mod__).bounds()
    boxes = np.c_[bounds[:, :2], bounds[:, 2:] - bounds[:, :2] + 1].astype(np.float64)
    boxes[bounds[:, 0] < 0] = 0
    return boxes[0] if one else boxes


def merge(rles, intersect=False):
    """The union (or with ``intersect`` the intersection) of RLEs of one size, as
    pycocotools' ``merge``: one RLE is returned as it is (counts compressed); the merge of
    several has no empty runs (pycocotools' keeps some of its inputs')."""
    rles, _ = _as_list(rles, 'merge')
    if not rles:
        raise ValueError('merge: no RLEs (their size is unknown)')
    counts, number, height, width = _one_size(rles, 'merge')
    if len(rles) == 1:
        return {'size': [int(height[0]), int(width[0])],
                'counts': _compress(counts, number)[0]}
    runs = _union(*_count_runs(counts, number), height, width)
    delta = np.concatenate([np.ones(len(runs.start), np.int64),
                            -np.ones(len(runs.stop), np.int64)])
    pixel, where = np.unique(np.concatenate([runs.start, runs.stop]), return_inverse=True)
    cover = np.cumsum(np.bincount(where, weights=delta, minlength=len(pixel)))
    inside = cover == len(rles) if intersect else cover > 0
    ones = np.flatnonzero(inside[:-1]) if len(pixel) else np.zeros(0, np.int64)
    out = _union(np.zeros(len(ones), np.int64), pixel[ones], pixel[ones + 1], height[:1],
                 width[:1])
    return out.rles()[0]


def iou(dets, gts, iscrowd):
    """``D x G`` float64 IoU of two lists of RLEs, as pycocotools' ``iou``: for a ground
    truth with ``iscrowd`` set, the union is the detection's area. RLEs of a pair must have
    one size (pycocotools gives -1 there; this is a ValueError). Counts with empty runs
    inside give the masks' IoU (pycocotools' stops early where both have one at a place)."""
    dets, _ = _as_list(dets, 'iou: dets')
    gts, _ = _as_list(gts, 'iou: gts')
    crowd = np.asarray(iscrowd, dtype=bool).reshape(-1)
    if len(crowd) != len(gts):
        raise ValueError('iou: iscrowd has %d values for %d ground truths'
                         % (len(crowd), len(gts)))
    det_runs = Runs.of(dets, name='dets[%d]'.__mod__)
    gt_runs = Runs.of(gts, name='gts[%d]'.__mod__)
    rows, cols = np.divmod(np.arange(len(dets) * len(gts)), max(len(gts), 1))
    return det_runs.pair_iou(gt_runs, rows, cols, crowd[cols]).reshape(len(dets), len(gts))
