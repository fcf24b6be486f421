"""The parsed flags of a training command as the engine's `TrainConfig`, built from the
dataclass's fields, and the dataset's defaults for the flags left unset."""
import argparse
import dataclasses
import logging
import os
import re
import sys

from ..data.resolve import finds_classes
from ..engine import TrainConfig
from ..errors import UserError

__all__ = ['train_config', 'dataset_defaults', 'zoo_dataset']

LOG = logging.getLogger('gluondet')

# TrainConfig fields set by a flag of another name (or by none: the command's own logic)
_FLAG_OF_FIELD = {'warmup_iters': '--lr-warmup', 'warmup_epochs': '--lr-warmup',
                  'warmup_factor': '--lr-warmup-factor', 'max_iters': '--iters',
                  'lr_decay_iters': '--milestones'}


def train_config(args, save_prefix, **overrides):
    """The `TrainConfig` of the parsed flags: every field a flag of its name sets, then
    ``--lr-warmup`` (epochs or iterations), ``--lr-warmup-factor``, the device and batch
    rules, ``save_prefix`` (the whole one) and ``overrides``. A bad value is a UserError
    naming the flag."""
    fields = [f.name for f in dataclasses.fields(TrainConfig)]
    values = {name: getattr(args, name) for name in fields if hasattr(args, name)}
    if args.warmup_unit == 'epochs':
        values['warmup_epochs'] = args.lr_warmup
    else:
        values['warmup_iters'] = max(0, args.lr_warmup)     # GluonCV's -1: none
    values.update(
        warmup_factor=args.lr_warmup_factor, save_prefix=save_prefix,
        gpus=default_gpus() if args.gpus is None else args.gpus,
        batch_size=args.batch_size or 0)
    values.update(overrides)
    try:
        return TrainConfig(**values)
    except ValueError as err:
        raise UserError(_named_by_flags(str(err))) from None


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


def zoo_dataset(args):
    """Which dataset's zoo network the data flags call for: ``'voc'`` or ``'coco'`` when
    ``--dataset`` names one without classes of its own (``--classes``, ``--train-json``, a
    VOC or LabelImg folder, whose classes its annotations name, a COCO json of other
    categories than COCO's 80: `finds_classes`), else ``'custom'`` (a ``*_custom`` network,
    GluonCV's naming)."""
    dataset = args.dataset.lower()
    if dataset in ('voc', 'coco') and not (
            args.classes or args.train_json or getattr(args, 'class_mapping', None)
            or finds_classes(dataset, args.dataset_root, args.train_split, train=True)):
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
