"""Pascal VOC style datasets: a VOCdevkit, a single VOC folder, or a LabelImg folder."""
import glob
import logging
import math
import os
from collections import namedtuple
from xml.etree.ElementTree import ParseError

import numpy as np
from defusedxml import DefusedXmlException
from defusedxml import ElementTree

from ..class_names import VOC_CLASSES
from .base import IMAGE_EXTENSIONS, DatasetError, DetectionDataset, Record, empty_label, safe_join

__all__ = ['VOC_CLASSES', 'VOCDetection', 'detect_layout', 'infer_layout', 'parse_voc_xml']

logger = logging.getLogger('gluondet.data')

LAYOUTS = ('devkit', 'folder', 'labelimg')
# The layouts of custom data: without classes they take the names their annotations write (a
# VOCdevkit, GluonCV's, takes VOC's 20).
FOUND_CLASSES_LAYOUTS = ('folder', 'labelimg')
_COORDS = ('xmin', 'ymin', 'xmax', 'ymax')

VOCAnnotation = namedtuple('VOCAnnotation', ['filename', 'size', 'objects'])
VOCObject = namedtuple('VOCObject', ['field', 'name', 'box', 'difficult'])


def _text(node, tag):
    """Stripped text of ``node/tag``, or None if absent or empty."""
    child = node.find(tag)
    if child is None or child.text is None or not child.text.strip():
        return None
    return child.text.strip()


def _number(path, field, text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise DatasetError(path, field, 'expected a number, got %r' % (text,),
                           'bad_annotation') from None
    if not math.isfinite(value):
        raise DatasetError(path, field, 'expected a finite number, got %r' % text,
                           'bad_annotation')
    return value


def _size(path, root):
    """``(width, height)`` from ``<size>``, or None if absent or zero."""
    size = root.find('size')
    if size is None or _text(size, 'width') is None or _text(size, 'height') is None:
        return None
    width = _number(path, 'size/width', _text(size, 'width'))
    height = _number(path, 'size/height', _text(size, 'height'))
    if width <= 0 or height <= 0:
        return None
    return int(width), int(height)


def _object(path, index, obj):
    field = 'object[%d]' % index
    name = _text(obj, 'name')
    if name is None:
        raise DatasetError(path, field + '/name', 'missing', 'bad_annotation')
    bndbox = obj.find('bndbox')
    if bndbox is None:
        raise DatasetError(path, field + '/bndbox', 'missing', 'bad_annotation')
    box = tuple(_number(path, '%s/bndbox/%s' % (field, tag), _text(bndbox, tag))
                for tag in _COORDS)
    try:
        difficult = int(_text(obj, 'difficult') or 0)
    except ValueError:  # as GluonCV: an unreadable flag counts as not difficult
        difficult = 0
    return VOCObject(field, name, box, difficult)


def parse_voc_xml(path):
    """Parse a VOC or LabelImg annotation file.

    Parsed with defusedxml: entity declarations (entity-expansion "bombs")
    and external references are refused.

    Parameters
    ----------
    path : str
        The ``.xml`` file.

    Returns
    -------
    VOCAnnotation
        ``filename`` (str or None), ``size`` (``(width, height)`` or None) and
        ``objects``: VOCObject ``(field, name, box, difficult)`` with ``box``
        the four ``bndbox`` values as written (VOC's 1-based pixels).

    Raises
    ------
    DatasetError
        Naming the file and field, for a missing or malformed file or field.
    """
    try:
        root = ElementTree.parse(path).getroot()
    except FileNotFoundError:
        raise DatasetError(path, 'xml', 'annotation file not found', 'missing_annotation') from None
    except OSError as err:
        raise DatasetError(path, 'xml', 'cannot be read (%s)' % err.strerror,
                           'bad_annotation') from None
    except ParseError as err:
        raise DatasetError(path, 'xml', 'malformed XML (%s)' % err, 'bad_annotation') from None
    except DefusedXmlException as err:
        raise DatasetError(path, 'xml', 'refused: %s (entity declarations and external '
                           'references are not allowed)' % type(err).__name__,
                           'bad_annotation') from None
    objects = [_object(path, i, obj) for i, obj in enumerate(root.iter('object'))]
    return VOCAnnotation(_text(root, 'filename'), _size(path, root), objects)


def detect_layout(root, subfolders=None):
    """Which of :data:`LAYOUTS` the folder ``root`` holds, or None.

    ``subfolders`` are LabelImg split names to look for ``.xml`` files in
    (default: ``root`` itself).
    """
    if os.path.isdir(os.path.join(root, 'ImageSets', 'Main')):
        return 'folder'
    if glob.glob(os.path.join(glob.escape(root), 'VOC*', 'ImageSets', 'Main')):
        return 'devkit'
    folders = [os.path.join(root, s) for s in subfolders] if subfolders else [root]
    if any(glob.glob(os.path.join(glob.escape(f), '*.xml')) for f in folders):
        return 'labelimg'
    return None


def labelimg_subfolders(root):
    """Names of the subfolders of ``root`` that hold ``.xml`` files (LabelImg splits)."""
    return sorted(os.path.basename(os.path.dirname(p))
                  for p in glob.glob(os.path.join(glob.escape(root), '*', '')) if
                  glob.glob(os.path.join(glob.escape(p), '*.xml')))


def infer_layout(root, splits):
    """Which of :data:`LAYOUTS` the folder ``root`` holds, given ``splits``."""
    if splits is not None and not isinstance(splits, str) and \
            all(isinstance(s, (tuple, list)) for s in splits):
        return 'devkit'
    layout = detect_layout(root, None if splits is None else _as_tuple(splits))
    if layout is None:
        raise layout_error(root)
    return layout


def layout_error(root, elsewhere=''):
    """The DatasetError for a root holding no VOC layout (``elsewhere``: what else was tried)."""
    found = labelimg_subfolders(root)
    return DatasetError(root, 'layout', 'not a VOC dataset: expected ImageSets/Main/ (a VOC '
                        'folder), VOC<year>/ImageSets/Main/ (a VOCdevkit), .xml files beside '
                        'images (a LabelImg folder)%s%s' % (elsewhere, (
                            '; its subfolders %s hold .xml files: name them as splits'
                            % ', '.join(found)) if found else ''), 'bad_layout')


def _as_tuple(splits):
    return (splits,) if isinstance(splits, str) else tuple(splits)


def _read_ids(path):
    try:
        with open(path) as f:
            return [line.strip() for line in f if line.strip()]
    except OSError as err:
        raise DatasetError(path, 'split', 'cannot read the split list (%s)' % err.strerror,
                           'bad_layout') from None
    except UnicodeDecodeError as err:
        raise DatasetError(path, 'split', 'the split list is not text (%s)' % err.reason,
                           'bad_layout') from None


class VOCDetection(DetectionDataset):
    """Pascal VOC detection data, in any of three folder layouts.

    ``layout`` says where annotations and images are; by default it is
    inferred from what is on disk:

    * ``'devkit'`` (GluonCV's): ``root`` is a VOCdevkit; ``splits`` are
      ``(year, name)`` pairs naming ``root/VOC<year>/ImageSets/Main/<name>.txt``
      (a string instead of a year names the subfolder itself); images are
      ``JPEGImages/<id>.jpg``, annotations ``Annotations/<id>.xml``.
    * ``'folder'``: ``root`` itself holds ``Annotations/``, ``JPEGImages/`` and
      ``ImageSets/Main/``; ``splits`` are names such as ``('train',)``.
    * ``'labelimg'``: each ``.xml`` sits beside its image, whose name is the
      xml's ``<filename>`` (matched exactly); ``splits`` are subfolders of
      ``root`` (``None``: ``root`` itself).

    In the first two layouts the image is ``JPEGImages/<id>.jpg`` as in
    GluonCV, or, if there is no such file, the xml's ``<filename>`` in
    ``JPEGImages/``. Image names that are absolute or climb out of their
    folder are refused.

    Box coordinates: VOC stores 1-based pixel indices; as GluonCV 0.10.5's
    ``VOCDetection``, 1 is subtracted from all four (``xmin, ymin, xmax,
    ymax``), so labels are 0-based pixel indices and VOC07 metrics match
    GluonCV's. Boxes are then clipped to ``[0, width - 1] x [0, height - 1]``;
    zero-area and inverted boxes are dropped (counted in :attr:`report`) or
    raise in ``'raise'`` mode. The ``difficult`` flag is kept in column 5.
    Class names match case-insensitively; objects of other classes are
    dropped (counted as ``unknown_class``) or raise.

    Without ``classes``, a VOCdevkit has the 20 VOC classes (as GluonCV's
    ``VOCDetection``); a VOC folder or a LabelImg folder has the names its
    annotations write (in every xml of its splits, sorted, case ignored), which
    are logged in one line.

    Parameters
    ----------
    root : str, default '~/.mxnet/datasets/voc'
        The dataset folder (see ``layout``).
    splits : sequence, optional
        Per layout, as above. Default: ``((2007, 'trainval'), (2012,
        'trainval'))`` for a devkit, ``('trainval',)`` for a folder, ``root``
        itself for LabelImg.
    transform : callable, optional
        ``fn(image, label)`` applied to every item.
    classes : sequence of str, optional
        Class names; default, as above, the 20 VOC classes or the annotations' names.
    layout : {'devkit', 'folder', 'labelimg'}, optional
        Default: inferred.
    on_error : {'skip', 'raise'}
        See :class:`DetectionDataset`.
    skip_empty : bool
        Leave out the images without a box (see :class:`DetectionDataset`); by default an
        xml without an ``object`` (or whose every object is left out) is a background
        image, kept.
    background_images : bool
        Also take the images that have no xml, as background images (no object): in the
        LabelImg layout every image file of a split folder without a ``<stem>.xml`` beside
        it (and not the ``<filename>`` of another xml); in the other two, an id of the
        split list without ``Annotations/<id>.xml`` whose ``JPEGImages/<id>.jpg`` exists.
        By default such an image is not seen (LabelImg) or a missing annotation.
    """

    CLASSES = VOC_CLASSES

    def __init__(self, root=os.path.join('~', '.mxnet', 'datasets', 'voc'), splits=None,
                 transform=None, classes=None, layout=None, on_error='skip', skip_empty=False,
                 background_images=False):
        super().__init__(classes or self.CLASSES, transform, on_error, skip_empty)
        self._background_images = bool(background_images)
        self._root = os.path.expanduser(root)
        if not os.path.isdir(self._root):
            raise DatasetError(self._root, 'root', 'not a directory', 'bad_layout')
        if layout is None:
            layout = infer_layout(self._root, splits)
        if layout not in LAYOUTS:
            raise ValueError('layout must be one of %s, got %r' % (LAYOUTS, layout))
        self.layout = layout
        self._splits = self._check_splits(splits)
        entries = [entry + (self._parse(*entry[:3]),) for entry in self._entries()]
        if not classes and layout in FOUND_CLASSES_LAYOUTS:
            self._set_classes(_written_classes(e[-1] for e in entries))
            logger.info('%s: classes found in its annotations: %s (sorted; --classes sets them)',
                        self, ', '.join(self.classes) or 'none')
        records = []
        for entry in entries:
            record = self._record(*entry)
            if record is not None:
                records.append(record)
        if self._background_images and self.layout == 'labelimg':
            records += self._unannotated(records)
        self._finish(records, str(self))

    def __str__(self):
        splits = ','.join(''.join(str(p) for p in s) if isinstance(s, tuple) else s or '.'
                          for s in self._splits)
        return 'VOCDetection(%s, %s, %s)' % (self._root, self.layout, splits)

    def _check_splits(self, splits):
        if self.layout == 'devkit':
            splits = ((2007, 'trainval'), (2012, 'trainval')) if splits is None else splits
            if isinstance(splits, str) or not all(
                    isinstance(s, (tuple, list)) and len(s) == 2 for s in splits):
                raise ValueError("devkit splits are (year, name) pairs such as "
                                 "((2007, 'trainval'),), got %r" % (splits,))
            return tuple(tuple(s) for s in splits)
        default = ('trainval',) if self.layout == 'folder' else ('',)
        splits = default if splits is None else _as_tuple(splits)
        if not all(isinstance(s, str) for s in splits):
            raise ValueError('%s splits are names such as %r, got %r'
                             % (self.layout, default, splits))
        return splits

    def _entries(self):
        """Per record: ``(listed_in, image_id, xml_path, image_dir)``.

        ``image_id`` is None in the LabelImg layout (the image is the xml's
        ``<filename>``); ``listed_in`` is the split list or the xml itself.
        """
        if self.layout == 'labelimg':
            for folder in self._split_folders():
                if not os.path.isdir(folder):
                    raise DatasetError(folder, 'split', 'not a directory', 'bad_layout')
                for xml_path in sorted(glob.glob(os.path.join(glob.escape(folder), '*.xml'))):
                    yield xml_path, None, xml_path, folder
            return
        for split in self._splits:
            if self.layout == 'devkit':
                subfolder, name = split
                folder = os.path.join(self._root, 'VOC%d' % subfolder
                                      if isinstance(subfolder, int) else subfolder)
            else:
                folder, name = self._root, split
            split_file = os.path.join(folder, 'ImageSets', 'Main', name + '.txt')
            for image_id in _read_ids(split_file):
                yield (split_file, image_id,
                       safe_join(os.path.join(folder, 'Annotations'), image_id + '.xml'),
                       os.path.join(folder, 'JPEGImages'))

    def _split_folders(self):
        """The folders of the LabelImg splits."""
        return [os.path.join(self._root, split) if split else self._root
                for split in self._splits]

    def _unannotated(self, records):
        """Records of the LabelImg images without an xml (``background_images``)."""
        annotated = {r.path for r in records}
        found = []
        for folder in self._split_folders():
            for name in sorted(os.listdir(folder)):
                path = os.path.join(folder, name)
                stem, ext = os.path.splitext(path)
                if (ext.lower() in IMAGE_EXTENSIONS and path not in annotated and
                        not os.path.isfile(stem + '.xml') and os.path.isfile(path)):
                    found.append(path)
        return [record for record in (self._background(path, folder) for path in found)
                if record is not None]

    def _background(self, path, listed_in):
        """The Record of an image without objects, or None if it is skipped."""
        size = self._image_size_or_skip(path, listed_in)
        return None if size is None else Record(path, empty_label(), *size)

    def _image_path(self, xml_path, image_id, image_dir, annotation):
        """The image file of a record; DatasetError if it is refused."""
        if image_id is not None:
            path = safe_join(image_dir, image_id + '.jpg')
            if os.path.isfile(path) or annotation.filename is None:
                return path
        if annotation.filename is None:
            raise DatasetError(xml_path, 'filename', 'missing (the image name)', 'bad_annotation')
        path = safe_join(image_dir, annotation.filename)
        if path is None:
            raise DatasetError(xml_path, 'filename', 'refused: %r is not a relative path inside %s'
                               % (annotation.filename, image_dir), 'unsafe_path')
        return path

    @staticmethod
    def _parse(listed_in, image_id, xml_path):
        """The VOCAnnotation of an entry, or the DatasetError that refuses it."""
        try:
            if xml_path is None:
                raise DatasetError(listed_in, 'id', 'refused: %r is not a file name inside the '
                                   'dataset' % image_id, 'unsafe_path')
            return parse_voc_xml(xml_path)
        except DatasetError as error:
            return error

    def _record(self, listed_in, image_id, xml_path, image_dir, annotation):
        """Build one Record from an entry and what `_parse` gave, or None if it is skipped."""
        try:
            if isinstance(annotation, DatasetError):
                raise annotation
            path = self._image_path(xml_path, image_id, image_dir, annotation)
        except DatasetError as error:
            if self._background_images and error.reason == 'missing_annotation' and image_id:
                image = safe_join(image_dir, image_id + '.jpg')
                if image and os.path.isfile(image):
                    return self._background(image, listed_in)
            self._fail(error)
            return None
        size = self._image_size_or_skip(path, xml_path, annotation.size)
        if size is None:
            return None
        return Record(path, self._label(xml_path, annotation.objects, size), *size)

    def _label(self, xml_path, objects, size):
        rows = []
        for obj in objects:
            self.report.names[obj.name] += 1
            class_id = self.class_id(obj.name)
            if class_id is None:
                self._fail(DatasetError(xml_path, obj.field + '/name', 'unknown class %r (classes: '
                                        '%s)' % (obj.name, ', '.join(self.classes)),
                                        'unknown_class'), box=True)
                continue
            box = self._clean_box([v - 1 for v in obj.box], size[0], size[1], xml_path,
                                  obj.field + '/bndbox', written=obj.box)
            if box is not None:
                rows.append(box + (class_id, obj.difficult))
        return np.array(rows, dtype=np.float32).reshape(-1, 6) if rows else empty_label()


def _written_classes(annotations):
    """The class names the parsed ``annotations`` write (DatasetErrors among them are passed
    over), each once (case ignored, as first written), sorted (case ignored)."""
    names = {}
    for annotation in annotations:
        if isinstance(annotation, VOCAnnotation):
            for obj in annotation.objects:
                names.setdefault(obj.name.lower(), obj.name)
    return tuple(sorted(names.values(), key=str.lower))
