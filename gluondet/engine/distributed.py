"""Runtimes of several processes: Horovod, and MXNet's parameter server (a dist kvstore).

`make_runtime` picks one from the config: ``horovod`` (processes started by ``horovodrun``),
a ``dist_*`` ``kv_store`` (processes started by ``gluondet launch``), else one process on
its devices. Each process trains on its shard of every epoch (``batch_size / world_size``
samples a step), only rank 0 writes files, and the step applies the mean of the
processes' gradients (dist_async: each worker's own, applied by the servers as it comes).
"""
import dataclasses
import os
import pickle
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import gluon, nd
from mxnet.gluon.parameter import DeferredInitializationError

from ..optional import install_hint
from .context import Runtime, local_runtime, make_contexts, optimizer_params


def check_launch(config):
    """ValueError, in one line, when ``config`` asks for processes this one cannot be part of
    (a dist kvstore without a launcher, Horovod without Horovod or on GPUs this machine
    lacks)."""
    if config.kv_store.startswith('dist') and 'DMLC_ROLE' not in os.environ:
        raise ValueError('kv_store %s: this process was not started by a parameter-server '
                         'launcher (no DMLC_ROLE in its environment); run it with `gluondet '
                         'launch -n WORKERS -s SERVERS -- python ...` (docs/distributed.md)'
                         % config.kv_store)
    if config.horovod:
        try:
            import horovod.mxnet  # noqa: F401
        except ImportError as err:
            raise ValueError('horovod: cannot import horovod.mxnet (%s); %s'
                             % (err, install_hint('horovod'))) from None
        if config.gpus and mx.context.num_gpus() == 0:
            raise ValueError("--horovod with --gpus %s asks for GPUs, but this machine has none; "
                             "--gpus '' trains on the CPU" % config.gpus)


def make_runtime(config):
    """The runtime ``config`` asks for: Horovod, a dist kvstore, or this process alone."""
    check_launch(config)
    if config.horovod:
        return HorovodRuntime.start(config)
    if config.kv_store.startswith('dist'):
        return KVStoreRuntime.start(config)
    return local_runtime(config)


def _process_context(config, local_rank):
    """This process's one device: GPU ``local_rank`` when ``config.gpus`` names GPUs, else CPU."""
    if not config.gpus:
        return mx.cpu()
    found = mx.context.num_gpus()
    if local_rank >= found:
        raise ValueError('process %d on this machine wants a GPU, but it has %d; run at most '
                         'that many processes per machine, or pass --gpus "" for the CPU'
                         % (local_rank, found))
    return mx.gpu(local_rank)


@dataclasses.dataclass(frozen=True)
class HorovodRuntime(Runtime):
    """A process of a ``horovodrun`` job: one device (its local rank's GPU, or the CPU),
    `hvd.DistributedTrainer`, Horovod's collectives."""

    hvd: Any = dataclasses.field(default=None, compare=False, repr=False)
    kind = 'horovod'

    @classmethod
    def start(cls, config):
        import horovod.mxnet as hvd
        hvd.init()
        return cls((_process_context(config, hvd.local_rank()),), hvd.rank(), hvd.size(),
                   hvd=hvd)

    def make_trainer(self, params, config, schedule=None):
        # A dict in the list's order (Horovod sorts a list, and Parameters do not compare);
        # the names are the same on every process.
        return self.hvd.DistributedTrainer({'%04d' % i: p for i, p in enumerate(params)},
                                           config.optimizer, optimizer_params(config))

    def allreduce(self, arrays, name=None):
        if self.world_size > 1 and arrays:
            self.hvd.grouped_allreduce_(list(arrays), average=False,
                                        name='gluondet.%s' % (name or _next_id()))
        return arrays

    def allgather(self, obj):
        if self.world_size == 1:
            return [obj]
        return self.hvd.allgather_object(obj, name='gluondet.%d' % _next_id())

    def broadcast_parameters(self, net, trained_only=False):
        # A sum to which the other ranks add zeros, not Horovod's broadcast: its op reads the
        # tensor's name after the op may have ended and been freed, and a rank died of a
        # segmentation fault now and then (gdb: in horovod::common::EnqueueTensorBroadcast).
        arrays = []
        for _, param in sorted(net.collect_params().items()):
            if trained_only and param.grad_req == 'null':
                continue
            try:
                arrays.append(param.data())
            except DeferredInitializationError:
                continue
        if self.rank != 0:
            for array in arrays:
                array[:] = 0
        for array in self.allreduce(arrays, name='parameters'):
            array.wait_to_read()


@dataclasses.dataclass(frozen=True)
class KVStoreRuntime(Runtime):
    """A worker of MXNet's parameter server (``kv_store`` ``dist_sync``, ``dist_device_sync``
    or ``dist_async``), started by ``gluondet launch``: its devices from ``config.gpus``, a
    `gluon.Trainer` on the dist kvstore; collectives are sums on the servers."""

    store: Any = dataclasses.field(default=None, compare=False, repr=False)
    kind = 'kvstore'

    @property
    def synchronous(self):
        return 'async' not in self.kv_store

    @classmethod
    def start(cls, config):
        store = mx.kv.create(config.kv_store)
        return cls(tuple(make_contexts(config.gpus, config.cpus)), store.rank, store.num_workers,
                   kv_store=config.kv_store, store=store)

    def make_trainer(self, params, config, schedule=None):
        # Synchronous: the servers sum the gradients, each worker's updater applies their
        # mean, and the optimizer states stay in the checkpoint. Async: only the servers can
        # update (MXNet's rule), so they hold the optimizer states and follow the schedule.
        if self.synchronous:
            trainer = gluon.Trainer(params, config.optimizer, optimizer_params(config),
                                    kvstore=self.store, update_on_kvstore=False)
            trainer._scale /= self.world_size
            return trainer
        options = dict(optimizer_params(config), lr_scheduler=ServerSchedule(
            schedule, self.world_size))
        return gluon.Trainer(params, config.optimizer, options, kvstore=self.store,
                             update_on_kvstore=True)

    def allreduce(self, arrays, name=None):
        if self.world_size == 1 or not self.synchronous:
            return arrays
        for i, array in enumerate(arrays):
            self.store.pushpull(_kv_key(self.store, (name, i), array), array, out=array)
        for array in arrays:   # a key's next sum must not start before this one ends
            array.wait_to_read()
        return arrays

    def allgather(self, obj):
        if self.world_size == 1 or not self.synchronous:
            return [obj]
        data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
        sizes = np.zeros(self.world_size, np.float32)
        sizes[self.rank] = len(data)
        sizes = self.allreduce([nd.array(sizes)])[0].asnumpy().astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        payload = np.zeros(int(offsets[-1]), np.float32)   # bytes as floats: sums are exact
        payload[offsets[self.rank]:offsets[self.rank + 1]] = data
        payload = self.allreduce([nd.array(payload)])[0].asnumpy().astype(np.uint8)
        return [pickle.loads(payload[offsets[r]:offsets[r + 1]].tobytes())
                for r in range(self.world_size)]


class ServerSchedule:
    """The `LRSchedule` as dist_async's servers apply it: their optimizer counts the updates
    of all the workers, about ``workers`` per training step."""

    def __init__(self, schedule, workers):
        self.schedule, self.workers = schedule, workers
        self.base_lr = schedule.base_lr

    def __call__(self, num_update):
        return self.schedule(num_update // self.workers)


_IDS = [0]


def _next_id():
    """A collective's name: the same sequence on every process (they call them in order)."""
    _IDS[0] += 1
    return _IDS[0]


# Keys of the kvstore's sums, by (position in the call, shape, dtype). The trainer's keys
# are its parameters' indices, so these are ints (a kvstore takes one key type) far above.
_KV_KEYS = {}
_KV_BASE = 1 << 30


def _kv_key(store, position, array):
    """The kvstore key summing the ``position``-th array of a call, of ``array``'s shape and
    type, created on first use (``init`` is a barrier: every worker reaches it at once)."""
    spec = (id(store), position, array.shape, np.dtype(array.dtype).str)
    if spec not in _KV_KEYS:
        key = _KV_BASE + len(_KV_KEYS)
        store.init(key, nd.zeros(array.shape, dtype=array.dtype))
        _KV_KEYS[spec] = key
    return _KV_KEYS[spec]
