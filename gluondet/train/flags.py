"""The flags every training command shares, and the checks made on them before any data is
read.

A flag that sets a `TrainConfig` field has the field's name and, unless a command says
otherwise where it calls `add_training_args` (GluonCV's per-dataset defaults, for one),
the field's default: one default per setting. A default of None stands for "the
dataset's" (`config.dataset_defaults`).
"""
import argparse
import dataclasses
import logging
import os
import sys
import tempfile

from ..dataset_flags import add_dataset_args
from ..engine import TrainConfig
from ..engine.config import KV_STORES, LR_MODES
from ..engine.context import make_contexts
from ..engine.distributed import check_launch
from ..errors import ArgumentParser, UserError, add_debug_flag

__all__ = ['parser', 'add_network_arg', 'add_training_args', 'check_args', 'check_writable',
           'SCALE_OUT_FLAGS']

LOG = logging.getLogger('gluondet')
SCALE_OUT_FLAGS = ('syncbn', 'dali', 'amp')
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in the help, but not None (the help says what an unset flag means) nor a
    switch's (on when given)."""

    def _get_help_string(self, action):
        if action.default is None or isinstance(action, (argparse._StoreTrueAction,
                                                         argparse._StoreFalseAction)):
            return action.help
        return super()._get_help_string(action)


def parser(description):
    """A training command's parser: one-line errors, defaults in the help."""
    return ArgumentParser(description=description, formatter_class=_HelpFormatter)


def add_network_arg(parser, default, names):
    """``--network`` and its alias ``--backbone`` (ODTK's name; horovodrun 0.28 stops at
    ``--network`` anywhere on its command line, an ambiguous prefix of its own options)."""
    parser.add_argument('--network', '--backbone', dest='network', default=default,
                        help='base network: %s (--backbone: the same; under horovodrun, which '
                             'refuses --network, use --backbone)' % ', '.join(names))


def add_training_args(parser, warmup_unit='epochs', batch_per_device=0, mixup=False,
                      scale_out=SCALE_OUT_FLAGS, **defaults):
    """The shared flags: the dataset's (`gluondet.dataset_flags`), then the training's.

    Parameters
    ----------
    warmup_unit : {'epochs', 'iterations'}
        What ``--lr-warmup`` counts: epochs (gluondet's SSD) or iterations (GluonCV's
        Faster R-CNN, ODTK; ``-1`` is none).
    batch_per_device : int
        Nonzero: an unset ``--batch-size`` means this many images on every device of every
        process (`TrainConfig.batch_per_device`).
    mixup : bool
        Add ``--mixup`` and ``--no-mixup-epochs`` (a task with ``supports_mixup``).
    scale_out : sequence of str
        The command's scale-out switches, of `SCALE_OUT_FLAGS`.
    **defaults
        ``dest=value``: the command's own default of a flag, where it differs from the
        `TrainConfig` field's (None: the dataset's, `config.dataset_defaults`); also
        ``lr_warmup``.
    """
    unknown = set(defaults) - set(_DEFAULTS) - {'lr_warmup'}
    if unknown:
        raise TypeError('add_training_args: no such setting %s' % ', '.join(sorted(unknown)))

    def add(*flags, **kwargs):
        dest = kwargs.get('dest') or flags[0].lstrip('-').replace('-', '_')
        if 'default' not in kwargs and kwargs.get('action') is None:
            kwargs['default'] = defaults.get(dest, _DEFAULTS.get(dest))
        if dest in defaults and defaults[dest] is None:
            kwargs['help'] += " (unset: the dataset's default, printed in the log)"
        parser.add_argument(*flags, **kwargs)

    if batch_per_device:
        add('--batch-size', type=int, default=None, help=(
            'images per step over all devices and processes; a number that does not split '
            'over the processes is rounded down to one that does (unset: %d per device, '
            'i.e. per GPU and per horovodrun process)' % batch_per_device))
    else:
        add('--batch-size', type=int,
            help='images per step over all devices and processes; a number that does not '
                 'split over the processes is rounded down to one that does')
    parser.set_defaults(batch_per_device=batch_per_device, warmup_unit=warmup_unit)
    add_dataset_args(parser)
    add('--num-workers', '-j', dest='num_workers', type=int,
        help='data loading worker processes')
    # unset, not TrainConfig's '': a GPU where there is one (GluonCV's default '0')
    add('--gpus', default=None, help="GPUs to train on, e.g. '0,1'; '' for the CPU (unset: "
                                     'GPU 0, or the CPU with a warning on a machine without '
                                     'a GPU)')
    add('--epochs', type=int, help='training epochs')
    add('--resume', help="a checkpoint json, 'auto' (this save prefix's last checkpoint) or "
                         'a .params file (weights only, as GluonCV)')
    add('--start-epoch', type=int, help='first epoch (with a .params --resume)')
    add('--pruned-model', metavar='PATH', default=None,
        help="retrain a model gluondet prune wrote (PATH.params, its .json beside; TAO's "
             'pruned_model_path): the network takes its channels and starts from its weights '
             "(--resume of the run's checkpoint needs it no more: it records the channels)")
    add('--lr', type=float, help='learning rate')
    add('--lr-mode', choices=LR_MODES,
        help="learning rate schedule (soft_start_annealing: NVIDIA TAO's, with --lr-min "
             '--soft-start --annealing; --lr is its max_learning_rate)')
    add('--lr-min', type=float,
        help="cosine and soft_start_annealing: the lowest learning rate (TAO's "
             'min_learning_rate)')
    add('--soft-start', type=float,
        help='soft_start_annealing: fraction of training ramping up from --lr-min to --lr')
    add('--annealing', type=float,
        help='soft_start_annealing: fraction of training from which it decays to --lr-min')
    add('--lr-decay', type=float, help='step schedule: decay factor')
    add('--lr-decay-epoch', type=str, help='step schedule: epochs to decay at',
        default=defaults.get('lr_decay_epoch', ','.join(map(str, _DEFAULTS['lr_decay_epoch']))))
    add('--lr-warmup', type=float if warmup_unit == 'epochs' else int,
        default=defaults.get('lr_warmup', 0.0),
        help='linear warmup length in %s%s' % (
            warmup_unit, '' if warmup_unit == 'epochs' else ' (-1: none)'))
    add('--lr-warmup-factor', type=float, default=_DEFAULTS['warmup_factor'],
        help='the warmup starts at lr times this factor')
    add('--momentum', type=float, help='SGD momentum')
    add('--wd', type=float, help='weight decay')
    add('--no-wd', action='store_true',
        help="no weight decay on biases and on the norm layers' gamma and beta")
    add('--clip-gradient', type=float,
        help='clip each gradient element to [-value, value]; -1: no clipping')
    if mixup:
        add('--mixup', action='store_true', help='mixup training (pairs of images blended)')
        add('--no-mixup-epochs', type=int,
            help='with --mixup, the last this many epochs train without it')
    add('--log-interval', type=int, help='batches between log lines')
    # a prefix the network's name is appended to (TrainConfig's is the whole prefix)
    add('--save-prefix', default='',
        help='prefix of saved files (the network name is appended); PREFIX_curves.png shows '
             'the losses, learning rate and validation mAP by epoch, redrawn at each validation')
    add('--save-interval', type=int, help='epochs between saved .params')
    add('--val-interval', type=int, help='epochs between validations')
    add('--seed', type=int, help='random seed')
    add('--logdir', help='TensorBoard log folder (tensorboardX)')
    add('--tb-images', type=int, metavar='N',
        help="with --logdir, show N images of a training batch with their boxes in "
             "TensorBoard (TAO's visualizer num_images); 0: none")
    add('--tb-images-interval', type=int, metavar='STEPS',
        help='steps between the batches shown; 0: the first batch of every epoch')
    add('--early-stop-monitor', metavar='NAME',
        help="early stopping (TAO's early_stopping monitor): a validation metric (mAP), "
             "which must rise, or the training 'loss' (or a loss name, loss_cls ...), whose "
             "epoch mean must fall; '': none")
    add('--early-stop-min-delta', type=float,
        help='early stopping: the least change that counts as an improvement')
    add('--early-stop-patience', type=int,
        help='early stopping: stop at this many checks (validations, or epochs for a loss) '
             'in a row without improvement')
    add('--ema', action='store_true',
        help="model EMA (TAO's model_ema): validate and save the .params of an exponential "
             'moving average of the weights; training goes on with the trained ones')
    add('--ema-decay', type=float,
        help='the model EMA\'s decay, reached after a ramp (1 + n) / (10 + n) over the steps n: '
             'the average spans about the last 1 / (1 - decay) steps')
    add('--no-hybridize', '--disable-hybridization', dest='hybridize', action='store_false',
        help='run imperatively')
    add('--no-pretrained-base', dest='pretrained_base', action='store_false',
        help='train the backbone from scratch (no ImageNet weights)')
    add('--horovod', action='store_true',
        help='one process of a horovodrun job: horovodrun -np 2 %s%%(prog)s --horovod ... '
             '(pass --backbone, not --network, under horovodrun; see docs/distributed.md)'
             % ('python ' if sys.argv[0].endswith('.py') else ''))
    add('--kv-store', choices=KV_STORES,
        help="how gradients are summed: over one process's GPUs device, local or nccl (CPU: "
             'device); over the workers of a parameter server started by gluondet launch '
             'dist_sync, dist_device_sync or dist_async')
    add('--hang-timeout', type=float,
        help='with several processes, a process that makes no progress for this many seconds '
             'ends the job (a stalled or dead peer); 0: wait forever')
    helps = {'syncbn': "BatchNorm statistics over the whole batch: across horovodrun's "
                       'processes, or the GPUs of one process',
             'dali': 'NVIDIA DALI data loading',
             'amp': 'automatic mixed precision: float16 on GPUs, bfloat16 on CPUs'}
    for flag in scale_out:
        add('--' + flag, action='store_true', help=helps[flag])
    add_debug_flag(parser)


def check_args(args):
    """Refuse, in one line naming the flag, before any data is read: ``--gpus`` this machine
    lacks, a ``--save-prefix`` folder that cannot be written, ``--horovod`` or a dist
    ``--kv-store`` this process cannot run (`engine.distributed.check_launch`), synchronized
    BatchNorm (``--syncbn``, ``--norm-layer syncbn``) on the parameter server, ``--amp`` with
    dist_async, ``--dali`` without DALI."""
    try:
        if args.gpus is not None:
            make_contexts(args.gpus)
        check_launch(args)
    except ValueError as err:
        raise UserError(str(err)) from None
    check_writable(args.save_prefix, '--save-prefix')
    sync = ('--syncbn' if getattr(args, 'syncbn', False) else
            '--norm-layer syncbn' if getattr(args, 'norm_layer', None) == 'syncbn' else None)
    if sync and args.kv_store.startswith('dist'):
        raise UserError('%s synchronizes BatchNorm across Horovod processes, not across '
                        'parameter-server workers (--kv-store %s): use horovodrun ... '
                        '--horovod' % (sync, args.kv_store))
    if getattr(args, 'amp', False) and args.kv_store == 'dist_async':
        raise UserError('--amp checks the gradients before each update, which --kv-store '
                        'dist_async makes on the servers: use dist_sync')
    if getattr(args, 'dali', False):
        from ..data.dali import require_dali
        try:
            require_dali()
        except ImportError as err:
            raise UserError(str(err)) from None


def check_writable(prefix, flag):
    """A UserError naming ``flag`` unless files ``prefix*`` can be written (its folder is
    made if missing)."""
    folder = os.path.abspath(os.path.dirname(prefix) or '.')
    try:
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as err:
        raise UserError('%s %s: cannot write in %s (%s)' % (flag, prefix, folder,
                                                           err.strerror or err)) from None
