"""What every training command does around the engine besides its flags and config: the
datasets of the data flags, a pruned model to retrain, the startup log, the final line."""
import logging
import os

from ..data import datasets_from_flags
from ..engine import HookBase
from ..errors import UserError

__all__ = ['build_datasets', 'pruned_model', 'gluoncv_schedule', 'StartupLog', 'print_final']

LOG = logging.getLogger('gluondet')


def build_datasets(args, masks=False):
    """``(train, val)`` datasets of the dataset flags (`gluondet.dataset_flags`), with their
    instance masks if ``masks``; a bad flag or folder is a UserError naming it."""
    try:
        datasets = datasets_from_flags(args, masks=masks)
    except ValueError as err:     # DatasetError included
        raise UserError(str(err)) from None
    paths = [[ds.image_path(i) for i in range(len(ds))] for ds in datasets]
    if paths[0] == paths[1]:
        LOG.warning('the validation data is the training data (%d images): name another split '
                    'with --val-split', len(paths[0]))
    return tuple(datasets)


def pruned_model(args, save_prefix):
    """``--pruned-model``, checked (a pruned model's .params and json); without it, when
    ``--resume`` names the checkpoint of a pruned run (``auto``: ``save_prefix``'s), that
    checkpoint's ``meta.pruned`` (its channels); else None. A bad one is a UserError."""
    from ..tasks.base import check_pruned_model
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
            raise UserError('--resume: %s' % err) from None
        return None if channels is None else {'channels': channels}
    try:
        check_pruned_model(args.pruned_model)
    except ValueError as err:
        raise UserError('--pruned-model: %s' % err) from None
    return args.pruned_model


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


def gluoncv_schedule(args, decay_epochs=None):
    """The `TrainConfig` settings of GluonCV's ``--warmup-lr`` and ``--num-samples`` (epochs
    of that many images: the warmup and the decays, at ``decay_epochs`` or else
    ``--lr-decay-epoch``, in steps)."""
    overrides = {}
    if args.warmup_lr:
        overrides['warmup_factor'] = args.warmup_lr / args.lr
    if args.num_samples > 0:
        if args.lr_mode != 'step':
            raise UserError('--num-samples sets the step schedule in steps; it does not apply '
                            'to --lr-mode %s' % args.lr_mode)
        try:
            decays = decay_epochs or tuple(
                int(v) for v in args.lr_decay_epoch.split(',') if v.strip())
        except ValueError:
            raise UserError('--lr-decay-epoch must be comma-separated integers, got %r'
                            % args.lr_decay_epoch) from None
        steps = max(1, args.num_samples // args.batch_size)
        overrides.update(lr_decay_iters=tuple(e * steps for e in decays),
                         warmup_iters=int(round(args.lr_warmup * steps)), warmup_epochs=0.0)
    return overrides


def unneeded_notices(args, unneeded):
    """One line per flag of ``unneeded`` (``{dest: (GluonCV's default, why)}``) set to
    something else: accepted, and ignored for that reason."""
    lines = []
    for dest, (default, why) in unneeded.items():
        value = getattr(args, dest)
        if value != default:
            flag = '--' + dest.replace('_', '-')
            lines.append('%s: ignored, %s' % (flag if value is True else '%s %s' % (flag, value),
                                              why))
    return lines


def print_final(result):
    """The last validation's metrics, on stdout (by rank 0 of several processes)."""
    if result.metrics and result.rank == 0:
        print('final: %s' % ', '.join('%s=%.4f' % kv for kv in result.metrics.items()))
