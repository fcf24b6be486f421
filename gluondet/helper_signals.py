"""How a helper process (a data loader's worker, a parameter server) leaves stop signals to
the process that started it.

``timeout``, a terminal's Ctrl-C, systemd and Slurm signal every process of a job. A helper
that died of that signal could leave its parent waiting forever (a worker holding its pool's
queue lock, a server its workers need for their last step); the parent is the one that stops,
after a checkpoint, and then ends its helpers itself. So in a helper SIGINT is ignored, a
SIGTERM is acted on only when its parent sends it, and it dies with its parent
(``PR_SET_PDEATHSIG``), so no helper outlives a parent killed by SIGKILL.
"""
import ctypes
import os
import signal
import threading


def leave_signals_to_parent(parent=None):
    """Make this process a helper of ``parent`` (default: its parent) as the module docstring
    says. SIGTERM must be blocked in every thread: block it before anything starts threads.
    """
    parent = os.getppid() if parent is None else parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(parent)
    threading.Thread(target=_watch_sigterm, args=(parent,), daemon=True,
                     name='gluondet-sigterm').start()


def _watch_sigterm(parent):
    while True:
        info = signal.sigwaitinfo({signal.SIGTERM})
        if info.si_pid == parent:
            os._exit(128 + signal.SIGTERM)


def _die_with(parent):
    """SIGKILL this process when ``parent`` exits (Linux); a no-op elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:            # the parent exited before the call
        os._exit(128 + signal.SIGKILL)


def end_loader_workers(loader):
    """End the worker processes of a Gluon ``DataLoader`` now (Gluon ends them only when the
    loader is garbage collected, which a reference cycle delays to any later moment)."""
    pool = getattr(loader, '_worker_pool', None)
    if pool is not None:
        loader._worker_pool = None
        pool.terminate()
        pool.join()
