"""``horovodrun -np 2 python tests/broadcast_run.py OUT``: each rank seeds its random numbers
with its rank and builds a net of one layer of known shape and one whose shape waits for the
first forward; the engine's `HorovodRuntime` broadcasts it before and after that forward, as
the training loop does. Writes ``OUT/rank{r}.params``."""
import os
import sys

import mxnet as mx
from mxnet.gluon import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from gluondet.engine.distributed import HorovodRuntime  # noqa: E402


def main(out):
    import horovod.mxnet as hvd
    hvd.init()
    mx.random.seed(hvd.rank())
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=2), nn.Dense(2))
    net.initialize(mx.init.Normal(1.))
    runtime = HorovodRuntime((mx.cpu(),), hvd.rank(), hvd.size(), hvd=hvd)
    runtime.broadcast_parameters(net)
    net.hybridize()
    net(mx.nd.ones((1, 2))).wait_to_read()
    runtime.broadcast_parameters(net, trained_only=True)
    net.save_parameters(os.path.join(out, 'rank%d.params' % hvd.rank()))


if __name__ == '__main__':
    main(sys.argv[1])
