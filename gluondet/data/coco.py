"""COCO-format detection datasets (the json is parsed here; pycocotools is not needed)."""
import json
import math
import os
from collections import defaultdict
from numbers import Number

import numpy as np

from .. import masks as rle_codec
from ..bbox import bbox_xywh_to_xyxy, bbox_xyxy_to_xywh
from ..coco_ids import is_id, other_type, sort_key
from ..optional import require
from .base import DatasetError, DetectionDataset, Record, empty_label, safe_join
from .instance_masks import polygons_empty

__all__ = ['COCODetection', 'coco_to_xyxy', 'json_classes', 'read_segmentation', 'xyxy_to_coco']


def coco_to_xyxy(bbox):
    """COCO ``[x, y, w, h]`` -> ``(xmin, ymin, xmax, ymax)`` in the dataset pixel frame.

    GluonCV's reading (``gluoncv.utils.bbox.bbox_xywh_to_xyxy``): COCO's
    continuous box covers the pixels ``x ... x + w - 1``, so ``xmax = x +
    max(w - 1, 0)`` (and ``ymax`` alike). A VOC box converted the standard way,
    ``[xmin - 1, ymin - 1, xmax - xmin + 1, ymax - ymin + 1]``, reads back as
    :class:`VOCDetection` reads the xml (1 subtracted from every corner).
    A box ``w <= 1`` or ``h <= 1`` wide has no area and is dropped, as GluonCV
    drops it. :func:`xyxy_to_coco` is the inverse.
    """
    return tuple(bbox_xywh_to_xyxy(np.asarray(bbox, dtype=np.float64), offset=1).tolist())


def xyxy_to_coco(boxes):
    """Inverse of :func:`coco_to_xyxy`: ``N x 4`` corner boxes -> ``N x 4`` ``[x, y, x2 - x + 1,
    y2 - y + 1]``, as GluonCV's ``COCODetectionMetric`` writes detections.
    """
    return bbox_xyxy_to_xywh(np.asarray(boxes, dtype=np.float64).reshape(-1, 4), offset=1)


def _load_json(path):
    try:
        with open(path, encoding='utf-8') as f:
            return json.load(f)
    except FileNotFoundError:
        raise DatasetError(path, 'json', 'annotation file not found', 'bad_layout') from None
    except OSError as err:
        raise DatasetError(path, 'json', 'cannot be read (%s)' % err.strerror,
                           'bad_layout') from None
    except json.JSONDecodeError as err:
        raise DatasetError(path, 'json', 'malformed JSON at line %d column %d: %s'
                           % (err.lineno, err.colno, err.msg), 'bad_layout') from None
    except UnicodeDecodeError as err:
        raise DatasetError(path, 'json', 'not UTF-8 text (%s)' % err.reason, 'bad_layout') from None
    except (ValueError, RecursionError) as err:  # e.g. an integer of more than 4300 digits
        raise DatasetError(path, 'json', 'cannot be parsed (%s)' % err, 'bad_layout') from None


def _list(path, data, key):
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, list):
        raise DatasetError(path, key, 'missing or not a list (is this a COCO instances file?)',
                           'bad_layout')
    return value


def _is_number(value):
    """A finite int or float (not a bool; not an int too large for a float)."""
    if not isinstance(value, Number) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _read_polygons(segmentation, bad):
    parts = []
    for i, part in enumerate(segmentation):
        if not (isinstance(part, list) and all(_is_number(v) for v in part)):
            raise bad('polygon %d is not a list of finite numbers' % i, 'bad_mask')
        if len(part) % 2:
            raise bad('polygon %d has an odd number (%d) of coordinates' % (i, len(part)),
                      'bad_mask')
        if len(part) >= 6:     # fewer than 3 points cover nothing (left out, as GluonCV)
            parts.append(np.array(part, np.float64).reshape(-1, 2))
    if not parts:
        raise bad('no polygon of 3 points or more', 'bad_mask')
    return tuple(parts)


def _read_rle(segmentation, width, height, bad, source):
    size = segmentation.get('size')
    if size != [height, width]:
        raise bad('RLE of size %r, but the image is [%d, %d] (height, width)'
                  % (size, height, width), 'bad_mask')
    try:
        rle = rle_codec.to_rle(segmentation, height, width, source=source)
    except ValueError as err:
        raise bad('malformed RLE (%s)' % err, 'bad_mask') from None
    if rle_codec.area(rle) <= 0:
        raise bad('empty mask: the RLE covers no pixel (zero area)', 'empty_mask')
    return rle


def _parse_segmentation(segmentation, width, height, path, field):
    """:func:`read_segmentation` but for the area of polygons."""
    def bad(problem, reason):
        return DatasetError(path, field, problem, reason)

    if segmentation is None or segmentation == []:
        raise bad('no segmentation (masks were asked for)', 'missing_mask')
    if isinstance(segmentation, list):
        return _read_polygons(segmentation, bad)
    if not isinstance(segmentation, dict):
        raise bad('expected polygons (a list) or an RLE (a dict), got %s'
                  % type(segmentation).__name__, 'bad_mask')
    return _read_rle(segmentation, width, height, bad, '%s: %s' % (path, field))


def _empty_polygons_error(parts, width, height, path, field):
    points = np.concatenate(parts)
    if (points.max(axis=0) <= 0).any() or (points.min(axis=0) >= (width, height)).any():
        problem = 'the polygons lie wholly outside the %dx%d image' % (width, height)
    else:
        problem = 'empty mask: the polygons cover no pixel (zero area)'
    return DatasetError(path, field, problem, 'empty_mask')


def read_segmentation(segmentation, width, height, path, field):
    """Check a COCO segmentation of an image ``width x height`` and return it as stored.

    Polygons (a list of flat ``[x1, y1, ...]`` lists) come back as a tuple of ``K x 2``
    float64 arrays (polygons of fewer than 3 points are left out, as GluonCV leaves them
    out); an RLE (compressed or not, crowd or not) as a compressed RLE dict. A
    self-intersecting polygon is kept (it rasterizes as pycocotools rasterizes it).

    Raises
    ------
    DatasetError
        Naming ``path`` and ``field``, with the reason it is counted under:
        ``missing_mask`` (no segmentation), ``bad_mask`` (malformed, or an RLE of another
        size than the image), ``empty_mask`` (no pixel: zero area, or outside the image).
    """
    stored = _parse_segmentation(segmentation, width, height, path, field)
    if isinstance(stored, tuple) and polygons_empty([stored], width, height)[0]:
        raise _empty_polygons_error(stored, width, height, path, field)
    return stored


def _categories(path, data):
    """``[(json id, name)]`` of the json ``path`` holding ``data``, sorted by id."""
    categories = {}
    for i, cat in enumerate(_list(path, data, 'categories')):
        if not isinstance(cat, dict) or not isinstance(cat.get('name'), str):
            raise DatasetError(path, 'categories[%d]' % i, 'needs an id and a name',
                               'bad_layout')
        if not is_id(cat.get('id')):
            raise DatasetError(path, 'categories[%d]/id' % i, 'missing or not an int or str, '
                               'got %r' % (cat.get('id'),), 'bad_layout')
        if cat['id'] in categories:
            raise DatasetError(path, 'categories[%d]/id' % i, 'duplicate id %r' % cat['id'],
                               'bad_layout')
        categories[cat['id']] = cat['name']
    try:
        return sorted(categories.items())
    except TypeError:
        raise DatasetError(path, 'categories', 'ids must all be numbers or all be strings',
                           'bad_layout') from None


def json_classes(annotation_file):
    """The classes a COCO json gives `COCODetection` without ``classes``: its categories'
    names in order of id (DatasetError naming the file if it cannot be read)."""
    return tuple(name for _, name in _categories(annotation_file, _load_json(annotation_file)))


class COCODetection(DetectionDataset):
    """MS COCO detection data, or any COCO-format json.

    Either GluonCV's layout, ``root/annotations/<split>.json`` with images in
    ``root/<year folder>`` (``instances_val2017`` -> ``val2017``), or an
    explicit ``annotation_file`` and ``image_root`` (``file_name`` in the
    json is relative to ``image_root``; names that are absolute or climb out
    of it are refused).

    Boxes are read as GluonCV reads them: ``[x, y, x + w - 1, y + h - 1]``
    (:func:`coco_to_xyxy`; a json converted from VOC xml the standard way gives
    the VOC loader's boxes), clipped to ``[0, width - 1] x [0, height - 1]``;
    boxes that keep no area, whose ``area`` is not above 0 or whose width or
    height is negative are dropped (or raise), the boxes GluonCV drops. Crowd
    boxes (``iscrowd``) and ``ignore`` boxes are left out of the labels (COCO
    evaluation reads them from the json itself). Images are in order of their
    COCO id, as GluonCV. Malformed fields (a ``bbox`` that is not four finite
    numbers, an ``image_id`` or ``category_id`` that is not an int or str) are
    :class:`DatasetError` naming the file and field, or counted and skipped.

    With ``masks=True`` items are ``(image, label, masks)``, ``masks`` an
    :class:`~gluondet.data.instance_masks.InstanceMasks` with one instance per label row
    (GluonCV's ``COCOInstance`` gives polygons): polygons and RLE, crowd (with
    ``use_crowd``) or not, checked by :func:`read_segmentation`. A box whose mask is
    missing, malformed, of another size than the image or empty (no pixel: zero area, or
    outside the image) is dropped with its mask (``missing_mask``, ``bad_mask``,
    ``empty_mask``), or raises naming the annotation's id.

    Parameters
    ----------
    root : str, default '~/.mxnet/datasets/coco'
        Dataset folder (GluonCV layout).
    splits : str or sequence of one str, default ('instances_val2017',)
        Annotation file name without ``.json`` (GluonCV layout).
    transform : callable, optional
        ``fn(image, label)`` applied to every item.
    min_object_area : float, default 0
        Boxes whose ``area`` (or ``w * h`` if absent) is smaller are left out.
    skip_empty : bool, default False
        Leave out images with no box (GluonCV's ``COCODetection`` default, True, which
        its training relies on). By default they are kept with a ``0 x 6`` label:
        background images, negatives in training (see :class:`DetectionDataset`).
    use_crowd : bool, default False
        Keep crowd boxes as ordinary boxes (GluonCV's default is True).
    annotation_file, image_root : str, optional
        The json and the image folder, instead of ``root`` and ``splits``.
    classes : sequence of str, optional
        Class names; default the json's categories in order of id. If given,
        categories are matched by name (case-insensitively) and boxes of other
        categories are dropped as ``unknown_class`` (or raise).
    on_error : {'skip', 'raise'}
        See :class:`DetectionDataset`.
    masks : bool, default False
        Read each box's segmentation too.

    Attributes
    ----------
    annotation_file : str
        The json path.
    image_ids : list
        COCO image id of each item.
    json_id_to_contiguous, contiguous_id_to_json : dict
        Category id in the json <-> class id in the labels.
    """

    def __init__(self, root=os.path.join('~', '.mxnet', 'datasets', 'coco'),
                 splits=('instances_val2017',), transform=None, min_object_area=0,
                 skip_empty=False, use_crowd=False, annotation_file=None, image_root=None,
                 classes=None, on_error='skip', masks=False):
        self.annotation_file, self._image_root = self._locate(root, splits, annotation_file,
                                                              image_root)
        data = _load_json(self.annotation_file)
        categories = _categories(self.annotation_file, data)
        super().__init__(classes or [name for _, name in categories], transform, on_error,
                         skip_empty, masks)
        self._min_object_area = min_object_area
        self._use_crowd = use_crowd
        self.json_id_to_contiguous = {}
        for cat_id, name in categories:
            class_id = self.class_id(name)
            if class_id is not None:
                self.json_id_to_contiguous[cat_id] = class_id
        self.contiguous_id_to_json = {v: k for k, v in self.json_id_to_contiguous.items()}
        self._category_names = dict(categories)
        self.image_ids = []
        self._coco = None
        records = self._build(data)
        self._finish(records, 'COCODetection(%s)' % self.annotation_file)

    @staticmethod
    def _locate(root, splits, annotation_file, image_root):
        if annotation_file is not None:
            if image_root is None:
                raise ValueError('annotation_file needs image_root (the folder file_name is '
                                 'relative to)')
            return os.path.expanduser(annotation_file), os.path.expanduser(image_root)
        splits = (splits,) if isinstance(splits, str) else tuple(splits)
        if len(splits) != 1:
            raise ValueError('COCODetection reads one annotation file; got splits=%r (build one '
                             'dataset per split)' % (splits,))
        root = os.path.expanduser(root)
        split = splits[0]
        folder = image_root or os.path.join(root, split.split('_')[-1])
        return os.path.join(root, 'annotations', split + '.json'), os.path.expanduser(folder)

    def _build(self, data):
        path = self.annotation_file
        images = sorted(enumerate(_list(path, data, 'images')),
                        key=lambda item: self._image_key(*item))
        ids = set()
        for i, entry in images:
            if entry['id'] in ids:
                raise DatasetError(path, 'images[%d]/id' % i, 'duplicate id %r' % entry['id'],
                                   'bad_layout')
            ids.add(entry['id'])
        annotations = defaultdict(list)
        for i, ann in enumerate(_list(path, data, 'annotations')):
            if not isinstance(ann, dict):
                raise DatasetError(path, 'annotations[%d]' % i, 'not a json object, got %r'
                                   % (ann,), 'bad_layout')
            # an annotation of no image can only be left out itself
            if not is_id(ann.get('image_id')):
                self._fail(DatasetError(path, 'annotations[%d]/image_id' % i, 'missing or not '
                                        'an int or str, got %r' % (ann.get('image_id'),),
                                        'bad_annotation'), box=True)
            elif ann['image_id'] not in ids:
                self._fail(DatasetError(path, 'annotations[%d]/image_id' % i, 'no image has '
                                        'the id %r%s' % (ann['image_id'], other_type(
                                            ann['image_id'], ids)), 'unknown_image'), box=True)
            else:
                annotations[ann['image_id']].append((i, ann))
        records = []
        for i, entry in images:
            image_id = entry['id']
            record = self._record(i, entry, annotations.get(image_id, ()))
            if record is not None and self._wanted(record):
                records.append(record)
                self.image_ids.append(image_id)
        return records

    def _image_key(self, index, entry):
        if not isinstance(entry, dict) or not is_id(entry.get('id')):
            raise DatasetError(self.annotation_file, 'images[%d]/id' % index,
                               'missing or not an int or str', 'bad_layout')
        return sort_key(entry['id'])

    def _record(self, index, entry, annotations):
        """One Record, or None if the image is skipped."""
        field = 'images[%d]' % index
        try:
            file_name = entry.get('file_name')
            if not isinstance(file_name, str):
                raise DatasetError(self.annotation_file, field + '/file_name',
                                   'missing or not a string', 'bad_annotation')
            image_path = safe_join(self._image_root, file_name)
            if image_path is None:
                raise DatasetError(self.annotation_file, field + '/file_name', 'refused: %r is '
                                   'not a relative path inside %s' % (file_name, self._image_root),
                                   'unsafe_path')
            stated = self._stated_size(field, entry)
        except DatasetError as error:
            self._fail(error)
            return None
        size = self._image_size_or_skip(image_path, self.annotation_file, stated)
        if size is None:
            return None
        found = self._label(annotations, size)
        if found is None:
            return None
        return Record(image_path, found[0], *size, masks=found[1])

    def _stated_size(self, field, entry):
        width, height = entry.get('width'), entry.get('height')
        if width is None and height is None:
            return None
        if not (_is_number(width) and _is_number(height) and width > 0 and height > 0):
            raise DatasetError(self.annotation_file, field + '/width,height', 'expected positive '
                               'numbers, got %r, %r' % (width, height), 'bad_annotation')
        return int(width), int(height)

    def _label(self, annotations, size):
        """``(N x 6 label, N masks or None)`` of one image, or None if one of its annotations
        is malformed."""
        rows, masks = [], []
        for index, ann in annotations:
            field = 'annotations[%d]' % index
            try:
                bbox = self._bbox(field, ann)
            except DatasetError as error:
                self._fail(error)
                return None
            self.report.names[self._category_names[ann['category_id']]] += 1
            if self._left_out(field, ann):
                continue
            box = self._box(field, ann, bbox, size)
            if box is None:
                continue
            if self.with_masks:
                where = '%s (id %r)/segmentation' % (field, ann.get('id'))
                try:
                    masks.append((where, _parse_segmentation(
                        ann.get('segmentation'), size[0], size[1], self.annotation_file, where)))
                except DatasetError as error:
                    self._fail(error, box=True)
                    continue
            rows.append(box + (self.json_id_to_contiguous[ann['category_id']], 0))
        if self.with_masks:
            rows, masks = self._without_empty_polygons(rows, masks, size)
        label = np.array(rows, dtype=np.float32).reshape(-1, 6) if rows else empty_label()
        return label, (masks if self.with_masks else None)

    def _without_empty_polygons(self, rows, masks, size):
        """``rows`` and their masks (``(field, stored mask)``) but those of polygons that fill
        no pixel (counted, or raised), tested together."""
        polygons = [i for i, (_, mask) in enumerate(masks) if isinstance(mask, tuple)]
        empty = polygons_empty([masks[i][1] for i in polygons], *size)
        for i in np.array(polygons, int)[empty]:
            self._fail(_empty_polygons_error(masks[i][1], *size, self.annotation_file,
                                             masks[i][0]), box=True)
        keep = np.setdiff1d(np.arange(len(rows)), np.array(polygons, int)[empty])
        return [rows[i] for i in keep], [masks[i][1] for i in keep]

    def _box(self, field, ann, bbox, size):
        """The clipped corner box of a valid annotation, or None (counted, or raised).

        GluonCV's rule: boxes of ``area`` under ``min_object_area`` or not above 0 are
        left out, then the box is read with :func:`coco_to_xyxy` and clipped, and kept
        if ``xmax > xmin`` and ``ymax > ymin``.
        """
        where = self.annotation_file, field + '/bbox'
        shown = '[%s]' % ', '.join('%g' % v for v in bbox)
        if bbox[2] < 0 or bbox[3] < 0:
            self._fail(DatasetError(*where, 'negative width or height in %s' % shown,
                                    'inverted'), box=True)
            return None
        area = ann.get('area', bbox[2] * bbox[3])
        if area < self._min_object_area:
            self.report.drop_box('small', '%s: %s' % where)
            return None
        if area <= 0:
            self._fail(DatasetError(*where, 'zero-area box %s (area %g)' % (shown, area),
                                    'zero_area'), box=True)
            return None
        return self._clean_box(coco_to_xyxy(bbox), size[0], size[1], *where, written=bbox)

    def _bbox(self, field, ann):
        bbox = ann.get('bbox')
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(_is_number(v) for v in bbox)):
            raise DatasetError(self.annotation_file, field + '/bbox', 'expected [x, y, w, h] '
                               'finite numbers, got %r' % (bbox,), 'bad_annotation')
        if not is_id(ann.get('category_id')) or ann['category_id'] not in self._category_names:
            raise DatasetError(self.annotation_file, field + '/category_id', 'no category with id '
                               '%r' % (ann.get('category_id'),), 'bad_annotation')
        if not _is_number(ann.get('area', 0)):
            raise DatasetError(self.annotation_file, field + '/area', 'expected a finite number, '
                               'got %r' % (ann['area'],), 'bad_annotation')
        return bbox

    def _left_out(self, field, ann):
        """True (after counting it) for crowd, ignored and other-class annotations."""
        where = '%s: %s' % (self.annotation_file, field)
        if ann.get('iscrowd', 0) and not self._use_crowd:
            self.report.drop_box('crowd', where)
            return True
        if ann.get('ignore', 0) == 1:
            self.report.drop_box('ignored', where)
            return True
        if ann['category_id'] not in self.json_id_to_contiguous:
            self._fail(DatasetError(self.annotation_file, field + '/category_id', 'category %r is '
                                    'not one of the classes %s' % (
                                        self._category_names[ann['category_id']],
                                        ', '.join(self.classes)), 'unknown_class'), box=True)
            return True
        return False

    def to_coco_bbox(self, boxes):
        """Corner boxes in this dataset's frame -> COCO ``[x, y, w, h]``: :func:`xyxy_to_coco`."""
        return xyxy_to_coco(boxes)

    @property
    def coco(self):
        """A ``pycocotools.coco.COCO`` of :attr:`annotation_file` (needs pycocotools)."""
        if self._coco is None:
            coco = require('pycocotools.coco', 'COCODetection.coco')
            self._coco = coco.COCO(self.annotation_file)
        return self._coco
