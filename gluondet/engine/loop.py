"""The one training loop and `fit`, which assembles it from a task and a config."""
import contextlib
import dataclasses
from typing import Optional

from mxnet import autograd, gluon, nd

from . import precision
from .checkpoint import Checkpointer
from .context import average_statistics
from .data import SIZE_INTERVAL, EpochBatchSampler, TrainData, seed_all
from .distributed import make_runtime
from .hooks import ValidationHook, default_hooks
from .watchdog import Watchdog
from .logging import Reporter
from .params import disable_weight_decay, trainable_params
from .schedule import LRSchedule
from .signals import guard_children


@dataclasses.dataclass
class TrainState:
    """Where training is; the hooks read it, the loop advances it.

    ``epoch`` is the epoch in progress (0-based), ``batch`` the batches done
    in it (of ``batches_per_epoch``), ``iteration`` the optimizer steps done
    in total, ``lr`` the last step's learning rate. ``losses`` holds the last
    step's ``{name: [NDArray per context]}``, ``metrics`` the last
    validation's result.
    """

    batches_per_epoch: int
    epoch: int = 0
    batch: int = 0
    iteration: int = 0
    lr: float = 0.0
    losses: dict = dataclasses.field(default_factory=dict)
    metrics: dict = dataclasses.field(default_factory=dict)
    _values: Optional[dict] = dataclasses.field(default=None, repr=False, compare=False)

    def position(self):
        """``(epoch, batch, iteration)``, a finished epoch given as the next one's start."""
        if self.batch == self.batches_per_epoch:
            return self.epoch + 1, 0, self.iteration
        return self.epoch, self.batch, self.iteration

    def set_losses(self, losses):
        self.losses = losses
        self._values = None

    def loss_values(self):
        """The last step's losses as ``{name: float}`` (each summed over contexts)."""
        if self._values is None:
            self._values = {name: float(sum(t.sum().asscalar() for t in terms))
                            for name, terms in self.losses.items()}
        return self._values


class TrainLoop:
    """Runs the epochs; every other concern is a hook.

    Parameters
    ----------
    net : gluon.HybridBlock
    trainer : gluon.Trainer
    task : object
        Follows the task contract (`gluondet.engine`).
    data : TrainData
    hooks : list of HookBase
        Called in list order at each stage.
    epochs : int
        Train until ``state.epoch == epochs``.
    runtime : Runtime
    state : TrainState
    max_iters : int
        Also stop once ``state.iteration`` reaches it, ending that epoch early (0: no limit).
    """

    def __init__(self, net, trainer, task, data, hooks, epochs, runtime, state, max_iters=0):
        self.net, self.trainer, self.task, self.data = net, trainer, task, data
        self.epochs, self.runtime, self.state = epochs, runtime, state
        self.max_iters = max_iters
        self.stop_reason = None     # set by request_stop (early stopping)
        self.current_batch = None   # the batch of the step in progress, for the hooks
        self._statistics_synced_at = None
        self._created_sent = False  # whether the first forward's new parameters were broadcast
        self.hooks = list(hooks)
        for hook in self.hooks:
            hook.loop = self
        # MXNet runs a step asynchronously. On GPUs the next batch loads meanwhile; on CPUs
        # loading would take cores from the step's OpenMP threads and slow it by more than
        # the loading costs, so it waits for the step.
        self.overlap_loading = any(c.device_type == 'gpu' for c in runtime.ctx)

    def train(self):
        """Train from ``state`` to ``epochs``; ``after_train`` runs even on error."""
        self._call('before_train')
        try:
            while self.state.epoch < self.epochs and self.stop_reason is None:
                self._call('before_epoch')
                batches = iter(self.data.epoch(self.state.epoch, self.state.batch))
                batch = next(batches, None)
                while batch is not None and not self.done():
                    self.current_batch = batch
                    self._call('before_step')
                    self.run_step(batch)
                    if not self.overlap_loading:
                        nd.waitall()
                    batch = next(batches, None)
                    self.state.batch += 1
                    self.state.iteration += 1
                    self._call('after_step')
                self._call('after_epoch')
                self.state.epoch += 1
                self.state.batch = 0
        finally:
            self._call('after_train')

    def sync_statistics(self):
        """Average BatchNorm's running statistics over the processes (`average_statistics`),
        once per step: the checkpoints and the validation of one position share it."""
        if self._statistics_synced_at != self.state.iteration:
            average_statistics(self.runtime, self.net)
            for hook in self.hooks:     # copies of the statistics (the model EMA's)
                getattr(hook, 'average_statistics', lambda: None)()
            self._statistics_synced_at = self.state.iteration

    def done(self):
        """Whether the step limit (``max_iters``) is reached or a hook asked to stop."""
        return self.stop_reason is not None or (
            bool(self.max_iters) and self.state.iteration >= self.max_iters)

    def interruptible(self):
        """A context in which a stop signal acts at once (`signals.SignalHook.interruptible`);
        without a hook that offers it, a plain block."""
        for hook in self.hooks:
            if hasattr(hook, 'interruptible'):
                return hook.interruptible()
        return contextlib.nullcontext()

    def evaluated_weights(self):
        """A context in which the net holds the weights that are validated and saved as
        ``.params``: the model EMA's (`ema.EMAHook.applied`), or without one the trained
        weights (a plain block)."""
        for hook in self.hooks:
            if hasattr(hook, 'applied'):
                return hook.applied()
        return contextlib.nullcontext()

    def request_stop(self, reason):
        """End training after the hooks of this step (the epoch's ``after_epoch`` hooks still
        run) or, from ``after_epoch``, of this epoch; ``reason`` ends up in `FitResult`."""
        self.stop_reason = self.stop_reason or reason

    def run_step(self, batch):
        """Forward the task's losses, backward their sum, one optimizer step."""
        parts = split_batch(batch, self.runtime.ctx)
        with autograd.record():
            losses = self.task.losses(self.net, parts)
            totals = precision.scaled(_per_context_totals(losses, len(parts)), self.trainer)
        autograd.backward(totals)
        self.trainer.step(1)
        self.state.set_losses(losses)
        if not self._created_sent:     # rank 0's values of those the first forward created
            self.runtime.broadcast_parameters(self.net, trained_only=True)
            self._created_sent = True

    def _call(self, stage):
        for hook in self.hooks:
            getattr(hook, stage)()


def split_batch(batch, ctx_list):
    """``[tuple of NDArrays for context k]``: each batch element split over the contexts."""
    if isinstance(batch, nd.NDArray):
        batch = (batch,)
    columns = [gluon.utils.split_and_load(x, ctx_list, even_split=False) for x in batch]
    return [tuple(parts) for parts in zip(*columns)]


def _per_context_totals(losses, num_ctx):
    if not isinstance(losses, dict) or not losses:
        raise TypeError('task.losses must return a non-empty {name: [NDArray per context]}, '
                        'got %r' % type(losses).__name__)
    for name, terms in losses.items():
        if not isinstance(terms, (list, tuple)) or len(terms) != num_ctx:
            raise TypeError('task.losses()[%r] must be a list of %d NDArrays (one per context)'
                            % (name, num_ctx))
    return [nd.add_n(*[terms[k].sum() for terms in losses.values()]) for k in range(num_ctx)]


def train_data(task, config, runtime):
    """The `TrainData` of ``task``: its dataset, batchify, (optional) batch sampler and
    per-batch input sizes."""
    dataset = task.train_dataset()
    batch_size = config.batch_size // runtime.world_size
    make_sampler = getattr(task, 'train_batch_sampler', None)
    sampler = None if make_sampler is None else make_sampler(
        len(dataset), batch_size=batch_size, seed=config.seed, rank=runtime.rank,
        world_size=runtime.world_size)
    sizes = getattr(task, 'train_sizes', None)
    if config.dali:     # the task's DALI pipeline over the same batches (gluondet.data.dali)
        make_dali = getattr(task, 'dali_train_data', None)
        if make_dali is None:
            raise ValueError('config.dali: task %s does not read its data with DALI (SSD and '
                             'RetinaNet do)' % type(task).__name__)
        if sizes is not None:
            raise ValueError('config.dali: task %s trains at per-batch input sizes '
                             '(train_sizes), which the DALI reader does not serve'
                             % type(task).__name__)
        return make_dali(sampler or EpochBatchSampler(len(dataset), batch_size, config.seed,
                                                      runtime.rank, runtime.world_size),
                         config, runtime)
    return TrainData(dataset, task.train_batchify, batch_size, config.num_workers, config.seed,
                     runtime.rank, runtime.world_size, sampler=sampler,
                     mixup_epochs=config.mixup_epochs, sizes=sizes,
                     size_interval=getattr(task, 'train_size_interval', SIZE_INTERVAL))


@dataclasses.dataclass
class FitResult:
    """What `fit` leaves: the trained net, where training ended, on which process, why it
    ended before its epochs (``stop_reason``, None when it did not: early stopping), and the
    best weights' ``.params`` (``best_path``, None when no validation scored a finite
    metric; written by the main process)."""

    net: gluon.HybridBlock
    epoch: int
    iteration: int
    best: Optional[float]
    metrics: dict
    checkpoint: Optional[str]
    rank: int = 0
    world_size: int = 1
    stop_reason: Optional[str] = None
    best_path: Optional[str] = None


def fit(task, config, runtime=None, hooks=()):
    """Train ``task`` as ``config`` says; resume if ``config.resume`` asks to.

    Parameters
    ----------
    task : object
        Follows the task contract in the `gluondet.engine` docstring.
    config : TrainConfig
    runtime : Runtime, optional
        Devices and rank; default: `distributed.make_runtime` (Horovod, a dist kvstore, or
        this process on ``config.gpus``/``config.cpus``).
    hooks : sequence of HookBase
        Extra hooks, called after the default ones at every stage.

    Returns
    -------
    FitResult

    Raises
    ------
    NonFiniteLossError
        A loss became NaN or infinite (``config.stop_on_nonfinite``).
    TrainingInterrupted
        SIGINT or SIGTERM arrived; a checkpoint was written first. It is a
        ``SystemExit`` with code 128 + signal number (130, 143).
    """
    runtime = runtime or make_runtime(config)
    config, batch_note = resolve_batch(config, runtime)
    if config.mixup and not getattr(task, 'supports_mixup', False):
        raise ValueError('config.mixup: task %s does not support mixup (no supports_mixup = True)'
                         % type(task).__name__)
    # the runtime from the net's construction on (synchronized BatchNorm); the data loaders'
    # processes leave a stop signal to this one
    with runtime.activated(), guard_children():
        loop, checkpointer = _build_and_train(task, config, runtime, hooks, batch_note)
    validation = next((h for h in loop.hooks if isinstance(h, ValidationHook)), None)
    best, best_path = (validation.best, validation.best_path) if validation else (None, None)
    return FitResult(loop.net, loop.state.epoch, loop.state.iteration, best,
                     loop.state.metrics, checkpointer.last_path, runtime.rank,
                     runtime.world_size, loop.stop_reason, best_path)


def resolve_batch(config, runtime):
    """``(config, note)``: ``config`` with the global batch its processes and devices take
    (``batch_size``'s rules in `TrainConfig`), and a line for the log saying how it was
    made of another (``''`` when it was not). A batch of less than one sample per device
    raises ValueError naming ``--batch-size``."""
    devices = len(runtime.ctx) * runtime.world_size
    where = '%d device%s' % (devices, 's' if devices > 1 else '')
    if runtime.world_size > 1:
        where += ' (%d processes of %d)' % (runtime.world_size, len(runtime.ctx))
    if not config.batch_size:
        total = config.batch_per_device * devices
        note = 'batch size %d: %d per device on %s' % (total, config.batch_per_device, where)
    else:
        total = config.batch_size // runtime.world_size * runtime.world_size
        note = '' if total == config.batch_size else (
            'batch size %d: --batch-size %d over %d processes, %d each (the remainder is '
            'dropped, as GluonCV and ODTK do)' % (total, config.batch_size, runtime.world_size,
                                                  total // runtime.world_size))
    if total < devices:
        raise ValueError('--batch-size %d is less than one sample for each of %s: give at least '
                         '%d' % (config.batch_size, where, devices))
    return dataclasses.replace(config, batch_size=total), note


def _build_and_train(task, config, runtime, hooks, batch_note=''):
    """Build the net, data, trainer and hooks of `fit`, resume if asked, train; returns
    ``(loop, checkpointer)``."""
    seed_all(config.seed)
    dtype = precision.init_amp(runtime.ctx) if config.amp else None
    net = task.build_net(list(runtime.ctx))
    runtime.broadcast_parameters(net)
    params = trainable_params(task, net)     # before the graph is built: frozen ones get no grad
    if config.no_wd:
        disable_weight_decay(net)
    config.hybridize_net(net)
    data = train_data(task, config, runtime)
    schedule = LRSchedule.from_config(config, data.iters_per_epoch)
    trainer = runtime.make_trainer(params, config, schedule)
    checkpointer = Checkpointer(config.save_prefix, task.meta(), config, runtime.is_main)
    reporter = Reporter(config.save_prefix, config.logdir, runtime.is_main)
    all_hooks = default_hooks(task, config, schedule, checkpointer, reporter) + list(hooks)
    if dtype:
        all_hooks.append(precision.AMPHook(trainer, dtype))
    if runtime.world_size > 1 and config.hang_timeout:
        all_hooks.append(Watchdog(config.hang_timeout, runtime.describe()))
    # an iteration budget (ODTK's) sets the epochs: the last one stops at max_iters
    epochs = (-(-config.max_iters // data.iters_per_epoch) if config.max_iters
              else config.epochs)
    loop = TrainLoop(net, trainer, task, data, all_hooks, epochs, runtime,
                     TrainState(data.iters_per_epoch, epoch=config.start_epoch,
                                iteration=config.start_epoch * data.iters_per_epoch),
                     max_iters=config.max_iters)
    with reporter:
        if batch_note:
            reporter.info(batch_note)
        try:
            checkpointer.resume(loop, config.resume)
            loop.train()
        finally:    # the loader's processes end with the run, not at a later gc
            if hasattr(data, 'close'):
                data.close()
    return loop, checkpointer
