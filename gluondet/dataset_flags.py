"""The dataset flags, one spelling each: the training scripts (their training and validation
data), ``gluondet evaluate`` (the data it evaluates on, the validation data) and
``gluondet convert`` (the data it writes, read as training data) add them with
`add_dataset_args` and turn them into datasets with
:func:`gluondet.data.datasets_from_flags`: a folder, split or file named for one works in
all. It imports no data code (``gluondet --help`` stays fast).

``--dataset --dataset-root --classes --class-mapping --image-root`` (and for training data
``--skip-empty --background-images``), and per role
``--{train,val}-split``, ``--{train,val}-json``, ``--{train,val}-rec``. A command of one
role also takes ``--split``, ``--annotation-file`` and ``--rec`` for it (earlier spellings,
not shown in its help).
"""
import argparse

#: The formats ``--dataset`` names (`gluondet.data.resolve_dataset`).
DATASETS = ('voc', 'coco', 'kitti', 'demo', 'rec')

__all__ = ['DATASETS', 'add_dataset_args', 'dataset_kwargs', 'class_list', 'class_mapping']

ROLES = ('train', 'val')
DEFAULT_ROOT = '~/.mxnet/datasets/'     # GluonCV's, as its scripts write it
_ROLE_DATA = {'train': 'training', 'val': 'validation'}


def class_list(text):
    """``'a, b,'`` -> ``('a', 'b')``."""
    return tuple(name.strip() for name in str(text).split(',') if name.strip())


def class_mapping(text):
    """``--class-mapping car=car,van=car`` -> ``{'car': 'car', 'van': 'car'}``."""
    mapping = {}
    for item in class_list(text):
        source, sep, target = (v.strip() for v in item.partition('='))
        if not sep or not source or not target:
            raise argparse.ArgumentTypeError('expected type=class,..., got %r' % item)
        mapping[source] = target
    if not mapping:
        raise argparse.ArgumentTypeError('expected type=class,..., got %r' % text)
    return mapping


def add_dataset_args(parser, roles=ROLES, dataset='voc', classes=True):
    """Add the dataset flags for ``roles`` (``'train'``, ``'val'`` or both) to ``parser``.

    ``dataset`` is ``--dataset``'s default (None: required unless a json or rec flag names
    the data). ``classes=False`` leaves ``--classes`` to the command (``gluondet evaluate``'s
    names the model's classes, which label the data).
    """
    add = parser.add_argument
    add('--dataset', default=dataset, choices=DATASETS, type=str.lower,
        help='voc (a VOC folder, VOCdevkit or LabelImg folder), coco, kitti, demo (the '
             'embedded synthetic set) or rec (RecordIO files of gluondet convert)')
    add('--dataset-root', default=DEFAULT_ROOT,
        help="the data, or a folder holding it: voc: a VOC folder, a VOCdevkit or a LabelImg "
             "folder; coco: GluonCV's layout (annotations/, train2017/); kitti: SPLIT/image_2 "
             "and label_2; the default is GluonCV's (voc/VOC2007, coco/annotations in it)")
    if classes:
        add('--classes', default='',
            help="comma-separated class names of custom data (default: the data's own: in a "
                 "VOC or LabelImg folder the names its annotations write, sorted; in a "
                 "VOCdevkit VOC's 20; a COCO json's categories; KITTI's types)")
    add('--class-mapping', type=class_mapping,
        help='KITTI types to classes, many to one, e.g. car=car,van=car,pedestrian=person '
             "(TAO's target_class_mapping; other types are dropped)")
    if 'train' in roles:
        add('--allow-missing-classes', action='store_true',
            help='train --classes that have no box in the training data (else an error with '
                 'a did-you-mean)')
        add('--skip-empty', action='store_true',
            help="leave out the training images without a box (GluonCV's behaviour); by "
                 'default they are kept and train as negatives (background images)')
        add('--background-images', action='store_true',
            help='voc: also read the images that have no xml as background images (no '
                 'object): in a LabelImg folder the images without a .xml of their name '
                 'beside them, in a VOC folder the listed ids without Annotations/ID.xml')
    for role in roles:
        data = _ROLE_DATA[role]
        add('--%s-split' % role,
            help="the %s split(s), comma-separated: voc: split lists of a VOC folder, "
                 "YEAR_NAME in a VOCdevkit, subfolders of a LabelImg folder; coco: an "
                 "annotation file name; kitti: a subfolder (unset: GluonCV's, %s)"
                 % (data, _default_split_text(role)))
        add('--%s-json' % role, help='a COCO json of the %s data (custom COCO data)' % data)
        add('--%s-rec' % role,
            help='RecordIO %s data: a .rec file or a glob of shards, as gluondet convert '
                 'writes them (PREFIX.json beside for the class names)' % data)
    add('--image-root', help="coco: the folder the json's file names are relative to (default: "
                             "the json's folder)")
    if len(roles) == 1:
        for old, flag in (('--split', 'split'), ('--annotation-file', 'json'),
                          ('--rec', 'rec')):
            add(old, dest='%s_%s' % (roles[0], flag), help=argparse.SUPPRESS)


def _default_split_text(role):
    index = ROLES.index(role)
    return ('VOC07+12 trainval, train2017, train' if index == 0 else
            'VOC07 test, val2017, val')


def dataset_kwargs(args, role):
    """The `resolve_dataset` arguments the parsed flags give ``role``'s data (a json names
    COCO data, a rec flag records, whatever ``--dataset`` says)."""
    json_file, records = getattr(args, role + '_json'), getattr(args, role + '_rec')
    name = 'coco' if json_file else 'rec' if records else args.dataset
    if name is None:
        raise ValueError('give --dataset')
    return dict(dataset=name, root=args.dataset_root,
                split=None if json_file else getattr(args, role + '_split'),
                annotation_file=json_file, image_root=args.image_root, records=records,
                class_mapping=args.class_mapping)
