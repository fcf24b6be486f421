"""Stopping on a signal: SIGINT and SIGTERM end training after a checkpoint, with any
number of data-loader processes, whether the signal reaches the training process alone or
its whole process group (``timeout``, a terminal's Ctrl-C, systemd and Slurm signal every
process of the job).

Two parts:

- `SignalHook` (the last hook): a signal finishes the step in progress (a validation in
  progress is abandoned at once in a single process), writes a checkpoint and raises
  `TrainingInterrupted`, a ``SystemExit`` with code 128 + the signal number.
- `guard_children` (around `fit`): the processes forked meanwhile (data-loader workers) leave
  the signal to the training process (`gluondet.helper_signals`): a worker killed by the
  group's SIGTERM while holding its pool's queue lock left the pool, and so the training
  process, waiting forever.
"""
import contextlib
import os
import signal
import threading

from ..helper_signals import leave_signals_to_parent
from .hookbase import HookBase
from .wording import setting

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(SystemExit):
    """SIGINT/SIGTERM stopped training after a checkpoint; exit code 128 + signal number."""

    def __init__(self, signum, message):
        super().__init__(128 + signum)
        self.signum = signum
        self.message = message

    def __str__(self):
        return self.message


class _SignalArrived(BaseException):
    """Raised by the handler inside `SignalHook.interruptible` (not an Exception, so no
    ``except Exception`` of the code it interrupts swallows it)."""


class SignalHook(HookBase):
    """On SIGINT or SIGTERM: finish the step, checkpoint, raise `TrainingInterrupted`.

    A second SIGINT before that interrupts at once (KeyboardInterrupt). With several
    processes, a signal received by any of them stops them all after the same step.
    Handlers are only installed when training runs in the main thread.
    """

    installed = []   # the hooks whose handlers are in place in this process

    def __init__(self, checkpointer, reporter):
        self.checkpointer = checkpointer
        self.reporter = reporter
        self.requested = None
        self._previous = {}
        self._at_once = False

    def before_train(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
            SignalHook.installed.append(self)

    def _handle(self, signum, frame):
        if self.requested == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = self.requested or signum
        if self._at_once:
            self._at_once = False
            raise _SignalArrived()

    @contextlib.contextmanager
    def interruptible(self):
        """Inside, a signal stops training at once (checkpoint, `TrainingInterrupted`)
        instead of after the block: for a validation, whose result a resumed run computes
        again. With several synchronous processes the block runs to its end (they must all
        stop at the same step)."""
        runtime = self.loop.runtime
        if not self._previous or (runtime.world_size > 1 and runtime.synchronous):
            yield
            return
        try:
            self._at_once = self.requested is None
            if not self._at_once:
                raise _SignalArrived()
            yield
        except _SignalArrived:
            self._at_once = False
            self._stop()
        finally:
            self._at_once = False

    def after_step(self):
        if self._agreed() is not None:
            self._stop()

    def after_epoch(self):
        if self._agreed() is not None:
            self._stop()

    def _agreed(self):
        """The signal to act on now: this process's, or with several synchronous processes
        the one any of them received (all must stop at the same step)."""
        runtime = self.loop.runtime
        if runtime.world_size == 1 or not runtime.synchronous:
            return self.requested
        import mxnet as mx
        # decided by the sum alone: a signal arriving meanwhile waits for the next agreement;
        # one name at every step, as the gradients' (a new name a step would fill Horovod's
        # response cache, which then warns of evictions)
        flags = mx.nd.array([self.requested == s for s in SIGNALS])
        got = runtime.allreduce([flags], name='stop_signal')[0].asnumpy()
        if not got.any():
            return None
        self.requested = SIGNALS[int(got.argmax())]
        return self.requested

    def after_train(self):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        if self in SignalHook.installed:
            SignalHook.installed.remove(self)

    def _stop(self):
        state = self.loop.state
        self.checkpointer.save(self.loop)
        name = signal.Signals(self.requested).name
        last = self.checkpointer.last_path
        resume = [setting('resume', target) for target in ('auto', last)]
        message = ('%s: stopped at epoch %d, batch %d, iteration %d; checkpoint %s. %s' % (
            name, state.epoch, state.batch, state.iteration, last,
            'Resume with %s or %s.' % tuple(resume) if all(resume) else
            'This command does not resume: run again, it starts over.'))
        self.reporter.info(message)
        raise TrainingInterrupted(self.requested, message)


# ------------------------------------------------------------------ forked children

_guards = []    # depth of `guard_children` blocks in this process


@contextlib.contextmanager
def guard_children():
    """Inside, processes forked by this one leave stop signals to it
    (`gluondet.helper_signals`)."""
    _guards.append(True)
    try:
        yield
    finally:
        _guards.pop()


def _before_fork():
    if _guards:
        # A signal arriving between fork and the child's setup stays pending, not lost.
        _masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS))


def _after_fork_in_parent():
    if _masks:
        signal.pthread_sigmask(signal.SIG_SETMASK, _masks.pop())


def _after_fork_in_child():
    if not _masks:
        return
    previous = _masks.pop()
    _guards.clear()
    SignalHook.installed.clear()
    # SIGTERM stays blocked (threads inherit the mask): only the helper's watcher takes it
    leave_signals_to_parent()
    signal.pthread_sigmask(signal.SIG_SETMASK, set(previous) | {signal.SIGTERM})


_masks = []
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)
