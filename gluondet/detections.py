"""One image's detections: per-detection fields of one length, best first.

`Detections` holds ``ids`` (class indices), ``scores`` and ``boxes`` (``xmin, ymin, xmax,
ymax`` in the original image's pixels) and any other per-detection field (``track_ids``
from the tracker, an embedding, keypoints, masks): an array whose first axis is the
detections. Indexing, `concat` and the filters apply to every field, so a stage that
does not know a field keeps it. What runs a network turns its GluonCV outputs
``(ids, scores, boxes)``, padded with -1, into one `Detections` per image; the sinks
(COCO results, JSON lines, KITTI lines) read it here.

A field named in ``point_fields`` holds points in pixels, as the boxes: keypoints, ``x`` and
``y`` first on its last axis (``N x K x 2``, or ``N x K x 3`` with a visibility or score
after them). Whatever moves the boxes between pixel frames (the input's rescaling, a
view's window, shrinking and mirroring) moves them too, by `map_points`; weighted box
fusion averages them as it does the boxes.
"""
import numbers

import numpy as np

from .data.coco import xyxy_to_coco
from .data.kitti import kitti_line

__all__ = ['Detections', 'JSON_NAMES', 'OUTPUT_NAMES', 'map_points']

#: The fields every detections has; also the first outputs of every detector network, in
#: this order, by these names in its exports. A network's further outputs (its
#: ``output_fields``) are more per-detection fields.
OUTPUT_NAMES = REQUIRED = ('ids', 'scores', 'boxes')
# a field's key in a JSON line's detection, where it is not the field's own name
JSON_NAMES = {'track_ids': 'track_id'}


class Detections:
    """The detections of one image.

    Parameters
    ----------
    ids : array-like
        ``N`` class indices into the model's classes (stored as int64).
    scores : array-like
        ``N`` scores (float32).
    boxes : array-like
        ``N x 4`` ``xmin, ymin, xmax, ymax`` in original image pixels (float32).
    point_fields : sequence of str
        The ``fields`` holding points in pixels (see the module docstring).
    **fields : array-like
        Other per-detection fields, each with ``N`` rows (``track_ids``: int64, -1 for a
        detection not tracked). A field given as None is left out.
    """

    __slots__ = ('_fields', 'point_fields')

    def __init__(self, ids, scores, boxes, point_fields=(), **fields):
        values = {'ids': np.asarray(ids, np.int64).reshape(-1),
                  'scores': np.asarray(scores, np.float32).reshape(-1),
                  'boxes': np.asarray(boxes, np.float32).reshape(-1, 4)}
        values.update((name, np.asarray(value)) for name, value in fields.items()
                      if value is not None)
        count = len(values['ids'])
        wrong = ['%s (%d)' % (name, len(value)) for name, value in values.items()
                 if value.ndim == 0 or len(value) != count]
        if wrong:
            raise ValueError('Detections: every field needs one row per detection (%d ids); '
                             'got %s' % (count, ', '.join(wrong)))
        points = tuple(point_fields)
        bad = [name for name in points if name not in values or name in REQUIRED
               or values[name].ndim < 2 or values[name].shape[-1] < 2]
        if bad:
            raise ValueError('Detections: a point field is a field other than ids, scores and '
                             'boxes with x and y on its last axis; not %s' % ', '.join(bad))
        object.__setattr__(self, '_fields', values)
        object.__setattr__(self, 'point_fields', points)

    @classmethod
    def empty(cls, point_fields=(), **fields):
        """No detections; ``fields`` (name: one detection's row, an example) add empty
        fields of that row's shape and type."""
        return cls(np.zeros(0), np.zeros(0), np.zeros((0, 4)), point_fields,
                   **{name: np.zeros((0,) + np.shape(row), np.asarray(row).dtype)
                      for name, row in fields.items()})

    @property
    def ids(self):
        return self._fields['ids']

    @property
    def scores(self):
        return self._fields['scores']

    @property
    def boxes(self):
        return self._fields['boxes']

    @property
    def fields(self):
        """The field names: ``ids``, ``scores``, ``boxes``, then the others as given."""
        return tuple(self._fields)

    def __getattr__(self, name):
        try:
            return object.__getattribute__(self, '_fields')[name]
        except KeyError:
            raise AttributeError('Detections have no field %r (fields: %s)'
                                 % (name, ', '.join(self._fields))) from None

    def __setattr__(self, name, value):
        raise AttributeError('Detections are not changed in place: use replace(%s=...)' % name)

    def get(self, name, default=None):
        """Field ``name``, or ``default`` when there is none."""
        return self._fields.get(name, default)

    def __len__(self):
        return len(self._fields['ids'])

    def __getitem__(self, index):
        """``d['name']``: a field; ``d[i]``, ``d[2:5]``, ``d[mask]``, ``d[order]``: those
        detections, every field (an integer gives Detections of one)."""
        if isinstance(index, str):
            return self._fields[index]
        if isinstance(index, numbers.Integral):
            index = [index]
        return Detections(point_fields=self.point_fields,
                          **{name: value[index] for name, value in self._fields.items()})

    def __iter__(self):
        raise TypeError('Detections are not a tuple: read d.ids, d.scores, d.boxes (d[i] is '
                        'detection i)')

    def __repr__(self):
        return 'Detections(%d; %s)' % (len(self), ', '.join(self._fields))

    def __reduce__(self):      # pickled whole (a distributed validation gathers them)
        return _rebuild, (self._fields, self.point_fields)

    def replace(self, **fields):
        """A copy with ``fields`` set (None removes a field other than the required ones)."""
        values = dict(self._fields)
        for name, value in fields.items():
            if value is None and name not in REQUIRED:
                values.pop(name, None)
            else:
                values[name] = value
        return Detections(point_fields=[n for n in self.point_fields if n in values], **values)

    def mapped_points(self, scale=(1.0, 1.0), offset=(0.0, 0.0), size=None, mirror=False):
        """A copy with its point fields moved by `map_points` (the boxes as they are)."""
        if not self.point_fields:
            return self
        return self.replace(**{name: map_points(self._fields[name], scale, offset, size,
                                                mirror) for name in self.point_fields})

    def above(self, score):
        """The detections scoring at least ``score``."""
        return self[self.scores >= score]

    def sorted(self):
        """Best first (a stable sort: ties keep their order)."""
        return self[np.argsort(-self.scores, kind='stable')]

    @staticmethod
    def concat(parts):
        """The detections of ``parts`` (a sequence of Detections with the same fields) in
        order; no parts: empty Detections."""
        parts = list(parts)
        if not parts:
            return Detections.empty()
        names, points = parts[0].fields, parts[0].point_fields
        for part in parts[1:]:
            if set(part.fields) != set(names) or set(part.point_fields) != set(points):
                raise ValueError('Detections.concat: fields differ: %s and %s'
                                 % (_described(parts[0]), _described(part)))
        return Detections(point_fields=points,
                          **{name: np.concatenate([p._fields[name] for p in parts])
                             for name in names})

    # ------------------------------------------------------------ conversions

    def coco_results(self, image_id):
        """COCO results rows: ``category_id`` is the class index + 1, ``bbox`` is
        ``[xmin, ymin, xmax - xmin + 1, ymax - ymin + 1]`` (`bbox.xyxy_to_coco`)."""
        bboxes = xyxy_to_coco(self.boxes).tolist()
        return [{'image_id': image_id, 'category_id': int(cls) + 1, 'bbox': bbox,
                 'score': float(score)}
                for cls, bbox, score in zip(self.ids.tolist(), bboxes, self.scores.tolist())]

    def kitti_lines(self, classes, image_size):
        """KITTI label lines ``Class 0 0 0 x1 y1 x2 y2 0 0 0 0 0 0 0 score``, boxes clipped to
        the ``(width, height)`` image as KITTI labels are (so they read back as written)."""
        width, height = image_size
        boxes = np.clip(self.boxes, 0, [width - 1, height - 1, width - 1, height - 1])
        return [kitti_line(classes[cls], box, score)
                for cls, box, score in zip(self.ids.tolist(), boxes.tolist(), self.scores)]

    def json_objects(self, classes):
        """One object per detection: ``bbox`` (rounded to 0.01 px), ``score`` (5 digits),
        ``class_id``, ``class``, then its `other_fields`."""
        boxes = np.round(self.boxes.astype(np.float64), 2).tolist()
        return [dict({'bbox': box, 'score': round(score, 5), 'class_id': cls,
                      'class': classes[cls]}, **others)
                for cls, score, box, others in zip(self.ids.tolist(), self.scores.tolist(),
                                                   boxes, self.other_fields())]

    def other_fields(self):
        """One dict per detection of its fields beyond ids, scores and boxes, each by its
        `JSON_NAMES` key or its own name, a row as a list."""
        rows = [{} for _ in range(len(self))]
        for name, value in self._fields.items():
            if name not in REQUIRED:
                key = JSON_NAMES.get(name, name)
                for row, item in zip(rows, value.tolist()):
                    row[key] = item
        return rows


def map_points(points, scale=(1.0, 1.0), offset=(0.0, 0.0), size=None, mirror=False):
    """Points (``x``, ``y`` first on the last axis) in another pixel frame, in float32:
    ``x * sx + ox``, ``y * sy + oy``; then with ``size`` (``(width, height)``) clipped to
    that image's pixels as boxes are, and ``mirror``-ed in it (column ``x`` becomes
    ``width - 1 - x``, as a mirrored box's). Entries after ``y`` are kept."""
    points = np.array(points, np.float32)
    xy = points[..., :2] * np.asarray(scale, np.float32) + np.asarray(offset, np.float32)
    if size is not None:
        width, height = size
        xy = np.clip(xy, 0, np.array([width - 1, height - 1], np.float32))
        if mirror:
            xy[..., 0] = width - 1 - xy[..., 0]
    points[..., :2] = xy
    return points


def _described(detections):
    """Its field names, and which of them hold points."""
    points = ' (points: %s)' % ', '.join(detections.point_fields) if detections.point_fields \
        else ''
    return ', '.join(detections.fields) + points


def _rebuild(fields, point_fields=()):
    return Detections(point_fields=point_fields, **fields)
