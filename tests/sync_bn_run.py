"""One Horovod rank of the SyncBatchNorm check: ``python tests/sync_bn_run.py OUT``.

Rank 0 holds 3 samples of a batch of 4, rank 1 the last one (uneven on purpose). Each rank
writes ``OUT/rank{r}.npz``: its outputs and input gradients, the parameter gradients, the
running statistics after two training passes, and an inference output.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from mxnet import autograd, gluon, nd  # noqa: E402

from gluondet.engine import TrainConfig, make_runtime  # noqa: E402
from gluondet.nn import SyncBatchNorm  # noqa: E402

SPLIT = (0, 3, 4)


def inputs():
    rng = np.random.RandomState(0)
    return (rng.randn(4, 3, 5, 5).astype('float32') * 2 + 1,
            rng.randn(4, 3, 5, 5).astype('float32'))


def run(norm, x, dy, runtime=None):
    """Two training passes and an inference of ``norm`` on ``x`` with output gradient ``dy``."""
    net = gluon.nn.HybridSequential()
    net.add(norm(in_channels=3))
    net.initialize()
    net[0].gamma.set_data(nd.array([1.5, 0.5, 2]))
    net[0].beta.set_data(nd.array([0.1, -1, 0]))
    net.hybridize()
    out = {}
    for _ in range(2):
        data = nd.array(x)
        data.attach_grad()
        with autograd.record():
            y = net(data)
        y.backward(nd.array(dy))
    out.update(y=y.asnumpy(), dx=data.grad.asnumpy(), dgamma=net[0].gamma.grad().asnumpy(),
               dbeta=net[0].beta.grad().asnumpy(),
               mean=net[0].running_mean.data().asnumpy(),
               var=net[0].running_var.data().asnumpy(), infer=net(nd.array(x)).asnumpy())
    return out


def main(folder):
    runtime = make_runtime(TrainConfig(horovod=True))
    x, dy = inputs()
    part = slice(SPLIT[runtime.rank], SPLIT[runtime.rank + 1])
    with runtime.activated():
        out = run(SyncBatchNorm, x[part], dy[part])
    os.makedirs(folder, exist_ok=True)
    np.savez(os.path.join(folder, 'rank%d.npz' % runtime.rank), **out)


if __name__ == '__main__':
    main(sys.argv[1])
