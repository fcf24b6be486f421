"""COCO evaluation with array operations: pycocotools' ``COCOeval`` numbers, for boxes
(``iouType='bbox'``) and masks (``'segm'``).

The semantics are pycocotools 2.0's, kept exactly:

- images and categories are those of the ground truth; detections of other
  categories are dropped, detections on unknown images are an error;
- per image and category, detections are taken best score first (equal
  scores in input order) and only the first 100 count;
- IoU of boxes ``x, y, w, h``, or of masks (`gluondet.masks`: ground-truth polygons
  rasterized as pycocotools does); a crowd ground truth's union is the detection's
  own area; a ground truth is ignored when it is a crowd or its ``area``
  field lies outside the area range (boxes and masks alike); a detection's area is
  ``w * h`` of its box, for masks too when the detections carry boxes (pycocotools'
  ``loadRes`` looks at the first detection: with a ``bbox`` it takes every detection's
  area from its box, else from its mask);
- matching is greedy per IoU threshold: each detection takes, among the
  ground truths still free (crowds are never used up) with IoU >=
  ``min(t, 1 - 1e-10)``, the one of highest IoU, preferring any
  non-ignored one over an ignored one; among equal IoUs the later ground
  truth in file order; a detection matched to an ignored ground truth, or
  unmatched and outside the area range, is ignored;
- a match to a ground truth whose annotation ``id`` is 0 counts as no match
  (pycocotools keeps match ids where 0 means none);
- precision at 101 recall points, made non-increasing from the right; -1
  where a category has no non-ignored ground truth.

Where pycocotools loops over images, categories, area ranges, thresholds and
detections in Python, here the greedy matching runs once per detection rank
(at most 100 steps) over all images, categories, area ranges and thresholds.
"""
import itertools
import json
import warnings

import numpy as np

from ..coco_ids import is_id, other_type, sort_key
from ..masks import Runs
from ._pairs import chunks, pairs

__all__ = ['coco_evaluate', 'evaluate_boxes', 'summarize', 'format_summary', 'load_ground_truth',
           'detection_columns', 'segm_columns', 'object_array', 'STAT_NAMES', 'IOU_TYPES']

IOU_TYPES = ('bbox', 'segm')

STAT_NAMES = ('AP', 'AP50', 'AP75', 'APs', 'APm', 'APl',
              'AR1', 'AR10', 'AR100', 'ARs', 'ARm', 'ARl')
IOU_THRESHOLDS = np.linspace(.5, 0.95, int(np.round((0.95 - .5) / .05)) + 1, endpoint=True)
RECALL_THRESHOLDS = np.linspace(.0, 1.00, int(np.round((1.00 - .0) / .01)) + 1, endpoint=True)
MAX_DETS = (1, 10, 100)
AREA_RANGES = {'all': (0. ** 2, 1e5 ** 2), 'small': (0. ** 2, 32. ** 2),
               'medium': (32. ** 2, 96. ** 2), 'large': (96. ** 2, 1e5 ** 2)}
# (stat, AP or AR, IoU threshold or None for all, area range, max detections)
_SUMMARY = [('AP', True, None, 'all', 100), ('AP50', True, .5, 'all', 100),
            ('AP75', True, .75, 'all', 100), ('APs', True, None, 'small', 100),
            ('APm', True, None, 'medium', 100), ('APl', True, None, 'large', 100),
            ('AR1', False, None, 'all', 1), ('AR10', False, None, 'all', 10),
            ('AR100', False, None, 'all', 100), ('ARs', False, None, 'small', 100),
            ('ARm', False, None, 'medium', 100), ('ARl', False, None, 'large', 100)]


class GroundTruth:
    """Arrays of a COCO ground-truth json, annotations in file order.

    Attributes
    ----------
    source : str
        The file name (or ``'<dict>'``), for error messages.
    dataset : dict
        The loaded json.
    image_ids, category_ids : numpy.ndarray
        Sorted unique ids of the images and categories.
    image, category : numpy.ndarray of int
        Index into ``image_ids`` / ``category_ids`` of each annotation.
    boxes : numpy.ndarray, G x 4
        ``x, y, w, h``.
    area : numpy.ndarray
        The ``area`` field.
    crowd, zero_id : numpy.ndarray of bool
        ``iscrowd`` set; annotation ``id`` is 0.
    annotations : list of dict
        The evaluated annotations (those of known images and categories), in file order;
        ``ann_index`` their index in the file.
    """

    def __init__(self, dataset, source):
        self.source, self.dataset = source, dataset
        for key in ('images', 'annotations', 'categories'):
            if not isinstance(dataset.get(key), list):
                raise ValueError('%s: COCO ground truth needs a list %r' % (source, key))
        self.image_ids = _sorted_ids(dataset['images'], 'images', source)
        self.category_ids = _sorted_ids(dataset['categories'], 'categories', source)
        anns = dataset['annotations']
        for i, ann in enumerate(anns):
            for key in ('id', 'image_id', 'category_id'):
                if not isinstance(ann, dict) or not is_id(ann.get(key)):
                    raise ValueError('%s: annotations[%d]/%s: missing or not an int or str, '
                                     'got %r' % (source, i, key, ann.get(key) if isinstance(
                                         ann, dict) else ann))
        ids = [a['id'] for a in anns]
        if len(set(ids)) != len(ids):
            raise ValueError('%s: annotation ids are not unique (pycocotools would evaluate '
                             'one annotation in place of another)' % source)
        image, known_image = _lookup(self.image_ids, [a['image_id'] for a in anns])
        category, known_cat = _lookup(self.category_ids, [a['category_id'] for a in anns])
        _warn_other_type(anns, ~known_image, 'image_id', self.image_ids, 'images', source)
        _warn_other_type(anns, ~known_cat, 'category_id', self.category_ids, 'categories',
                         source)
        keep = known_image & known_cat  # pycocotools drops the others
        anns = [a for a, known in zip(anns, keep) if known]
        self.annotations, self.ann_index = anns, np.flatnonzero(keep)
        try:
            self.boxes = np.array([a['bbox'] for a in anns], dtype=np.float64).reshape(-1, 4)
            self.area = np.array([a['area'] for a in anns], dtype=np.float64)
        except (KeyError, ValueError, TypeError, OverflowError):
            raise ValueError('%s: every annotation needs "bbox" [x, y, w, h] and "area" '
                             '(first bad: %r)' % (source, _first_bad(anns))) from None
        if not (np.isfinite(self.boxes).all() and np.isfinite(self.area).all()):
            raise ValueError('%s: annotation boxes and areas must be finite' % source)
        self.image, self.category = image[keep], category[keep]
        self.crowd = np.array([bool(a.get('iscrowd', 0)) for a in anns], dtype=bool)
        self.zero_id = np.array([a['id'] == 0 for a in anns], dtype=bool)
        self._entries = self._masks = self._sizes = None

    def image_entry(self, image_id):
        """The json ``images`` entry of an image id."""
        if self._entries is None:
            self._entries = {entry['id']: entry for entry in self.dataset['images']}
        return self._entries[image_id]

    def image_sizes(self, image):
        """``height, width`` arrays of images (indices into ``image_ids``), needed for masks."""
        if self._sizes is None:
            self._sizes = np.array([[_positive_int(self.image_entry(i).get(key)) for i in
                                     self.image_ids.tolist()] for key in ('height', 'width')],
                                   np.int64).reshape(2, -1)
        height, width = self._sizes[:, image]
        bad = (height < 1) | (width < 1)
        if bad.any():
            image_id = self.image_ids[image[np.argmax(bad)]]
            entry = self.image_entry(image_id)
            raise ValueError('%s: image %r needs an int height and width for masks, got %r'
                             % (self.source, image_id, (entry.get('height'), entry.get('width'))))
        return height, width

    def masks(self):
        """The annotations' masks (`gluondet.masks.Runs`), from their ``segmentation``."""
        if self._masks is None:
            height, width = self.image_sizes(self.image)
            missing = [i for i, a in enumerate(self.annotations) if 'segmentation' not in a]
            if missing:
                raise ValueError('%s: annotations[%d] has no "segmentation" (mask evaluation '
                                 'needs one on every annotation)' % (
                                     self.source, self.ann_index[missing[0]]))
            self._masks = Runs.of([a['segmentation'] for a in self.annotations], height, width,
                                  lambda i: '%s: annotations[%d]/segmentation' % (
                                      self.source, self.ann_index[i]))
        return self._masks


def _positive_int(value):
    """``value`` if it is an int > 0, else -1."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else -1


def _sorted_ids(entries, key, source):
    """The entries' ids (ints or strings, `gluondet.coco_ids`), unique, in `sort_key` order,
    as an object array (ints and strings kept apart)."""
    ids = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not is_id(entry.get('id')):
            raise ValueError('%s: %s[%d]/id: missing or not an int or str, got %r' % (
                source, key, i, entry.get('id') if isinstance(entry, dict) else entry))
        ids.add(entry['id'])
    return object_array(sorted(ids, key=sort_key))


def object_array(values):
    """A 1-D object array of ``values`` (each element as it is, lists included)."""
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array


def _lookup(ids, values):
    """Index of each value in ``ids`` and whether it is there.

    Ids match by value and type, as pycocotools' dict keys (``"7"`` is not ``7``; a
    detection's ``7.0`` is); bools and values that cannot be keys match nothing.
    """
    index = {value: i for i, value in enumerate(ids.tolist())}
    found = np.fromiter((_find(index, value) for value in values), np.int64, len(values))
    return found.clip(0), found >= 0


def _find(index, value):
    if isinstance(value, bool):
        return -1
    try:
        return index.get(value, -1)
    except TypeError:       # a list or dict
        return -1


def _warn_other_type(anns, unknown, key, ids, where, source):
    """Warn about annotations left out because their ``key`` is an id of ``ids`` written as
    the other of int and str (pycocotools drops them without a word)."""
    members = set(ids.tolist())
    named = [(i, anns[i][key]) for i in np.flatnonzero(unknown)
             if other_type(anns[i][key], members, where)]
    if named:
        i, value = named[0]
        warnings.warn('%s: annotations[%d]/%s: no %s entry has the id %r%s; %d such '
                      'annotations are not evaluated' % (
                          source, i, key, where, value, other_type(value, members, where),
                          len(named)))


def _first_bad(anns):
    for ann in anns:
        bbox = ann.get('bbox')
        if 'area' not in ann or not isinstance(bbox, (list, tuple)) or len(bbox) != 4:
            return ann
    return None


def load_ground_truth(gt):
    """Load a COCO ground truth (json path, dict or :class:`GroundTruth`) into arrays."""
    if isinstance(gt, GroundTruth):
        return gt
    if isinstance(gt, dict):
        return GroundTruth(gt, '<dict>')
    try:
        with open(gt, encoding='utf-8') as f:
            dataset = json.load(f)
    except (ValueError, RecursionError) as err:   # not json, not UTF-8, nested too deep
        raise ValueError('%s: not valid json (%s)' % (gt, err)) from None
    if not isinstance(dataset, dict):
        raise ValueError('%s: a COCO ground truth is a json object' % gt)
    return GroundTruth(dataset, str(gt))


def _parse_detections(detections, gt, iou_type):
    """Image index, category index, score, area and box (``x, y, w, h``) or mask index of
    each usable detection, and the detections' masks (`gluondet.masks.Runs`, for 'segm')."""
    if iou_type == 'bbox':
        image_id, category_id, boxes, score = detection_columns(detections)
        segmentation = None
    else:
        image_id, category_id, segmentation, score, boxes = segm_columns(detections)
    values = np.c_[score, boxes] if boxes is not None else score[:, None]
    if not np.isfinite(values).all():
        raise ValueError('detection %sscores must be finite (first bad: index %d)' % (
            'boxes and ' if boxes is not None else '',
            np.flatnonzero(~np.isfinite(values).all(1))[0]))
    image, known = _lookup(gt.image_ids, image_id)
    if not known.all():
        first = image_id[~known][0]
        raise ValueError('detections name images absent from %s (first: %r%s)' % (
            gt.source, first, other_type(first, set(gt.image_ids.tolist()), 'the ground truth')))
    category, known = _lookup(gt.category_ids, category_id)
    if not known.all():
        first = category_id[~known][0]
        warnings.warn('%d detections have category ids absent from %s (first: %r%s); they are '
                      'not evaluated (as pycocotools)' % (
                          (~known).sum(), gt.source, first,
                          other_type(first, set(gt.category_ids.tolist()), 'the ground truth')))
    if segmentation is None:
        area = boxes[:, 2] * boxes[:, 3]
        return image[known], category[known], score[known], area[known], boxes[known], None
    index = np.flatnonzero(known)
    height, width = gt.image_sizes(image[index])
    masks = Runs.of(segmentation[index].tolist(), height, width,
                    lambda i: 'detections[%d]/segmentation' % index[i])
    # pycocotools' loadRes: areas from the boxes if the detections have them, else the masks
    area = boxes[index, 2] * boxes[index, 3] if boxes is not None else masks.area()
    return (image[index], category[index], score[index], area.astype(np.float64),
            np.arange(len(index)), masks)


def segm_columns(detections):
    """``image_id, category_id, segmentation, score, bbox`` of mask detections.

    ``detections`` is a list of ``{image_id, category_id, segmentation, score}`` dicts (COCO
    results) or a dict of those columns. ``bbox`` (N x 4 ``x, y, w, h``) is None unless the
    detections have boxes: in a list, the first detection decides (as pycocotools'
    ``loadRes``), and then every detection needs one.
    """
    if isinstance(detections, dict):
        try:
            columns = [object_array(list(detections[key])) for key in
                       ('image_id', 'category_id', 'segmentation')]
            columns.append(np.asarray(detections['score'], np.float64).reshape(-1))
            boxes = (np.asarray(detections['bbox'], np.float64).reshape(-1, 4)
                     if 'bbox' in detections else None)
        except (KeyError, TypeError, ValueError, OverflowError):
            raise ValueError('detections: a dict of the columns image_id, category_id, '
                             'segmentation (RLEs), score (N) and, optionally, bbox (N x 4)') \
                from None
        lengths = [len(column) for column in columns + ([] if boxes is None else [boxes])]
        if len(set(lengths)) != 1:
            raise ValueError('detection columns differ in length: %s' % lengths)
        return tuple(columns) + (boxes,)
    if not isinstance(detections, (list, tuple)):
        raise ValueError('mask detections: a list of {image_id, category_id, segmentation, '
                         'score} or a dict of columns, got %s' % type(detections).__name__)
    keys = ('image_id', 'category_id', 'segmentation', 'score')
    for i, det in enumerate(detections):
        if not isinstance(det, dict) or not set(keys) <= set(det):
            raise ValueError('detections[%d]: a mask detection needs image_id, category_id, '
                             'segmentation and score, got %r' % (i, det))
    columns = [object_array([d[key] for d in detections]) for key in keys[:3]]
    boxed = bool(detections) and np.size(detections[0].get('bbox', [])) > 0
    try:
        columns.append(np.array([d['score'] for d in detections], np.float64).reshape(-1))
        boxes = (np.array([d['bbox'] for d in detections], np.float64).reshape(-1, 4)
                 if boxed else None)
        if boxed and len(boxes) != len(detections):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise ValueError('detections: every score must be a number%s' % (
            '; the first has a bbox, so every detection needs one [x, y, w, h] (pycocotools '
            'then takes the areas from the boxes)' if boxed else '')) from None
    return tuple(columns) + (boxes,)


def detection_columns(detections):
    """``image_id, category_id, bbox (N x 4 x, y, w, h), score`` arrays of detections.

    ``detections`` is a list of ``{image_id, category_id, bbox, score}``
    dicts, pycocotools' ``N x 7`` array ``[image_id, x, y, w, h, score,
    category_id]``, or a dict of those four columns. The ids are object arrays of the
    values as given (ints and strings kept apart).
    """
    if isinstance(detections, np.ndarray):
        if detections.ndim != 2 or detections.shape[1] != 7:
            raise ValueError('a detection array must be N x 7 [image_id, x, y, w, h, score, '
                             'category_id], got shape %s' % (detections.shape,))
        try:
            numbers = detections.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError('a detection array holds numbers, got %s' % detections.dtype) \
                from None
        # pycocotools' loadNumpyAnnotations: int ids
        return (object_array([int(v) if np.isfinite(v) else v for v in numbers[:, 0].tolist()]),
                object_array([int(v) if np.isfinite(v) else v for v in numbers[:, 6].tolist()]),
                numbers[:, 1:5], numbers[:, 5])
    if isinstance(detections, dict):
        try:
            columns = [object_array(list(detections[key])) for key in ('image_id', 'category_id')]
            columns += [np.asarray(detections['bbox'], np.float64).reshape(-1, 4),
                        np.asarray(detections['score'], np.float64).reshape(-1)]
        except (KeyError, TypeError, ValueError, OverflowError):
            raise ValueError('detections: a dict of the columns image_id, category_id, bbox '
                             '(N x 4) and score (N)') from None
        if len({len(column) for column in columns}) != 1:
            raise ValueError('detection columns differ in length: %s'
                             % [len(column) for column in columns])
        return tuple(columns)
    if not isinstance(detections, (list, tuple)):
        raise ValueError('detections: a list of {image_id, category_id, bbox, score}, an N x 7 '
                         'array or a dict of columns, got %s' % type(detections).__name__)
    try:
        image_id = object_array([d['image_id'] for d in detections])
        category_id = object_array([d['category_id'] for d in detections])
        score = np.fromiter((d['score'] for d in detections), np.float64, len(detections))
        bbox = [d['bbox'] for d in detections]
        if any(len(b) != 4 for b in bbox):
            raise ValueError('a bbox is not 4 numbers')
        boxes = np.fromiter(itertools.chain.from_iterable(bbox), np.float64, 4 * len(bbox))
    except (KeyError, TypeError, ValueError, OverflowError):
        raise ValueError('every detection needs image_id, category_id, score and bbox '
                         '[x, y, w, h] (first bad: %r)' % (_first_bad_det(detections),)) from None
    return image_id, category_id, boxes.reshape(-1, 4), score


def _first_bad_det(detections):
    for det in detections:
        try:
            if len(det['bbox']) != 4 or not {'image_id', 'category_id', 'score'} <= set(det):
                return det
        except (KeyError, TypeError):
            return det
    return None


def coco_evaluate(gt, detections, iou_type='bbox'):
    """The 12 summary numbers of COCO evaluation, as pycocotools computes them.

    Parameters
    ----------
    gt : str, dict or GroundTruth
        COCO ground-truth json path, or the loaded dict. For ``'segm'`` every annotation
        needs a ``segmentation`` (polygons, or an RLE of its image's size) and every image
        its ``height`` and ``width``.
    detections : list of dict, numpy.ndarray or dict of arrays
        COCO results ``{image_id, category_id, bbox: [x, y, w, h], score}``,
        an ``N x 7`` array ``[image_id, x, y, w, h, score, category_id]``
        (pycocotools' numpy form) or a dict of the four columns. For ``'segm'``, results
        ``{image_id, category_id, segmentation: RLE, score}`` (a ``bbox`` too, optionally:
        see :func:`segm_columns`) or a dict of those columns.
    iou_type : {'bbox', 'segm'}
        Match boxes or masks (pycocotools' ``iouType``).

    Returns
    -------
    dict
        ``AP, AP50, AP75, APs, APm, APl, AR1, AR10, AR100, ARs, ARm, ARl``
        (floats; -1 where undefined, e.g. no ground truth in an area range).
    """
    precision, recall = evaluate_boxes(gt, detections, iou_type)[:2]
    return summarize(precision, recall)


def evaluate_boxes(gt, detections, iou_type='bbox'):
    """pycocotools' ``evaluate()`` + ``accumulate()``, of boxes or (``iou_type='segm'``)
    masks.

    Returns
    -------
    precision : numpy.ndarray, T x R x K x A x M
        IoU thresholds x recall points x categories x area ranges x max detections.
    recall : numpy.ndarray, T x K x A x M
    category_ids : numpy.ndarray
        The K category ids.
    """
    if iou_type not in IOU_TYPES:
        raise ValueError('iou_type must be one of %s, got %r' % (', '.join(IOU_TYPES), iou_type))
    gt = load_ground_truth(gt)
    image, category, score, area, what, masks = _parse_detections(detections, gt, iou_type)
    # best score first within (category, image), equal scores in input order
    order = np.lexsort((-score, image, category))
    image, category, score, area, what = (image[order], category[order], score[order],
                                          area[order], what[order])
    key = category * len(gt.image_ids) + image
    rank = np.arange(len(key)) - np.searchsorted(key, key, side='left')
    keep = rank < MAX_DETS[-1]
    image, category, score, area, what, rank = (image[keep], category[keep], score[keep],
                                                area[keep], what[keep], rank[keep])
    if masks is None:
        def iou(det, cols):
            return _box_iou(what[det], gt.boxes[cols], gt.crowd[cols])
    else:
        gt_masks = gt.masks()

        def iou(det, cols):
            return masks.pair_iou(gt_masks, what[det], cols, gt.crowd[cols])
    lows, highs = np.array(list(AREA_RANGES.values())).T
    gt_ignored = gt.crowd | (gt.area < lows[:, None]) | (gt.area > highs[:, None])
    out_of_range = (area < lows[:, None]) | (area > highs[:, None])
    true_match, on_ignored = _greedy_match(gt, category * len(gt.image_ids) + image, iou,
                                           rank, gt_ignored)
    ignored = on_ignored | (~true_match & out_of_range[:, None, :])
    positives = np.stack([np.bincount(gt.category[~ign], minlength=len(gt.category_ids))
                          for ign in gt_ignored], axis=1)  # K x A
    return _accumulate(category, score, rank, true_match, ignored, positives) + \
        (gt.category_ids,)


def _greedy_match(gt, key, iou, rank, gt_ignored):
    """Greedy matching of every detection at every area range and IoU threshold;
    ``iou(det, cols)`` gives the IoU of detection ``det[i]`` with ground truth ``cols[i]``.

    Returns
    -------
    true_match : numpy.ndarray of bool, A x T x N
        Matched to a ground truth whose id is not 0 (pycocotools' match).
    on_ignored : numpy.ndarray of bool, A x T x N
        Matched to a ground truth ignored in that area range.
    """
    shape = (len(gt_ignored), len(IOU_THRESHOLDS))
    gt_key = gt.category * len(gt.image_ids) + gt.image
    gt_order = np.argsort(gt_key, kind='stable')  # file order within an image and category
    start = np.searchsorted(gt_key[gt_order], key, side='left')
    count = np.searchsorted(gt_key[gt_order], key, side='right') - start
    dets = np.flatnonzero(count)
    dets = dets[np.argsort(rank[dets], kind='stable')]
    thresholds = np.minimum(IOU_THRESHOLDS, 1 - 1e-10)
    det, cols, ious = _close_pairs(dets, start[dets], count[dets], gt_order, iou,
                                   thresholds.min())
    state = {'taken': np.zeros(shape + (len(gt_key),), dtype=bool),
             'true_match': np.zeros(shape + (len(key),), dtype=bool),
             'on_ignored': np.zeros(shape + (len(key),), dtype=bool)}
    steps = np.searchsorted(rank[det], np.arange(MAX_DETS[-1] + 1))
    for lo, hi in zip(steps[:-1], steps[1:]):  # one detection rank at a time
        if lo < hi:
            _match_step(det[lo:hi], cols[lo:hi], ious[lo:hi], thresholds[:, None], gt,
                        gt_ignored, **state)
    return state['true_match'], state['on_ignored']


def _close_pairs(dets, start, count, gt_order, iou, min_iou):
    """Detection, ground truth and IoU of the pairs with IoU >= ``min_iou`` (the others
    never match), in the order of ``dets`` then of the ground truths in the file."""
    parts = []
    for lo, hi in chunks(count):
        rows, cols, _ = pairs(start[lo:hi], count[lo:hi])
        det, cols = dets[lo:hi][rows], gt_order[cols]
        ious = iou(det, cols)
        close = ious >= min_iou
        parts.append((det[close], cols[close], ious[close]))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return tuple(np.concatenate(column) for column in zip(*parts))


def _match_step(det, cols, iou, thresholds, gt, gt_ignored, taken, true_match, on_ignored):
    """Match detections of one rank (one per image and category) given what is taken.

    ``det``, ``cols``, ``iou``: the pairs, grouped by detection, ground truths in
    file order. Updates ``taken``, ``true_match`` and ``on_ignored`` in place.
    """
    new = np.r_[True, det[1:] != det[:-1]]
    seg, rows = np.flatnonzero(new), np.cumsum(new) - 1
    near = (~taken[:, :, cols] | gt.crowd[cols]) & (iou >= thresholds)
    ignored = gt_ignored[:, None, cols]
    regular = near & ~ignored
    usable = np.where(np.logical_or.reduceat(regular, seg, axis=2)[:, :, rows],
                      regular, near & ignored)
    best = np.maximum.reduceat(np.where(usable, iou, -1.), seg, axis=2)
    at_best = usable & (iou == best[:, :, rows])
    last = np.maximum.reduceat(np.where(at_best, np.arange(len(det)), -1), seg, axis=2)
    area, thr, which = np.nonzero(last >= 0)
    pair = last[area, thr, which]
    chosen = cols[pair]
    taken[area, thr, chosen] = True
    true_match[area, thr, det[pair]] = ~gt.zero_id[chosen]
    on_ignored[area, thr, det[pair]] = gt_ignored[area, chosen]


def _box_iou(det, gt, crowd):
    """IoU of ``det[i]`` with ``gt[i]`` (``x, y, w, h``) as pycocotools' ``bbIou``."""
    width = np.minimum(det[:, 2] + det[:, 0], gt[:, 2] + gt[:, 0]) - \
        np.maximum(det[:, 0], gt[:, 0])
    height = np.minimum(det[:, 3] + det[:, 1], gt[:, 3] + gt[:, 1]) - \
        np.maximum(det[:, 1], gt[:, 1])
    inter = width * height
    det_area = det[:, 2] * det[:, 3]
    union = np.where(crowd, det_area, det_area + gt[:, 2] * gt[:, 3] - inter)
    overlap = (width > 0) & (height > 0)
    with np.errstate(divide='ignore', invalid='ignore'):
        return np.where(overlap, inter / union, 0.)


def _accumulate(category, score, rank, true_match, ignored, positives):
    """Precision (T x R x K x A x M) and recall (T x K x A x M), as pycocotools."""
    order = np.lexsort((-score, category))  # stable: image order, then rank, on ties
    category, rank = category[order], rank[order]
    counted = ~ignored[:, :, order]
    tps = true_match[:, :, order] & counted
    needs = _recall_needs(positives)
    curves = [_curves(category[keep], tps[:, :, keep], counted[:, :, keep], positives, needs)
              for keep in (rank < max_det for max_det in MAX_DETS)]
    absent = positives == 0  # K x A
    precision = np.stack([c[0] for c in curves], axis=-1)
    precision[:, :, absent] = -1
    recall = np.stack([c[1] for c in curves], axis=-1)
    recall[:, absent] = -1
    return precision, recall


def _recall_needs(positives):
    """K x A x R: true positives needed to reach each recall point (``tp / p >= r``)."""
    needs = np.zeros(positives.shape + (len(RECALL_THRESHOLDS),), dtype=np.int64)
    for p in np.unique(positives[positives > 0]):
        # the same division as the recall tp / positives, so the same comparisons
        needs[positives == p] = np.searchsorted(np.arange(p + 1) / p, RECALL_THRESHOLDS)
    return needs


def _curves(category, tps, counted, positives, needs):
    """Precision at the recall points (T x R x K x A) and final recall (T x K x A).

    ``tps`` and ``counted`` (A x T x N) flag true positives and non-ignored
    detections, sorted by category then score. Precision made non-increasing
    from the right is highest at true positives, so only they are looked at:
    the precision at a recall point is the best precision from the true
    positive that reaches it on.
    """
    num_areas, num_thr, _ = tps.shape
    num_cats = len(positives)
    bounds = np.searchsorted(category, np.arange(num_cats + 1))
    seen = np.zeros(tps.shape[:2] + (tps.shape[2] + 1,), dtype=np.int32)  # int64: 5x slower
    np.cumsum(counted, axis=2, dtype=np.int32, out=seen[:, :, 1:])  # seen before each index
    before = seen[:, :, bounds[:-1]]
    area, thr, pos = np.nonzero(tps)
    group = (area * num_thr + thr) * num_cats + category[pos]  # sorted
    first = np.searchsorted(group, group, side='left')
    hits = np.arange(1, len(group) + 1) - first  # true positives so far in the category
    seen = seen[area, thr, pos + 1] - before[area, thr, category[pos]]
    precision = hits / (seen + np.spacing(1))  # tp / (fp + tp + eps)
    found = np.bincount(group, minlength=num_areas * num_thr * num_cats)
    found = found.reshape(num_areas, num_thr, num_cats)
    with np.errstate(divide='ignore', invalid='ignore'):
        recall = (found / positives.T[:, None, :]).transpose(1, 2, 0)
    return _precision_at_recalls(precision, first, found, needs), recall


def _precision_at_recalls(precision, first, found, needs):
    """T x R x K x A best precision from the true positive reaching each recall point."""
    num_areas, num_thr, num_cats = found.shape
    need = np.broadcast_to(needs.transpose(1, 0, 2)[:, None], found.shape + needs.shape[-1:])
    reached = (need <= found[..., None]) & (found[..., None] > 0)
    groups_start = np.zeros(found.size, dtype=np.int64)
    groups_start[found.ravel() > 0] = np.unique(first)
    index = groups_start.reshape(found.shape)[..., None] + np.maximum(need - 1, 0)
    result = np.zeros(reached.shape)
    if len(precision):
        # best precision of each stretch between consecutive recall points' true positives
        result[reached] = np.maximum.reduceat(precision, index[reached])
        result = np.maximum.accumulate(result[..., ::-1], axis=-1)[..., ::-1]
    return result.transpose(1, 3, 2, 0)


def format_summary(stats):
    """The 12 lines pycocotools' ``summarize()`` prints, for a dict of :data:`STAT_NAMES`."""
    lines = []
    for name, is_ap, iou_thr, area, max_det in _SUMMARY:
        iou = '%0.2f:%0.2f' % (IOU_THRESHOLDS[0], IOU_THRESHOLDS[-1]) if iou_thr is None \
            else '%0.2f' % iou_thr
        title = 'Average Precision  (AP)' if is_ap else 'Average Recall     (AR)'
        lines.append(' %s @[ IoU=%-9s | area=%6s | maxDets=%3d ] = %0.3f'
                     % (title, iou, area, max_det, stats[name]))
    return '\n'.join(lines)


def summarize(precision, recall):
    """pycocotools' ``summarize()`` numbers as a dict of :data:`STAT_NAMES`."""
    stats = {}
    area_names = list(AREA_RANGES)
    for name, is_ap, iou_thr, area, max_det in _SUMMARY:
        a, m = area_names.index(area), MAX_DETS.index(max_det)
        values = precision[..., a, m] if is_ap else recall[..., a, m]
        if iou_thr is not None:
            values = values[np.where(iou_thr == IOU_THRESHOLDS)[0]]
        values = values[values > -1]
        stats[name] = float(np.mean(values)) if values.size else -1.0
    return stats
