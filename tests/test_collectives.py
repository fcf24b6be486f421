"""gluondet.collectives: the active runtime's collectives, below nn and losses (the 2-rank runs
are in test_distributed_horovod.py)."""
import dataclasses
import threading

import mxnet as mx
import numpy as np
from mxnet import nd

from gluondet import collectives, engine
from gluondet.engine import Runtime
from gluondet.nn import SyncBatchNorm
from sync_bn_run import inputs, run


@dataclasses.dataclass(frozen=True)
class Recording(Runtime):
    """A runtime whose ``allreduce`` adds ``peer`` (the other processes' arrays, one per array
    of the call) and records each call's name and thread."""

    peer: tuple = ()
    calls: list = dataclasses.field(default_factory=list, compare=False)

    def allreduce(self, arrays, name=None):
        self.calls.append((name, threading.current_thread() is threading.main_thread()))
        for array, other in zip(arrays, self.peer):
            array += other
        return arrays


def test_outside_training_they_are_identities():
    assert collectives.active_runtime() is None
    total, arrays = nd.array([5]), [nd.array([1, 2])]
    assert collectives.process_share(total) is total
    assert collectives.allreduce(arrays) is arrays
    assert collectives.mean_over_processes({'loss': 2.0}) == {'loss': 2.0}


def test_two_processes_share_counts_and_average_values():
    runtime = Recording((mx.cpu(),), world_size=2, peer=(nd.array([3]),))
    total = nd.array([5])
    with runtime.activated() as active:
        assert active is runtime and collectives.active_runtime() is runtime
        assert collectives.process_share(total).asscalar() == 4     # (5 + 3) / 2
        assert total.asscalar() == 5                                # the caller's count stays
    assert collectives.active_runtime() is None
    runtime = Recording((mx.cpu(),), world_size=2, peer=(nd.array([3, 5]),))
    with runtime.activated():
        assert collectives.mean_over_processes({'b': 3.0, 'a': 1.0}) == {'b': 4.0, 'a': 2.0}


def test_an_asynchronous_or_single_process_runtime_is_not_summed():
    single = Recording((mx.cpu(),), peer=(nd.array([3]),))
    with single.activated():
        assert collectives.process_share(nd.array([5])).asscalar() == 5
        assert collectives.mean_over_processes({'a': 1.0}) == {'a': 1.0}
    assert single.calls == []


def test_custom_operator_threads_see_the_active_runtime():
    # SyncBatchNorm's operator runs on MXNet's custom-operator threads: they reach the runtime
    runtime = Recording((mx.cpu(),))
    x, dy = inputs()
    with runtime.activated():
        run(SyncBatchNorm, x, dy)
    assert {name.rsplit('.', 1)[1] for name, _ in runtime.calls} == {'sum', 'var', 'grad'}
    assert not any(main for _, main in runtime.calls)


def test_the_engine_exports_the_same_functions():
    assert engine.process_share is collectives.process_share
    assert engine.mean_over_processes is collectives.mean_over_processes
    np.testing.assert_equal(engine.process_share(nd.array([2])).asnumpy(), [2])
