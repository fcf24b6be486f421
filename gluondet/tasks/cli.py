"""Flags shared by the training scripts, and their translation into datasets and a config.

Flag names and defaults follow GluonCV's ``train_*.py``; each script adds its own
(``--network``, ``--data-shape``, ...) and keeps only the translation here.
"""
import argparse
import logging
import os
import sys

from ..data import resolve_dataset
from ..engine import TrainConfig

LOG = logging.getLogger('gluondet')

SCALE_OUT_FLAGS = ('syncbn', 'dali', 'amp', 'horovod')


def add_training_args(parser, epochs, lr, lr_decay_epoch, batch_size, wd=0.0005,
                      log_interval=100, val_interval=1):
    """The flags every training script shares, with that script's defaults."""
    add = parser.add_argument
    add('--batch-size', type=int, default=batch_size, help='training mini-batch size')
    add('--dataset', default='voc', help='voc, coco, kitti or demo (the embedded synthetic set)')
    add('--dataset-root', default='~/.mxnet/datasets/',
        help='dataset folder: VOCdevkit parent, COCO root, KITTI root, or a VOC-style folder')
    add('--classes', default='', help='comma-separated class names of a custom VOC/KITTI set')
    add('--train-json', default='', help='COCO json of the training images (custom COCO data)')
    add('--val-json', default='', help='COCO json of the validation images')
    add('--image-root', default='', help='folder the COCO file names are relative to')
    add('--train-split', default='train',
        help='split(s) to train on in a VOC-style folder, comma-separated (e.g. trainval)')
    add('--val-split', default='val', help='split(s) to validate on in a VOC-style folder')
    add('--num-workers', '-j', dest='num_workers', type=int, default=4,
        help='data loading worker processes')
    add('--gpus', default='0', help="GPUs to train on, e.g. '0,1'; '' for the CPU")
    add('--epochs', type=int, default=epochs, help='training epochs')
    add('--resume', default='',
        help="a checkpoint json, 'auto' (this save prefix's last checkpoint) or a .params "
             'file (weights only, as GluonCV)')
    add('--start-epoch', type=int, default=0, help='first epoch (with a .params --resume)')
    add('--lr', type=float, default=lr, help='learning rate')
    add('--lr-mode', default='step', choices=('step', 'cosine'), help='learning rate schedule')
    add('--lr-decay', type=float, default=0.1, help='step schedule: decay factor')
    add('--lr-decay-epoch', default=lr_decay_epoch, help='step schedule: epochs to decay at')
    add('--lr-warmup', type=float, default=0, help='linear warmup length in epochs')
    add('--momentum', type=float, default=0.9, help='SGD momentum')
    add('--wd', type=float, default=wd, help='weight decay')
    add('--log-interval', type=int, default=log_interval, help='batches between log lines')
    add('--save-prefix', default='', help='prefix of saved files (the network name is appended)')
    add('--save-interval', type=int, default=10, help='epochs between saved .params')
    add('--val-interval', type=int, default=val_interval, help='epochs between validations')
    add('--seed', type=int, default=233, help='random seed')
    add('--logdir', default='', help='TensorBoard log folder (tensorboardX)')
    add('--no-hybridize', dest='hybridize', action='store_false', help='run imperatively')
    add('--no-pretrained-base', dest='pretrained_base', action='store_false',
        help='train the backbone from scratch (no ImageNet weights)')
    add('--syncbn', action='store_true', help='synchronized BatchNorm across devices')
    add('--dali', action='store_true', help='NVIDIA DALI data loading')
    add('--amp', action='store_true', help='automatic mixed precision')
    add('--horovod', action='store_true', help='distributed training with Horovod')


def check_scale_out(args):
    """Refuse the scale-out flags that are not implemented yet, rather than ignore them."""
    asked = ['--' + f for f in SCALE_OUT_FLAGS if getattr(args, f)]
    if asked:
        raise SystemExit('%s: not available in this version of gluondet yet; run without it'
                         % ', '.join(asked))


def _split_list(text, cast=str):
    return tuple(cast(v.strip()) for v in str(text).split(',') if v.strip())


# add_training_args' split defaults, which stand for the dataset's own default split
# (GluonCV's VOC07+12 trainval and VOC07 test in a VOCdevkit, COCO train2017 and val2017).
FLAG_SPLIT_DEFAULTS = ('train', 'val')


def build_datasets(args):
    """``(train, val)`` datasets for ``--dataset`` and its companion flags.

    Both come from :func:`gluondet.data.resolve_dataset`, as ``gluondet evaluate``'s do;
    ``--train-json`` and ``--val-json`` name COCO data whatever ``--dataset`` says. A bad
    flag or folder exits with one line naming it.
    """
    jsons = (args.train_json, args.val_json)
    if any(jsons) and not all(jsons):
        raise SystemExit('--train-json and --val-json go together')
    name = 'coco' if all(jsons) else args.dataset
    datasets = []
    try:
        for train, split, json_file, default in zip(
                (True, False), (args.train_split, args.val_split), jsons, FLAG_SPLIT_DEFAULTS):
            datasets.append(resolve_dataset(
                name, args.dataset_root, None if json_file or split == default else split,
                _split_list(args.classes) or None, json_file or None, args.image_root or None,
                train=train))
    except ValueError as err:     # DatasetError included
        raise SystemExit('%s: error: %s' % (os.path.basename(sys.argv[0]), err)) from None
    paths = [[ds.image_path(i) for i in range(len(ds))] for ds in datasets]
    if paths[0] == paths[1]:
        LOG.warning('the validation data is the training data (%d images): name another split '
                    'with --val-split', len(paths[0]))
    return tuple(datasets)


def train_config(args, save_prefix, **overrides):
    """The engine's `TrainConfig` from the shared flags."""
    values = dict(
        gpus=args.gpus, batch_size=args.batch_size, num_workers=args.num_workers,
        epochs=args.epochs, start_epoch=args.start_epoch, resume=args.resume, lr=args.lr,
        wd=args.wd, momentum=args.momentum, lr_mode=args.lr_mode, lr_decay=args.lr_decay,
        lr_decay_epoch=_split_list(args.lr_decay_epoch, int), warmup_epochs=args.lr_warmup,
        log_interval=args.log_interval, save_prefix=save_prefix,
        save_interval=args.save_interval, val_interval=args.val_interval, seed=args.seed,
        logdir=args.logdir, hybridize=args.hybridize)
    values.update(overrides)
    return TrainConfig.from_dict(values)


def parser(description):
    return argparse.ArgumentParser(description=description,
                                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)
