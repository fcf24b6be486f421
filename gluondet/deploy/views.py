"""Views of an image, their detections mapped back and merged: sliced inference and TTA.

:class:`ViewPredictor` wraps a :class:`~gluondet.deploy.predictor.Predictor` (any backend)
and runs it on *views* of each image instead of the image itself:

- **Slicing** (:class:`Slicing`, ``--slice``): tiles of ``size`` original pixels with
  ``overlap`` between neighbours, covering the image; the last tile of a row or column
  ends at the image's edge (its overlap is then larger). An image no larger than a tile
  along an axis is one tile along it. With ``full``, the whole image is one more view. A
  detection touching an inner edge of its tile (one that is not the image's edge, within
  1% of the tile's side) is a partial view of an object the tile cuts: it is dropped
  when over half of it lies inside a detection of the same class from another view that
  touches no inner edge (the object seen whole in the overlapping neighbour, or in the
  full pass); then class-wise NMS at ``iou`` merges the tiles. (SAHI merges such boxes
  into their union; dropping keeps each box one the network drew.)
- **Test-time augmentation** (:class:`TTA`, ``--tta``): each image (each tile, when
  slicing) is also seen mirrored left-right and shrunk by each of ``scales``: shrunk
  and placed at the top-left of a canvas of its own size filled with the model's mean
  colour (the value normalization makes 0, as the predictor's padding), so the network
  sees every object ``scale`` times as large, whatever the detector's preprocessing (a
  fixed-size SSD or YOLOv3 input, or a keep-ratio Faster R-CNN or RetinaNet resize: for
  both, resizing the image alone would be undone by the preprocessing). Ultralytics'
  TTA scales its letterboxed input the same way, by 1, 0.83 and 0.67. Every view's
  detections are mapped back and merged by weighted box fusion (:func:`fuse_boxes`,
  ``merge='wbf'``) or class-wise NMS (``merge='nms'``) at ``iou``.

With both, each tile's TTA views are fused first, then the tiles are merged. The views
of a call's images run through the predictor in batches of ``batch_size``. At most
``max_det`` detections of an image are kept, best first. An image of more than
:data:`MANY_VIEWS` views is warned of, with their number (each view is a run of the
model); a ``stopped`` callable that turns true between batches of views abandons the call
(:class:`Abandoned`), so that a signal stops an image of millions of tiles.
"""
import collections
import itertools
import logging
import numbers
import os

import numpy as np

from ..bbox import bbox_iou
from ..data import transforms as T
from ..data.base import empty_label
from ..inference_flags import VIEW_DEFAULTS
from .nms import nms_keep
from .predictor import Detections, Predictions, clip_boxes
from .loop import Abandoned
from .streams import as_image

__all__ = ['Abandoned', 'MANY_VIEWS', 'Slicing', 'TTA', 'ViewOptions', 'ViewPredictor',
           'fuse_boxes', 'merge_nms', 'tile_windows', 'view_options', 'wrap']

logger = logging.getLogger('gluondet.deploy')

MANY_VIEWS = 1000       # views of one image (tiles x TTA views) over which a warning says so

EDGE_MARGIN = 0.01      # of a tile's side: a box this near an inner edge is cut by it
COVERED = 0.5           # share of a cut box inside a whole one that makes it a duplicate


class Slicing(collections.namedtuple('Slicing', ['size', 'overlap', 'full', 'iou'])):
    """Tiles of ``size`` ``(height, width)`` original pixels overlapping by ``overlap`` of a
    tile's side, plus the whole image if ``full``, merged by NMS at ``iou``."""

    def __new__(cls, size, overlap=VIEW_DEFAULTS['slice_overlap'],
                full=VIEW_DEFAULTS['slice_full'], iou=VIEW_DEFAULTS['slice_iou']):
        size = _size_pair(size)
        if not 0 <= overlap < 1:
            raise ValueError('slice overlap must be in [0, 1), got %r' % (overlap,))
        return super().__new__(cls, size, float(overlap), bool(full), _iou(iou, 'slice'))


class TTA(collections.namedtuple('TTA', ['scales', 'flip', 'merge', 'iou'])):
    """Views shrunk by each of ``scales`` (in (0, 1]), each also mirrored if ``flip``, merged
    by ``merge`` ('wbf' or 'nms') at ``iou``."""

    def __new__(cls, scales=VIEW_DEFAULTS['tta_scales'], flip=True,
                merge=VIEW_DEFAULTS['tta_merge'], iou=VIEW_DEFAULTS['tta_iou']):
        scales = tuple(float(s) for s in scales)
        if not scales or not all(0 < s <= 1 for s in scales) or len(set(scales)) < len(scales):
            raise ValueError('TTA scales must be distinct numbers in (0, 1] (1: the image as '
                             'it is), got %s' % (scales,))
        if merge not in ('wbf', 'nms'):
            raise ValueError("TTA merge must be 'wbf' or 'nms', got %r" % (merge,))
        return super().__new__(cls, scales, bool(flip), merge, _iou(iou, 'TTA'))


ViewOptions = collections.namedtuple('ViewOptions', ['slice', 'tta', 'max_det'])
ViewOptions.__doc__ = """What :func:`view_options` reads from the flags: :class:`Slicing` or
None, :class:`TTA` or None, the most detections of an image (None: all)."""

View = collections.namedtuple('View', ['window', 'flip', 'scale'])
View.__doc__ = """A window ``(x0, y0, x1, y1)`` of an image (``x1``, ``y1`` excluded),
mirrored left-right if ``flip``, shrunk by ``scale`` onto a canvas of the window's size."""


def _iou(value, what):
    if not isinstance(value, numbers.Real) or not 0 < value <= 1:
        raise ValueError('%s IoU must be in (0, 1], got %r' % (what, value))
    return float(value)


def _size_pair(size):
    pair = (size, size) if isinstance(size, numbers.Integral) else tuple(size)
    if len(pair) != 2 or not all(isinstance(v, numbers.Integral) and v >= 1 for v in pair):
        raise ValueError('slice size must be a positive integer or (height, width), got %r'
                         % (size,))
    return tuple(int(v) for v in pair)


# ---------------------------------------------------------------- views

def _starts(length, tile, overlap):
    """Where the tiles of one axis start: ``overlap`` apart, the last at ``length - tile``."""
    if length <= tile:
        return [0]
    stride = max(1, int(round(tile * (1 - overlap))))
    count = -(-(length - tile) // stride) + 1
    return [min(i * stride, length - tile) for i in range(count)]


def tile_windows(height, width, size, overlap=0.2):
    """The tiles covering an image, row by row: ``(x0, y0, x1, y1)``, ``x1``/``y1`` excluded.

    Parameters
    ----------
    height, width : int
        The image's size.
    size : int or (int, int)
        A tile's ``(height, width)``; an image no larger along an axis is one tile along it.
    overlap : float
        Least overlap of neighbouring tiles, as a share of a tile's side.
    """
    tile_h, tile_w = _size_pair(size)
    tile_h, tile_w = min(tile_h, height), min(tile_w, width)
    return [(x, y, x + tile_w, y + tile_h) for y in _starts(height, tile_h, overlap)
            for x in _starts(width, tile_w, overlap)]


def view_image(image, view, fill):
    """The ``H x W x 3`` uint8 image the predictor sees for ``view`` of ``image``."""
    x0, y0, x1, y1 = view.window
    crop = image[y0:y1, x0:x1]
    if view.flip:
        crop = crop[:, ::-1]
    if view.scale == 1:
        return np.ascontiguousarray(crop)
    height, width = crop.shape[:2]
    canvas = np.empty_like(crop)
    canvas[...] = fill
    small = T.imresize(crop, *_shrunk(width, height, view.scale), interp=T.INTERP_AUTO)
    canvas[:small.shape[0], :small.shape[1]] = small
    return canvas


def _shrunk(width, height, scale):
    return max(1, int(round(width * scale))), max(1, int(round(height * scale)))


def in_window(detections, view):
    """The detections of ``view``'s image back in the window's pixels (clipped to it): its
    boxes, point fields and grid fields (re-gridded where clipped, flipped if mirrored)."""
    x0, y0, x1, y1 = view.window
    width, height = x1 - x0, y1 - y0
    small_w, small_h = _shrunk(width, height, view.scale)
    scale = np.array([width / small_w, height / small_h], np.float32)
    scaled = detections.boxes * np.tile(scale, 2)
    clipped = clip_boxes(scaled[None], [[height, width]])[0]
    found = detections.replace(boxes=scaled).clipped(clipped).mapped_points(
        scale, size=(width, height))
    return found.mirrored((width, height)) if view.flip else found


def _cut(boxes, window, height, width):
    """Which boxes (window pixels) touch an inner edge of ``window`` in a ``height x width``
    image."""
    x0, y0, x1, y1 = window
    margin_x, margin_y = EDGE_MARGIN * (x1 - x0), EDGE_MARGIN * (y1 - y0)
    return (((boxes[:, 0] <= margin_x) & (x0 > 0))
            | ((boxes[:, 1] <= margin_y) & (y0 > 0))
            | ((boxes[:, 2] >= x1 - x0 - 1 - margin_x) & (x1 < width))
            | ((boxes[:, 3] >= y1 - y0 - 1 - margin_y) & (y1 < height)))


# ---------------------------------------------------------------- merging

def merge_nms(detections, iou):
    """Class-wise NMS at ``iou`` over several views' :class:`Detections`; best first."""
    pooled = Detections.concat(detections)
    return pooled[nms_keep(pooled.boxes, pooled.scores, pooled.ids, iou)]


def fuse_boxes(detections, iou=0.55):
    """Weighted box fusion (Solovyev et al. 2019, arXiv:1910.13302) of views' detections.

    Per class, boxes are taken best first; each joins the cluster whose fused box it
    overlaps most by IoU above ``iou``, or starts one. A cluster's fused box is the
    score-weighted mean of its boxes, its score their mean score times
    ``min(boxes, views) / views``: an object only some views found scores lower. Its point
    fields fuse as its box; its other fields are its best box's, its grid fields (masks)
    too: the best box's grid, kept as it is, lies over the fused box (near that box).

    Parameters
    ----------
    detections : list of Detections
        One per view, boxes in the same pixels.
    iou : float

    Returns
    -------
    Detections
        The fused boxes, best first.
    """
    pooled = Detections.concat(detections).sorted()
    views = len(detections)
    fused = []
    for cls in np.unique(pooled.ids):
        mine = np.flatnonzero((pooled.ids == cls) & (pooled.scores > 0))  # weight 0 fuses nothing
        sums = np.zeros((0, 4), np.float64)     # score-weighted coordinate sums
        weights, counts, members = [], [], []
        for i in mine:
            box, score = pooled.boxes[i], pooled.scores[i]
            if weights:
                overlaps = bbox_iou(box[None], sums / np.array(weights)[:, None])[0]
                best = int(np.argmax(overlaps))
                if overlaps[best] > iou:
                    sums[best] += score * box
                    weights[best] += score
                    counts[best] += 1
                    members[best].append(i)
                    continue
            sums = np.vstack([sums, score * box])
            weights.append(float(score))
            counts.append(1)
            members.append([i])
        weights, counts = np.array(weights), np.array(counts)
        # a cluster's other fields are its best box's; its points fuse as its boxes
        fused.append(pooled[np.array([m[0] for m in members], np.int64)].replace(
            scores=weights / counts * np.minimum(counts, views) / views,
            boxes=sums / weights[:, None], **_fused_points(pooled, members)))
    return Detections.concat(fused).sorted() if fused else pooled[:0]


def _fused_points(pooled, members):
    """Each cluster's point fields: ``x`` and ``y`` the score-weighted mean of its members'
    (as its box's coordinates), what follows them its best member's."""
    fused = {}
    for name in pooled.point_fields:
        values = pooled[name][[m[0] for m in members]].copy()
        for k, m in enumerate(members):
            w = pooled.scores[m].astype(np.float64)
            values[k, ..., :2] = np.tensordot(w, pooled[name][m][..., :2], 1) / w.sum()
        fused[name] = values
    return fused


def _merge_tiles(found, windows, height, width, iou):
    """One image's detections from its windows' (each in window pixels): cut boxes covered
    by whole ones dropped, then class-wise NMS (see the module docstring)."""
    shifted, cut, source = [], [], []
    for w, (window, detections) in enumerate(zip(windows, found)):
        cut.append(_cut(detections.boxes, window, height, width))
        shifted.append(detections.replace(
            boxes=detections.boxes + np.array(window[:2] * 2, np.float32)).mapped_points(
                offset=window[:2]))
        source.append(np.full(len(detections), w))
    pooled, cut, source = (Detections.concat(shifted), np.concatenate(cut),
                           np.concatenate(source))
    keep = ~cut
    for i in np.flatnonzero(cut):
        whole = ~cut & (pooled.ids == pooled.ids[i]) & (source != source[i])
        box = pooled.boxes[i]
        inter = np.prod(np.clip(np.minimum(pooled.boxes[whole, 2:], box[2:])
                                - np.maximum(pooled.boxes[whole, :2], box[:2]), 0, None), axis=1)
        area = np.prod(box[2:] - box[:2])
        keep[i] = not (area > 0 and (inter > COVERED * area).any())
    return merge_nms([pooled[keep]], iou)


# ---------------------------------------------------------------- the predictor

class ViewPredictor:
    """A predictor run on views of each image (tiles, flips, scales), merged back.

    It has :class:`~gluondet.deploy.predictor.Predictor`'s interface (``classes``,
    ``backend``, ``transform``, ``batch_size``, ``detect``, ``detect_samples``,
    ``predict``), so :func:`gluondet.metrics.evaluation.evaluate` and ``infer`` take it
    as they take a predictor. See the module docstring.

    Parameters
    ----------
    predictor : Predictor
        Any backend's.
    slice : Slicing, int or (int, int), optional
        Sliced inference (an int or pair: the tile size, other settings default).
    tta : TTA or bool, optional
        Test-time augmentation (True: the default :class:`TTA`).
    max_det : int, optional
        Most detections of an image after merging (default all).
    batch_size : int, optional
        Views per run of the predictor (see its ``batch_size``).
    stopped : callable, optional
        Asked between batches of views: true abandons the call (:class:`Abandoned`).

    Attributes
    ----------
    transform : callable
        ``(image, label) -> (image, label, original [h, w])``: the image kept whole, as
        an ``H x W x 3`` uint8 numpy array (views are made from it).
    """

    def __init__(self, predictor, slice=None, tta=None, max_det=None, batch_size=None,
                 stopped=None):
        if slice is not None and not isinstance(slice, Slicing):
            slice = Slicing(slice)
        if tta is True:
            tta = TTA()
        if tta is not None and not isinstance(tta, TTA):
            raise ValueError('tta must be a TTA, True or None, got %r' % (tta,))
        if max_det is not None and (not isinstance(max_det, numbers.Integral) or max_det < 1):
            raise ValueError('max_det must be a positive integer, got %r' % (max_det,))
        self.predictor, self.slice, self.tta, self.max_det = predictor, slice, tta, max_det
        self.classes, self.backend = predictor.classes, predictor.backend
        self.views_batch = predictor.batch_size(batch_size)
        mean = np.asarray(predictor.preprocessing['mean'], np.float64)
        self._fill = np.round(mean * 255).astype(np.uint8)
        scales, flips = (self.tta.scales, (False, True) if self.tta.flip else (False,)) \
            if self.tta else ((1.0,), (False,))
        self._augments = [(flip, scale) for scale in scales for flip in flips]
        self.stopped = stopped
        self.timings = predictor.timings    # one clock for the views and the predictor
        self._warned = set()    # image sizes whose many views were warned of

    def __repr__(self):
        return 'ViewPredictor(%r, slice=%s, tta=%s, max_det=%s)' % (self.predictor, self.slice,
                                                                   self.tta, self.max_det)

    @staticmethod
    def transform(image, label):
        """The image as numpy uint8, the label as float32, the ``[h, w]``."""
        image = image.asnumpy() if hasattr(image, 'asnumpy') else np.asarray(image)
        return image, np.asarray(label, np.float32), np.array(image.shape[:2], np.float32)

    @property
    def grid_fields(self):
        """The predictor's."""
        return self.predictor.grid_fields

    def batch_size(self, batch_size=None):
        """Images per call of :meth:`detect_samples`: the predictor's ``batch_size``."""
        return self.predictor.batch_size(batch_size)

    def windows(self, height, width):
        """The windows ``(x0, y0, x1, y1)`` of a ``height x width`` image: its tiles, and
        the image itself with ``full`` (once, if one tile covers it), or just the image."""
        whole = (0, 0, width, height)
        if self.slice is None:
            return [whole]
        tiles = tile_windows(height, width, self.slice.size, self.slice.overlap)
        return tiles + [whole] if self.slice.full and tiles != [whole] else tiles

    def detect(self, images, batch_size=None):
        """Detections of decoded ``H x W x 3`` uint8 RGB images; see
        :meth:`Predictor.detect <gluondet.deploy.predictor.Predictor.detect>`."""
        self.batch_size(batch_size)
        return self._run([as_image(image, 'image %d' % i) for i, image in enumerate(images)])

    def detect_samples(self, samples):
        """Detections of ``(image, label, size)`` samples made by :attr:`transform`."""
        return self._run([sample[0] for sample in samples])

    def predict(self, inputs, batch_size=None, progress=False):
        """Detections of image files or arrays; see
        :meth:`Predictor.predict <gluondet.deploy.predictor.Predictor.predict>`."""
        if isinstance(inputs, (str, os.PathLike)):
            inputs = [inputs]
        return Predictions(self, list(inputs), self.batch_size(batch_size), progress)

    def _run(self, images):
        """Every view of ``images`` through the predictor, mapped back and merged."""
        results = []
        for image, found in zip(images, self.view_detections(images)):
            with self.timings('merge'):
                windows = self.windows(*image.shape[:2])
                merged = [views[0] if len(views) == 1 else
                          fuse_boxes(views, self.tta.iou) if self.tta.merge == 'wbf'
                          else merge_nms(views, self.tta.iou) for views in found]
                if len(windows) > 1:    # one tile (a small image): the predictor's detections
                    merged = [_merge_tiles(merged, windows, *image.shape[:2], self.slice.iou)]
                results.append(merged[0].sorted()[:self.max_det])
        return results

    def view_detections(self, images):
        """The detections of every view of ``images``, before merging.

        Returns
        -------
        list of list of list of Detections
            For each image, for each of its :meth:`windows`, for each TTA view (scale by
            scale, unmirrored then mirrored): boxes in the window's pixels.
        """
        windows = [self.windows(*image.shape[:2]) for image in images]
        for image, tiles in zip(images, windows):
            self._warn_of_many(image.shape[:2], len(tiles))
        jobs = ((i, View(window, flip, scale))
                for i, tiles in enumerate(windows)
                for window in tiles
                for flip, scale in self._augments)
        found = []
        while True:
            chunk = list(itertools.islice(jobs, self.views_batch))
            if not chunk:
                break
            if self.stopped is not None and self.stopped():
                raise Abandoned('stopped after %d views' % len(found))
            with self.timings('preprocess'):
                samples = [self.predictor.transform(view_image(images[i], view, self._fill),
                                                    empty_label()) for i, view in chunk]
            detected = self.predictor.detect_samples(samples)
            with self.timings('postprocess'):
                found.extend(in_window(item, view)
                             for (_, view), item in zip(chunk, detected))
        views = len(self._augments)
        per_window = [found[k:k + views] for k in range(0, len(found), views)]
        out = []
        for tiles in windows:
            out.append(per_window[:len(tiles)])
            per_window = per_window[len(tiles):]
        return out

    def _warn_of_many(self, shape, tiles):
        height, width = shape
        views = tiles * len(self._augments)
        if views > MANY_VIEWS and (height, width) not in self._warned:
            self._warned.add((height, width))
            logger.warning('a %dx%d image makes %d views (%d tiles%s), as many runs of the model '
                           'for each such image; larger tiles, a smaller overlap or fewer TTA '
                           'scales make fewer', width, height, views, tiles,
                           ' x %d TTA views' % len(self._augments) if self.tta else '')


def wrap(predictor, options, batch_size=None, stopped=None):
    """``predictor`` run on the views ``options`` (a :class:`ViewOptions`) asks for, or
    itself if none; ``stopped`` as :class:`ViewPredictor`'s."""
    if options is None or (options.slice is None and options.tta is None):
        return predictor
    return ViewPredictor(predictor, options.slice, options.tta, options.max_det, batch_size,
                         stopped)


def view_options(args):
    """:class:`ViewOptions` of parsed :func:`add_view_arguments` flags (``max_det`` from a
    ``--max-det`` flag if the parser has one), or None if neither slicing nor TTA is asked.

    Raises
    ------
    ValueError
        If a ``--slice-*`` or ``--tta-*`` flag is given without ``--slice`` or ``--tta``.
    """
    for name, default in VIEW_DEFAULTS.items():
        owner = name.split('_')[0]
        if getattr(args, name) != default and not getattr(args, owner):
            raise ValueError('--%s needs --%s' % (name.replace('_', '-'), owner))
    slicing = (Slicing(args.slice, args.slice_overlap, args.slice_full, args.slice_iou)
               if args.slice else None)
    tta = TTA(args.tta_scales, True, args.tta_merge, args.tta_iou) if args.tta else None
    if slicing is None and tta is None:
        return None
    return ViewOptions(slicing, tta, getattr(args, 'max_det', None))
