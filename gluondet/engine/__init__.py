"""The one training engine: ``fit(task, config)`` trains any detector.

The engine knows nothing about detection. It imports MXNet only, never
``gluondet.tasks`` or ``gluondet.model_zoo``; a task binds a detector to it.

The task contract
-----------------
A task is any object with:

``meta() -> dict``
    What rebuilds the model (network name, classes, data shape, ...); JSON-ready.
    Saved in every checkpoint and beside every params file.
``build_net(ctx_list) -> gluon.HybridBlock``
    The network, initialized on the contexts.
``train_dataset() -> gluon.data.Dataset``
    Items are the task's training samples, the train transform already
    applied (lazily). The engine wraps it so numpy's and python's global RNGs
    are seeded from ``(seed, epoch, index)`` before each item is read: a
    transform that draws from them gives the same augmentation whatever
    ``num_workers`` is, and after a resume.
``train_batchify``
    The batchify_fn for the training DataLoader; a batch is an NDArray or a
    tuple of NDArrays. The engine builds the loader: full batches only (the
    last incomplete batch of an epoch is dropped), shuffled by
    ``(seed, epoch)``, sharded by ``(rank, world_size)``.
``losses(net, parts) -> {name: [NDArray per context]}``
    ``parts`` is the batch split over the contexts: a list with one tuple of
    NDArrays per context (``gluon.utils.split_and_load`` of each batch
    element). Each value holds the per-context terms of one named loss;
    the sum over names, contexts and elements is the loss whose gradient
    ``trainer.step(1)`` applies, so the task normalizes (SSD: by the number
    of positives over all contexts). Called inside ``autograd.record()``.
    Names follow one scheme: ``loss_cls``, ``loss_box``, ``loss_rpn_obj``,
    ``loss_rpn_box``, ... The engine logs each name's sum per step.
``validate(net, ctx_list) -> {name: float}``
    The task's evaluation (it owns its val loader and metric), called
    outside ``autograd.record()``. ``config.val_metric`` (default
    ``'mAP'``) names the key that selects the best model (higher is better).
    It may re-hybridize the net for inference; the engine hybridizes it
    again for training afterwards.

The loop
--------
`TrainLoop.train` runs ``before_train``, then per epoch ``before_epoch``,
per step ``before_step`` / step / ``after_step``, then ``after_epoch``, and
``after_train`` (also on error). Everything else is a hook (`hooks`): per-step
seeding, LR schedule, non-finite check, logging, checkpointing, validation
and params files, signal handling. ``fit(task, config, hooks=[...])`` adds
hooks after the default ones.

Stopping
--------
- SIGINT/SIGTERM: the current step finishes (or the current validation),
  a checkpoint is written, and `TrainingInterrupted` (a ``SystemExit``)
  exits with code 130 (SIGINT) or 143 (SIGTERM). ``resume='auto'``
  continues exactly from there. DataLoader workers ignore SIGINT (Ctrl-C
  reaches the whole process group); send SIGTERM to the training process
  only: workers killed by it make MXNet's loader fail after its timeout.
- A NaN or infinite loss raises `NonFiniteLossError` naming the epoch and
  iteration; no checkpoint is written for that step, the last good one stays.
- ``kill -9``: the last committed checkpoint stays valid (see `checkpoint`).
"""
from .checkpoint import CheckpointError, Checkpointer, read_manifest, save_params
from .config import TrainConfig
from .context import Runtime, local_runtime, make_contexts
from .data import EpochBatchSampler, SeededDataset, TrainData
from .hooks import (CheckpointHook, HookBase, LoggingHook, LRScheduleHook, NonFiniteHook,
                    NonFiniteLossError, SeedHook, SignalHook, TrainingInterrupted,
                    ValidationHook, default_hooks)
from .loop import FitResult, TrainLoop, TrainState, fit, split_batch
from .schedule import LRSchedule

__all__ = [
    'fit', 'FitResult', 'TrainConfig', 'TrainLoop', 'TrainState', 'split_batch',
    'Runtime', 'local_runtime', 'make_contexts', 'LRSchedule',
    'EpochBatchSampler', 'SeededDataset', 'TrainData',
    'Checkpointer', 'CheckpointError', 'read_manifest', 'save_params',
    'HookBase', 'default_hooks', 'SeedHook', 'LRScheduleHook', 'NonFiniteHook', 'LoggingHook',
    'CheckpointHook', 'ValidationHook', 'SignalHook', 'NonFiniteLossError', 'TrainingInterrupted',
]
