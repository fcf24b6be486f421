"""One way to name data: the dataset flags every script and ``gluondet`` command share.

:func:`resolve_dataset` turns a dataset name, a dataset root, a split, class names and
(for custom COCO data) a json and an image folder into a dataset. ``train_*.py``
(``--dataset --dataset-root --classes --train-split --val-split --train-json --val-json
--image-root``) and ``gluondet evaluate`` (``--dataset --dataset-root --split
--annotation-file --image-root``) both call it, so the same folder and split names work
in both.

The root may be the data itself or GluonCV's dataset folder (``~/.mxnet/datasets``,
the default), which holds ``voc/VOC2007``, ``voc/VOC2012``, ``coco/annotations`` and
``coco/train2017``; a VOC root may also be a ``VOCdevkit`` or hold one.
"""
import difflib
import glob
import os

import numpy as np

from ..class_names import COCO_CLASSES
from ..dataset_flags import DATASETS, class_list, dataset_kwargs
from .base import DatasetError
from .coco import COCODetection, json_classes
from .demo import DemoDetection
from .kitti import KITTIDetection
from .record import RecordDetection
from .voc import FOUND_CLASSES_LAYOUTS, VOCDetection, detect_layout, layout_error

__all__ = ['DATASETS', 'DEFAULT_ROOT', 'DEFAULT_SPLITS', 'MASK_DATASETS', 'check_boxes',
           'check_classes_found', 'finds_classes', 'resolve_dataset', 'datasets_from_flags',
           'split_names']

DEFAULT_ROOT = os.path.join('~', '.mxnet', 'datasets')
# The split used when none is named: (training, validation or evaluation), as GluonCV's
# scripts (VOC07+12 trainval / VOC07 test, COCO train2017 / val2017).
DEFAULT_SPLITS = {
    'devkit': ('2007_trainval,2012_trainval', '2007_test'),
    'folder': ('train', 'val'),
    'labelimg': ('train', 'val'),       # subfolders; the root itself if it holds the xml
    'coco': ('instances_train2017', 'instances_val2017'),
    'kitti': ('training', 'val'),       # subfolders; the root itself if it holds label_2
}
#: The datasets whose items can carry instance masks.
MASK_DATASETS = ('coco', 'demo', 'rec')
# Where under a root each dataset may be (GluonCV's folder names first).
_NAMES_SHOWN = 20     # the annotations' class names in a message, at most
_SUBFOLDERS = {'voc': ('voc', 'VOCdevkit', os.path.join('voc', 'VOCdevkit')),
               'coco': ('coco',)}
# The flag that keeps the boxes left out for a reason (the others are the annotations' own).
_FLAG_OF_REASON = {'unknown_class': '--classes names the classes to train',
                   'unmapped_class': '--class-mapping maps the types to the classes'}


def split_names(split):
    """``'a,b'``, ``('a', 'b')`` or None -> a tuple of the names (empty: none named)."""
    if split is None:
        return ()
    parts = split.split(',') if isinstance(split, str) else split
    return tuple(str(p).strip() for p in parts if str(p).strip())


def resolve_dataset(dataset, root=None, split=None, classes=None, annotation_file=None,
                    image_root=None, train=False, on_error='skip', class_mapping=None,
                    records=None, allow_missing_classes=False, skip_empty=False,
                    background_images=False, masks=False):
    """The dataset that a name, a root and a split say.

    Parameters
    ----------
    dataset : {'voc', 'coco', 'kitti', 'demo', 'rec'}
        The format (case-insensitive); ``rec``: MXNet RecordIO files named by ``records``.
    root : str, optional
        The data folder, or a folder holding it (default ``~/.mxnet/datasets``).
        voc: a VOC folder (``ImageSets/Main``), a VOCdevkit (``VOC<year>/``), a LabelImg
        folder (xml beside images), or a folder with ``voc/`` or ``VOCdevkit/`` holding a
        VOCdevkit. coco: GluonCV's layout (``annotations/<split>.json``, images in
        ``<year folder>/``), or a folder with it in ``coco/``. kitti: ``<split>/image_2``
        and ``label_2``, or those folders directly.
    split : str or sequence of str, optional
        Comma-separated names; default :data:`DEFAULT_SPLITS` (training or validation).
        VOC folder: split lists (``ImageSets/Main/<name>.txt``). VOCdevkit: ``YEAR_NAME``
        (``2007_test``), or a bare name for that list in every year that has it. LabelImg:
        subfolders. coco: one annotation file name (``instances_val2017``). kitti: one
        subfolder.
    classes : sequence of str, optional
        Class names (default: the dataset's own: a COCO json's categories, KITTI's types,
        VOC's 20 in a VOCdevkit, the names the annotations write in a VOC or LabelImg
        folder). COCO categories and KITTI types are matched to them by name. For training,
        each must have a box in the data (see :func:`check_classes_found`).
    annotation_file : str, optional
        coco: a COCO json of any data, instead of ``root`` and ``split``.
    image_root : str, optional
        coco: the folder the json's ``file_name`` are relative to (default: the json's
        folder with ``annotation_file``, GluonCV's year folder with ``root``).
    train : bool
        For training: the training default split.
    skip_empty : bool
        Leave out the images without a box, in every format (``--skip-empty``, GluonCV's
        COCO training); by default they are kept, background images.
    background_images : bool
        voc: also the images without an xml, as background images (``--background-images``;
        see :class:`~gluondet.data.VOCDetection`).
    on_error : {'skip', 'raise'}
        See :class:`~gluondet.data.DetectionDataset`.
    class_mapping : dict, optional
        kitti: KITTI type -> class name, many to one (TAO's ``target_class_mapping``); the
        classes are its targets unless ``classes`` orders them. Other types are dropped.
    records : str or sequence of str, optional
        rec: a ``.rec`` file, a glob of shards or a list (``--train-rec``, ``--val-rec``);
        see :class:`~gluondet.data.RecordDetection`. No root or split.
    allow_missing_classes : bool
        For training: accept ``classes`` without a box in the data (``--allow-missing-classes``).
    masks : bool
        Items carry their instance masks (``(image, label, masks)``, Mask R-CNN's training):
        coco, demo and rec data only.

    Raises
    ------
    DatasetError
        Naming the path, if the root is not a folder or holds no such data or split, or
        (for training) a class of ``classes`` has no box in it or it has no box at all
        (:func:`check_boxes`).
    ValueError
        For an unknown dataset name or flags that do not go together.
    """
    common = dict(on_error=on_error, skip_empty=skip_empty)
    if masks:
        if str(dataset).strip().lower() not in MASK_DATASETS:
            raise ValueError('the %s dataset has no instance masks: use %s data (a COCO json '
                             'with segmentations)' % (dataset, ', '.join(MASK_DATASETS)))
        common['masks'] = True
    data = _resolve(dataset, root, split, classes, annotation_file, image_root, train,
                    class_mapping, records, background_images, common)
    if train and classes and not allow_missing_classes:
        check_classes_found(data)
    if train:
        check_boxes(data)
    return data


def finds_classes(dataset, root=None, split=None, train=False):
    """Whether the data :func:`resolve_dataset` names so, given no classes, has classes of its
    own rather than its format's: the names its annotations write (a VOC or LabelImg folder;
    a VOCdevkit has VOC's 20), or a COCO json's categories other than COCO's 80. What makes a
    training network ``*_custom``. False for data not found."""
    name = str(dataset).strip().lower()
    names = split_names(split)
    role = 0 if train else 1
    root = os.path.expanduser(root or DEFAULT_ROOT)
    try:
        if name == 'voc':
            return _voc(root, names, role)[1] in FOUND_CLASSES_LAYOUTS
        if name == 'coco' and len(names) <= 1:
            folder, split = _coco(root, names[0] if names else DEFAULT_SPLITS['coco'][role])
            path = os.path.join(folder, 'annotations', split + '.json')
            return json_classes(path) != COCO_CLASSES
    except DatasetError:
        pass        # the dataset's own error comes when it is read
    return False


def check_boxes(dataset):
    """Raise DatasetError if ``dataset`` has no box to train on.

    The one line says what was left out, by reason, and the flag that keeps it
    (``--classes`` for boxes of unknown classes), with the names the annotations write.
    """
    report = dataset.report
    if report.boxes:
        return
    fixes = ''.join('; ' + _FLAG_OF_REASON[reason] for reason in sorted(report.dropped)
                    if reason in _FLAG_OF_REASON)
    names = _shown(_written(dataset))
    if fixes and names:
        fixes += ' (the annotations name: %s)' % names
    raise DatasetError(dataset.name, 'boxes', 'no box to train on (%s)%s'
                       % (report.summary(), fixes), 'no_boxes')


def check_classes_found(dataset):
    """Raise DatasetError if a class of ``dataset`` has no box in it (``--classes``).

    The one line names each such class with the names its annotations write that are close
    to it (did you mean, case ignored as classes match), and ``--allow-missing-classes``.
    """
    labels = [dataset.label(i)[:, 4] for i in range(len(dataset))]
    counts = np.bincount(np.concatenate(labels).astype(int), minlength=dataset.num_class)
    missing = [name for name, count in zip(dataset.classes, counts) if not count]
    if not missing:
        return
    written = _written(dataset)
    problems = []
    for name in missing:
        key = name.strip().lower()
        if key in written:
            problems.append('every object of class %r was left out (the report above says why)'
                            % name)
            continue
        close = difflib.get_close_matches(key, list(written), n=2)
        hint = ' (did you mean %s?)' % ' or '.join(repr(written[c]) for c in close)
        problems.append('no object of class %r%s' % (name, hint if close else ''))
    raise DatasetError(dataset.name, '--classes', '%s; the annotations name: %s. '
                       '--allow-missing-classes trains a class without boxes on purpose'
                       % ('; '.join(problems), _shown(written) or 'none'), 'missing_class')


def _written(dataset):
    """The class names ``dataset``'s annotations write: lower-cased -> as first written."""
    written = {}
    for name in dataset.report.names:
        written.setdefault(name.strip().lower(), name)
    return written


def _shown(written):
    """`_written`'s names sorted (case ignored), at most `_NAMES_SHOWN`, comma-separated."""
    shown = sorted(written.values(), key=str.lower)
    listed = ', '.join(shown[:_NAMES_SHOWN])
    if len(shown) > _NAMES_SHOWN:
        listed += ' ... (%d in all)' % len(shown)
    return listed


def _resolve(dataset, root, split, classes, annotation_file, image_root, train, class_mapping,
             records, background_images, common):
    """:func:`resolve_dataset` without the checks of training data; ``common``: the keyword
    arguments of every dataset (``on_error``, ``skip_empty``)."""
    name = str(dataset).strip().lower()
    if name not in DATASETS:
        raise ValueError('unknown dataset %r: use %s (COCO-format data: coco with its json)'
                         % (dataset, ', '.join(DATASETS)))
    names = split_names(split)
    role = 0 if train else 1
    if (annotation_file or image_root) and name != 'coco':
        raise ValueError('a COCO json and its image root go with the coco dataset, not %s' % name)
    if background_images and name != 'voc':
        raise ValueError('background images without an xml go with the voc dataset (a LabelImg '
                         'or VOC folder), not %s: its images without a box are kept anyway'
                         % name)
    if class_mapping and name != 'kitti':
        raise ValueError('a class mapping goes with the kitti dataset, not %s' % name)
    if (records is not None) != (name == 'rec'):
        raise ValueError('record files go with the rec dataset, not %s' % name if records
                         is not None else 'the rec dataset needs its record files (a .rec or a '
                         'glob of shards: --train-rec, --val-rec)')
    if name == 'rec':
        if names:
            raise ValueError('record files are their own split: no split with %s' % records)
        return RecordDetection(records, classes=classes, **common)
    if name == 'coco' and annotation_file:
        if names:
            raise ValueError('a COCO json is its own split: no split with %s' % annotation_file)
        annotation_file = os.path.expanduser(annotation_file)
        return COCODetection(annotation_file=annotation_file, classes=classes,
                             image_root=image_root or os.path.dirname(
                                 os.path.abspath(annotation_file)), **common)
    if name == 'demo':
        if names:
            raise ValueError('the demo dataset has its own train and val splits: no split')
        return DemoDetection(split=('train', 'val')[role], seed=0, on_error=common['on_error'],
                             masks=common.get('masks', False))
    root = os.path.expanduser(root or DEFAULT_ROOT)
    if not os.path.isdir(root):
        raise DatasetError(root, 'dataset root', 'no such folder', 'bad_layout')
    if name == 'voc':
        folder, layout, splits = _voc(root, names, role)
        return VOCDetection(folder, splits=splits, classes=classes, layout=layout,
                            background_images=background_images, **common)
    if len(names) > 1:
        raise ValueError('%s reads one split at a time, got %s' % (name, ', '.join(names)))
    if name == 'coco':
        folder, split = _coco(root, names[0] if names else DEFAULT_SPLITS['coco'][role])
        return COCODetection(folder, splits=split, classes=classes, image_root=image_root,
                             **common)
    folder = _kitti(root, names[0] if names else None, role)
    if not class_mapping and classes:
        class_mapping = {c: c for c in classes}
    return KITTIDetection(os.path.dirname(folder), split=os.path.basename(folder),
                          classes=classes, class_mapping=class_mapping or None, **common)


def _candidates(root, name):
    return [root] + [os.path.join(root, sub) for sub in _SUBFOLDERS[name]]


def _voc(root, names, role):
    """``(folder, layout, VOCDetection splits)``."""
    for folder in _candidates(root, 'voc'):
        layout = detect_layout(folder, names)
        if layout is None and not names:
            layout = detect_layout(folder, (DEFAULT_SPLITS['labelimg'][role],))
        if layout is not None:
            break
    else:
        raise layout_error(root, ', or a VOCdevkit in voc/ or VOCdevkit/')
    if layout == 'devkit':
        names = names or split_names(DEFAULT_SPLITS['devkit'][role])
        return folder, layout, [pair for n in names for pair in _devkit_splits(folder, n)]
    if layout == 'labelimg' and not names and glob.glob(
            os.path.join(glob.escape(folder), '*.xml')):
        return folder, layout, None     # the root itself
    return folder, layout, names or (DEFAULT_SPLITS[layout][role],)


def _devkit_splits(devkit, name):
    """``YEAR_NAME`` -> ``[(year, name)]``; a bare name -> that list in every year."""
    year, _, part = name.partition('_')
    if year.isdigit() and part:
        return [(int(year), part)]
    found = sorted(os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(p))))
                   for p in glob.glob(os.path.join(glob.escape(devkit), 'VOC*', 'ImageSets',
                                                   'Main', glob.escape(name) + '.txt')))
    if not found:
        raise DatasetError(devkit, 'split', 'no VOC<year>/ImageSets/Main/%s.txt in this '
                           'VOCdevkit (a devkit split is YEAR_NAME such as 2007_test, or a name '
                           'listed in some year)' % name, 'bad_layout')
    return [(folder, name) for folder in found]


def _coco(root, split):
    """``(folder, split)`` of GluonCV's layout, in ``root`` or ``root/coco``."""
    for folder in _candidates(root, 'coco'):
        if os.path.isfile(os.path.join(folder, 'annotations', split + '.json')):
            return folder, split
    present = sorted(os.path.splitext(os.path.basename(p))[0] for folder in _candidates(
        root, 'coco') for p in glob.glob(os.path.join(glob.escape(folder), 'annotations',
                                                      '*.json')))
    raise DatasetError(root, 'layout', 'not a COCO dataset with split %s: no annotations/%s.json '
                       'in it or in coco/%s' % (split, split, ' (splits there: %s)'
                                                % ', '.join(present) if present else ''),
                       'bad_layout')


def _kitti(root, split, role):
    """The folder holding ``image_2`` and ``label_2``."""
    folder = os.path.join(root, split or DEFAULT_SPLITS['kitti'][role])
    if os.path.isdir(os.path.join(folder, 'label_2')):
        return folder
    if split is None and os.path.isdir(os.path.join(root, 'label_2')) and not os.path.isdir(
            os.path.join(root, DEFAULT_SPLITS['kitti'][0])):
        return root     # the root is the data (not a KITTI download's training/ beside it)
    raise DatasetError(folder, 'split', 'not a KITTI split: no label_2/ and image_2/ in it%s'
                       % ('' if split else ' (name the split, or put a validation set in val/ '
                          'beside training/)'), 'bad_layout')


def datasets_from_flags(args, roles=('train', 'val'), masks=False):
    """A dataset per role of ``roles``, from the parsed flags of
    `gluondet.dataset_flags.add_dataset_args` (`dataset_kwargs`), with the classes of
    ``--classes``, else the first dataset's own (the training data's), which the others take.
    Training data with a json or rec flag needs its validation data named the same way.
    ``masks``: the items carry their masks (`resolve_dataset`)."""
    if len(roles) == 2:
        for flag in ('json', 'rec'):
            given = [bool(getattr(args, '%s_%s' % (role, flag))) for role in roles]
            if any(given) and not all(given):
                raise ValueError('--train-%s and --val-%s go together' % (flag, flag))
    classes = class_list(getattr(args, 'classes', '')) or None
    datasets = []
    for role in roles:
        datasets.append(resolve_dataset(
            classes=classes, train=role == 'train',
            allow_missing_classes=getattr(args, 'allow_missing_classes', False),
            skip_empty=role == 'train' and getattr(args, 'skip_empty', False),
            background_images=getattr(args, 'background_images', False),
            masks=masks, **dataset_kwargs(args, role)))
        classes = datasets[0].classes
    return tuple(datasets)
