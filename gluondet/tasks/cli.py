"""Flags shared by the training scripts, and their translation into datasets and a config.

Flag names and defaults follow GluonCV's ``train_*.py``; each script adds its own
(``--network``, ``--data-shape``, ...) and keeps only the translation here. A default of
None stands for "the dataset's": `dataset_defaults` fills those into a new namespace after
parsing (GluonCV's scripts fill their parsed args in place).
"""
import argparse
import dataclasses
import logging
import os
import re
import sys
import tempfile

from ..dataset_flags import add_dataset_args, resolve_datasets
from ..errors import ArgumentParser, UserError, add_debug_flag
from ..engine import HookBase, TrainConfig
from ..engine.config import KV_STORES
from ..engine.context import make_contexts
from ..engine.distributed import check_launch

LOG = logging.getLogger('gluondet')

SCALE_OUT_FLAGS = ('syncbn', 'dali', 'amp')


def add_training_args(parser, epochs, lr, lr_decay_epoch, batch_size, wd=0.0005,
                      log_interval=100, val_interval=1, save_interval=10, lr_warmup=0.0,
                      warmup_unit='epochs', mixup=False, scale_out=SCALE_OUT_FLAGS,
                      kv_store='device', batch_per_device=0):
    """The flags every training script shares, with that script's defaults.

    A default of None means the dataset's (`dataset_defaults`), but for ``--batch-size``,
    where it means ``batch_per_device`` images on every device of every process
    (`TrainConfig.batch_per_device`). ``warmup_unit`` is what
    ``--lr-warmup`` counts: ``'epochs'`` (gluondet's SSD) or ``'iterations'`` (GluonCV's
    Faster R-CNN, where ``-1`` is none). ``mixup`` adds ``--mixup`` and
    ``--no-mixup-epochs`` (for a task with ``supports_mixup``). ``scale_out`` names the
    script's scale-out on/off flags.
    ``kv_store`` is the
    default of ``--kv-store`` (GluonCV's Faster R-CNN: ``nccl``).
    """
    def add(*flags, **kwargs):
        if 'default' in kwargs and kwargs['default'] is None:
            kwargs['help'] += " (unset: the dataset's default, printed in the log)"
        parser.add_argument(*flags, **kwargs)

    if batch_per_device:
        parser.add_argument('--batch-size', type=int, help=(
            'images per step over all devices and processes; a number that does not split '
            'over the processes is rounded down to one that does (unset: %d per device, '
            'i.e. per GPU and per horovodrun process)' % batch_per_device))
    else:
        add('--batch-size', type=int, default=batch_size,
            help='images per step over all devices and processes; a number that does not '
                 'split over the processes is rounded down to one that does')
    parser.set_defaults(batch_per_device=batch_per_device)
    add_dataset_args(parser)
    add('--num-workers', '-j', dest='num_workers', type=int, default=4,
        help='data loading worker processes')
    parser.add_argument('--gpus', help="GPUs to train on, e.g. '0,1'; '' for the CPU (unset: "
                        'GPU 0, or the CPU with a warning on a machine without a GPU)')
    add('--epochs', type=int, default=epochs, help='training epochs')
    add('--resume', default='',
        help="a checkpoint json, 'auto' (this save prefix's last checkpoint) or a .params "
             'file (weights only, as GluonCV)')
    add('--start-epoch', type=int, default=0, help='first epoch (with a .params --resume)')
    add('--pruned-model', metavar='PATH',
        help="retrain a model gluondet prune wrote (PATH.params, its .json beside; TAO's "
             'pruned_model_path): the network takes its channels and starts from its weights '
             "(--resume of the run's checkpoint needs it no more: it records the channels)")
    add('--lr', type=float, default=lr, help='learning rate')
    add('--lr-mode', default='step', choices=('step', 'cosine', 'soft_start_annealing'),
        help="learning rate schedule (soft_start_annealing: NVIDIA TAO's, with --lr-min "
             '--soft-start --annealing; --lr is its max_learning_rate)')
    add('--lr-min', type=float, default=0.0,
        help="cosine and soft_start_annealing: the lowest learning rate (TAO's "
             'min_learning_rate)')
    add('--soft-start', type=float, default=0.1,
        help='soft_start_annealing: fraction of training ramping up from --lr-min to --lr')
    add('--annealing', type=float, default=0.3,
        help='soft_start_annealing: fraction of training from which it decays to --lr-min')
    add('--lr-decay', type=float, default=0.1, help='step schedule: decay factor')
    add('--lr-decay-epoch', default=lr_decay_epoch, help='step schedule: epochs to decay at')
    add('--lr-warmup', type=float if warmup_unit == 'epochs' else int, default=lr_warmup,
        help='linear warmup length in %s%s' % (
            warmup_unit, '' if warmup_unit == 'epochs' else ' (-1: none)'))
    add('--lr-warmup-factor', type=float, default=1. / 3,
        help='the warmup starts at lr times this factor')
    parser.set_defaults(warmup_unit=warmup_unit)
    add('--momentum', type=float, default=0.9, help='SGD momentum')
    add('--wd', type=float, default=wd, help='weight decay')
    add('--no-wd', action='store_true',
        help='no weight decay on biases and on the norm layers\' gamma and beta')
    add('--clip-gradient', type=float, default=-1.,
        help='clip each gradient element to [-value, value]; -1: no clipping')
    if mixup:
        add('--mixup', action='store_true', help='mixup training (pairs of images blended)')
        add('--no-mixup-epochs', type=int, default=20,
            help='with --mixup, the last this many epochs train without it')
    add('--log-interval', type=int, default=log_interval, help='batches between log lines')
    add('--save-prefix', default='',
        help='prefix of saved files (the network name is appended); PREFIX_curves.png shows '
             'the losses, learning rate and validation mAP by epoch, redrawn at each validation')
    add('--save-interval', type=int, default=save_interval,
        help='epochs between saved .params')
    add('--val-interval', type=int, default=val_interval, help='epochs between validations')
    add('--seed', type=int, default=233, help='random seed')
    add('--logdir', default='', help='TensorBoard log folder (tensorboardX)')
    add('--tb-images', type=int, default=0, metavar='N',
        help="with --logdir, show N images of a training batch with their boxes in "
             "TensorBoard (TAO's visualizer num_images); 0: none")
    add('--tb-images-interval', type=int, default=0, metavar='STEPS',
        help='steps between the batches shown; 0: the first batch of every epoch')
    add('--early-stop-monitor', default='', metavar='NAME',
        help="early stopping (TAO's early_stopping monitor): a validation metric (mAP), "
             "which must rise, or the training 'loss' (or a loss name, loss_cls ...), whose "
             "epoch mean must fall; '': none")
    add('--early-stop-min-delta', type=float, default=0.0,
        help='early stopping: the least change that counts as an improvement')
    add('--early-stop-patience', type=int, default=5,
        help='early stopping: stop at this many checks (validations, or epochs for a loss) '
             'in a row without improvement')
    add('--no-hybridize', '--disable-hybridization', dest='hybridize', action='store_false',
        help='run imperatively')
    add('--no-pretrained-base', dest='pretrained_base', action='store_false',
        help='train the backbone from scratch (no ImageNet weights)')
    add('--horovod', action='store_true',
        help='one process of a horovodrun job: horovodrun -np 2 python %s --horovod --gpus '
             "'' ... (pass --backbone, not --network, under horovodrun; see docs/distributed.md)"
             % os.path.basename(sys.argv[0]))
    add('--kv-store', default=kv_store, choices=KV_STORES,
        help="how gradients are summed: over one process's GPUs device, local or nccl (CPU: "
             'device); over the workers of a parameter server started by gluondet launch '
             'dist_sync, dist_device_sync or dist_async')
    add('--hang-timeout', type=float, default=600.,
        help='with several processes, a process that makes no progress for this many seconds '
             'ends the job (a stalled or dead peer); 0: wait forever')
    helps = {'syncbn': 'BatchNorm statistics over the whole batch: across horovodrun\'s '
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
        raise _user_error(err) from None
    check_writable(args.save_prefix, '--save-prefix')
    sync = ('--syncbn' if getattr(args, 'syncbn', False) else
            '--norm-layer syncbn' if getattr(args, 'norm_layer', None) == 'syncbn' else None)
    if sync and args.kv_store.startswith('dist'):
        raise _user_error('%s synchronizes BatchNorm across Horovod processes, not across '
                          'parameter-server workers (--kv-store %s): use horovodrun ... '
                          '--horovod' % (sync, args.kv_store))
    if getattr(args, 'amp', False) and args.kv_store == 'dist_async':
        raise _user_error('--amp checks the gradients before each update, which --kv-store '
                          'dist_async makes on the servers: use dist_sync')
    if getattr(args, 'dali', False):
        from ..data.dali import require_dali
        try:
            require_dali()
        except ImportError as err:
            raise _user_error(err) from None


def check_writable(prefix, flag):
    """Exit with one line naming ``flag`` unless files ``prefix*`` can be written (its folder
    is made if missing)."""
    folder = os.path.abspath(os.path.dirname(prefix) or '.')
    try:
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as err:
        raise _user_error('%s %s: cannot write in %s (%s)' % (flag, prefix, folder,
                                                             err.strerror or err)) from None


def build_datasets(args):
    """``(train, val)`` datasets of the dataset flags (`gluondet.dataset_flags`); a bad flag or
    folder is one line naming it."""
    try:
        datasets = resolve_datasets(args)
    except ValueError as err:     # DatasetError included
        raise _user_error(err) from None
    paths = [[ds.image_path(i) for i in range(len(ds))] for ds in datasets]
    if paths[0] == paths[1]:
        LOG.warning('the validation data is the training data (%d images): name another split '
                    'with --val-split', len(paths[0]))
    return tuple(datasets)


def train_config(args, save_prefix, **overrides):
    """The engine's `TrainConfig` from the shared flags (a bad value exits with one line)."""
    warmup = ({'warmup_epochs': args.lr_warmup} if args.warmup_unit == 'epochs'
              else {'warmup_iters': max(0, args.lr_warmup)})
    values = dict(
        gpus=default_gpus() if args.gpus is None else args.gpus, batch_size=args.batch_size or 0,
        batch_per_device=args.batch_per_device, num_workers=args.num_workers,
        epochs=args.epochs, start_epoch=args.start_epoch, resume=args.resume, lr=args.lr,
        wd=args.wd, momentum=args.momentum, lr_mode=args.lr_mode, lr_decay=args.lr_decay,
        lr_decay_epoch=args.lr_decay_epoch, warmup_factor=args.lr_warmup_factor, no_wd=args.no_wd,
        lr_min=args.lr_min, soft_start=args.soft_start, annealing=args.annealing,
        clip_gradient=args.clip_gradient, log_interval=args.log_interval,
        save_prefix=save_prefix, save_interval=args.save_interval,
        val_interval=args.val_interval, seed=args.seed, logdir=args.logdir,
        hybridize=args.hybridize, horovod=args.horovod, kv_store=args.kv_store,
        tb_images=args.tb_images, tb_images_interval=args.tb_images_interval,
        early_stop_monitor=args.early_stop_monitor,
        early_stop_min_delta=args.early_stop_min_delta,
        early_stop_patience=args.early_stop_patience,
        hang_timeout=args.hang_timeout, amp=getattr(args, 'amp', False),
        dali=getattr(args, 'dali', False), **warmup)
    if hasattr(args, 'mixup'):
        values.update(mixup=args.mixup, no_mixup_epochs=args.no_mixup_epochs)
    values.update(overrides)
    try:
        return TrainConfig(**values)
    except ValueError as err:
        raise _user_error(_named_by_flags(str(err))) from None


# TrainConfig fields set by a flag of another name
_FLAG_OF_FIELD = {'warmup_iters': '--lr-warmup', 'warmup_epochs': '--lr-warmup',
                  'warmup_factor': '--lr-warmup-factor', 'max_iters': '--iters',
                  'lr_decay_iters': '--milestones'}


def _named_by_flags(message):
    """A `TrainConfig` error with its field names written as the flags that set them."""
    fields = [f.name for f in dataclasses.fields(TrainConfig)]
    return re.sub(r'\b(%s)\b' % '|'.join(fields), lambda m: _FLAG_OF_FIELD.get(
        m.group(1), '--' + m.group(1).replace('_', '-')), message)


def default_gpus():
    """What an unset ``--gpus`` means: ``'0'`` (GluonCV's default) on a machine with a GPU;
    else ``''``, the CPU, after a warning."""
    import mxnet as mx
    if mx.context.num_gpus() > 0:
        return '0'
    LOG.warning("%s: no GPU on this machine: training on the CPU (--gpus '' says so; --gpus 0 "
                'asks for the first GPU)', os.path.basename(sys.argv[0]))
    return ''


def pruned_model(args, save_prefix):
    """``--pruned-model``, checked (a pruned model's .params and json); without it, when
    ``--resume`` names the checkpoint of a pruned run (``auto``: ``save_prefix``'s), that
    checkpoint's ``meta.pruned`` (its channels); else None. A bad one exits with one line."""
    from .base import check_pruned_model
    if getattr(args, 'pruned_model', None) is None:
        resume = getattr(args, 'resume', '')
        from ..engine.checkpoint import CheckpointError, manifest_path, read_manifest
        path = manifest_path(save_prefix) if resume == 'auto' else resume
        if not path or not path.endswith('.json') or not os.path.isfile(path):
            return None
        from ..model_zoo.pruned import pruned_channels
        try:
            channels = pruned_channels(read_manifest(path).get('meta') or {}, path)
        except (CheckpointError, ValueError) as err:
            raise _user_error('--resume: %s' % err) from None
        return None if channels is None else {'channels': channels}
    try:
        check_pruned_model(args.pruned_model)
    except ValueError as err:
        raise _user_error('--pruned-model: %s' % err) from None
    return args.pruned_model


def _user_error(err):
    return UserError(str(err))


def zoo_dataset(args):
    """Which dataset's zoo network the data flags call for: ``'voc'`` or ``'coco'`` when
    ``--dataset`` names one without classes of its own (``--classes``, ``--train-json``),
    else ``'custom'`` (a ``*_custom`` network, GluonCV's naming)."""
    dataset = args.dataset.lower()
    if dataset in ('voc', 'coco') and not (args.classes or args.train_json
                                           or getattr(args, 'class_mapping', None)):
        return dataset
    return 'custom'


def dataset_defaults(args, table, fallback, origin='GluonCV'):
    """The parsed ``args`` with the dataset's defaults for the flags left unset.

    Parameters
    ----------
    args : argparse.Namespace
        Not changed.
    table : dict
        ``{dataset: {dest: default}}``; a flag whose parsed value is None takes it.
    fallback : str
        The key of ``table`` for datasets it does not name.
    origin : str
        Whose defaults they are, for the message.

    Returns
    -------
    resolved : argparse.Namespace
        A copy of ``args`` with the defaults filled in.
    message : str
        What was filled in, for the log (``''`` when nothing was).
    """
    dataset = args.dataset.lower()
    key = dataset if dataset in table else fallback
    applied = {dest: value for dest, value in table[key].items() if getattr(args, dest) is None}
    resolved = argparse.Namespace(**dict(vars(args), **applied))
    if not applied:
        return resolved, ''
    source = ("%s's %s defaults" % (origin, key) if key == dataset else
              "%s has none for --dataset %s; its %s defaults" % (origin, args.dataset, key))
    return resolved, '%s for the flags left unset: %s' % (source, ', '.join(
        '--%s %s' % (dest.replace('_', '-'), value) for dest, value in applied.items()))


class StartupLog(HookBase):
    """Writes ``lines`` to the training log (console and ``_train.log``) as training
    starts; with ``trainable``, also the names of the parameters that train (GluonCV's
    ``--verbose``)."""

    def __init__(self, lines, trainable=False):
        self.lines, self.trainable = [line for line in lines if line], trainable

    def before_train(self):
        for line in self.lines:
            LOG.info(line)
        if self.trainable:
            names = [name for name, param in self.loop.net.collect_params().items()
                     if param.grad_req != 'null']
            LOG.info('Trainable parameters (%d): %s', len(names), ', '.join(names))


def print_final(result):
    """The last validation's metrics, on stdout (by rank 0 of several processes)."""
    if result.metrics and result.rank == 0:
        print('final: %s' % ', '.join('%s=%.4f' % kv for kv in result.metrics.items()))


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in the help, but not None (the help says what an unset flag means) nor a
    switch's (on when given)."""

    def _get_help_string(self, action):
        if action.default is None or isinstance(action, (argparse._StoreTrueAction,
                                                         argparse._StoreFalseAction)):
            return action.help
        return super()._get_help_string(action)


def parser(description):
    return ArgumentParser(description=description, formatter_class=_HelpFormatter)


def add_network_arg(parser, default, names):
    """``--network`` and its alias ``--backbone`` (ODTK's name; horovodrun 0.28 stops at
    ``--network`` anywhere on its command line, an ambiguous prefix of its own options)."""
    parser.add_argument('--network', '--backbone', dest='network', default=default,
                        help='base network: %s (--backbone: the same; under horovodrun, which '
                             'refuses --network, use --backbone)' % ', '.join(names))
