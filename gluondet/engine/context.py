"""Where training runs: the device contexts, this process's rank, the trainer factory, and
the collectives (identities in one process; `gluondet.collectives` reaches the active one)."""
import dataclasses
import inspect
from typing import Tuple

import mxnet as mx
from mxnet import gluon

from .. import collectives
from . import watchdog


def make_contexts(gpus='', cpus=1):
    """Device contexts from a GPU id string.

    Parameters
    ----------
    gpus : str
        Comma-separated GPU ids (``'0,1'``); ``''`` means CPU.
    cpus : int
        Number of CPU contexts when ``gpus`` is empty.

    Returns
    -------
    list of mx.Context

    Raises
    ------
    ValueError
        The id string is malformed or names GPUs this machine does not have.
    """
    try:
        ids = [int(g) for g in gpus.split(',') if g.strip()]
    except ValueError:
        raise ValueError("--gpus (gpus) takes comma-separated GPU ids like 0,1 ('' for the "
                         'CPU), got %r' % gpus) from None
    if not ids:
        return [mx.cpu(i) for i in range(cpus)]
    if len(set(ids)) != len(ids) or min(ids) < 0:
        raise ValueError('--gpus (gpus) %r: ids must be distinct and >= 0' % gpus)
    found = mx.context.num_gpus()
    missing = [i for i in ids if i >= found]
    if missing:
        have = 'no GPU' if found == 0 else '%d GPU(s) (ids 0..%d)' % (found, found - 1)
        raise ValueError("--gpus (gpus) %s asks for GPU %s, but this machine has %s; --gpus '' "
                         'trains on the CPU' % (gpus, ','.join(map(str, missing)), have))
    return [mx.gpu(i) for i in ids]


@dataclasses.dataclass(frozen=True)
class Runtime:
    """One training process: its devices and its place among the processes.

    A distributed backend (Horovod, a dist kvstore: `gluondet.engine.distributed`) is a
    subclass that sets ``rank``/``world_size`` and overrides `make_trainer` and the
    collectives (`allreduce`, `allgather`, `broadcast_parameters`). Every process calls a
    collective at the same point of training, in the same order.

    The gradient a step applies is the mean of the processes' gradients (``synchronous``;
    Horovod's convention), so a loss normalized by a count over the whole batch divides each
    process's part by `process_share` of that count.

    Parameters
    ----------
    ctx : tuple of mx.Context
        The devices of this process; each batch is split over them.
    rank, world_size : int
        This process's index and the number of processes. Only rank 0
        writes logs and checkpoints.
    """

    ctx: Tuple[mx.Context, ...]
    rank: int = 0
    world_size: int = 1
    kv_store: str = 'device'

    #: Whether every step averages the processes' gradients (not dist_async).
    synchronous = True
    #: What runs the processes, for messages and the checkpoint.
    kind = 'local'

    @property
    def is_main(self):
        """Whether this process writes logs, checkpoints and params files."""
        return self.rank == 0

    def describe(self):
        """``'rank 1 of 2 (horovod)'``, for messages."""
        return 'rank %d of %d (%s)' % (self.rank, self.world_size, self.kind)

    def allreduce(self, arrays, name=None):
        """Sum each NDArray of ``arrays`` over the processes, in place; returns ``arrays``.

        ``name`` identifies a call made from several threads at once (a layer's): without
        it, calls are matched across the processes by their order."""
        return arrays

    def allgather(self, obj):
        """``[obj of rank 0, obj of rank 1, ...]`` (``obj`` picklable), on every process."""
        return [obj]

    def broadcast_parameters(self, net, trained_only=False):
        """Make every process hold rank 0's values of ``net``'s initialized parameters; with
        ``trained_only`` of those with a gradient. The loop calls it before training, and
        after the first step (whose forward initialized the others) with ``trained_only``:
        the running statistics start from constants and then hold each process's batches."""

    def beat(self, what):
        """Tell the hang watchdog, if one runs, that this process is alive and doing ``what``."""
        watchdog.beat(what)

    def activated(self):
        """A context within which `gluondet.collectives.active_runtime` is this one (the
        collectives' `process_share`, `mean_over_processes` and `gluondet.nn.SyncBatchNorm`
        use it)."""
        return collectives.activated(self)

    def make_trainer(self, params, config, schedule=None):
        """A `gluon.Trainer` for ``params`` from the optimizer fields of ``config``.

        Updates run in the trainer's own updaters (``update_on_kvstore=False``),
        where the checkpoint code reads and restores the optimizer states. ``schedule`` (the
        `LRSchedule`) is for a trainer whose updates run elsewhere (dist_async's servers).
        """
        kvstore = self.kv_store if all(c.device_type == 'gpu' for c in self.ctx) else 'device'
        return gluon.Trainer(params, config.optimizer, optimizer_params(config),
                             kvstore=kvstore, update_on_kvstore=False)


def local_runtime(config):
    """The single-process runtime on the devices named by ``config.gpus``/``config.cpus``
    (``config.kv_store`` sums GPU gradients: ``device``, ``local`` or ``nccl``)."""
    return Runtime(tuple(make_contexts(config.gpus, config.cpus)),
                   kv_store='device' if config.kv_store.startswith('dist') else config.kv_store)


#: Name endings of BatchNorm's running statistics (MXNet's and GluonCV's layers).
STATISTICS = ('running_mean', 'running_var', 'moving_mean', 'moving_var')


def is_statistic(name):
    """Whether the parameter named ``name`` is a BatchNorm running mean or variance."""
    return name.endswith(STATISTICS)


def average_statistics(runtime, net):
    """Set BatchNorm's running mean and variance to their mean over the processes (the
    trainers keep only the trained parameters equal). Every process calls it."""
    if runtime.world_size == 1 or not runtime.synchronous:
        return
    stats = [p for name, p in sorted(net.collect_params().items())
             if is_statistic(name) and p._data is not None]
    means = average_over_processes(runtime, [p.data(runtime.ctx[0]) for p in stats])
    for param, mean in zip(stats, means):
        param.set_data(mean)


def average_over_processes(runtime, arrays):
    """Copies of ``arrays`` averaged over the synchronous processes; ``arrays`` itself in one
    process or with dist_async, whose workers' weights differ. Every process calls it."""
    if runtime.world_size == 1 or not runtime.synchronous or not arrays:
        return arrays
    summed = runtime.allreduce([a.copy() for a in arrays])
    # Horovod's sum runs in the background: a process that exits right after (a stopped run
    # checkpoints, and only rank 0 writes) would shut Horovod down under the others' sum
    for array in summed:
        array.wait_to_read()
    return [array / runtime.world_size for array in summed]


def optimizer_params(config):
    """``learning_rate``, ``wd``, if the optimizer takes it ``momentum``,
    ``clip_gradient`` when ``config.clip_gradient > 0``, and with AMP on GPUs
    ``multi_precision`` (float32 master copies of any float16 weights, as GluonCV)."""
    params = {'learning_rate': config.lr, 'wd': config.wd}
    if config.amp and config.gpus:
        params['multi_precision'] = True
    if config.clip_gradient > 0:
        params['clip_gradient'] = config.clip_gradient
    cls = mx.optimizer.Optimizer.opt_registry[config.optimizer.lower()]
    if 'momentum' in inspect.signature(cls.__init__).parameters:
        params['momentum'] = config.momentum
    return params
