"""Early stopping (NVIDIA TAO's ``training_config.early_stopping``: monitor, min_delta,
patience) as a hook, for every task.

A *check* compares the monitored value with the best so far:

- a training loss (``config.early_stop_monitor`` ``'loss'``, the sum of the task's losses,
  or one of them by name, ``'loss_cls'``, ...; every name starting with ``loss``) is
  checked at the end of every epoch, on the epoch's mean of the per-step values (over all
  processes, as the epoch's log line), and lower is better;
- anything else is a key of ``task.validate()``'s result (``'mAP'``, ``'AP/<class>'``) and
  is checked after every validation; higher is better.

A value improves on the best when it beats it by more than ``early_stop_min_delta``; the
first finite value always does. At the ``early_stop_patience``-th check in a row without an
improvement (the first, with patience 0 or 1) training stops once the hooks of that step
(or epoch) are done: the checkpoint holds the stopped state, ``fit`` returns as at the end
(``FitResult.stop_reason`` says why) and the log says why.
This is Keras' ``EarlyStopping``, which TAO runs, except that Keras' ``mode='auto'`` would
minimize ``mAP`` (it maximizes only names containing ``acc``): here validation metrics are
maximized. TAO's ``validation_loss`` has no counterpart (gluondet validates by mAP).

The counters are in the checkpoint: a resumed run continues counting, and resuming a run
that stopped early ends at once unless ``early_stop_patience`` was raised.
"""
import math

from ..collectives import mean_over_processes
from .hookbase import HookBase

__all__ = ['EarlyStoppingHook', 'monitors_loss']


def monitors_loss(monitor):
    """Whether ``monitor`` names a training loss (``'loss'``, ``'loss_cls'``, ...) rather
    than a validation metric."""
    return monitor.startswith('loss')


class EarlyStoppingHook(HookBase):
    """Stops training when ``monitor`` stops improving (see the module docstring).

    Parameters
    ----------
    monitor : str
        ``'loss'``, a loss name, or a key of the validation result.
    min_delta : float
        The least change that counts as an improvement.
    patience : int
        Checks without improvement tolerated; the next one stops training.
    reporter : Reporter
        For the log line.

    Validation results reach it through ``after_validation(epoch, metrics)``, which
    `ValidationHook` calls on every hook before it checkpoints.
    """

    def __init__(self, monitor, min_delta, patience, reporter):
        self.monitor, self.min_delta, self.patience = monitor, float(min_delta), int(patience)
        self.reporter = reporter
        self.minimize = monitors_loss(monitor)
        self.best = None
        self.best_epoch = self.best_iteration = None
        self.wait = 0
        self.checks = 0
        self._sums, self._steps = {}, 0

    # ---------------------------------------------------------------- stages

    def before_train(self):
        if self._exhausted():
            state = self.loop.state
            self._stop('stopped early before (%d checks without improvement); resumed with '
                       'patience %d, nothing is trained' % (self.wait, self.patience),
                       'at epoch %d, batch %d, iteration %d' % (state.epoch, state.batch,
                                                                state.iteration))

    def after_step(self):
        if not self.minimize:
            return
        values = self.loop.state.loss_values()
        for name, value in values.items():
            self._sums[name] = self._sums.get(name, 0.0) + value
        self._sums['loss'] = self._sums.get('loss', 0.0) + sum(values.values())
        self._steps += 1

    def after_epoch(self):
        if not self.minimize:
            return
        sums, steps = self._sums, self._steps
        self._sums, self._steps = {}, 0
        if not steps:
            return
        means = mean_over_processes({k: v / steps for k, v in sums.items()})
        if self.monitor not in means:
            raise KeyError('early_stop_monitor %r: the task\'s losses are %s (and their sum, '
                           "'loss')" % (self.monitor, sorted(k for k in means if k != 'loss')))
        self._check(means[self.monitor], 'epoch mean', self.loop.state.epoch)

    def after_validation(self, epoch, metrics):
        if self.minimize:
            return
        if self.monitor not in metrics:
            raise KeyError('early_stop_monitor %r is not in the validation result %s'
                           % (self.monitor, sorted(metrics)))
        self._check(metrics[self.monitor], 'validation', epoch)

    # ---------------------------------------------------------------- the rule

    def improved(self, value):
        """Whether ``value`` beats the best by more than ``min_delta`` (NaN never does)."""
        if not math.isfinite(value):
            return False
        if self.best is None:
            return True
        if self.minimize:
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def _check(self, value, what, epoch):
        state = self.loop.state
        self.checks += 1
        if self.improved(value):
            self.best, self.best_epoch, self.best_iteration = value, epoch, state.iteration
            self.wait = 0
            return
        self.wait += 1
        if self._exhausted():
            best = ('its best, %.6g at epoch %d (iteration %d)'
                    % (self.best, self.best_epoch, self.best_iteration)
                    if self.best is not None else 'any finite value')
            self._stop('%s %s %.6g at epoch %d, iteration %d has not %s %s by more than %g '
                       'in %d checks (patience %d)'
                       % (self.monitor, what, value, epoch, state.iteration,
                          'fallen below' if self.minimize else 'risen above', best,
                          self.min_delta, self.wait, self.patience))

    def _exhausted(self):
        return self.wait >= max(1, self.patience)

    def _stop(self, why, where=None):
        state = self.loop.state
        reason = 'early stopping: ' + why
        self.reporter.info('%s; training stops %s' % (reason, where or 'after epoch %d, iteration '
                                                      '%d' % (state.epoch, state.iteration)))
        self.loop.request_stop(reason)

    # ---------------------------------------------------------------- resume

    def state_dict(self):
        return {'monitor': self.monitor, 'best': self.best, 'best_epoch': self.best_epoch,
                'best_iteration': self.best_iteration, 'wait': self.wait,
                'checks': self.checks, 'sums': self._sums, 'steps': self._steps}

    def load_state_dict(self, state):
        if state.get('monitor') != self.monitor:
            self.reporter.info('early stopping now monitors %r, not %r: counting starts anew'
                               % (self.monitor, state.get('monitor')))
            return
        self.best, self.best_epoch = state['best'], state['best_epoch']
        self.best_iteration, self.wait = state['best_iteration'], state['wait']
        self.checks = state['checks']
        self._sums, self._steps = dict(state['sums']), state['steps']
