"""A toy task for the engine tests (regression MLP on synthetic data), and its own checks.

Other engine tests import `ToyTask` and `make_task` from here; child
processes reach `make_task` as ``test_engine_toy:make_task`` with this
folder on PYTHONPATH.
"""
import random

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon, nd

DIM = 8


class ToyNet(gluon.HybridBlock):
    """BatchNorm -> Dense+ReLU -> Dropout -> Dense(1); shapes inferred at first call."""

    def __init__(self, hidden=32, dropout=0.1, **kwargs):
        super().__init__(**kwargs)
        self.body = gluon.nn.HybridSequential()
        self.body.add(gluon.nn.BatchNorm(), gluon.nn.Dense(hidden, activation='relu'),
                      gluon.nn.Dropout(dropout), gluon.nn.Dense(1))

    def hybrid_forward(self, F, x):
        return self.body(x).reshape((-1,))


def augment(x, y):
    """Random jitter from numpy's and python's global RNGs (seeded per sample by the engine)."""
    noise = np.random.normal(0, 0.05, x.shape) * random.uniform(0.5, 1.5)
    return (x + noise).astype('float32'), y


def batchify(samples):
    xs, ys = zip(*samples)
    return nd.array(np.stack(xs)), nd.array(np.array(ys, dtype='float32'))


class ToyTask:
    """Regression of ``y = x . w / sqrt(8) + 0.5 sin(x0)`` following the engine's task contract.

    Parameters
    ----------
    num_train, num_val : int
        Synthetic samples.
    nan_at_call : int, optional
        The ``losses`` call (1-based) whose loss is NaN, to test the non-finite stop.
    dropout : float
    """

    train_batchify = staticmethod(batchify)

    def __init__(self, num_train=64, num_val=32, nan_at_call=None, dropout=0.1):
        rng = np.random.RandomState(0)
        w = rng.normal(size=DIM).astype('float32')
        x = rng.normal(size=(num_train + num_val, DIM)).astype('float32')
        y = (x @ w / np.sqrt(DIM) + 0.5 * np.sin(x[:, 0])).astype('float32')
        self.train_x, self.train_y = x[:num_train], y[:num_train]
        self.val_x, self.val_y = nd.array(x[num_train:]), nd.array(y[num_train:])
        self.nan_at_call = nan_at_call
        self.dropout = dropout
        self.calls = 0

    def meta(self):
        return {'network': 'toy_mlp', 'dim': DIM}

    def build_net(self, ctx_list):
        net = ToyNet(dropout=self.dropout)
        net.initialize(mx.init.Xavier(), ctx=ctx_list)
        return net

    def train_dataset(self):
        data = gluon.data.ArrayDataset(self.train_x, self.train_y)
        return data.transform(augment, lazy=True)

    def losses(self, net, parts):
        self.calls += 1
        total = sum(x.shape[0] for x, _ in parts)
        scale = float('nan') if self.calls == self.nan_at_call else 1.0
        l2, l1 = [], []
        for x, y in parts:
            err = net(x) - y
            l2.append((err ** 2).sum() * (scale / total))
            l1.append(err.abs().sum() * (0.1 / total))
        return {'loss_l2': l2, 'loss_l1': l1}

    def validate(self, net, ctx_list):
        pred = net(self.val_x.as_in_context(ctx_list[0])).as_in_context(mx.cpu())
        mse = float(((pred - self.val_y) ** 2).mean().asscalar())
        return {'mAP': 1.0 / (1.0 + mse), 'mse': mse}


def make_task(**kwargs):
    """Factory for `gluondet.engine.testing` child processes."""
    return ToyTask(**kwargs)


def test_toy_task_follows_the_contract():
    task = ToyTask(num_train=16)
    ctx = [mx.cpu(0), mx.cpu(1)]
    net = task.build_net(ctx)
    batch = task.train_batchify([task.train_dataset()[i] for i in range(4)])
    parts = [tuple(p) for p in zip(*[gluon.utils.split_and_load(b, ctx) for b in batch])]
    with mx.autograd.record():
        losses = task.losses(net, parts)
    assert sorted(losses) == ['loss_l1', 'loss_l2']
    assert all(len(terms) == 2 for terms in losses.values())
    metrics = task.validate(net, ctx)
    assert metrics['mAP'] == pytest.approx(1 / (1 + metrics['mse']))
