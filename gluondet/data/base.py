"""The contract every detection dataset follows, and the checks they share.

A dataset is built in two steps. When it is constructed, the annotations are
parsed, every image file is checked cheaply (it exists, its header names a
supported format and a size, a JPEG or PNG is not truncated) and every box is
validated; bad records are skipped or raise, and a one-line report is logged.
When an item is loaded, the image is decoded; a file that fails then raises
:class:`DatasetError` naming it, or in ``'skip'`` mode is replaced by the next
readable item, with a warning.

Boxes use GluonCV's pixel frame: ``xmin, ymin, xmax, ymax`` are 0-based pixel
indices and lie in ``[0, width - 1] x [0, height - 1]``.
"""
import logging
import os
import re
from collections import Counter, namedtuple

import cv2
import mxnet as mx
import numpy as np
from mxnet import gluon

from .instance_masks import InstanceMasks

__all__ = ['DatasetError', 'DatasetReport', 'DetectionDataset', 'probe_image', 'read_image',
           'safe_join']

logger = logging.getLogger('gluondet.data')

ON_ERROR = ('skip', 'raise')
# Reasons for leaving something out that are part of normal operation; any
# other reason means bad input and is warned about.
EXPECTED_REASONS = frozenset(['crowd', 'ignored', 'small', 'dontcare', 'unmapped_class', 'empty'])
_EXAMPLES_PER_REASON = 3

# Formats OpenCV decodes, as PIL names them.
SUPPORTED_FORMATS = ('JPEG', 'PNG', 'BMP', 'TIFF', 'WEBP', 'PPM')
# Their file name extensions (lower case).
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff', '.webp', '.ppm')
_JPEG_END = b'\xff\xd9'
_PNG_END = b'IEND\xaeB`\x82'
_TAIL_BYTES = 32
# EXIF orientation is ignored, as mx.image.imread (and so GluonCV) ignores it:
# boxes are stored in the file's own pixel order.
_DECODE_FLAGS = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION

Record = namedtuple('Record', ['path', 'label', 'width', 'height', 'masks'], defaults=(None,))
Record.__doc__ = ('One dataset item: image file, N x 6 float32 label, image size in pixels and, '
                  'in a dataset with masks, one segmentation per label row (what '
                  'InstanceMasks takes).')


class DatasetError(ValueError):
    """A bad record, naming the file and the field at fault.

    Parameters
    ----------
    path : str
        The file at fault (annotation or image).
    field : str
        Where in the file, e.g. ``'object[2]/bndbox/xmin'``, ``'image'``.
    problem : str
        What is wrong.
    reason : str, optional
        The category it is counted under in :class:`DatasetReport`.
    """

    def __init__(self, path, field, problem, reason=None):
        self.path = str(path)
        self.field = field
        self.problem = problem
        self.reason = reason
        super().__init__('%s: %s: %s' % (self.path, field, problem))

    def __reduce__(self):
        # Rebuilt from its parts when it crosses from a DataLoader worker.
        return type(self), (self.path, self.field, self.problem, self.reason)


class DatasetReport:
    """What a dataset found when it was built and what it left out, and why.

    Attributes
    ----------
    images : int
        Images in the dataset.
    background : int
        Of those, the images without a box (background images: they train as negatives).
    boxes : int
        Boxes in their labels.
    skipped : collections.Counter
        Images left out, by reason (``missing_image``, ``bad_image``,
        ``bad_annotation``, ``unsafe_path``, ``size_mismatch``, ``empty``: no box, left
        out on request, ``skip_empty``).
    dropped : collections.Counter
        Boxes left out, by reason (``zero_area``, ``inverted``,
        ``outside_image``, ``unknown_class``, ``unknown_image`` (a COCO
        annotation of an image id not in ``images``), ``crowd``, ``dontcare``,
        ``unmapped_class`` ...; in a dataset with masks, the boxes whose mask is
        missing, malformed or empty: ``missing_mask``, ``bad_mask``, ``empty_mask``).
    clipped : int
        Boxes kept after clipping to the image.
    replaced : collections.Counter
        Items that failed to load and were replaced by the next readable one,
        by reason; counted in the process that loaded them.
    examples : dict
        Up to three messages per reason, naming the files.
    names : collections.Counter
        Objects per class name as the annotations write it, before matching to
        the classes (what a class name given by hand can be checked against).
    """

    def __init__(self):
        self.images = 0
        self.background = 0
        self.boxes = 0
        self.skipped = Counter()
        self.dropped = Counter()
        self.clipped = 0
        self.replaced = Counter()
        self.examples = {}
        self.names = Counter()

    def _note(self, counter, reason, message):
        counter[reason] += 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < _EXAMPLES_PER_REASON:
            examples.append(message)

    def skip_image(self, reason, message):
        """Count an image left out."""
        self._note(self.skipped, reason, message)

    def drop_box(self, reason, message):
        """Count a box left out."""
        self._note(self.dropped, reason, message)

    def replace_item(self, reason, message):
        """Count an item replaced at load time."""
        self._note(self.replaced, reason, message)

    def problems(self):
        """Counts of everything left out because the input was bad, by reason."""
        bad = self.skipped + self.dropped + self.replaced
        return Counter({k: v for k, v in bad.items() if k not in EXPECTED_REASONS})

    def as_dict(self):
        """Plain-data copy (for JSON logs)."""
        return {'images': self.images, 'background': self.background, 'boxes': self.boxes,
                'clipped': self.clipped,
                'skipped': dict(self.skipped), 'dropped': dict(self.dropped),
                'replaced': dict(self.replaced), 'examples': dict(self.examples)}

    def summary(self):
        """One line: images (background images among them), boxes, and what was left out."""
        parts = ['%d images, %d boxes' % (self.images, self.boxes)]
        if self.background:
            parts[0] = '%d images (%d background images, without a box), %d boxes' % (
                self.images, self.background, self.boxes)
        for name, counter in (('skipped images', self.skipped), ('dropped boxes', self.dropped),
                              ('replaced at load', self.replaced)):
            if counter:
                parts.append('%s: %s' % (name, _format_counts(counter)))
        if self.clipped:
            parts.append('clipped boxes: %d' % self.clipped)
        return '; '.join(parts)

    def __repr__(self):
        return 'DatasetReport(%s)' % self.summary()


def _format_counts(counter):
    return ', '.join('%s %d' % (k, v) for k, v in sorted(counter.items()))


def _check_tail(path, fmt, tail):
    """Raise DatasetError if a JPEG or PNG does not end with its end marker."""
    tail = tail.rstrip(b'\x00')  # some writers pad after the end marker
    if fmt == 'JPEG' and not tail.endswith(_JPEG_END):
        raise DatasetError(path, 'image', 'truncated JPEG (no FFD9 end marker)')
    if fmt == 'PNG' and not tail.endswith(_PNG_END):
        raise DatasetError(path, 'image', 'truncated PNG (no IEND chunk at the end)')


def probe_image(path):
    """Check an image file without decoding it, and return its size.

    Parameters
    ----------
    path : str
        Image file.

    Returns
    -------
    tuple of int
        ``(width, height)`` from the header.

    Raises
    ------
    DatasetError
        If the file is missing, unreadable, not an image OpenCV decodes, or a
        truncated JPEG or PNG.
    """
    from PIL import Image

    try:
        with open(path, 'rb') as f:
            try:
                with Image.open(f) as im:
                    fmt, size = im.format, im.size
            except Exception as err:  # PIL raises many types for bad data
                raise DatasetError(path, 'image', 'not a readable image (%s)' % err) from None
            f.seek(max(0, os.fstat(f.fileno()).st_size - _TAIL_BYTES))
            tail = f.read()
    except OSError as err:
        raise DatasetError(path, 'image', 'cannot be read (%s)' % err.strerror) from None
    if fmt not in SUPPORTED_FORMATS:
        raise DatasetError(path, 'image', 'unsupported format %s (supported: %s)'
                           % (fmt, ', '.join(SUPPORTED_FORMATS)))
    _check_tail(path, fmt, tail)
    return size


def _format_of(data):
    if data.startswith(b'\xff\xd8\xff'):
        return 'JPEG'
    if data.startswith(b'\x89PNG\r\n\x1a\n'):
        return 'PNG'
    return None


def read_image(path):
    """Decode an image file to RGB.

    Parameters
    ----------
    path : str
        Image file (JPEG, PNG, BMP, TIFF, WebP, PPM). EXIF orientation is
        ignored, as ``mx.image.imread`` ignores it.

    Returns
    -------
    mxnet.nd.NDArray
        ``H x W x 3`` uint8 RGB; grey and 16-bit images are converted and
        alpha is dropped.

    Raises
    ------
    DatasetError
        If the file cannot be read, is truncated or cannot be decoded.
    """
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError as err:
        raise DatasetError(path, 'image', 'cannot be read (%s)' % err.strerror) from None
    if not data:
        raise DatasetError(path, 'image', 'empty file')
    _check_tail(path, _format_of(data), data[-_TAIL_BYTES:])
    array = cv2.imdecode(np.frombuffer(data, np.uint8), _DECODE_FLAGS)
    if array is None:
        raise DatasetError(path, 'image', 'cannot be decoded')
    cv2.cvtColor(array, cv2.COLOR_BGR2RGB, dst=array)
    return mx.nd.from_numpy(array, zero_copy=True)  # the NDArray takes over the buffer


_WINDOWS_ABSOLUTE = re.compile(r'^([A-Za-z]:|[\\/])')


def safe_join(root, name):
    """``root/name`` if ``name`` is a relative path that stays inside ``root``, else None.

    Absolute names (POSIX or Windows), names that climb out with ``..`` and
    names holding NUL are refused. The check is on the text of the path, so
    symbolic links inside ``root`` still work.
    """
    if not name or '\x00' in name or os.path.isabs(name) or _WINDOWS_ABSOLUTE.match(name):
        return None
    root = os.path.normpath(root)
    path = os.path.normpath(os.path.join(root, name))
    if not path.startswith(root + os.sep):
        return None
    return path


def empty_label():
    """An N x 6 float32 label with no rows."""
    return np.zeros((0, 6), dtype=np.float32)


class DetectionDataset(gluon.data.Dataset):
    """Base of every detection dataset: items are ``(image, label)``, or ``(image, label,
    masks)`` in a dataset built with masks.

    ``image`` is an ``mx.nd.NDArray`` ``H x W x 3`` uint8 RGB; ``label`` a
    float32 numpy array ``N x 6``: ``xmin, ymin, xmax, ymax, class_id,
    difficult`` in pixels of that image (an image without boxes has a
    ``0 x 6`` label); ``masks`` an :class:`~gluondet.data.instance_masks.InstanceMasks`
    of ``N`` instances, one per label row. ``transform(fn, lazy=True)`` works as for any
    Gluon dataset: ``fn(image, label)`` (``fn(image, label, masks)``).

    Parameters
    ----------
    classes : sequence of str
        Class names; a box's class id indexes this tuple.
    transform : callable, optional
        ``fn(image, label)`` applied by ``__getitem__`` (as GluonCV's
        ``transform=`` argument).
    on_error : {'skip', 'raise'}
        ``'skip'``: bad records are left out and counted in :attr:`report`,
        with one summary warning; an image that fails to decode at load time
        is replaced by the next readable item, with a warning. ``'raise'``:
        the first bad record raises :class:`DatasetError`.
    skip_empty : bool
        Leave out the images without a box (none annotated, or every one left out:
        crowd, ``DontCare``, another class ...), counted as ``empty``: GluonCV's
        behaviour for COCO training data. By default they are kept with a ``0 x 6`` label,
        background images that every detector trains on as negatives.
    masks : bool
        Items carry the objects' masks (a subclass that reads them stores one segmentation
        per label row in each :class:`Record`).

    Notes
    -----
    A subclass parses its annotations in ``__init__``: per image it gets the
    size from :meth:`_image_size_or_skip`, passes each box through
    :meth:`_clean_box`, reports bad records with :meth:`_fail`, and ends with
    :meth:`_finish` on the list of :class:`Record`.
    """

    def __init__(self, classes, transform=None, on_error='skip', skip_empty=False,
                 masks=False):
        if on_error not in ON_ERROR:
            raise ValueError('on_error must be one of %s, got %r' % (ON_ERROR, on_error))
        self._set_classes(classes)
        self._transform = transform
        self._on_error = on_error
        self._skip_empty = bool(skip_empty)
        self._with_masks = bool(masks)
        self._records = []
        self._unreadable = set()
        self._name = type(self).__name__
        self.report = DatasetReport()

    def _set_classes(self, classes):
        """Install the class names (a subclass that learns them from its annotations calls
        it again before reading its boxes)."""
        self._classes = tuple(str(c) for c in classes)
        self._class_index = self._make_class_index(self._classes)

    @staticmethod
    def _make_class_index(classes):
        """Lower-cased, stripped name -> id; names must differ beyond case."""
        index = {}
        for i, name in enumerate(classes):
            key = name.strip().lower()
            if not key:
                raise ValueError('class names must not be empty: %r' % (classes,))
            if key in index:
                raise ValueError('class names must differ beyond case and spaces: %r and %r'
                                 % (classes[index[key]], name))
            index[key] = i
        return index

    @property
    def classes(self):
        """Class names, a tuple of str."""
        return self._classes

    @property
    def name(self):
        """What the dataset was built from, for messages (``COCODetection(path)``)."""
        return self._name

    @property
    def num_class(self):
        """Number of classes."""
        return len(self._classes)

    @property
    def on_error(self):
        """``'skip'`` or ``'raise'``."""
        return self._on_error

    @property
    def with_masks(self):
        """Whether items carry masks: ``(image, label, masks)``."""
        return self._with_masks

    def __len__(self):
        return len(self._records)

    def __getitem__(self, idx):
        item = self._load(idx)
        if self._transform is not None:
            return self._transform(*item)
        return item

    def image_path(self, idx):
        """Path of the image of item ``idx``."""
        return self._records[idx].path

    def label(self, idx):
        """Label of item ``idx`` (a copy, ``N x 6`` float32), without reading the image."""
        return self._records[idx].label.copy()

    def masks(self, idx):
        """Masks of item ``idx``, an :class:`InstanceMasks` aligned with :meth:`label`,
        without reading the image (a dataset built with masks only)."""
        if not self._with_masks:
            raise ValueError('%s was built without masks (masks=True reads them)' % self._name)
        return InstanceMasks(self._records[idx].masks)

    def image_size(self, idx):
        """``(width, height)`` of the image of item ``idx`` as stored on disk."""
        record = self._records[idx]
        return record.width, record.height

    def __repr__(self):
        return '%s(%s)' % (type(self).__name__, self.report.summary())

    # -- building -----------------------------------------------------------

    def class_id(self, name):
        """Id of a class name (case and surrounding spaces ignored), or None."""
        return self._class_index.get(str(name).strip().lower())

    def _fail(self, error, box=False):
        """Raise ``error`` in 'raise' mode; else count an image skipped (or a box dropped)."""
        if self._on_error == 'raise':
            raise error
        if box:
            self.report.drop_box(error.reason, str(error))
        else:
            self.report.skip_image(error.reason, str(error))

    def _probe(self, path, annotation, size=None):
        """Check an image file when building; return ``(width, height)``.

        ``size`` is the size the annotation states, if any: a different size
        in the file means the boxes are in another frame, so it is an error.
        """
        if not os.path.isfile(path):
            raise DatasetError(path, 'image', 'file not found (listed in %s)' % annotation,
                               'missing_image')
        try:
            actual = probe_image(path)
        except DatasetError as error:
            raise DatasetError(error.path, error.field, error.problem, 'bad_image') from None
        if size is not None and tuple(size) != tuple(actual):
            raise DatasetError(annotation, 'size', 'says %dx%d but %s is %dx%d'
                               % (size[0], size[1], path, actual[0], actual[1]), 'size_mismatch')
        return actual

    def _image_size_or_skip(self, path, annotation, size=None):
        """:meth:`_probe`, with failures counted (or raised); None if skipped."""
        try:
            return self._probe(path, annotation, size)
        except DatasetError as error:
            self._fail(error)
            return None

    def _clean_box(self, box, width, height, source, field, written=None):
        """Clip a box to the image; None (counted, or raised) if nothing is left.

        ``box`` is ``xmin, ymin, xmax, ymax`` in the pixel frame, finite;
        ``written`` is how the file states it, for messages (default ``box``).
        Inverted (``xmax < xmin``) and zero-area (``xmax == xmin``) boxes are
        dropped, as are boxes wholly outside the image.
        """
        xmin, ymin, xmax, ymax = box
        shown = _fmt_box(box if written is None else written)
        if xmax < xmin or ymax < ymin:
            self._fail(DatasetError(source, field, 'inverted box %s' % shown, 'inverted'), box=True)
            return None
        if xmax == xmin or ymax == ymin:
            self._fail(DatasetError(source, field, 'zero-area box %s' % shown, 'zero_area'),
                       box=True)
            return None
        clipped = (min(max(xmin, 0.), width - 1.), min(max(ymin, 0.), height - 1.),
                   min(max(xmax, 0.), width - 1.), min(max(ymax, 0.), height - 1.))
        if clipped[2] <= clipped[0] or clipped[3] <= clipped[1]:
            self._fail(DatasetError(source, field, 'box %s is outside the %dx%d image'
                                    % (shown, width, height), 'outside_image'), box=True)
            return None
        if clipped != tuple(box):
            self.report.clipped += 1
        return clipped

    def _wanted(self, record):
        """False for an image without a box with ``skip_empty`` (counted as ``empty``)."""
        if self._skip_empty and not len(record.label):
            self.report.skip_image('empty', '%s: no box (skip_empty)' % record.path)
            return False
        return True

    def _finish(self, records, name):
        """Install the built records (without the empty ones with ``skip_empty``), fill the
        report and log it."""
        self._records = [record for record in records if self._wanted(record)]
        self._name = name
        self.report.images = len(self._records)
        self.report.background = sum(1 for r in self._records if not len(r.label))
        self.report.boxes = sum(len(r.label) for r in self._records)
        logger.info('%s, %d classes: %s', name, self.num_class, self.report.summary())
        problems = self.report.problems()
        if problems:
            examples = [m for reason in sorted(problems) for m in self.report.examples[reason]]
            logger.warning('%s: left out: %s. For example: %s',
                           name, _format_counts(problems), ' | '.join(examples))
        if not self._records:
            raise DatasetError(name, 'images', 'no usable image (%s)' % self.report.summary(),
                               'empty_dataset')

    # -- loading ------------------------------------------------------------

    def _read(self, idx):
        """Decode the image of item ``idx``; DatasetError if it fails or has the wrong size."""
        record = self._records[idx]
        image = read_image(record.path)
        height, width = image.shape[:2]
        if (width, height) != (record.width, record.height):
            raise DatasetError(record.path, 'image', 'decoded as %dx%d, expected %dx%d'
                               % (width, height, record.width, record.height))
        return image

    def _load(self, idx):
        """``(image, label)`` (and masks) of item ``idx``, or in 'skip' mode of the next
        readable item."""
        start = range(len(self._records))[idx]  # IndexError past the end ends iteration
        count = len(self._records)
        for step in range(count):
            current = (start + step) % count
            if current in self._unreadable:
                continue
            try:
                image = self._read(current)
            except DatasetError as error:
                if self._on_error == 'raise':
                    raise
                self._unreadable.add(current)
                self.report.replace_item(error.reason or 'unreadable_image', str(error))
                logger.warning('%s; using the next readable item instead', error)
                continue
            if self._with_masks:
                return image, self.label(current), self.masks(current)
            return image, self.label(current)
        raise DatasetError(self._name, 'images',
                           'no item could be read (%s)' % self.report.summary())


def _fmt_box(box):
    return '[%s]' % ', '.join('%g' % v for v in box)
