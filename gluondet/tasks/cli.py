"""Flags shared by the training scripts, and their translation into datasets and a config.

Flag names and defaults follow GluonCV's ``train_*.py``; each script adds its own
(``--network``, ``--data-shape``, ...) and keeps only the translation here.
"""
import argparse
import logging
import os

from ..data import COCODetection, DemoDetection, KITTIDetection, VOCDetection
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


def build_datasets(args):
    """``(train, val)`` datasets for ``--dataset`` and its companion flags."""
    root = os.path.expanduser(args.dataset_root)
    classes = _split_list(args.classes) or None
    name = args.dataset.lower()
    if args.train_json or args.val_json:
        if not (args.train_json and args.val_json):
            raise SystemExit('--train-json and --val-json go together')
        image_root = args.image_root or os.path.dirname(os.path.abspath(args.train_json))
        return (COCODetection(annotation_file=args.train_json, image_root=image_root),
                COCODetection(annotation_file=args.val_json, image_root=image_root,
                              skip_empty=False))
    if name == 'demo':
        return DemoDetection(split='train', seed=0), DemoDetection(split='val', seed=0)
    if name == 'voc':
        if os.path.isdir(os.path.join(root, 'VOC2007')) or os.path.isdir(
                os.path.join(root, 'VOCdevkit')):
            devkit = root if os.path.isdir(os.path.join(root, 'VOC2007')) else os.path.join(
                root, 'VOCdevkit')
            return (VOCDetection(devkit, splits=((2007, 'trainval'), (2012, 'trainval')),
                                 classes=classes),
                    VOCDetection(devkit, splits=((2007, 'test'),), classes=classes))
        return (VOCDetection(root, splits=_split_list(args.train_split), classes=classes),
                VOCDetection(root, splits=_split_list(args.val_split), classes=classes))
    if name == 'coco':
        return (COCODetection(root, splits='instances_train2017'),
                COCODetection(root, splits='instances_val2017', skip_empty=False))
    if name == 'kitti':
        mapping = {c: c for c in classes} if classes else None
        if not os.path.isdir(os.path.join(root, 'val')):
            raise SystemExit('KITTI has no validation split: put one in %s/val/{image_2,'
                             'label_2} beside %s/training' % (root, root))
        return (KITTIDetection(root, split='training', class_mapping=mapping),
                KITTIDetection(root, split='val', class_mapping=mapping))
    raise SystemExit('unknown --dataset %r: use voc, coco, kitti or demo, or --train-json/'
                     '--val-json for COCO-format data' % args.dataset)


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
