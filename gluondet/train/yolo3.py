"""``train_yolo3.py``: train YOLOv3 (the flags and defaults of GluonCV's
scripts/detection/yolo/train_yolo3.py, plus gluondet's dataset and engine flags).

Examples
--------
The small network on the demo data, on the CPU::

    python scripts/train_yolo3.py --network mobilenet0.5 --data-shape 256 --dataset demo \
        --gpus '' --epochs 1 --no-pretrained-base --no-random-shape

GluonCV's VOC recipe (DarkNet-53, sizes 320 to 608 every 10 batches)::

    python scripts/train_yolo3.py --network darknet53 --dataset voc --gpus 0,1,2,3 \
        --batch-size 64 --label-smooth --mixup --no-wd --warmup-epochs 4

The defaults are GluonCV's: batch 64, 200 epochs, lr 0.001 stepped by 0.1 at epochs 160 and
180, seed 233, validation every epoch, params saved every 10.
"""
import logging

from ..demo import COMMON_SETTINGS, Recipe
from ..engine import fit
from ..errors import UserError
from ..model_zoo.yolo3 import YOLO3_ARCHS
from ..tasks import YOLO3Task
from ..tasks.yolo3 import RANDOM_SHAPES
from . import common, config, flags

__all__ = ['build_parser', 'parse_args', 'network_name', 'main', 'DEMO']

NETWORKS = sorted(arch.split('_', 1)[1] for arch in YOLO3_ARCHS)
# GluonCV's train_yolo3.py defaults where TrainConfig's differ
GLUONCV = dict(batch_size=64, epochs=200, lr=0.001, lr_mode='step', lr_decay_epoch='160,180',
               log_interval=100, save_interval=10, val_interval=1, seed=233, num_workers=4)


def build_parser():
    parser = flags.parser('Train YOLOv3 networks (with random input shapes).')
    flags.add_network_arg(parser, 'darknet53', NETWORKS)
    parser.add_argument('--data-shape', type=int, default=416, help=(
        'the input size of validation (and of training with --no-random-shape); training '
        'takes a size of %d to %d px every 10 batches' % (RANDOM_SHAPES[0], RANDOM_SHAPES[-1])))
    flags.add_training_args(parser, mixup=True, **GLUONCV)
    # GluonCV's names: the first default (--lr-warmup's 0) stands
    parser.add_argument('--warmup-epochs', dest='lr_warmup', type=float,
                        help="GluonCV's name of --lr-warmup")
    parser.add_argument('--warmup-lr', type=float, default=0.0,
                        help='the learning rate the warmup starts at (GluonCV\'s; sets '
                             '--lr-warmup-factor to it over --lr)')
    parser.add_argument('--lr-decay-period', type=int, default=0,
                        help='step schedule: decay every this many epochs (0: at '
                             '--lr-decay-epoch)')
    parser.add_argument('--num-samples', type=int, default=-1,
                        help='step schedule: count an epoch as this many images, '
                             'NUM_SAMPLES // --batch-size steps, for the warmup and decays '
                             "(GluonCV's; -1: the training set's size)")
    parser.add_argument('--no-random-shape', action='store_true',
                        help='train at --data-shape only (faster, slightly less accurate)')
    parser.add_argument('--label-smooth', action='store_true', help='label smoothing')
    parser.add_argument('--anchor-iou-thresh', type=float,
                        help="gluondet's: also assign each object to every anchor of IoU above "
                             "this with it (YOLOv4's iou_thresh, 0.213 in its configs; unset: "
                             "the best anchor only, GluonCV's)")
    parser.add_argument('--no-zoom', action='store_true',
                        help="gluondet's: leave out the zoom-out and crop of GluonCV's "
                             'augmentation (colour, resize and flip remain), for objects '
                             'already small in the images or a short training from scratch')
    return parser


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def network_name(args):
    """GluonCV's naming, ``yolo3_{network}_{voc|coco|custom}``."""
    arch = 'yolo3_' + args.network
    if arch not in YOLO3_ARCHS:
        raise UserError('unknown --network %r; YOLOv3 has %s' % (args.network,
                                                                   ', '.join(NETWORKS)))
    dataset = config.zoo_dataset(args)
    if dataset not in YOLO3_ARCHS[arch]['datasets']:
        dataset = 'custom'
    if dataset not in YOLO3_ARCHS[arch]['datasets']:
        raise UserError('--network %s has no %s model' % (args.network, config.zoo_dataset(args)))
    return '%s_%s' % (arch, dataset)


def network_flags(network):
    """The flags naming the zoo network ``network`` (``yolo3_darknet53_voc`` -> ``--network
    darknet53``): `network_name`'s inverse."""
    return ['--network', network[len('yolo3_'):].rsplit('_', 1)[0]]


def schedule(args):
    """The `TrainConfig` settings of GluonCV's ``--lr-decay-period``, ``--warmup-lr`` and
    ``--num-samples`` (`common.gluoncv_schedule`)."""
    overrides = {}
    if args.lr_decay_period:
        overrides['lr_decay_epoch'] = tuple(range(args.lr_decay_period, args.epochs,
                                                  args.lr_decay_period))
    overrides.update(common.gluoncv_schedule(args, overrides.get('lr_decay_epoch')))
    return overrides


def main(argv=None):
    return run(parse_args(argv))


def run(args):
    """Train as the parsed flags ``args`` say; returns the engine's `FitResult`."""
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    flags.check_args(args)
    name = network_name(args)
    if args.dali:
        raise UserError('--dali: YOLOv3 makes its targets in the data loader (numpy, per '
                        'image, at each batch\'s size), which DALI\'s pipelines do not run; '
                        'train without --dali')
    train_dataset, val_dataset = common.build_datasets(args)
    try:
        task = YOLO3Task(
            name, train_dataset, val_dataset, args.data_shape,
            random_shapes=None if args.no_random_shape else RANDOM_SHAPES,
            label_smooth=args.label_smooth, zoom=not args.no_zoom,
            anchor_iou_thresh=args.anchor_iou_thresh, pretrained_base=args.pretrained_base,
            num_workers=args.num_workers,
            model_kwargs={'norm_layer': 'syncbn'} if args.syncbn else None,
            pruned_model=common.pruned_model(args, args.save_prefix + name))
    except ValueError as err:
        raise UserError(str(err)) from None
    result = fit(task, config.train_config(args, args.save_prefix + name, **schedule(args)))
    common.print_final(result)
    return result


def _demo_task(train, val, num_workers):
    return YOLO3Task('yolo3_mobilenet0.5_custom', train, val, 160, random_shapes=None,
                     zoom=False, anchor_iou_thresh=0.213, pretrained_base=False,
                     num_workers=num_workers)


# The demo recipe: the small network at 160 px, GluonCV's augmentation without its zoom-out
# and crop, each object assigned to every anchor of IoU above 0.213 (YOLOv4's), batch 8, lr
# 0.02 after a warmup epoch from 4e-5 (the prediction starting at its priors), cosine decay.
# Measured on the way (12 epochs, lr 0.01, batch 4, demo val mAP): GluonCV's best-anchor
# assignment 0.764, with the anchors above 0.213 0.900 (0.634 against 0.415 after 6 epochs);
# the Xavier start diverged above lr 0.005 (0.847 after 14 epochs at 0.005); Adam 0.709.
DEMO = Recipe('yolo3_mobilenet0.5_custom', 14, 1, _demo_task,
              dict(COMMON_SETTINGS, lr=0.02, warmup_factor=0.002, wd=5e-4, val_interval=14))
