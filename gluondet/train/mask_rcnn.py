"""``train_mask_rcnn.py``: train Mask R-CNN (flags as GluonCV's
scripts/instance/mask_rcnn/train_mask_rcnn.py, plus gluondet's dataset flags).

GluonCV's defaults fill the flags left unset (``--epochs 26``, ``--lr 0.00125`` per image of
the batch, ``--lr-decay-epoch 17,23``, ``--lr-warmup`` ``max(8000 / batch, 1000)``
iterations, ``--wd 1e-4``) and are printed in the log. The training data needs masks: a COCO
json with segmentations (``--dataset coco``), the demo's shapes, or records written with
them. ``custom-model`` and its flags build GluonCV's ``custom_mask_rcnn_fpn``.

Examples
--------
The small FPN network on the demo data, on the CPU::

    python scripts/train_mask_rcnn.py --network resnet18_v1b --use-fpn --dataset demo \
        --gpus '' --epochs 1 --no-pretrained-base --image-short 128 --image-max-size 160

GluonCV's COCO recipe on 8 GPUs::

    python scripts/train_mask_rcnn.py --network resnet50_v1b --use-fpn --dataset coco \
        --gpus 0,1,2,3,4,5,6,7 --batch-size 8
"""
import argparse
import logging

from ..demo import COMMON_SETTINGS, Recipe
from ..errors import UserError
from ..model_zoo.mask_rcnn import MASK_RCNN_ARCHS
from ..tasks import MaskRCNNTask
from . import common, config, flags
from .faster_rcnn import UNNEEDED as FASTER_RCNN_UNNEEDED
from .faster_rcnn import add_rcnn_args, fit_and_report, image_short, rcnn_task
from .faster_rcnn import network_flags as rcnn_network_flags

__all__ = ['build_parser', 'parse_args', 'network_name', 'network_flags', 'notices', 'main',
           'run', 'DEMO']

# --static-alloc is not among them: it sets TrainConfig.static_alloc here
UNNEEDED = dict(executor_threads=FASTER_RCNN_UNNEEDED['executor_threads'], use_ext=(
    False, "gluondet's COCO evaluation is its own, pycocotools' numbers at array speed"))
# GluonCV's custom-model flags: (flag, type, default, custom_mask_rcnn_fpn keyword, help)
_CUSTOM = (
    ('--num-fpn-filters', int, 256, 'num_fpn_filters', 'filters of the FPN outputs'),
    ('--num-box-head-conv', int, 4, 'num_box_head_conv',
     'convolutions of the box head (with --norm-layer)'),
    ('--num-box-head-conv-filters', int, 256, 'num_box_head_conv_filters',
     'filters of those convolutions'),
    ('--num_box_head_dense_filters', int, 1024, 'num_box_head_dense_filters',
     'units of the box head dense layers'),
    ('--nms-thresh', float, 0.5, 'nms_thresh', 'inference NMS IoU'),
    ('--nms-topk', int, -1, 'nms_topk', 'candidates per class entering NMS'),
    ('--post-nms', int, -1, 'post_nms', 'detections kept after NMS'),
    ('--roi-mode', str, 'align', 'roi_mode', 'align or pool'),
    ('--roi-size', str, '14,14', 'roi_size', 'pooled region size'),
    ('--strides', str, '4,8,16,32,64', 'strides', 'strides of the pyramid levels'),
    ('--clip', float, 4.14, 'clip', 'largest log-size box offset'),
    ('--rpn-channel', int, 256, 'rpn_channel', 'channels of the RPN convolution'),
    ('--anchor-base-size', int, 16, 'base_size', 'anchor base size'),
    ('--anchor-aspect-ratio', str, '0.5,1,2', 'ratios', 'anchor height / width ratios'),
    ('--anchor-scales', str, '2,4,8,16,32', 'scales', 'anchor scales of the base size'),
    ('--anchor-alloc-size', str, '384,384', 'alloc_size', 'anchors precomputed for this map'),
    ('--rpn-nms-thresh', float, 0.7, 'rpn_nms_thresh', 'RPN NMS IoU'),
    ('--rpn-train-pre-nms', int, 12000, 'rpn_train_pre_nms', 'RPN proposals before NMS'),
    ('--rpn-train-post-nms', int, 2000, 'rpn_train_post_nms', 'RPN proposals after NMS'),
    ('--rpn-test-pre-nms', int, 6000, 'rpn_test_pre_nms', 'RPN test proposals before NMS'),
    ('--rpn-test-post-nms', int, 1000, 'rpn_test_post_nms', 'RPN test proposals after NMS'),
    ('--rpn-min-size', int, 1, 'rpn_min_size', 'smallest proposal side'),
    ('--rcnn-num-samples', int, 512, 'num_sample', 'sampled regions per image'),
    ('--rcnn-pos-iou-thresh', float, 0.5, 'pos_iou_thresh', 'IoU of a positive region'),
    ('--rcnn-pos-ratio', float, 0.25, 'pos_ratio', 'positives among the samples, at most'),
    ('--max-num-gt', int, 100, 'max_num_gt', 'accepted (any number of boxes trains)'),
    ('--target-roi-scale', int, 2, 'target_roi_scale', 'mask grid / pooled size (FPN: 2)'),
    ('--num-mask-head-convs', int, 4, 'num_fcn_convs', 'mask head convolutions'),
)
_TUPLES = {'roi_size': int, 'strides': int, 'ratios': float, 'scales': float,
           'alloc_size': int}


def build_parser():
    parser = flags.parser('Train Mask R-CNN networks end to end.')
    add = parser.add_argument
    flags.add_network_arg(parser, 'resnet50_v1b',
                          sorted({spec['backbone'] for spec in MASK_RCNN_ARCHS.values()}))
    # GluonCV's: 8 images a batch, defaults from the batch size (run), a params file every
    # epoch, warmup in iterations, nccl
    flags.add_training_args(parser, warmup_unit='iterations', scale_out=('amp',), batch_size=8,
                            epochs=None, lr=None, lr_decay_epoch=None, lr_warmup=None, wd=None,
                            save_interval=1, kv_store='nccl')
    parser.set_defaults(dataset='coco')     # GluonCV's: instance masks come with COCO
    add('--verbose', action='store_true', help='log the names of the trainable parameters')
    add('--norm-layer', default=None, choices=['bn', 'syncbn'],
        help="unset: frozen BatchNorm in the backbone, none in the heads (GluonCV). bn or "
             "syncbn: GluonCV's mask_rcnn_fpn_syncbn_{network} (FPN implied), trainable "
             "BatchNorm in the backbone, FPN and heads, synchronized across horovodrun's "
             'processes or the GPUs of one process')
    add_rcnn_args(parser)
    add('--use-ext', action='store_true', help='accepted for GluonCV command lines')
    custom = parser.add_subparsers(dest='custom_model').add_parser(
        'custom-model', help="GluonCV's custom_mask_rcnn_fpn with the flags that follow "
                             '(FPN implied; --image-short and --image-max-size apply)')
    for flag, kind, default, _, text in _CUSTOM:
        custom.add_argument(flag, type=kind, default=default, help=text)
    # GluonCV has these three under custom-model only: accepted on either side of it
    custom.add_argument('--no-pretrained-base', dest='pretrained_base', action='store_false',
                        default=argparse.SUPPRESS, help='as before custom-model')
    custom.add_argument('--image-short', type=image_short, default=argparse.SUPPRESS,
                        help='as before custom-model')
    custom.add_argument('--image-max-size', type=int, default=argparse.SUPPRESS,
                        help='as before custom-model')
    return parser


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def _syncbn(args):
    return args.norm_layer in ('bn', 'syncbn')


def network_name(args):
    """GluonCV's naming, ``mask_rcnn_[fpn_][syncbn_]{network}_{coco|custom}``
    (``custom_mask_rcnn_fpn`` with ``custom-model``); data with classes of its own, or a
    network the zoo has for COCO only, takes ``_custom`` if the zoo has it."""
    if args.custom_model:
        return 'custom_mask_rcnn_fpn'
    syncbn = _syncbn(args)
    arch = 'mask_rcnn_%s%s%s' % ('fpn_' if args.use_fpn or syncbn else '',
                                 'syncbn_' if syncbn else '', args.network)
    if arch not in MASK_RCNN_ARCHS:
        networks = sorted({a.replace('mask_rcnn_', '').replace('fpn_', '').replace(
            'syncbn_', '') for a in MASK_RCNN_ARCHS
            if a.startswith('mask_rcnn_fpn_syncbn_') == syncbn})
        with_flags = (' with --norm-layer %s' % args.norm_layer if syncbn else
                      ' with --use-fpn' if args.use_fpn else '')
        raise UserError('no Mask R-CNN on --network %s%s in gluondet; it has %s'
                        % (args.network, with_flags, ', '.join(networks)))
    datasets = MASK_RCNN_ARCHS[arch]['datasets']
    dataset = config.zoo_dataset(args)
    if dataset not in datasets:
        if 'custom' not in datasets:
            raise UserError('%s is for COCO\'s classes only (GluonCV\'s); for --dataset %s use '
                            '--network resnet18_v1b (with or without --use-fpn) or '
                            'custom-model' % (arch, args.dataset))
        dataset = 'custom'
    return '%s_%s' % (arch, dataset)


def network_flags(network):
    """The flags naming the zoo network ``network``: `network_name`'s inverse."""
    if network == 'custom_mask_rcnn_fpn':
        return ['custom-model']
    return rcnn_network_flags(network, 'mask_rcnn_')


def _custom_kwargs(args):
    """``custom_mask_rcnn_fpn``'s keywords from the custom-model flags."""
    kwargs = {}
    for flag, _, _, key, _ in _CUSTOM:
        value = getattr(args, flag[2:].replace('-', '_'))
        if key in _TUPLES:
            try:
                value = tuple(_TUPLES[key](v) for v in str(value).split(','))
            except ValueError:
                raise UserError('%s: comma-separated numbers, got %r' % (flag, value)) from None
        kwargs[key] = value
    kwargs['base_network_name'] = args.network
    if _syncbn(args):
        kwargs['norm_layer'] = 'syncbn'
    return kwargs


def _gluoncv_defaults(args):
    """GluonCV's defaults of the flags left unset, which depend on the batch size."""
    batch = args.batch_size
    table = {'coco': dict(epochs=26, lr=0.00125 * batch, lr_decay_epoch='17,23',
                          lr_warmup=max(8000 // batch, 1000), wd=1e-4)}
    return config.dataset_defaults(args, table, fallback='coco')


def notices(args, name):
    """One line per choice the user should know of: implied FPN, ignored flags."""
    lines = []
    if _syncbn(args) and not args.use_fpn and not args.custom_model:
        lines.append('--norm-layer %s: training %s, with FPN (GluonCV has synchronized '
                     'BatchNorm only with FPN)' % (args.norm_layer, name))
    return lines + common.unneeded_notices(args, UNNEEDED)


def main(argv=None):
    return run(parse_args(argv))


def run(args):
    """Train as the parsed flags ``args`` say; returns the engine's `FitResult`."""
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    flags.check_args(args)
    name = network_name(args)
    resolved, defaults_used = _gluoncv_defaults(args)
    model_kwargs = _custom_kwargs(args) if args.custom_model else (
        {'norm_layer': 'syncbn'} if _syncbn(args) else None)
    task = rcnn_task(MaskRCNNTask, name, args, common.build_datasets(resolved, masks=True),
                     model_kwargs)
    return fit_and_report(task, resolved, name, [defaults_used] + notices(args, name))


def _demo_task(train, val, num_workers):
    return MaskRCNNTask(
        'mask_rcnn_fpn_resnet18_v1b_custom', train, val, short=128, max_size=256,
        pretrained_base=False, num_workers=num_workers,
        model_kwargs=dict(anchor_sizes=(16, 32, 64, 128, 256), num_sample=64, pos_ratio=0.5,
                          rpn_train_pre_nms=1000, rpn_train_post_nms=300))


# The demo recipe: Faster R-CNN's (mask_rcnn_fpn_resnet18_v1b_custom at 128 px), its masks
# learnt beside the boxes.
DEMO = Recipe('mask_rcnn_fpn_resnet18_v1b_custom', 5, 1, _demo_task,
              dict(COMMON_SETTINGS, wd=1e-4, warmup_epochs=0.5, val_interval=5), masks=True)
