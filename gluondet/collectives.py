"""The collectives of the training in progress, for the code below the engine.

The engine makes its runtime (`gluondet.engine.Runtime`: ``world_size``, ``synchronous``,
``allreduce``) active for the whole training (`Runtime.activated`); layers (`gluondet.nn.
SyncBatchNorm`), losses and the engine's hooks call the functions here, which are identities
outside training and in one process. So nn and losses never import the engine, and a
deployed network does not load it.
"""
import contextlib

from mxnet import autograd, nd

# The active runtimes, innermost last: a module global, not thread-local, so that MXNet's
# custom-operator threads (SyncBatchNorm's allreduce) see the runtime too.
_ACTIVE = []


@contextlib.contextmanager
def activated(runtime):
    """Within the block, `active_runtime` is ``runtime``."""
    _ACTIVE.append(runtime)
    try:
        yield runtime
    finally:
        _ACTIVE.remove(runtime)


def active_runtime():
    """The runtime of the training in progress (`activated`), or None."""
    return _ACTIVE[-1] if _ACTIVE else None


def allreduce(arrays, name=None):
    """Each NDArray of ``arrays`` summed over the processes of the active runtime, in place
    (``arrays`` unchanged without one); ``name`` as `gluondet.engine.Runtime.allreduce`."""
    runtime = active_runtime()
    return arrays if runtime is None else runtime.allreduce(arrays, name=name)


def _several():
    """The active runtime if it has several synchronous processes, else None."""
    runtime = active_runtime()
    if runtime is None or runtime.world_size == 1 or not runtime.synchronous:
        return None
    return runtime


def process_share(total):
    """A count summed over the whole batch, per process: ``total`` summed over the processes of
    the active runtime and divided by their number (``total`` itself in one process).

    A loss divides its part by this, so that the mean of the processes' gradients (what a
    synchronous step applies) is the gradient of the whole batch's loss. Not differentiated:
    counts are constants.
    """
    runtime = _several()
    if runtime is None:
        return total
    with autograd.pause():
        summed = runtime.allreduce([total.copy()])[0]
        return summed / runtime.world_size


def mean_over_processes(values):
    """``{name: float}`` averaged over the processes of the active runtime (same keys on all)."""
    runtime = _several()
    if runtime is None or not values:
        return dict(values)
    names = sorted(values)
    summed = runtime.allreduce([nd.array([values[n] for n in names], dtype='float32')])[0]
    means = dict(zip(names, (summed / runtime.world_size).asnumpy().tolist()))
    return {name: means[name] for name in values}
