"""The hang watchdog: ends a distributed job whose process stopped making progress.

A process of a distributed job that stays alive but stops stepping (a peer stalled or
died inside a collective: Horovod and MXNet's parameter server both wait for it forever)
would hang the whole job. The `Watchdog` hook runs a thread that expects a `beat` at least
every ``timeout`` seconds; the training loop beats at every step, validation at every
batch, the checkpointer before writing. Without one it prints which rank stopped where, and
ends the process with `EXIT_CODE`; ``horovodrun`` and ``gluondet launch`` then end the
other processes.
"""
import os
import sys
import threading
import time

from .hookbase import HookBase

EXIT_CODE = 124     # as timeout(1)
_ACTIVE = []        # the running watchdog of this process, if any


def beat(what):
    """Progress: this process is alive and now doing ``what`` (a no-op without a watchdog)."""
    if _ACTIVE:
        _ACTIVE[0].beat(what)


class Watchdog(HookBase):
    """Ends this process when no `beat` came for ``timeout`` seconds.

    Parameters
    ----------
    timeout : float
        Seconds without progress before the process ends (``config.hang_timeout``).
    describe : str
        Who this process is, for the message (``'rank 1 of 2 (horovod)'``).
    exit : callable
        Called with the exit code after the message (default ``os._exit``: the main thread
        may be blocked in a collective that no exception would interrupt).
    """

    def __init__(self, timeout, describe, exit=os._exit):
        self.timeout = float(timeout)
        self.describe = describe
        self._exit = exit
        self._what, self._since = 'starting', time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def beat(self, what):
        with self._lock:
            self._what, self._since = what, time.monotonic()

    def before_train(self):
        self.beat('starting training')
        _ACTIVE[:] = [self]
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name='gluondet-watchdog',
                                        daemon=True)
        self._thread.start()

    def before_epoch(self):
        self.beat('epoch %d: starting its data loader' % self.loop.state.epoch)

    def before_step(self):
        state = self.loop.state
        self.beat('epoch %d, iteration %d: the step (forward, backward, the gradients\' exchange '
                  'with the other processes, the next batch)' % (state.epoch, state.iteration))

    def after_step(self):
        state = self.loop.state
        self.beat('epoch %d, iteration %d done: the hooks between steps (logging, checkpoint, '
                  'validation)' % (state.epoch, state.iteration))

    def after_epoch(self):
        self.beat('end of epoch %d: checkpoint and validation' % self.loop.state.epoch)

    def after_train(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if _ACTIVE and _ACTIVE[0] is self:
            _ACTIVE.clear()

    def _watch(self):
        while not self._stop.wait(min(1.0, self.timeout / 10)):
            with self._lock:
                what, idle = self._what, time.monotonic() - self._since
            if idle > self.timeout:
                sys.stderr.write(
                    'gluondet: %s made no progress for %.0f s (--hang-timeout %g) while in: %s. '
                    'Another process of the job has probably stalled or died; ending this one '
                    'with exit code %d so that the launcher ends the job.\n'
                    % (self.describe, idle, self.timeout, what, EXIT_CODE))
                sys.stderr.flush()
                self._exit(EXIT_CODE)
                return
