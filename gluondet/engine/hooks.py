"""Hooks: everything the loop does besides forward, backward and step.

Each is a `HookBase` (`hookbase`); `default_hooks` gives the order; it matters where commented.
"""
import math
import time

from ..collectives import mean_over_processes
from ..errors import UserError
from .batch_images import BatchImagesHook
from .checkpoint import save_params
from .curves import CurvesHook
from .data import seed_step
from .early_stopping import EarlyStoppingHook
from .ema import EMAHook
from .hookbase import HookBase
from .signals import SignalHook
from .wording import setting


class NonFiniteLossError(UserError, RuntimeError):
    """A loss became NaN or infinite; training stopped without checkpointing it. The
    training commands print it in one line, as the user's to settle (the learning rate,
    its warmup, gradient clipping, the data)."""


def default_hooks(task, config, schedule, checkpointer, reporter):
    """The engine's hooks for ``config``, in the order they run at every stage."""
    hooks = [SeedHook(config.seed), LRScheduleHook(schedule)]
    if config.stop_on_nonfinite:
        # First after a step: a non-finite step is neither logged as usual nor checkpointed.
        hooks.append(NonFiniteHook(checkpointer, reporter))
    if config.ema:
        # After the non-finite check (a NaN step stops before it is averaged), before the
        # checkpoint and the validation of the step, which read the average.
        hooks.append(EMAHook(config.ema_decay))
    hooks.append(LoggingHook(reporter, config))
    if config.tb_images:
        hooks.append(BatchImagesHook(reporter, config.tb_images, config.tb_images_interval))
    if config.early_stop_monitor:
        # Before the checkpoint: the epoch's loss check is in the epoch's checkpoint (a
        # validation's check is in the checkpoint after it, see after_validation).
        hooks.append(EarlyStoppingHook(config.early_stop_monitor, config.early_stop_min_delta,
                                       config.early_stop_patience, reporter))
    return hooks + [
        # Checkpoint before validating: a failing evaluation leaves a checkpoint to debug.
        CheckpointHook(checkpointer, config.checkpoint_interval),
        ValidationHook(task, config, checkpointer, reporter),
        # After validating: _curves.png shows the validation just logged.
        CurvesHook(reporter, config.save_prefix, config.val_metric),
        # Last: a signal is acted on once this step's (or epoch's) other hooks are done.
        SignalHook(checkpointer, reporter),
    ]


class SeedHook(HookBase):
    """Seeds python, numpy and MXNet RNGs from (seed, iteration) before each step,
    so dropout or random sampling inside the net repeats exactly after a resume."""

    def __init__(self, seed):
        self.seed = seed

    def before_step(self):
        seed_step(self.seed, self.loop.state.iteration)


class LRScheduleHook(HookBase):
    """Sets the learning rate of each step from the global iteration (`LRSchedule`), unless
    the optimizer follows a schedule of its own (dist_async's servers)."""

    def __init__(self, schedule):
        self.schedule = schedule

    def before_step(self):
        state = self.loop.state
        state.lr = self.schedule(state.iteration)
        if self.loop.trainer.optimizer.lr_scheduler is None:
            self.loop.trainer.set_learning_rate(state.lr)


class NonFiniteHook(HookBase):
    """Stops training at the first NaN or infinite loss, naming epoch and iteration."""

    def __init__(self, checkpointer, reporter):
        self.checkpointer = checkpointer
        self.reporter = reporter

    def after_step(self):
        state = self.loop.state
        values = state.loss_values()
        bad = {k: v for k, v in values.items() if not math.isfinite(v)}
        if not bad:
            return
        last = self.checkpointer.last_path
        names = [setting(dest) for dest in ('lr', 'lr_warmup', 'clip_gradient')]
        message = ('non-finite loss at epoch %d, iteration %d (batch %d of the epoch, lr %g): %s; '
                   'training stopped%s. %s' % (
                       state.epoch, state.iteration, state.batch - 1, state.lr,
                       ', '.join('%s=%s' % kv for kv in values.items()),
                       ' (a lower %s, a longer %s or %s may keep it finite)' % tuple(names)
                       if all(names) else '',
                       'The last good checkpoint, %s, was left untouched.' % last if last
                       else 'No checkpoint had been written yet.'))
        self.reporter.info(message)
        raise NonFiniteLossError(message)


class LoggingHook(HookBase):
    """Progress bar, log lines, metrics.jsonl and TensorBoard during training.

    Parameters
    ----------
    reporter : Reporter
    config : TrainConfig
        Logged at the start; gives ``log_interval`` (steps between reports)
        and ``batch_size`` (for samples/s).
    """

    def __init__(self, reporter, config):
        self.reporter = reporter
        self.config = config
        self._jsonl_offset = None
        self._epoch_sums, self._epoch_steps = {}, 0
        self._sums, self._steps = {}, 0
        self._tic = self._epoch_tic = time.time()

    def before_train(self):
        state = self.loop.state
        resumed = self._jsonl_offset is not None
        self.reporter.start_metrics(self._jsonl_offset, state.iteration if resumed else None)
        self.reporter.info(str(self.config))
        self.reporter.info('Start training from [Epoch %d] (batch %d, iteration %d)'
                           % (state.epoch, state.batch, state.iteration))
        self._tic = time.time()

    def before_epoch(self):
        state = self.loop.state
        if state.batch == 0:
            self._epoch_sums, self._epoch_steps = {}, 0
        self._epoch_tic = time.time()
        self.reporter.start_epoch(state.epoch, state.batches_per_epoch, state.batch)

    def after_step(self):
        values = self.loop.state.loss_values()
        for name, value in values.items():
            self._sums[name] = self._sums.get(name, 0.0) + value
            self._epoch_sums[name] = self._epoch_sums.get(name, 0.0) + value
        self._steps += 1
        self._epoch_steps += 1
        self.reporter.advance()
        if self.loop.state.batch % self.config.log_interval == 0:
            self._report()

    def after_epoch(self):
        self.reporter.end_epoch()
        means = mean_over_processes(
            {k: v / max(1, self._epoch_steps) for k, v in self._epoch_sums.items()})
        self.reporter.epoch_summary(self.loop.state.epoch, time.time() - self._epoch_tic, means)

    def _report(self):
        state = self.loop.state
        elapsed = max(time.time() - self._tic, 1e-9)
        self.reporter.train({
            'epoch': state.epoch, 'batch': state.batch - 1, 'iteration': state.iteration,
            'lr': state.lr, 'samples_per_sec': self._steps * self.config.batch_size / elapsed,
            'losses': mean_over_processes({k: v / self._steps for k, v in self._sums.items()})})
        self._sums, self._steps, self._tic = {}, 0, time.time()

    def state_dict(self):
        return {'jsonl_offset': self.reporter.jsonl_offset(),
                'sums': self._sums, 'steps': self._steps,
                'epoch_sums': self._epoch_sums, 'epoch_steps': self._epoch_steps}

    def load_state_dict(self, state):
        self._jsonl_offset = state['jsonl_offset']
        self._sums, self._steps = dict(state['sums']), state['steps']
        self._epoch_sums, self._epoch_steps = dict(state['epoch_sums']), state['epoch_steps']


class CheckpointHook(HookBase):
    """Writes the resumable checkpoint every ``interval`` steps (0: never mid-epoch)
    and at the end of every epoch."""

    def __init__(self, checkpointer, interval=0):
        self.checkpointer = checkpointer
        self.interval = interval

    def after_step(self):
        if self.interval and self.loop.state.iteration % self.interval == 0:
            self.checkpointer.save(self.loop)

    def after_epoch(self):
        self.checkpointer.save(self.loop)


class ValidationHook(HookBase):
    """Validates, keeps the best metric, writes GluonCV's params files.

    After every ``save_interval``-th epoch, (if ``val_interval`` > 0) every
    ``val_interval``-th and the last epoch, and (if ``val_iters`` > 0) every
    ``val_iters``-th step within an epoch, it calls
    ``task.validate(net, ctx_list)`` (with several processes: BatchNorm statistics averaged
    first, then ``validate(net, ctx_list, group=runtime)`` on every process) and reports the
    result. When
    ``metrics[val_metric]`` beats the best so far it writes
    ``{save_prefix}_best.params`` and appends to ``{save_prefix}_best_map.log``;
    every ``save_interval``-th epoch it writes
    ``{save_prefix}_{epoch:04d}_{metric:.4f}.params``. Each params file gets a
    ``.json`` beside it (meta, epoch, metrics, config). With the model EMA
    (``config.ema``) the averaged weights are validated and saved
    (`TrainLoop.evaluated_weights`). Then the checkpoint manifest is rewritten so the new best
    survives a resume, and the net is hybridized again (``validate`` may have re-hybridized it
    for inference).
    """

    def __init__(self, task, config, checkpointer, reporter):
        self.task = task
        self.config = config
        self.checkpointer = checkpointer
        self.reporter = reporter
        self.best = None
        self.best_epoch = None
        self.validated_epoch = None
        self._restored = False
        self._validated_at = None   # iteration of this process's last validation

    def before_train(self):
        # A stop during a validation (kill -9, or a signal, which abandons it) leaves the
        # checkpoint written before it without its result: run it now, on those weights.
        state = self.loop.state
        if not self._restored or self._validated_at == state.iteration:
            return
        done = state.epoch - 1
        if state.batch == 0:
            if done >= 0 and self._due(done) and (self.validated_epoch is None
                                                  or self.validated_epoch < done):
                self._validate(done)
        elif self._due_within_epoch():
            self._validate(state.epoch)

    def after_step(self):
        if self._due_within_epoch() and not self.loop.done():
            self._validate(self.loop.state.epoch)

    def after_epoch(self):
        # a stop requested after a step's validation ends the epoch on the same weights
        if self._due(self.loop.state.epoch) and self._validated_at != self.loop.state.iteration:
            self._validate(self.loop.state.epoch)

    def _due_within_epoch(self):
        """Whether this step validates (``val_iters``; the epoch's end validates in
        after_epoch)."""
        state, every = self.loop.state, self.config.val_iters
        return (bool(every) and state.iteration % every == 0
                and state.batch < state.batches_per_epoch)

    def _due(self, epoch):
        val, save = self.config.val_interval, self.config.save_interval
        if save and (epoch + 1) % save == 0:
            return True     # the params file is named by the metric
        return bool(val) and ((epoch + 1) % val == 0 or epoch + 1 == self.loop.epochs)

    def _validate(self, epoch):
        loop, runtime = self.loop, self.loop.runtime
        loop.sync_statistics()
        runtime.beat('validation after epoch %d, iteration %d' % (epoch, loop.state.iteration))
        # the averaged weights (model EMA) while validating and saving params files; the
        # trained ones back before a signal's checkpoint (interruptible) and the next step
        with loop.interruptible(), loop.evaluated_weights():
            if runtime.world_size == 1:
                metrics = self.task.validate(loop.net, list(runtime.ctx))
            elif runtime.synchronous:    # every process validates its share
                metrics = self.task.validate(loop.net, list(runtime.ctx), group=runtime)
            elif runtime.is_main:        # dist_async: the workers' weights differ; rank 0's
                metrics = self.task.validate(loop.net, list(runtime.ctx))
            else:
                return
        metrics = _checked_metrics(metrics, self.config.val_metric)
        loop.state.metrics = metrics
        self.reporter.validation(epoch, loop.state.iteration, metrics)
        if loop.runtime.is_main:
            with loop.evaluated_weights():
                self._save_params(epoch, metrics)
        self.validated_epoch, self._validated_at = epoch, loop.state.iteration
        for hook in loop.hooks:
            getattr(hook, 'after_validation', lambda *args: None)(epoch, metrics)
        self.checkpointer.save(loop)
        self.config.hybridize_net(loop.net)

    def _save_params(self, epoch, metrics):
        value, prefix = metrics[self.config.val_metric], self.config.save_prefix
        info = {'meta': self.checkpointer.meta, 'epoch': epoch,
                'iteration': self.loop.state.iteration, 'metrics': _json_metrics(metrics),
                'config': self.config.to_dict()}
        if math.isfinite(value) and (self.best is None or value > self.best):
            self.best, self.best_epoch = value, epoch
            save_params(self.loop.net, prefix + '_best.params', info)
            with open(prefix + '_best_map.log', 'a') as f:
                f.write('{:04d}:\t{:.4f}\n'.format(epoch, value))
        if self.config.save_interval and (epoch + 1) % self.config.save_interval == 0:
            save_params(self.loop.net, '{:s}_{:04d}_{:.4f}.params'.format(prefix, epoch, value),
                        info)

    def state_dict(self):
        return {'best': self.best, 'best_epoch': self.best_epoch,
                'validated_epoch': self.validated_epoch,
                'validated_iteration': self._validated_at}

    @property
    def best_path(self):
        """The best weights' ``.params`` (``{save_prefix}_best.params``), None before a
        validation scored a finite metric."""
        return None if self.best is None else self.config.save_prefix + '_best.params'

    def load_state_dict(self, state):
        self.best, self.best_epoch = state['best'], state['best_epoch']
        self.validated_epoch = state['validated_epoch']
        self._validated_at = state.get('validated_iteration')
        self._restored = True


def _checked_metrics(metrics, key):
    if not isinstance(metrics, dict):
        raise TypeError('task.validate must return {name: float}, got %r' % type(metrics).__name__)
    if key not in metrics:
        raise KeyError('task.validate returned %s but not val_metric %r'
                       % (sorted(metrics), key))
    return {str(k): float(v) for k, v in metrics.items()}


def _json_metrics(metrics):
    return {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
