"""``train_faster_rcnn.py``: train Faster R-CNN (flags as GluonCV's
scripts/detection/faster_rcnn/train_faster_rcnn.py, plus gluondet's dataset flags).

GluonCV's per-dataset defaults (``DATASET_DEFAULTS``) fill only the flags left unset and
are printed in the log; the flags gluondet's engine makes unnecessary are accepted with a
notice (``notices``); ``--amp``, ``--horovod`` and ``--norm-layer syncbn`` run through the
engine (docs/distributed.md).

Examples
--------
The small FPN network on the demo data, on the CPU::

    python scripts/train_faster_rcnn.py --network resnet18_v1b --use-fpn --dataset demo \
        --gpus '' --epochs 1 --no-pretrained-base --image-short 128 --image-max-size 160

GluonCV's VOC recipe (VOC07+12 trainval, VOC07 test)::

    python scripts/train_faster_rcnn.py --network resnet50_v1b --dataset voc --gpus 0,1,2,3 \
        --batch-size 4
"""
import argparse
import logging

from ..demo import COMMON_SETTINGS, Recipe
from ..engine import fit
from ..errors import UserError
from ..model_zoo.faster_rcnn import FASTER_RCNN_ARCHS
from ..tasks import FasterRCNNTask
from . import common, config, flags

__all__ = ['build_parser', 'parse_args', 'network_name', 'notices', 'main', 'DEMO',
           'DATASET_DEFAULTS']

# GluonCV 0.10.5's parse_args, for the flags left unset. It has none for other datasets
# (its script stops there); gluondet gives them VOC's.
DATASET_DEFAULTS = {
    'voc': dict(epochs=20, lr=0.001, lr_decay_epoch='14,20', lr_warmup=-1, wd=5e-4),
    'coco': dict(epochs=26, lr=0.00125, lr_decay_epoch='17,23', lr_warmup=1000, wd=1e-4),
}

# GluonCV flags the engine has no use for: {dest: (GluonCV's default, why it is ignored)}.
# Set to anything else, they are accepted with this notice.
UNNEEDED = {
    'executor_threads': (1, "MXNet already runs the devices' forward and backward passes in "
                            'parallel'),
    'static_alloc': (False, 'the engine always hybridizes with static_alloc and static_shape '
                            '(--disable-hybridization: not at all)'),
}


def image_short(text):
    """``--image-short``: ``800``, or ``640,800`` for a random short side in that range."""
    try:
        sides = tuple(int(v) for v in text.split(','))
    except ValueError:
        sides = ()
    if len(sides) not in (1, 2) or min(sides) < 1:
        raise argparse.ArgumentTypeError('expected a side or a range like 640,800, got %r'
                                         % text)
    return sides[0] if len(sides) == 1 else sides


def build_parser():
    parser = flags.parser('Train Faster R-CNN networks end to end.')
    add = parser.add_argument
    flags.add_network_arg(parser, 'resnet50_v1b',
                        sorted({spec['backbone'] for spec in FASTER_RCNN_ARCHS.values()}))
    # GluonCV's: per-dataset defaults (DATASET_DEFAULTS), one image per device, a params file
    # every epoch, warmup in iterations, nccl
    flags.add_training_args(parser, warmup_unit='iterations', batch_per_device=1, mixup=True,
                            scale_out=('amp',), epochs=None, lr=None, lr_decay_epoch=None,
                            lr_warmup=None, wd=None, save_interval=1, kv_store='nccl')
    add('--verbose', action='store_true', help='log the names of the trainable parameters')
    add('--norm-layer', default=None, choices=['syncbn'],
        help='unset: frozen BatchNorm in the backbone, none in the heads (GluonCV). syncbn: '
             "GluonCV's faster_rcnn_fpn_syncbn_{network} (FPN implied), trainable BatchNorm "
             'in the backbone, the FPN and the box head, synchronized across horovodrun\'s '
             'processes or the GPUs of one process (not with a dist --kv-store)')
    add_rcnn_args(parser)
    return parser


def add_rcnn_args(parser):
    """The flags both R-CNN commands share (GluonCV's train_faster_rcnn.py and
    train_mask_rcnn.py): losses, FPN, image sizes, the accepted performance flags."""
    add = parser.add_argument
    add('--rpn-smoothl1-rho', type=float, default=1. / 9.,
        help='RPN box regression: transition point from L1 to L2 (0: L1)')
    add('--rcnn-smoothl1-rho', type=float, default=1.,
        help='R-CNN box regression: transition point from L1 to L2 (0: L1)')
    add('--use-fpn', action='store_true', help='feature pyramid network')
    add('--image-short', type=image_short, default=None,
        help="shorter side of the training images, or a range 'low,high' (unset: the "
             "network's, GluonCV's per name)")
    add('--image-max-size', type=int, default=None,
        help="cap on the longer side (unset: the network's)")
    add('--static-alloc', action='store_true',
        help='Mask R-CNN: hybridize with static_alloc and static_shape, every buffer of the '
             'graph kept (faster, about twice the memory); Faster R-CNN: always on')
    add('--executor-threads', type=int, default=1, help='accepted for GluonCV command lines')


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def network_name(args):
    """GluonCV's naming, ``faster_rcnn_[fpn_][syncbn_]{network}_{voc|coco|custom}``.

    ``--norm-layer syncbn`` implies ``--use-fpn`` (GluonCV has synchronized BatchNorm
    only with FPN; without ``--use-fpn`` its script names a network it lacks).

    Data with classes of its own (`config.zoo_dataset`) takes the ``custom`` variant; so
    does a network the zoo has no ``voc`` or ``coco`` variant of (FPN on VOC, ResNet-18:
    GluonCV lacks them too), with the dataset's classes.
    """
    syncbn = args.norm_layer == 'syncbn'
    arch = 'faster_rcnn_%s%s%s' % ('fpn_' if args.use_fpn or syncbn else '',
                                   'syncbn_' if syncbn else '', args.network)
    if arch not in FASTER_RCNN_ARCHS:
        flags = ' with --norm-layer syncbn' if syncbn else ' with --use-fpn' if args.use_fpn else ''
        networks = {a.replace('faster_rcnn_', '').replace('fpn_', '').replace('syncbn_', '')
                    for a in FASTER_RCNN_ARCHS if a.startswith('faster_rcnn_fpn_syncbn_') == syncbn}
        raise UserError('no Faster R-CNN on --network %s%s in gluondet; it has %s'
                        % (args.network, flags, ', '.join(sorted(networks))))
    dataset = config.zoo_dataset(args)
    if dataset not in FASTER_RCNN_ARCHS[arch]['datasets']:
        dataset = 'custom'
    return '%s_%s' % (arch, dataset)


def network_flags(network, prefix='faster_rcnn_'):
    """The flags naming the zoo network ``network`` (``faster_rcnn_fpn_resnet50_v1b_coco`` ->
    ``--network resnet50_v1b --use-fpn``): `network_name`'s inverse; ``prefix``: the
    family's (Mask R-CNN's names are built alike)."""
    arch = network[len(prefix):].rsplit('_', 1)[0]
    flags = []
    for part, flag in (('fpn_', ['--use-fpn']), ('syncbn_', ['--norm-layer', 'syncbn'])):
        if arch.startswith(part):
            arch, flags = arch[len(part):], flags + flag
    return ['--network', arch] + flags


def notices(args, name):
    """One line per choice the user should know of: a ``_custom`` fallback, ignored flags."""
    lines = []
    if args.norm_layer == 'syncbn' and not args.use_fpn:
        lines.append('--norm-layer syncbn: training %s, with FPN (GluonCV has synchronized '
                     'BatchNorm only with FPN)' % name)
    dataset = config.zoo_dataset(args)
    if dataset != 'custom' and name.endswith('_custom'):
        lines.append('GluonCV has no %s_%s: training %s on the %s classes'
                     % (name[:-len('_custom')], dataset, name, dataset))
    return lines + common.unneeded_notices(args, UNNEEDED)


def main(argv=None):
    return run(parse_args(argv))


def run(args):
    """Train as the parsed flags ``args`` say; returns the engine's `FitResult`."""
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    flags.check_args(args)
    name = network_name(args)
    resolved, defaults_used = config.dataset_defaults(args, DATASET_DEFAULTS, fallback='voc')
    task = rcnn_task(FasterRCNNTask, name, args, common.build_datasets(resolved),
                     {'norm_layer': 'syncbn'} if args.norm_layer else None)
    return fit_and_report(task, resolved, name, [defaults_used] + notices(args, name),
                          static_alloc=True)


def rcnn_task(cls, name, args, datasets, model_kwargs):
    """The task ``cls`` (`FasterRCNNTask` or a subclass) of the zoo network ``name`` on the
    ``(train, val)`` datasets, as the R-CNN flags ``args`` say."""
    return cls(name, *datasets, short=args.image_short, max_size=args.image_max_size,
               pretrained_base=args.pretrained_base, rpn_rho=args.rpn_smoothl1_rho,
               rcnn_rho=args.rcnn_smoothl1_rho, num_workers=args.num_workers,
               model_kwargs=model_kwargs,
               pruned_model=common.pruned_model(args, args.save_prefix + name))


def fit_and_report(task, resolved, name, lines, **overrides):
    """Train ``task`` with the settings of the flags ``resolved`` and the `TrainConfig`
    ``overrides``, the startup ``lines`` logged; print the final metrics; the engine's
    `FitResult`."""
    settings = config.train_config(resolved, resolved.save_prefix + name, **overrides)
    startup = common.StartupLog(lines, trainable=resolved.verbose)
    result = fit(task, settings, hooks=[startup])
    common.print_final(result)
    return result


def _demo_task(train, val, num_workers):
    return FasterRCNNTask(
        'faster_rcnn_fpn_resnet18_v1b_custom', train, val, short=128, max_size=256,
        pretrained_base=False, num_workers=num_workers,
        model_kwargs=dict(anchor_sizes=(16, 32, 64, 128, 256), num_sample=64, pos_ratio=0.5,
                          rpn_train_pre_nms=1000, rpn_train_post_nms=300))


# The demo recipe (faster_rcnn_fpn_resnet18_v1b_custom, 5 epochs at 128 px, about seven
# minutes, mAP 0.92). Measured (batch 8, lr 0.04 cosine, BatchNorm with batch statistics,
# first epochs on a loaded machine):
# - At 160 px with the zoo's anchors (32 to 512 px) and 64 samples a quarter positive,
#   3 epochs gave mAP 0.48; anchors of 16 to 256 px (most demo objects are under 32 px
#   there: with 32 px anchors their best IoU is under the RPN's 0.3, so they get no
#   positive anchor) gave 0.55.
# - At 128 px with those anchors and half of the 64 samples positive, an 8-epoch cosine
#   run passed 0.9 after its 4th epoch (0.54, 0.82, 0.92, 0.95, 0.95 after epochs 2-6)
#   at 85 s an epoch on idle cores.
# - 4 epochs (0.75) or 32 samples (0.87 after 5) are not enough. A step is 0.63 s since ROI
#   Align trains with the sparse backward on CPUs (0.85 s with MXNet's), 80 s an epoch.
DEMO = Recipe('faster_rcnn_fpn_resnet18_v1b_custom', 5, 1, _demo_task,
              dict(COMMON_SETTINGS, wd=1e-4, warmup_epochs=0.5, val_interval=5))
