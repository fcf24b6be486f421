"""Where training runs: the device contexts, this process's rank, the trainer factory."""
import dataclasses
import inspect
from typing import Tuple

import mxnet as mx
from mxnet import gluon


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
        raise ValueError('gpus must be comma-separated GPU ids like "0,1", got %r' % gpus) from None
    if not ids:
        return [mx.cpu(i) for i in range(cpus)]
    if len(set(ids)) != len(ids) or min(ids) < 0:
        raise ValueError('gpus=%r: ids must be distinct and >= 0' % gpus)
    found = mx.context.num_gpus()
    missing = [i for i in ids if i >= found]
    if missing:
        have = 'no GPU' if found == 0 else '%d GPU(s) (ids 0..%d)' % (found, found - 1)
        raise ValueError('gpus=%r asks for GPU %s, but this machine has %s; use gpus="" '
                         'to train on the CPU' % (gpus, ','.join(map(str, missing)), have))
    return [mx.gpu(i) for i in ids]


@dataclasses.dataclass(frozen=True)
class Runtime:
    """One training process: its devices and its place among the processes.

    A distributed backend (Horovod, a dist kvstore) is a subclass that sets
    ``rank``/``world_size`` and overrides `make_trainer`.

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

    @property
    def is_main(self):
        """Whether this process writes logs, checkpoints and params files."""
        return self.rank == 0

    def make_trainer(self, params, config):
        """A `gluon.Trainer` for ``params`` from the optimizer fields of ``config``.

        Updates run in the trainer's own updaters (``update_on_kvstore=False``),
        where the checkpoint code reads and restores the optimizer states.
        """
        return gluon.Trainer(params, config.optimizer, optimizer_params(config),
                             kvstore='device', update_on_kvstore=False)


def local_runtime(config):
    """The single-process runtime on the devices named by ``config.gpus``/``config.cpus``."""
    return Runtime(tuple(make_contexts(config.gpus, config.cpus)))


def optimizer_params(config):
    """``learning_rate``, ``wd``, if the optimizer takes it ``momentum``, and
    ``clip_gradient`` when ``config.clip_gradient > 0``."""
    params = {'learning_rate': config.lr, 'wd': config.wd}
    if config.clip_gradient > 0:
        params['clip_gradient'] = config.clip_gradient
    cls = mx.optimizer.Optimizer.opt_registry[config.optimizer.lower()]
    if 'momentum' in inspect.signature(cls.__init__).parameters:
        params['momentum'] = config.momentum
    return params
