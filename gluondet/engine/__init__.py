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
    ``num_workers`` is, and after a resume. It is indexed with a
    `SampleIndex`, an ``int`` that also carries ``epoch`` and ``mixup``.
``train_batchify``
    The batchify_fn for the training DataLoader; a batch is an NDArray or a
    tuple of NDArrays. The engine builds the loader: full batches only (the
    last incomplete batch of an epoch is dropped), shuffled by
    ``(seed, epoch)``, sharded by ``(rank, world_size)``
    (``gluondet.data.batchify.PadImages`` batches images of different sizes).
``losses(net, parts) -> {name: [NDArray per context]}``
    ``parts`` is the batch split over the contexts: a list with one tuple of
    NDArrays per context (``gluon.utils.split_and_load`` of each batch
    element). Each value holds the per-context terms of one named loss;
    the sum over names, contexts and elements is the loss whose gradient
    ``trainer.step(1)`` applies, so the task normalizes (SSD: by the number
    of positives over all contexts, through `gluondet.collectives.process_share`, which with
    several processes makes it the whole batch's count per process). Called inside
    ``autograd.record()``.
    Names follow one scheme: ``loss_cls``, ``loss_box``, ``loss_rpn_obj``,
    ``loss_rpn_box``, ... The engine logs each name's sum per step.
``validate(net, ctx_list, group=None) -> {name: float}``
    The task's evaluation (it owns its val loader and metric), called outside
    ``autograd.record()``. With several synchronous processes every process calls it with
    ``group`` (the `Runtime`: ``rank``, ``world_size``, ``allgather``, ``beat``), and each must
    return the metrics of the whole val set (see ``gluondet.metrics.evaluation.evaluate``);
    otherwise ``group`` is not passed. ``config.val_metric`` (default ``'mAP'``) names the key
    that selects the best model (higher is better). It may re-hybridize the net for inference;
    the engine hybridizes it again for training afterwards.

Optional, each with the default behaviour when absent:

``train_params(net) -> ParameterDict``
    The parameters that train (a ``ParameterDict``, dict or sequence of the
    net's parameters; GluonCV's ``collect_train_params``: Faster R-CNN
    freezes the stem, layer1 and every BatchNorm). Every other parameter
    gets ``grad_req='null'`` and no optimizer state; params files and
    checkpoints still hold all. Default: all parameters train.
    ``lr_mult`` / ``wd_mult``: a task sets them on the parameters in
    ``build_net`` or ``train_params`` (the optimizer reads them at every
    step); ``config.no_wd`` is applied afterwards and sets ``wd_mult = 0``
    on biases, gamma and beta (`params.NO_WD_PATTERN`).
``train_batch_sampler(length, batch_size, seed, rank, world_size) -> sampler``
    The training batch sampler (``batch_size`` per rank), following the
    protocol of `EpochBatchSampler` (``length``, ``batches_per_epoch``,
    ``set_epoch(epoch, start)``, yields lists of keys ``epoch * length +
    index``): typically a `GroupedBatchSampler` over a per-sample group key
    (Faster R-CNN: landscape or portrait, from the image sizes). It must be
    a function of ``(seed, epoch)`` only, so that a resume is exact.
    Default: an `EpochBatchSampler`.
``train_sizes`` (and ``train_size_interval``, default 10)
    Multi-scale training (YOLOv3's ``--no-random-shape`` off): a sequence of
    input sizes, each a side or ``(width, height)``; every
    ``train_size_interval`` steps the batches take one of them, drawn from
    ``(seed, global step // interval)`` alone (`SizedBatchSampler`), so all
    ranks and a resumed run use the same. Each sample's `SampleIndex` carries
    its batch's ``(width, height)`` as ``size`` to the task's dataset
    (``gluondet.data.multiscale.SizedTransform`` hands it to the transform).
    None (default): every sample's ``size`` is None.
``supports_mixup = True``
    The task's train dataset mixes images when ``SampleIndex.mixup`` says so
    (its raw dataset wrapped in ``gluondet.data.mixup.MixupDetection``,
    labels with a 7th weight column). ``config.mixup`` with a task without
    it is an error.
``dali_train_data(sampler, config, runtime) -> data``
    The training data read by NVIDIA DALI (``config.dali``; ``gluondet.data.dali``):
    an object with ``iters_per_epoch`` and ``epoch(epoch, start)`` as `TrainData`,
    over the batches of ``sampler`` (the task's or an `EpochBatchSampler`), and
    optionally ``close()``, which `fit` calls when training ends.
    ``config.dali`` with a task without it is an error.
``batch_images(batch, count) -> [(image, boxes, names)]``
    The first ``count`` images of a training batch as the network sees them
    (``H x W x 3`` uint8 RGB, normalization undone), their ground-truth boxes
    (``N x 4`` pixels) and class names, for TensorBoard (``config.tb_images``,
    `batch_images.BatchImagesHook`). ``config.tb_images`` with a task without it
    is an error.

Optimization
------------
``config.clip_gradient > 0`` clips each gradient element (the optimizer's
``clip_gradient``); ``config.warmup_iters`` or ``warmup_epochs`` warm the
learning rate up linearly (`LRSchedule`, a function of the global
iteration).

The loop
--------
`TrainLoop.train` runs ``before_train``, then per epoch ``before_epoch``,
per step ``before_step`` / step / ``after_step``, then ``after_epoch``, and
``after_train`` (also on error). Everything else is a hook (`hooks`): per-step
seeding, LR schedule, non-finite check, the model EMA (`ema`), logging, TensorBoard
images of the batches (`batch_images`), early stopping (`early_stopping`), checkpointing,
validation and params files, the ``_curves.png`` picture (`curves`), signal
handling. A validation's result reaches every hook's ``after_validation(epoch,
metrics)``; a hook ends training with ``loop.request_stop(reason)``.
``fit(task, config, hooks=[...])`` adds hooks after the default ones.

Stopping
--------
- SIGINT/SIGTERM, to the training process or to its whole process group: the current
  step finishes (a validation in progress is abandoned in one process, and run first when
  the run resumes), a checkpoint is written, and `TrainingInterrupted` (a ``SystemExit``)
  exits with code 130 (SIGINT) or 143 (SIGTERM). ``resume='auto'`` continues exactly from
  there; the message says so in the caller's words (``--resume auto`` unless
  `wording.speaking` gives others). The data loaders' processes leave the signal
  to the training process (`signals.guard_children`); several processes stop after the
  same step.
- A NaN or infinite loss raises `NonFiniteLossError` naming the epoch and
  iteration, and the settings that may keep it finite in the same words; no checkpoint is
  written for that step, the last good one stays.
- ``kill -9``: the last committed checkpoint stays valid (see `checkpoint`).
- Early stopping (``config.early_stop_monitor``): after the step's or epoch's
  hooks, with its checkpoint written; ``fit`` returns, ``FitResult.stop_reason``
  says why.
"""
from ..collectives import mean_over_processes, process_share
from .checkpoint import CheckpointError, Checkpointer, read_manifest, save_params
from .config import TrainConfig
from .context import Runtime, average_statistics, local_runtime, make_contexts
from .distributed import HorovodRuntime, KVStoreRuntime, make_runtime
from .watchdog import Watchdog
from .data import (EpochBatchSampler, GroupedBatchSampler, SampleIndex, SeededDataset,
                   SizedBatchSampler, TrainData)
from .batch_images import BatchImagesHook
from .curves import CurvesHook
from .early_stopping import EarlyStoppingHook
from .ema import EMAHook
from .hookbase import HookBase
from .hooks import (CheckpointHook, LoggingHook, LRScheduleHook, NonFiniteHook,
                    NonFiniteLossError, SeedHook, ValidationHook, default_hooks)
from .signals import SignalHook, TrainingInterrupted
from .loop import FitResult, TrainLoop, TrainState, fit, split_batch
from .params import NO_WD_PATTERN, disable_weight_decay, trainable_params
from .schedule import LRSchedule

__all__ = [
    'fit', 'FitResult', 'TrainConfig', 'TrainLoop', 'TrainState', 'split_batch',
    'Runtime', 'local_runtime', 'make_contexts', 'LRSchedule', 'make_runtime', 'HorovodRuntime',
    'KVStoreRuntime', 'process_share', 'mean_over_processes', 'average_statistics', 'Watchdog',
    'EpochBatchSampler', 'GroupedBatchSampler', 'SampleIndex', 'SeededDataset',
    'SizedBatchSampler', 'TrainData',
    'trainable_params', 'disable_weight_decay', 'NO_WD_PATTERN',
    'Checkpointer', 'CheckpointError', 'read_manifest', 'save_params',
    'HookBase', 'default_hooks', 'SeedHook', 'LRScheduleHook', 'NonFiniteHook', 'LoggingHook',
    'CheckpointHook', 'ValidationHook', 'SignalHook', 'NonFiniteLossError', 'TrainingInterrupted',
    'EarlyStoppingHook', 'EMAHook', 'BatchImagesHook', 'CurvesHook',
]
