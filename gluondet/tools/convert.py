"""``gluondet convert``: a dataset to sharded MXNet RecordIO files (NVIDIA TAO's dataset_convert).

Any dataset the training scripts read (VOC, COCO, KITTI, the demo set, or records again) is
split into partitions (folds) and each into shards, written as IndexedRecordIO pairs in
GluonCV's detection label layout (:mod:`gluondet.data.record`)::

    PREFIX-fold-000-of-002-shard-00000-of-00004.rec    + .idx
    ...
    PREFIX-fold-001-of-002-shard-00003-of-00004.rec    + .idx
    PREFIX.json     classes, per-fold files, image and object counts per class, what was
                    left out and why, the command's settings

TAO's naming and folds: with ``--val-split P`` there are two folds, fold 0 the validation
images (P percent) and fold 1 the training images; without it, ``--num-partitions`` folds
of equal size (default one). ``--partition-mode random`` draws the folds from a seeded
shuffle (TAO takes its validation fold from the sorted file names, then shuffles);
``sequence`` keeps the dataset's order, so the folds are consecutive runs (frames of a
video stay together when their names sort by sequence) and the records stay in order.
Shards are consecutive, near-equal slices of a fold.

Images are stored as their files' bytes (no re-encoding), so a record decodes to the
pixels of the file; labels read back exactly (the pixel boxes ride in the header). Every
file is written under a temporary name and renamed when all are complete, the json last:
a failed or killed conversion leaves no partial file under the final names.
"""
import argparse
import glob
import json
import logging
import os
import random
import sys
from collections import Counter

import numpy as np

from ..dataset_flags import add_dataset_args, class_list, dataset_kwargs

__all__ = ['add_arguments', 'convert', 'main', 'partition', 'record_name', 'shard']

logger = logging.getLogger('gluondet')

PARTITION_MODES = ('random', 'sequence')


def record_name(prefix, fold, folds, index, shards):
    """``PREFIX-fold-FFF-of-NNN-shard-SSSSS-of-MMMMM.rec`` (TAO's names, with ``.rec``)."""
    return '%s-fold-%03d-of-%03d-shard-%05d-of-%05d.rec' % (prefix, fold, folds, index, shards)


def partition(count, mode='random', num_partitions=None, val_split=0., seed=42):
    """Split ``range(count)`` into folds.

    Parameters
    ----------
    count : int
        Number of items.
    mode : {'random', 'sequence'}
        ``random``: folds drawn from a shuffle seeded by ``seed``; ``sequence``: consecutive
        runs in the items' order.
    num_partitions : int, optional
        Number of folds: 2 with ``val_split`` (the only number it allows), else default 1.
    val_split : float
        Percent of the items in fold 0 (the validation fold), ``0 <= val_split < 100``;
        fold 1 gets the rest. 0: ``num_partitions`` equal folds.
    seed : int

    Returns
    -------
    list of list of int
    """
    if mode not in PARTITION_MODES:
        raise ValueError('partition mode must be one of %s, got %r'
                         % (', '.join(PARTITION_MODES), mode))
    if not 0 <= val_split < 100:
        raise ValueError('the validation split is a percentage, 0 <= val_split < 100, got %g'
                         % val_split)
    if val_split and num_partitions not in (None, 2):
        raise ValueError('a validation split makes 2 partitions (validation, training), not '
                         '%d: leave --num-partitions out' % num_partitions)
    if num_partitions is not None and num_partitions < 1:
        raise ValueError('the number of partitions must be positive, got %d' % num_partitions)
    folds = num_partitions or (2 if val_split else 1)
    order = list(range(count))
    if mode == 'random':
        random.Random(seed).shuffle(order)
    if val_split:
        cut = int(count * val_split / 100.)
        return [order[:cut], order[cut:]]
    return [order[i * count // folds:(i + 1) * count // folds] for i in range(folds)]


def shard(items, num_shards):
    """``items`` in ``num_shards`` consecutive slices whose sizes differ by at most one."""
    if num_shards < 1:
        raise ValueError('the number of shards must be positive, got %d' % num_shards)
    n = len(items)
    return [items[i * n // num_shards:(i + 1) * n // num_shards] for i in range(num_shards)]


def target_classes(source_classes, class_mapping=None, classes=None):
    """``(output classes, source id -> output id array, -1: dropped)``.

    With ``class_mapping`` (source name -> output name, many to one, TAO's
    ``target_class_mapping``), the output classes are ``classes`` if given (every target
    must be one) or the targets in order of first appearance, and source classes it does
    not map are dropped. Without it, the source classes are written as they are.
    """
    if not class_mapping:
        return tuple(source_classes), np.arange(len(source_classes))
    lookup = {str(k).strip().lower(): str(v).strip() for k, v in class_mapping.items()}
    output = tuple(classes) if classes else tuple(dict.fromkeys(lookup.values()))
    index = {name.strip().lower(): i for i, name in enumerate(output)}
    for source, target in lookup.items():
        if target.lower() not in index:
            raise ValueError('the class mapping maps %r to %r, which is not one of the classes '
                             '%s' % (source, target, ', '.join(output)))
    ids = [index[lookup[n.strip().lower()].lower()] if n.strip().lower() in lookup else -1
           for n in source_classes]
    return output, np.array(ids, dtype=np.int64)


def _encoded(dataset, idx):
    if hasattr(dataset, 'encoded_image'):
        return dataset.encoded_image(idx)
    with open(dataset.image_path(idx), 'rb') as f:
        return f.read()


def _check_image(data, where, size):
    """Decode the bytes as the readers will; DatasetError if they fail or the size differs."""
    from ..data.base import DatasetError
    from ..data.record import decode_image
    image = decode_image(data, where)
    height, width = image.shape[:2]
    if (width, height) != tuple(size):
        raise DatasetError(where, 'image', 'decoded as %dx%d, but the dataset says %dx%d'
                           % (width, height, size[0], size[1]), 'size_mismatch')


def convert(dataset, prefix, partition_mode='random', num_partitions=None, val_split=0.,
            num_shards=1, seed=42, class_mapping=None, classes=None, verify=True,
            on_error='skip', settings=None):
    """Write ``dataset`` as sharded record files; return the summary written to
    ``PREFIX.json``.

    Parameters
    ----------
    dataset : DetectionDataset
        The source (without a transform); images are read as the bytes of
        ``image_path(i)`` (or ``encoded_image(i)``), labels with ``label(i)``, and with
        ``with_masks`` each box's mask with ``masks(i)`` (written as RLE beside its box).
    prefix : str
        Output path prefix; its folder is made if missing.
    partition_mode, num_partitions, val_split, seed
        See :func:`partition`.
    num_shards : int
        Shards per fold.
    class_mapping : dict, optional
        Dataset class name -> written class name, many to one; see :func:`target_classes`.
    classes : sequence of str, optional
        With ``class_mapping``: the written classes and their order.
    verify : bool
        Decode every image before writing it; one that fails (or has another size than the
        dataset says) is skipped and counted, or raises with ``on_error='raise'``.
    on_error : {'skip', 'raise'}
    settings : dict, optional
        Recorded in the json as ``source`` (e.g. the command's dataset flags).

    Returns
    -------
    dict
        The json's content.
    """
    from ..data.base import DatasetError, DatasetReport
    from ..data.record import RecordWriter
    from ..files import atomic_write

    if num_shards < 1:
        raise ValueError('the number of shards must be positive, got %d' % num_shards)
    output_classes, id_map = target_classes(dataset.classes, class_mapping, classes)
    folds = partition(len(dataset), partition_mode, num_partitions, val_split, seed)
    folder = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(folder, exist_ok=True)
    report = DatasetReport()        # what the dataset left out, then what convert does
    for name in ('skipped', 'dropped', 'replaced'):
        getattr(report, name).update(getattr(dataset.report, name))
    report.clipped = dataset.report.clipped
    report.examples = {k: list(v) for k, v in dataset.report.examples.items()}
    summary_folds, writers = [], []
    try:
        for fold, members in enumerate(folds):
            counts, images, background, files = Counter(), 0, 0, []
            for index, part in enumerate(shard(members, num_shards)):
                path = record_name(prefix, fold, len(folds), index, num_shards)
                writer = RecordWriter(path)
                writers.append(writer)
                for idx in part:
                    label, kept = _mapped(dataset, idx, id_map, report)
                    size = dataset.image_size(idx)
                    where = dataset.image_path(idx)
                    try:
                        data = _encoded(dataset, idx)
                        if verify:
                            _check_image(data, where, size)
                    except OSError as err:
                        error = DatasetError(where, 'image', 'cannot be read (%s)'
                                             % err.strerror, 'bad_image')
                    except DatasetError as err:
                        error = err
                    else:
                        error = None
                    if error is not None:
                        if on_error == 'raise':
                            raise error
                        report.skip_image(error.reason or 'bad_image', str(error))
                        continue
                    writer.add(data, label, *size, masks=dataset.masks(idx)[kept]
                               if dataset.with_masks else None)
                    images += 1
                    background += not len(label)
                    counts.update(output_classes[int(c)] for c in label[:, 4])
                writer.close()      # renamed into place when every shard is written
                files.append(os.path.basename(path))
            summary_folds.append({
                'fold': fold, 'role': _role(fold, len(folds), val_split), 'files': files,
                'images': images, 'background': background,
                'objects': {c: counts[c] for c in output_classes}})
        report.images = sum(f['images'] for f in summary_folds)
        report.background = sum(f['background'] for f in summary_folds)
        report.boxes = sum(sum(f['objects'].values()) for f in summary_folds)
        summary = _summary(prefix, output_classes, summary_folds, report, dataset, dict(
            partition_mode=partition_mode, num_partitions=len(folds), val_split=val_split,
            num_shards=num_shards, seed=seed, class_mapping=class_mapping or None,
            verify=verify), settings)
        for writer in writers:
            writer.commit()
        # The json is the commit point: written last.
        atomic_write(prefix + '.json', json.dumps(summary, indent=1) + '\n')
    except BaseException:
        for writer in writers:
            writer.abort()
        raise
    if report.problems():
        logger.warning('convert: left out: %s', report.summary())
    written = {os.path.join(folder, name) for fold in summary_folds for name in fold['files']}
    stale = sorted({os.path.abspath(p) for p in glob.glob(glob.escape(prefix) + '-fold-*.rec')}
                   - written)
    if stale:
        logger.warning('convert: %d other record files with the prefix %s are not part of this '
                       'conversion (%s...): remove them, or mind your globs', len(stale), prefix,
                       os.path.basename(stale[0]))
    return summary


def _mapped(dataset, idx, id_map, report):
    """Item ``idx``'s label with the output class ids (dropped classes counted), and which
    of its rows were kept."""
    label = dataset.label(idx)
    ids = id_map[label[:, 4].astype(np.int64)]
    for row in label[ids < 0]:
        report.drop_box('unmapped_class', '%s: %s' % (dataset.image_path(idx),
                                                      dataset.classes[int(row[4])]))
    label = label[ids >= 0]
    label[:, 4] = ids[ids >= 0]
    return label, ids >= 0


def _role(fold, folds, val_split):
    if val_split:
        return 'val' if fold == 0 else 'train'
    return 'all' if folds == 1 else 'fold'


def _summary(prefix, classes, folds, report, dataset, options, settings):
    totals = Counter()
    for fold in folds:
        totals.update(fold['objects'])
    return {
        'format': 'gluondet RecordIO detection',
        'layout': {'header': ['header_width = 4 + 4 * objects', 'label_width = 6',
                              'image_width', 'image_height',
                              'xmin ymin xmax ymax in pixels, per object'],
                   'object': ['class_id', 'xmin / image_width', 'ymin / image_height',
                              'xmax / image_width', 'ymax / image_height', 'difficult'],
                   'no objects': 'one padding row, class_id -1'},
        'classes': list(classes),
        'images': sum(f['images'] for f in folds),
        'objects': {c: totals[c] for c in classes},
        'folds': folds,
        'prefix': os.path.basename(prefix),
        'options': options,
        'source': dict(settings or {}, read=getattr(dataset, '_name', type(dataset).__name__)),
        'left_out': report.as_dict(),
    }


# ---------------------------------------------------------------- command line

def add_arguments(parser):
    """``gluondet convert``'s flags: the training scripts' dataset flags for the data it reads
    (`gluondet.dataset_flags`, ``--classes`` with ``--class-mapping``: the classes written, in
    this order), then TAO's."""
    add_dataset_args(parser, roles=('train',), dataset=None)
    add = parser.add_argument
    add('-o', '--output', required=True,
        help='output path prefix: PREFIX-fold-000-of-00N-shard-00000-of-0000M.rec/.idx and '
             'PREFIX.json')
    add('--partition-mode', choices=PARTITION_MODES, default='random',
        help='random: folds from a seeded shuffle; sequence: consecutive runs in the '
             "dataset's order")
    add('--num-partitions', type=int,
        help='number of folds (default 1; 2 with --val-split)')
    add('--val-split', type=float, default=0.,
        help='percent of the images in fold 0, the validation fold (fold 1: training)')
    add('--num-shards', type=int, default=1, help='record files per fold')
    add('--seed', type=int, default=42, help='seed of the random partition')
    add('--on-error', choices=('skip', 'raise'), default='skip',
        help='skip: bad records are counted and left out; raise: the first one stops')
    add('--no-verify', dest='verify', action='store_false',
        help='do not decode each image before writing it')
    add('--masks', action='store_true',
        help="write each box's instance mask too (coco data with segmentations, the demo): "
             'records Mask R-CNN trains on')


def run(args):
    """Convert as the parsed flags say; print what was written. Returns the summary."""
    from ..data import resolve_dataset
    classes = class_list(args.classes) or None
    mapping = args.class_mapping
    source = dataset_kwargs(args, 'train')
    dataset = resolve_dataset(classes=tuple(mapping) if mapping else classes, train=True,
                              on_error=args.on_error, **dict(source, class_mapping=None),
                              allow_missing_classes=args.allow_missing_classes or bool(mapping),
                              skip_empty=args.skip_empty,
                              background_images=args.background_images, masks=args.masks)
    names = {'root': 'dataset_root'}      # the summary's keys, as the flags' dests were
    settings = {names.get(k, k): v for k, v in dict(source, classes=args.classes or None).items()
                if v is not None and k != 'class_mapping'}
    summary = convert(dataset, args.output, args.partition_mode, args.num_partitions,
                      args.val_split, args.num_shards, args.seed, mapping, classes,
                      args.verify, args.on_error, settings)
    folds, shards = len(summary['folds']), args.num_shards
    for fold in summary['folds']:
        print('fold %d (%s): %d images (%d background) in %d files %s; objects: %s' % (
            fold['fold'], fold['role'], fold['images'], fold['background'], len(fold['files']),
            _glob_of(args.output, fold['fold'], folds, shards),
            ', '.join('%s %d' % kv for kv in fold['objects'].items())))
    left_out = summary['left_out']
    if left_out['skipped'] or left_out['dropped']:
        print('left out: %s' % ', '.join('%s %d' % kv for kv in sorted(
            dict(Counter(left_out['skipped']) + Counter(left_out['dropped'])).items())))
    print('classes and counts: %s.json' % args.output)
    if len(summary['folds']) == 2 and args.val_split:
        print("train with: --dataset rec --train-rec '%s' --val-rec '%s'"
              % (_glob_of(args.output, 1, 2, shards), _glob_of(args.output, 0, 2, shards)))
    return summary


def _glob_of(prefix, fold, folds, shards):
    return '%s-fold-%03d-of-%03d-shard-*-of-%05d.rec' % (prefix, fold, folds, shards)


def main(args):
    """``gluondet convert``: run, with bad input printed as one line (exit code 1)."""
    try:
        run(args)
    except (ValueError, OSError) as err:        # DatasetError is a ValueError
        print('gluondet convert: error: %s' % err, file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    _parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(_parser)
    sys.exit(main(_parser.parse_args()))
