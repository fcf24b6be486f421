"""Detection data in MXNet RecordIO files (``.rec`` + ``.idx``), in GluonCV's label layout.

An IndexedRecordIO file holds one record per image: MXNet's image record header
(``IRHeader``: flag, label, id, id2), a float32 label vector, then the encoded image as
it was in its file. The label vector is GluonCV's detection layout, the one
``im2rec.py --pack-label``, ``mx.io.ImageDetRecordIter`` and
``gluoncv.data.RecordFileDetection`` use::

    [A, B, header extras (A - 2 values), object rows of B values]

``A`` is the header width (itself included), ``B`` the width of an object row, at least
5: ``class_id, xmin, ymin, xmax, ymax`` with the box divided by the image width and
height (0..1), then any extra columns (``difficult`` in the sixth).

What gluondet writes (:func:`encode_label`), within that layout:

* ``B = 6``: ``class_id, xmin/w, ymin/h, xmax/w, ymax/h, difficult``;
* ``A = 4 + 4 N`` for N objects; extras ``width, height`` (GluonCV's tutorial puts the
  image size there) and then each object's box in pixels, ``xmin ymin xmax ymax``. A
  normalized float32 does not always scale back to the float32 it came from (about one
  integer coordinate in 13 comes back one float32 step off), so the pixel boxes ride
  along in the header, where GluonCV's and MXNet's readers skip them, and
  :class:`RecordDetection` reads labels back exactly;
* an image without objects gets one padding row, class id -1, written so that GluonCV's
  reader gives ``-1`` in every column (gluondet's padding rows); GluonCV's reader
  refuses a label without any row.

* with masks (:class:`RecordWriter` ``add(..., masks=)``), the extras go on after the
  pixel boxes with each object's mask as uncompressed COCO RLE
  (:func:`~gluondet.data.instance_masks.pack_runs`): N run counts ``L_i``, then the
  ``L_i`` run lengths of each object (column-major, starting with a run of zeros, adding
  up to ``width * height``; a run longer than 2**24, past which float32 integers are not
  exact, is split by runs of length 0). ``A = 4 + 5 N + sum L_i``.

:class:`RecordDetection` reads those and any file in the layout: the pixel boxes of the
header when they agree with the rows, else the rows times the image size (from the
extras when ``A >= 4``, GluonCV's tutorial convention, else from the image itself);
rows with a negative class id are padding and left out; with ``masks=True``, the masks.

The record files are read with plain file reads at the offsets of the ``.idx`` (MXNet's
framing: a magic number, a length word with a continuation flag, the data padded to 4
bytes), so a damaged file is a :class:`~gluondet.data.DatasetError` naming the file and
the record; reads are ``os.pread`` at an offset, so DataLoader workers (processes or threads)
share nothing but the descriptor.
"""
import contextlib
import glob
import io
import json
import logging
import os
import re
import struct

import cv2
import mxnet as mx
import numpy as np

from .. import masks as rle_codec
from ..files import naming, remove_if_exists, short_write_error
from .base import (_DECODE_FLAGS, _TAIL_BYTES, DatasetError, DetectionDataset, Record,
                   _check_tail, _format_of, empty_label)
from .instance_masks import pack_runs, unpack_runs

__all__ = ['RecordDetection', 'RecordWriter', 'class_file_of', 'decode_masks', 'encode_label',
           'read_index', 'record_files']

logger = logging.getLogger('gluondet.data')

MAGIC = 0xced7230a              # dmlc-core's RecordIO record marker
_LENGTH_BITS = 29               # the length word: continuation flag << 29 | length
_IR_FORMAT = '<IfQQ'            # mx.recordio.IRHeader: flag, label, id, id2
_IR_SIZE = struct.calcsize(_IR_FORMAT)
LABEL_WIDTH = 6                 # class_id, xmin, ymin, xmax, ymax, difficult
BASE_HEADER = 4                 # A, B, width, height
_PIXEL_TOLERANCE = 0.01         # header pixel boxes vs rows times size, in pixels
_MAX_SIDE = 1 << 20
_MAX_OPEN = 64                  # record files a dataset keeps open at once
# PREFIX-fold-000-of-002-shard-00000-of-00004.rec -> PREFIX (gluondet convert's names).
_SUFFIX = re.compile(r'(-fold-\d+-of-\d+)?(-shard-\d+-of-\d+)?$')


# ---------------------------------------------------------------- the label layout

def _mask_section(masks, keep, width, height):
    """The header extras of the masks of the rows ``keep`` (see the module docstring)."""
    if hasattr(masks, 'bitmaps'):
        masks = masks.bitmaps(height, width)
    masks = np.asarray(masks)
    if masks.shape != (len(keep), height, width):
        raise ValueError('masks must be N x height x width = %d x %d x %d, got shape %s'
                         % (len(keep), height, width, masks.shape))
    return pack_runs(masks[keep])


def encode_label(label, width, height, masks=None):
    """The float32 label vector of one image (see the module docstring).

    Parameters
    ----------
    label : array_like
        ``N x 6`` ``[xmin, ymin, xmax, ymax, class_id, difficult]`` in pixels; rows with a
        negative class id are padding and not written.
    width, height : int
        The image size.
    masks : InstanceMasks or array_like ``N x height x width``, optional
        One mask per label row (those of padding rows are not written).

    Returns
    -------
    numpy.ndarray
        1-D float32.
    """
    label = np.asarray(label, np.float32).reshape(-1, 6)
    keep = label[:, 4] >= 0
    objects = label[keep]
    section = np.zeros(0) if masks is None else _mask_section(masks, keep, width, height)
    scale = np.array([width, height, width, height], np.float64)
    if len(objects):
        rows = np.empty((len(objects), LABEL_WIDTH), np.float64)
        rows[:, 0] = objects[:, 4]
        rows[:, 1:5] = objects[:, :4] / scale
        rows[:, 5] = objects[:, 5]
    else:
        rows = np.concatenate([[-1.], -1. / scale, [-1.]])[None]
    header = [BASE_HEADER + 4 * len(objects) + len(section), LABEL_WIDTH, width, height]
    return np.concatenate([np.asarray(header, np.float64), objects[:, :4].ravel(), section,
                           rows.ravel()]).astype(np.float32)


def _integer(value):
    return np.isfinite(value) and float(value).is_integer()


def decode_label(values, where):
    """Parse a label vector.

    Returns ``(rows, size, pixels)``: ``rows`` the object rows, float64 ``M x B``
    (``class_id``, normalized box, extras), padding included; ``size`` ``(width,
    height)`` from the extras or None; ``pixels`` ``M x 4`` boxes in pixels from the
    extras or None. Raises DatasetError (``where`` names the record) if the vector is not
    in the layout.
    """
    values = np.asarray(values, np.float32).ravel()

    def bad(problem):
        return DatasetError(where, 'label', problem, 'bad_annotation')

    if values.size < 2 or not (_integer(values[0]) and _integer(values[1])):
        raise bad('not a detection label (header width and label width first), got %s'
                  % np.array2string(values[:8]))
    header, width = int(values[0]), int(values[1])
    if header < 2 or width < 5:
        raise bad('header width %d (at least 2) or object width %d (at least 5) out of range'
                  % (header, width))
    if values.size < header or (values.size - header) % width:
        raise bad('%d values do not make a header of %d and rows of %d'
                  % (values.size, header, width))
    rows = values[header:].reshape(-1, width).astype(np.float64)
    size = pixels = None
    if header >= BASE_HEADER and all(_integer(v) and 0 < v <= _MAX_SIDE for v in values[2:4]):
        size = (int(values[2]), int(values[3]))
        end = BASE_HEADER + 4 * len(rows)
        if header >= end and len(rows):
            pixels = values[BASE_HEADER:end].reshape(-1, 4).astype(np.float64)
            scale = np.array(size * 2, np.float64)
            with np.errstate(invalid='ignore'):
                if not np.all(np.abs(pixels - rows[:, 1:5] * scale) <= _PIXEL_TOLERANCE):
                    pixels = None       # other extras than gluondet's: use the rows
    return rows, size, pixels


def decode_masks(values, where):
    """The mask of each object row of a label vector in gluondet's layout with masks, as
    uncompressed COCO RLE counts (int64 arrays); None if the vector has no masks (call it
    when :func:`decode_label` found gluondet's pixel boxes). DatasetError if the mask
    extras are malformed."""
    values = np.asarray(values, np.float32).ravel()
    header, count = int(values[0]), (values.size - int(values[0])) // int(values[1])
    section = values[BASE_HEADER + 4 * count:header]
    if not section.size:
        return None
    try:
        return unpack_runs(section, count)
    except ValueError as err:
        raise DatasetError(where, 'label', 'mask extras: %s' % err, 'bad_mask') from None


# ---------------------------------------------------------------- files

def record_files(pattern):
    """The ``.rec`` files a path, a glob or a list of them name, sorted; DatasetError if
    none."""
    patterns = [pattern] if isinstance(pattern, str) else list(pattern or ())
    files = []
    for item in patterns:
        item = os.path.expanduser(str(item))
        found = sorted(p for p in glob.glob(item) if p.endswith('.rec') and os.path.isfile(p))
        if not found and glob.escape(item) == item and os.path.isfile(item):
            found = [item]          # a record file not named .rec
        if not found:
            raise DatasetError(item, 'records', 'no .rec file matches (a RecordIO file, or a '
                               'glob of shards such as PREFIX-fold-001-of-002-shard-*.rec)',
                               'bad_layout')
        files.extend(p for p in found if p not in files)
    if not files:
        raise DatasetError(str(pattern), 'records', 'no record file named', 'bad_layout')
    return files


def index_path(rec_path):
    """The ``.idx`` beside a ``.rec`` (MXNet's rule: the same name, extension ``.idx``)."""
    return os.path.splitext(rec_path)[0] + '.idx'


def read_index(rec_path):
    """``[(key, offset)]`` of the ``.idx`` beside ``rec_path``, in file order.

    Raises DatasetError naming the file if the index is missing or malformed. An offset
    past the end of the record file (a truncated file) is an error of that record, when it
    is read.
    """
    idx = index_path(rec_path)
    if not os.path.isfile(idx):
        raise DatasetError(rec_path, 'index', 'no index file %s beside it (an indexed RecordIO '
                           'file comes as .rec and .idx, as im2rec and gluondet convert write '
                           'them)' % os.path.basename(idx), 'bad_layout')
    try:
        with open(idx) as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DatasetError(idx, 'file', 'cannot be read (%s)' % err, 'bad_layout') from None
    entries = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split('\t')
        try:
            key, offset = int(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            raise DatasetError(idx, 'line %d' % number, 'expected KEY<tab>OFFSET, got %r'
                               % line[:80], 'bad_layout') from None
        if offset < 0:
            raise DatasetError(idx, 'line %d' % number, 'negative offset %d' % offset,
                               'bad_layout')
        entries.append((key, offset))
    return entries


def _chunk_head(fd, offset, where):
    head = os.pread(fd, 8, offset)
    if len(head) < 8:
        raise DatasetError(where, 'record', 'truncated (the file ends %s it)'
                           % ('inside' if head else 'before'), 'bad_record')
    magic, word = struct.unpack('<II', head)
    if magic != MAGIC:
        raise DatasetError(where, 'record', 'no RecordIO marker at this offset (damaged file, '
                           'or an index of another file)', 'bad_record')
    return word >> _LENGTH_BITS, word & ((1 << _LENGTH_BITS) - 1)


def _read_chunk(fd, offset, length, where):
    data = os.pread(fd, length, offset)
    if len(data) < length:
        raise DatasetError(where, 'record', 'truncated (the file ends inside it)', 'bad_record')
    return data


def read_record(fd, offset, where, head_only=False):
    """The payload of the record at ``offset`` of the open file ``fd`` (multi-part records
    joined as dmlc-core's reader joins them). With ``head_only``, a one-part record is read
    only as far as its image record header and label.

    Reads with ``os.pread``, so threads and forked processes may share ``fd``.
    """
    flag, length = _chunk_head(fd, offset, where)
    if flag not in (0, 1):
        raise DatasetError(where, 'record', 'the offset is in the middle of a multi-part '
                           'record (continuation flag %d)' % flag, 'bad_record')
    if flag == 0 and head_only:
        head = os.pread(fd, min(length, _IR_SIZE), offset + 8)
        if len(head) == _IR_SIZE:
            count = struct.unpack(_IR_FORMAT, head)[0]
            return head + os.pread(fd, min(4 * count, length - _IR_SIZE), offset + 8 + _IR_SIZE)
        return head
    parts = [_read_chunk(fd, offset + 8, length, where)]
    offset += 8 + ((length + 3) & ~3)
    while flag in (1, 2):       # start, middle: read up to the end part (3)
        flag, length = _chunk_head(fd, offset, where)
        if flag not in (2, 3):
            raise DatasetError(where, 'record', 'a multi-part record is interrupted',
                               'bad_record')
        parts.append(_read_chunk(fd, offset + 8, length, where))
        offset += 8 + ((length + 3) & ~3)
    return struct.pack('<I', MAGIC).join(parts)


def unpack_record(payload, where):
    """``(label values, image bytes)`` of a record payload (``mx.recordio.unpack``'s
    reading, with errors naming the record)."""
    if len(payload) < _IR_SIZE:
        raise DatasetError(where, 'record', 'too short for an image record header',
                           'bad_record')
    count, scalar = struct.unpack(_IR_FORMAT, payload[:_IR_SIZE])[:2]
    end = _IR_SIZE + 4 * count
    if len(payload) < end:
        raise DatasetError(where, 'record', 'the header announces %d label values but the '
                           'record ends before them' % count, 'bad_record')
    values = (np.frombuffer(payload, np.float32, count, _IR_SIZE) if count
              else np.array([scalar], np.float32))
    return values, payload[end:]


def decode_image(data, where):
    """Decode encoded image bytes to RGB ``mx.nd`` (as `gluondet.data.base.read_image`)."""
    if not data:
        raise DatasetError(where, 'image', 'no image data in the record', 'bad_image')
    _check_tail(where, _format_of(data), data[-_TAIL_BYTES:])
    array = cv2.imdecode(np.frombuffer(data, np.uint8), _DECODE_FLAGS)
    if array is None:
        raise DatasetError(where, 'image', 'cannot be decoded', 'bad_image')
    cv2.cvtColor(array, cv2.COLOR_BGR2RGB, dst=array)
    return mx.nd.from_numpy(array, zero_copy=True)


def _probe_bytes(data, where):
    """``(width, height)`` from encoded image bytes' header."""
    from PIL import Image
    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except Exception as err:    # PIL raises many types for bad data
        raise DatasetError(where, 'image', 'not a readable image (%s)' % err,
                           'bad_image') from None


def class_file_of(rec_path):
    """The class json of a record file, or None: ``X.json`` for ``X.rec``, else
    ``PREFIX.json`` for gluondet convert's ``PREFIX-fold-...-shard-....rec``."""
    stem = os.path.splitext(rec_path)[0]
    for candidate in (stem, _SUFFIX.sub('', stem, count=1)):
        if os.path.isfile(candidate + '.json'):
            return candidate + '.json'
    return None


def read_class_file(path):
    """The class names of a class json (``{"classes": [...], ...}``)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as err:
        raise DatasetError(path, 'file', 'cannot be read as json (%s)' % err,
                           'bad_layout') from None
    classes = data.get('classes') if isinstance(data, dict) else None
    if not (isinstance(classes, list) and classes and all(
            isinstance(c, str) and c.strip() for c in classes)):
        raise DatasetError(path, 'classes', 'expected a list of class names', 'bad_layout')
    return tuple(classes)


# ---------------------------------------------------------------- reading

class RecordDetection(DetectionDataset):
    """Detection data from one MXNet IndexedRecordIO file or a glob of shards.

    Reads GluonCV's detection layout (see :mod:`gluondet.data.record`): what
    ``gluondet convert`` writes, exactly, and what ``im2rec.py --pack-label`` makes of a
    GluonCV-style ``.lst``, with boxes normalized to 0..1. Items are ``(image, label)`` as
    in every gluondet dataset, the label in pixels. Each ``.rec`` needs its ``.idx``.

    Parameters
    ----------
    path : str or sequence of str
        A ``.rec`` file, a glob (``data-fold-001-of-002-shard-*.rec``) or a list of them;
        files are read in sorted order, records in their index's order.
    classes : sequence of str, optional
        Class names. If the records come with a class json (``gluondet convert``'s
        ``PREFIX.json``, or ``X.json`` beside ``X.rec``), its classes are matched to these
        by name and objects of other classes are dropped (counted as ``unknown_class``);
        without one the ids are taken as indices into ``classes``. Default: the json's
        classes (required then).
    transform : callable, optional
        ``fn(image, label)`` applied to every item.
    on_error : {'skip', 'raise'}
        See :class:`~gluondet.data.DetectionDataset`. A damaged record or label is
        skipped and counted (``bad_record``, ``bad_annotation``) or raises; a missing or
        malformed index always raises.
    skip_empty : bool
        Leave out the images without a box (see :class:`~gluondet.data.DetectionDataset`);
        by default they are kept, background images.
    masks : bool
        Items are ``(image, label, masks)`` with the masks the records carry; a box without
        one, or with one of another size than the image or without a pixel, is dropped
        (``missing_mask``, ``bad_mask``, ``empty_mask``) or raises.

    Notes
    -----
    ``image_path(i)`` is ``FILE.rec#KEY``, a name for messages, not a file.
    """

    def __init__(self, path, classes=None, transform=None, on_error='skip', skip_empty=False,
                 masks=False):
        files = record_files(path)
        stored = self._stored_classes(files)
        if classes is None and stored is None:
            raise DatasetError(files[0], 'classes', 'no class names: give classes (--classes) '
                               'or put the class json of gluondet convert beside the records '
                               '(PREFIX.json, or %s)' % os.path.basename(
                                   os.path.splitext(files[0])[0] + '.json'), 'bad_layout')
        super().__init__(classes or stored, transform, on_error, skip_empty, masks)
        self._files = files
        self._id_map = (None if stored is None else
                        np.array([-1 if self.class_id(n) is None else self.class_id(n)
                                  for n in stored]))
        self._stored = stored
        self._handles = {}
        self._where = []
        records = []
        for file_index, rec_path in enumerate(files):
            entries = read_index(rec_path)
            fd = os.open(rec_path, os.O_RDONLY)
            try:
                for key, offset in entries:
                    record = self._record(fd, rec_path, key, offset)
                    if record is not None and self._wanted(record):
                        records.append(record)
                        self._where.append((file_index, offset))
            finally:
                os.close(fd)
        pattern = path if isinstance(path, str) else ','.join(map(str, path))
        self._finish(records, 'RecordDetection(%s, %d files)' % (pattern, len(files)))

    @staticmethod
    def _stored_classes(files):
        found = {}
        for rec_path in files:
            class_file = class_file_of(rec_path)
            if class_file is not None:
                found.setdefault(read_class_file(class_file), class_file)
        if len(found) > 1:
            raise DatasetError(', '.join(found.values()), 'classes',
                               'the record files have class jsons with different classes',
                               'bad_layout')
        return next(iter(found), None)

    @property
    def files(self):
        """The record files read, in order."""
        return list(self._files)

    def _handle(self, file_index):
        """An open descriptor of a record file (read with ``os.pread``: threads and forked
        workers may share it)."""
        handle = self._handles.get(file_index)
        if handle is None:
            if len(self._handles) >= _MAX_OPEN:
                self._close()
            handle = self._handles[file_index] = os.open(self._files[file_index], os.O_RDONLY)
        return handle

    def _close(self):
        handles, self._handles = self._handles, {}
        for handle in handles.values():
            os.close(handle)

    def __del__(self):
        try:
            self._close()
        except (AttributeError, OSError):
            pass

    def __getstate__(self):
        state = dict(self.__dict__)
        state['_handles'] = {}
        return state

    def _record(self, fd, rec_path, key, offset):
        """One Record (labels in pixels), or None if it is skipped."""
        where = '%s#%d' % (rec_path, key)
        try:
            payload = read_record(fd, offset, where, head_only=True)
            values, _ = unpack_record(payload, where)
            rows, size, pixels = decode_label(values, where)
            if size is None:
                image = unpack_record(read_record(fd, offset, where), where)[1]
                size = _probe_bytes(image, where)
            counts = (decode_masks(values, where) if self.with_masks and pixels is not None
                      else None)
        except DatasetError as error:
            self._fail(error)
            return None
        width, height = size
        kept, masks = [], []
        for number, row in enumerate(rows):
            field = 'object[%d]' % number
            if row[0] < 0:
                continue    # padding
            if not np.all(np.isfinite(row)) or not float(row[0]).is_integer():
                self._fail(DatasetError(where, field, 'non-finite value or fractional class '
                                        'id in %s' % np.array2string(row), 'bad_annotation'),
                           box=True)
                continue
            class_id = self._class_of(where, field, int(row[0]))
            if class_id is None:
                continue
            if pixels is not None:
                box = pixels[number]
            else:
                box = (row[1:5] * np.array([width, height, width, height], np.float64))
                box = box.astype(np.float32).astype(np.float64)
            box = self._clean_box(tuple(float(v) for v in box), width, height, where, field)
            if box is None:
                continue
            if self.with_masks:
                mask = self._mask(counts, number, size, where, field)
                if mask is None:
                    continue
                masks.append(mask)
            kept.append(box + (class_id, row[5] if len(row) > 5 else 0.))
        label = np.array(kept, dtype=np.float32).reshape(-1, 6) if kept else empty_label()
        return Record(where, label, width, height, masks if self.with_masks else None)

    def _mask(self, counts, number, size, where, field):
        """The compressed RLE of object ``number``'s mask, or None (counted, or raised)."""
        width, height = size
        runs = None if counts is None else counts[number]
        if runs is None:
            problem, reason = 'no mask in the record', 'missing_mask'
        elif runs.sum() != width * height:
            problem, reason = ('mask runs add up to %d pixels, not the %dx%d image\'s %d'
                               % (runs.sum(), width, height, width * height), 'bad_mask')
        elif not runs[1::2].any():
            problem, reason = 'empty mask (no pixel)', 'empty_mask'
        else:
            return rle_codec.to_rle({'size': [height, width], 'counts': runs.tolist()}, height,
                                    width, source='%s: %s' % (where, field))
        self._fail(DatasetError(where, field + '/mask', problem, reason), box=True)
        return None

    def _class_of(self, where, field, stored_id):
        """The class id of a stored id, or None (counted, or raised)."""
        written = self.classes if self._stored is None else self._stored
        class_id = stored_id if 0 <= stored_id < len(written) else None
        if class_id is not None:
            self.report.names[written[class_id]] += 1
        if class_id is not None and self._id_map is not None:
            class_id = int(self._id_map[class_id])
            if class_id < 0:
                class_id = None
        if class_id is None:
            name = (' (%s)' % self._stored[stored_id] if self._stored is not None
                    and 0 <= stored_id < len(self._stored) else '')
            self._fail(DatasetError(where, field + '/class_id', 'class %d%s is not one of the '
                                    'classes %s' % (stored_id, name, ', '.join(self.classes)),
                                    'unknown_class'), box=True)
        return class_id

    def encoded_image(self, idx):
        """The encoded image bytes of item ``idx``, as stored."""
        file_index, offset = self._where[idx]
        where = self._records[idx].path
        payload = read_record(self._handle(file_index), offset, where)
        return unpack_record(payload, where)[1]

    def _read(self, idx):
        record = self._records[idx]
        image = decode_image(self.encoded_image(idx), record.path)
        height, width = image.shape[:2]
        if (width, height) != (record.width, record.height):
            raise DatasetError(record.path, 'image', 'decoded as %dx%d, but the label says '
                               '%dx%d' % (width, height, record.width, record.height),
                               'size_mismatch')
        return image


# ---------------------------------------------------------------- writing

class RecordWriter:
    """Writes one IndexedRecordIO file pair (``PATH.rec``, ``PATH.idx``) under temporary
    names; :meth:`commit` syncs and renames them into place, :meth:`abort` removes them.

    Records are packed with ``mx.recordio.pack`` and written with MXNet's
    ``MXIndexedRecordIO``; keys are 0, 1, ... in the order written.
    """

    def __init__(self, path):
        if not path.endswith('.rec'):
            raise ValueError('a record file name ends with .rec, got %r' % path)
        self.path, self.index = path, index_path(path)
        suffix = '.tmp%d' % os.getpid()
        self._tmp = (path + suffix, self.index + suffix)
        try:    # by Python first: a folder not writable gives its OSError, with its errno
            for tmp, final in zip(self._tmp, (path, self.index)):
                try:
                    open(tmp, 'wb').close()
                except OSError as err:
                    raise naming(err, tmp, final) from None
            self._writer = mx.recordio.MXIndexedRecordIO(self._tmp[1], self._tmp[0], 'w')
        except BaseException:
            self._writer = None
            self.abort()
            raise
        self.count = 0

    def add(self, image_bytes, label, width, height, masks=None):
        """Append one image (encoded bytes, stored as they are) with its ``N x 6`` label
        in pixels and, optionally, one mask per label row (``InstanceMasks`` or ``N x height
        x width``)."""
        header = mx.recordio.IRHeader(0, encode_label(label, width, height, masks), self.count,
                                      0)
        record = mx.recordio.pack(header, bytes(image_bytes))
        try:
            self._writer.write_idx(self.count, record)
        except mx.MXNetError:   # MXNet's writer says no more (see gluondet.files)
            raise short_write_error(self.path, len(record)) from None
        self.count += 1

    def close(self):
        """Close the files; an OSError if the record file is short (MXNet's writer does not
        check the last flush)."""
        if self._writer is not None:
            size = self._writer.tell()
            try:
                self._writer.close()    # the index's last lines are written here
            except OSError as err:
                raise naming(err, self._tmp[1], self.index) from None
            finally:
                self._writer = None
            written = os.path.getsize(self._tmp[0])
            if written != size:
                raise short_write_error(self.path, size - written)

    def commit(self):
        """Close, sync and rename into place."""
        self.close()
        for tmp in self._tmp:
            with open(tmp, 'rb+') as f:
                os.fsync(f.fileno())
        os.replace(self._tmp[1], self.index)
        os.replace(self._tmp[0], self.path)

    def abort(self):
        """Close and remove the temporary files (an error closing them is moot)."""
        with contextlib.suppress(OSError):
            self.close()
        for tmp in self._tmp:
            remove_if_exists(tmp)
