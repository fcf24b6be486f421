"""``train_center_net.py``: train CenterNet (the flags and defaults of GluonCV's
scripts/detection/center_net/train_center_net.py, plus gluondet's dataset and engine flags).

Examples
--------
The small network on the demo data, on the CPU::

    python scripts/train_center_net.py --network mobilenet0.5 --data-shape 256 \
        --dataset demo --gpus '' --epochs 1 --no-pretrained-base

GluonCV's VOC recipe (ResNet-18 v1b, 512 px)::

    python scripts/train_center_net.py --network resnet18_v1b --dataset voc --gpus 0,1,2,3 \
        --batch-size 128 --lr 5e-4 --warmup-epochs 5

The defaults are GluonCV's: Adam, batch 32, 140 epochs, lr 1.25e-4 stepped by 0.1 at epochs
90 and 120 (after a linear warmup from --warmup-lr, 0, over --warmup-epochs), weight decay
1e-4 except on the biases, seed 233, validation every epoch, params saved every 10.
"""
import logging

from ..demo import COMMON_SETTINGS, Recipe
from ..engine import fit
from ..errors import UserError
from ..model_zoo.center_net import CENTER_NET_ARCHS
from ..tasks import CenterNetTask
from . import common, config, flags

__all__ = ['build_parser', 'parse_args', 'network_name', 'network_flags', 'schedule', 'main',
           'DEMO']

PREFIX = 'center_net_'
NETWORKS = sorted(arch[len(PREFIX):] for arch in CENTER_NET_ARCHS)
# GluonCV's train_center_net.py defaults where TrainConfig's differ
GLUONCV = dict(batch_size=32, epochs=140, lr=1.25e-4, lr_mode='step', lr_decay_epoch='90,120',
               wd=1e-4, log_interval=100, save_interval=10, val_interval=1, seed=233,
               num_workers=4)


def build_parser():
    parser = flags.parser('Train CenterNet networks.')
    flags.add_network_arg(parser, 'resnet18_v1b', NETWORKS)
    parser.add_argument('--data-shape', type=int, default=512, help=(
        'the side of the square training input, and the longest side of the validation '
        'input (each image resized keeping its ratio)'))
    flags.add_training_args(parser, scale_out=('syncbn', 'amp'), **GLUONCV)
    # GluonCV's warmup rises from 0: --lr-warmup-factor 0 (its names set the same fields)
    parser.set_defaults(lr_warmup_factor=0.0)
    parser.add_argument('--warmup-epochs', dest='lr_warmup', type=float,
                        help="GluonCV's name of --lr-warmup")
    parser.add_argument('--warmup-lr', type=float, default=0.0,
                        help='the learning rate the warmup starts at (GluonCV\'s name; sets '
                             '--lr-warmup-factor to it over --lr)')
    parser.add_argument('--num-samples', type=int, default=-1,
                        help='step schedule: count an epoch as this many images, '
                             'NUM_SAMPLES // --batch-size steps, for the warmup and decays '
                             "(GluonCV's; -1: the training set's size)")
    parser.add_argument('--wh-weight', type=float, default=0.1,
                        help='weight of the box size (L1) loss')
    parser.add_argument('--center-reg-weight', type=float, default=1.0,
                        help='weight of the center offset (L1) loss')
    parser.add_argument('--flip-validation', action='store_true',
                        help='validate averaging the heatmap and sizes with those of the '
                             'mirrored image')
    return parser


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def network_name(args):
    """GluonCV's naming, ``center_net_{network}_{voc|coco|custom}``."""
    arch = PREFIX + args.network
    if arch not in CENTER_NET_ARCHS:
        raise UserError('unknown --network %r; CenterNet has %s' % (args.network,
                                                                      ', '.join(NETWORKS)))
    dataset = config.zoo_dataset(args)
    if dataset not in CENTER_NET_ARCHS[arch]['datasets']:
        dataset = 'custom'
    return '%s_%s' % (arch, dataset)


def network_flags(network):
    """The flags naming the zoo network ``network`` (``center_net_resnet18_v1b_voc`` ->
    ``--network resnet18_v1b``): `network_name`'s inverse."""
    return ['--network', network[len(PREFIX):].rsplit('_', 1)[0]]


def schedule(args):
    """The `TrainConfig` settings of GluonCV's Adam, ``--warmup-lr`` and ``--num-samples``
    (`common.gluoncv_schedule`)."""
    return dict(common.gluoncv_schedule(args), optimizer='adam')


def main(argv=None):
    return run(parse_args(argv))


def run(args):
    """Train as the parsed flags ``args`` say; returns the engine's `FitResult`."""
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    flags.check_args(args)
    name = network_name(args)
    train_dataset, val_dataset = common.build_datasets(args)
    try:
        task = CenterNetTask(
            name, train_dataset, val_dataset, args.data_shape, wh_weight=args.wh_weight,
            center_reg_weight=args.center_reg_weight, flip_validation=args.flip_validation,
            pretrained_base=args.pretrained_base, num_workers=args.num_workers,
            model_kwargs={'norm_layer': 'syncbn'} if args.syncbn else None,
            pruned_model=common.pruned_model(args, args.save_prefix + name))
    except ValueError as err:
        raise UserError(str(err)) from None
    result = fit(task, config.train_config(args, args.save_prefix + name, **schedule(args)))
    common.print_final(result)
    return result


def _demo_task(train, val, num_workers):
    return CenterNetTask('center_net_mobilenet0.5_custom', train, val, 160, val_size=192,
                         zoom_sigma=0.1, max_shift=0.2, pretrained_base=False,
                         num_workers=num_workers)


# The demo recipe: the small network trained on 160 px squares, validated at 192 px (a longest
# side of 192: the demo images at 3/4 of their 256 px), a lighter zoom and shift than
# GluonCV's (spread 0.1 instead of 0.4, the square's centre within 20% of the middle), Adam at
# lr 0.008 for batch 8 after a warmup epoch, cosine decay over 20 epochs; 6.6 to 6.8 minutes
# on one core beside another training. Measured (demo val mAP; CPU shared):
# - GluonCV's augmentation, lr 0.004 and the network cut at stride 32 with three
#   deconvolutions: 0.073, 0.269, 0.437, 0.527 after 5, 10, 15, 20 epochs at 256 px (32.7 min).
# - Cut at stride 16, the lighter augmentation, lr 0.008, 16 epochs at 160 px: 0.857 and 0.811
#   (seeds 1 and 2); the classes were the limit (stars 0.71, triangles 0.54 for seed 2). Batch
#   4 (0.754), focal exponent 1 instead of 2 (0.866) or a stride-8 output (0.214 after 8 epochs)
#   did no better; SGD at 0.02 collapsed the heatmap in its first epoch.
# - 32 channels at stride 4 instead of 64 (20% less a step), 20 epochs: 0.904 and 0.917 (seeds
#   1 and 2) at 160 px; seed 1's model gives 0.922 at 192 px (0.889 for the 64-channel model)
#   and 0.941 with --flip-validation.
DEMO = Recipe('center_net_mobilenet0.5_custom', 20, 1, _demo_task,
              dict(COMMON_SETTINGS, optimizer='adam', lr=8e-3, wd=1e-4, val_interval=20))
