"""KITTI object detection data (``image_2/`` + ``label_2/``)."""
import glob
import math
import os
import shutil

import numpy as np

from ..files import atomic_write
from .base import DatasetError, DetectionDataset, Record, empty_label

__all__ = ['KITTI_CLASSES', 'KITTIDetection', 'parse_kitti_label', 'kitti_line', 'write_kitti',
           'check_unique_stems']

KITTI_CLASSES = ('Car', 'Van', 'Truck', 'Pedestrian', 'Person_sitting', 'Cyclist', 'Tram', 'Misc')
IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.PNG', '.JPG', '.JPEG')
# type truncated occluded alpha left top right bottom h w l x y z rotation_y [score]
_COLUMNS = (15, 16)


def parse_kitti_label(path):
    """Read a KITTI ``label_2`` file.

    Parameters
    ----------
    path : str
        The ``.txt`` file.

    Returns
    -------
    list of tuple
        ``(line_number, type, (left, top, right, bottom))`` per object, the
        box in 0-based pixels as written.

    Raises
    ------
    DatasetError
        Naming the file and line, if a line does not have 15 or 16 columns
        or a number is malformed.
    """
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as err:
        raise DatasetError(path, 'file', 'cannot be read (%s)' % err.strerror,
                           'bad_annotation') from None
    except UnicodeDecodeError as err:
        raise DatasetError(path, 'file', 'not text (%s)' % err.reason, 'bad_annotation') from None
    objects = []
    for number, line in enumerate(lines, 1):
        columns = line.split()
        if not columns:
            continue
        field = 'line %d' % number
        if len(columns) not in _COLUMNS:
            raise DatasetError(path, field, 'expected 15 or 16 columns (type truncated occluded '
                               'alpha left top right bottom h w l x y z rotation_y [score]), '
                               'got %d' % len(columns), 'bad_annotation')
        try:
            values = [float(v) for v in columns[1:]]
        except ValueError:
            raise DatasetError(path, field, 'malformed number in %r' % line,
                               'bad_annotation') from None
        if not all(math.isfinite(v) for v in values):
            raise DatasetError(path, field, 'non-finite number in %r' % line, 'bad_annotation')
        objects.append((number, columns[0], tuple(values[3:7])))  # left top right bottom
    return objects


def _find_image(image_dir, stem):
    for ext in IMAGE_EXTENSIONS:
        path = os.path.join(image_dir, stem + ext)
        if os.path.isfile(path):
            return path
    return os.path.join(image_dir, stem + IMAGE_EXTENSIONS[0])


class KITTIDetection(DetectionDataset):
    """KITTI 2D object detection data.

    ``root/<split>/image_2`` and ``root/<split>/label_2`` (the KITTI
    download's layout), or ``root/image_2`` and ``root/label_2`` directly.
    Each ``label_2/<id>.txt`` pairs with ``image_2/<id>.png`` (or ``.jpg``).

    Boxes are KITTI's ``left top right bottom``, already 0-based pixels:
    used as written, then clipped to ``[0, width - 1] x [0, height - 1]``;
    zero-area and inverted boxes are dropped (or raise). ``DontCare`` regions
    are dropped, and so are objects whose type ``class_mapping`` does not
    map: both are counted in :attr:`report`, never an error. KITTI has no
    difficult flag: column 5 is 0.

    Parameters
    ----------
    root : str
        Dataset folder.
    split : str, default 'training'
        Subfolder of ``root`` holding ``image_2`` and ``label_2``, if present.
    class_mapping : dict, optional
        KITTI type -> class name, many to one, matched case-insensitively, as
        NVIDIA TAO's ``target_class_mapping``: ``{'car': 'car', 'van': 'car',
        'pedestrian': 'person', 'person_sitting': 'person'}``. Default: each
        of the eight KITTI types is its own class.
    classes : sequence of str, optional
        Class names (their order gives the ids); default: the mapping's target
        names in order of first appearance.
    transform : callable, optional
        ``fn(image, label)`` applied to every item.
    on_error : {'skip', 'raise'}
        See :class:`DetectionDataset`.
    skip_empty : bool
        Leave out the images without a box (see :class:`~gluondet.data.DetectionDataset`);
        by default they are kept, background images.
    """

    def __init__(self, root, split='training', class_mapping=None, classes=None, transform=None,
                 on_error='skip', skip_empty=False):
        if class_mapping is None:
            class_mapping = {name: name for name in KITTI_CLASSES}
        targets = tuple(dict.fromkeys(class_mapping.values()))
        super().__init__(classes or targets, transform, on_error, skip_empty)
        self._mapping = self._check_mapping(class_mapping)
        self._folder = self._locate(os.path.expanduser(root), split)
        label_dir = os.path.join(self._folder, 'label_2')
        image_dir = os.path.join(self._folder, 'image_2')
        records = []
        for label_path in sorted(glob.glob(os.path.join(glob.escape(label_dir), '*.txt'))):
            stem = os.path.splitext(os.path.basename(label_path))[0]
            record = self._record(label_path, _find_image(image_dir, stem))
            if record is not None:
                records.append(record)
        self._finish(records, 'KITTIDetection(%s)' % self._folder)

    def _check_mapping(self, class_mapping):
        """Lower-cased KITTI type -> class id; every target must be a class."""
        mapping = {}
        for source, target in class_mapping.items():
            class_id = self.class_id(target)
            if class_id is None:
                raise ValueError('class_mapping maps %r to %r, which is not in classes %s'
                                 % (source, target, self.classes))
            mapping[str(source).strip().lower()] = class_id
        return mapping

    @staticmethod
    def _locate(root, split):
        for folder in (os.path.join(root, split), root):
            if os.path.isdir(os.path.join(folder, 'label_2')):
                if not os.path.isdir(os.path.join(folder, 'image_2')):
                    raise DatasetError(folder, 'image_2', 'folder not found beside label_2',
                                       'bad_layout')
                return folder
        raise DatasetError(root, 'layout', 'not a KITTI dataset: expected %s/label_2 and image_2, '
                           'or label_2 and image_2 directly' % split, 'bad_layout')

    def _record(self, label_path, image_path):
        """One Record, or None if it is skipped."""
        try:
            objects = parse_kitti_label(label_path)
        except DatasetError as error:
            self._fail(error)
            return None
        size = self._image_size_or_skip(image_path, label_path)
        if size is None:
            return None
        rows = []
        for number, kind, box in objects:
            self.report.names[kind] += 1
            class_id = self._class_of(label_path, number, kind)
            if class_id is None:
                continue
            box = self._clean_box(box, size[0], size[1], label_path, 'line %d' % number)
            if box is not None:
                rows.append(box + (class_id, 0))
        label = np.array(rows, dtype=np.float32).reshape(-1, 6) if rows else empty_label()
        return Record(image_path, label, *size)

    def _class_of(self, label_path, number, kind):
        """Class id of a KITTI type, or None (counted) for DontCare and unmapped types."""
        key = kind.lower()
        where = '%s: line %d: %s' % (label_path, number, kind)
        if key == 'dontcare':
            self.report.drop_box('dontcare', where)
            return None
        if key not in self._mapping:
            self.report.drop_box('unmapped_class', where)
            return None
        return self._mapping[key]


def kitti_line(kind, box, score=None):
    """A KITTI label line ``Type 0 0 0 left top right bottom 0 0 0 0 0 0 0 [score]``; spaces in
    ``kind`` become underscores (KITTI's columns are split on blanks)."""
    line = '%s 0 0 0 %.2f %.2f %.2f %.2f 0 0 0 0 0 0 0' % ((kind.replace(' ', '_'),) + tuple(box))
    return line if score is None else '%s %.4f' % (line, score)


def _stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def check_unique_stems(paths):
    """Raise ValueError if two of ``paths`` would write the same ``{stem}.txt`` label file."""
    seen = {}
    for path in paths:
        other = seen.setdefault(_stem(path), path)
        if other != path:
            raise ValueError('%s and %s would write the same KITTI label file %s.txt: rename '
                             'one' % (other, path, _stem(path)))


def write_kitti(dataset, folder):
    """Write ``dataset`` (any `DetectionDataset`) as a KITTI split that `KITTIDetection` reads
    back as it was: ``folder/image_2`` (the images, copied under their own names) and
    ``folder/label_2/{image stem}.txt``, each object's type its class name.

    KITTI has no difficult flag: a difficult object is written as any other. Label files are
    written atomically. Returns the number of images written.
    """
    paths = [dataset.image_path(i) for i in range(len(dataset))]
    check_unique_stems(paths)
    for sub in ('image_2', 'label_2'):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    for i, path in enumerate(paths):
        shutil.copyfile(path, os.path.join(folder, 'image_2', os.path.basename(path)))
        lines = [kitti_line(dataset.classes[int(row[4])], row[:4]) for row in dataset.label(i)]
        atomic_write(os.path.join(folder, 'label_2', _stem(path) + '.txt'),
                     ''.join(line + '\n' for line in lines))
    return len(paths)
