"""Toy tasks for the engine tests, and their own checks.

`ToyTask` is a regression MLP on synthetic vectors. `ToyImageTask` is
detection-shaped (images of different sizes and orientations, N x 6 labels)
and uses every optional part of the task contract: frozen parameters,
a grouped batch sampler, mixup, padded image batches.

Other engine tests import them, `toy_config` and `make_task` / `make_image_task` from here;
child processes reach the factories as ``test_engine_toy:make_task`` with this
folder on PYTHONPATH.
"""
import random

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon, nd

from gluondet.data.batchify import Pad, PadImages, Tuple
from gluondet.data.mixup import MixupDetection
from gluondet.engine import GroupedBatchSampler, TrainConfig

DIM = 8


def toy_config(tmp_path, **kwargs):
    """The `TrainConfig` of a toy run: batch 8, no loader workers, lr 0.005, a log record
    every 4 steps, no epoch ``.params``, files under ``tmp_path/run/toy``; ``kwargs`` set
    the rest or override."""
    values = dict(batch_size=8, num_workers=0, lr=0.005, log_interval=4, save_interval=0,
                  save_prefix=str(tmp_path / 'run' / 'toy'))
    values.update(kwargs)
    return TrainConfig(**values)


class ToyNet(gluon.HybridBlock):
    """BatchNorm -> Dense+ReLU -> Dropout -> Dense(1); shapes inferred at first call."""

    def __init__(self, hidden=32, dropout=0.1, bias_init='zeros', **kwargs):
        super().__init__(**kwargs)
        self.body = gluon.nn.HybridSequential()
        self.body.add(gluon.nn.BatchNorm(), gluon.nn.Dense(hidden, activation='relu',
                                                           bias_initializer=bias_init),
                      gluon.nn.Dropout(dropout), gluon.nn.Dense(1, bias_initializer=bias_init))

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
    loss_scale : float
        Multiplies the losses (0: zero gradients, 1000: large ones).
    bias_init : str or mx.init.Initializer
        Of the Dense layers' biases.
    """

    train_batchify = staticmethod(batchify)

    def __init__(self, num_train=64, num_val=32, nan_at_call=None, dropout=0.1, loss_scale=1.0,
                 bias_init='zeros'):
        rng = np.random.RandomState(0)
        w = rng.normal(size=DIM).astype('float32')
        x = rng.normal(size=(num_train + num_val, DIM)).astype('float32')
        y = (x @ w / np.sqrt(DIM) + 0.5 * np.sin(x[:, 0])).astype('float32')
        self.train_x, self.train_y = x[:num_train], y[:num_train]
        self.val_x, self.val_y = nd.array(x[num_train:]), nd.array(y[num_train:])
        self.nan_at_call = nan_at_call
        self.dropout = dropout
        self.loss_scale = loss_scale
        self.bias_init = bias_init
        self.calls = 0

    def meta(self):
        return {'network': 'toy_mlp', 'dim': DIM}

    def build_net(self, ctx_list):
        net = ToyNet(dropout=self.dropout, bias_init=self.bias_init)
        net.initialize(mx.init.Xavier(), ctx=ctx_list)
        return net

    def train_dataset(self):
        data = gluon.data.ArrayDataset(self.train_x, self.train_y)
        return data.transform(augment, lazy=True)

    def losses(self, net, parts):
        self.calls += 1
        total = sum(x.shape[0] for x, _ in parts)
        scale = float('nan') if self.calls == self.nan_at_call else self.loss_scale
        l2, l1 = [], []
        for x, y in parts:
            err = net(x) - y
            l2.append((err ** 2).sum() * (scale / total))
            l1.append(err.abs().sum() * (0.1 * self.loss_scale / total))
        return {'loss_l2': l2, 'loss_l1': l1}

    def validate(self, net, ctx_list):
        pred = net(self.val_x.as_in_context(ctx_list[0])).as_in_context(mx.cpu())
        mse = float(((pred - self.val_y) ** 2).mean().asscalar())
        return {'mAP': 1.0 / (1.0 + mse), 'mse': mse}


def make_task(**kwargs):
    """Factory for `gluondet.engine.testing` child processes."""
    return ToyTask(**kwargs)


class ToyImages(gluon.data.Dataset):
    """``num`` random uint8 images of 5..10 px a side with 1-3 boxes of 3 classes each."""

    def __init__(self, num, seed):
        rng = np.random.RandomState(seed)
        self.items = []
        for _ in range(num):
            h, w = rng.randint(5, 11, size=2)
            image = rng.randint(0, 256, size=(h, w, 3)).astype('uint8')
            boxes = []
            for _ in range(rng.randint(1, 4)):
                x0, y0 = rng.randint(0, w - 2), rng.randint(0, h - 2)
                boxes.append([x0, y0, rng.randint(x0 + 1, w), rng.randint(y0 + 1, h),
                              rng.randint(3), 0])
            self.items.append((image, np.array(boxes, 'float32')))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        image, label = self.items[idx]
        return nd.array(image, dtype='uint8'), label.copy()

    def image_size(self, idx):
        """``(width, height)``, without "reading" the image."""
        height, width = self.items[idx][0].shape[:2]
        return width, height


def image_augment(image, label):
    """HWC uint8 -> CHW float32 with noise (numpy's RNG) and a flip (python's RNG)."""
    img = image.asnumpy().astype('float32') / 255
    img += np.random.normal(0, 0.05, img.shape).astype('float32')
    label = label.copy()
    if random.random() < 0.5:
        img = img[:, ::-1]
        label[:, [0, 2]] = img.shape[1] - label[:, [2, 0]]
    return np.ascontiguousarray(img.transpose(2, 0, 1)), label


def image_targets(labels):
    """Per image: the sum of ``weight * (class + 1) / 3`` over its boxes (weight: column 6)."""
    weights = labels[:, :, 6] if labels.shape[2] > 6 else nd.ones_like(labels[:, :, 4])
    return ((labels[:, :, 4] >= 0) * weights * (labels[:, :, 4] + 1) / 3).sum(axis=1)


class ToyConvNet(gluon.HybridBlock):
    """Stem (Conv2D + BatchNorm) -> global average pool -> Dense+ReLU -> Dropout -> Dense(1)."""

    def __init__(self, dropout=0.1, **kwargs):
        super().__init__(**kwargs)
        self.stem = gluon.nn.HybridSequential()
        self.stem.add(gluon.nn.Conv2D(4, 3, padding=1), gluon.nn.BatchNorm(),
                      gluon.nn.Activation('relu'))
        self.head = gluon.nn.HybridSequential()
        self.head.add(gluon.nn.GlobalAvgPool2D(), gluon.nn.Flatten(),
                      gluon.nn.Dense(16, activation='relu'), gluon.nn.Dropout(dropout),
                      gluon.nn.Dense(1))

    def hybrid_forward(self, F, x):
        return self.head(self.stem(x)).reshape((-1,))


class ToyImageTask:
    """A detection-shaped toy using every optional part of the task contract.

    The stem (convolution and BatchNorm) is frozen (``train_params``), batches
    hold images of one orientation (``train_batch_sampler``: a
    `GroupedBatchSampler` on ``width > height``), padded to a multiple of 4
    (``PadImages``), and images are mixed when the engine says so
    (``supports_mixup``); the loss weights each box by its mixup weight.

    Parameters
    ----------
    num_train : int
    ratio : float or (float, float)
        Of `MixupDetection`.
    """

    supports_mixup = True
    train_batchify = Tuple(PadImages(multiple=4), Pad(pad_val=-1))

    def __init__(self, num_train=48, ratio=(1.5, 1.5)):
        self.images = ToyImages(num_train, seed=1)
        self.val_images = ToyImages(8, seed=2)
        self.ratio = ratio

    def meta(self):
        return {'network': 'toy_conv'}

    def build_net(self, ctx_list):
        net = ToyConvNet()
        net.initialize(mx.init.Xavier(), ctx=ctx_list)
        for ctx in ctx_list:      # finish the deferred initialization
            net(nd.zeros((1, 3, 8, 8), ctx=ctx))
        return net

    def train_params(self, net):
        return net.head.collect_params()

    def groups(self):
        return [int(w > h) for w, h in map(self.images.image_size, range(len(self.images)))]

    def train_batch_sampler(self, length, batch_size, seed, rank, world_size):
        return GroupedBatchSampler(self.groups(), batch_size, seed, rank, world_size)

    def train_dataset(self):
        return MixupDetection(self.images, self.ratio).transform(image_augment)

    def losses(self, net, parts):
        total = sum(x.shape[0] for x, _, _ in parts)
        return {'loss_l2': [((net(x) - image_targets(y)) ** 2).sum() / total
                            for x, _, y in parts]}

    def validate(self, net, ctx_list):
        items = [image_augment(*self.val_images[i]) for i in range(len(self.val_images))]
        images, _, labels = self.train_batchify(items)
        pred = net(images.as_in_context(ctx_list[0])).as_in_context(mx.cpu())
        mse = float(((pred - image_targets(labels)) ** 2).mean().asscalar())
        return {'mAP': 1.0 / (1.0 + mse), 'mse': mse}


def make_image_task(**kwargs):
    """Factory for `gluondet.engine.testing` child processes."""
    return ToyImageTask(**kwargs)


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


def test_toy_image_task_follows_the_contract():
    task = ToyImageTask(num_train=8)
    ctx = [mx.cpu(0), mx.cpu(1)]
    net = task.build_net(ctx)
    images, sizes, labels = task.train_batchify([task.train_dataset()[i] for i in range(4)])
    assert images.shape[2] % 4 == 0 and images.shape[3] % 4 == 0 and labels.shape[2] == 7
    parts = [tuple(p) for p in zip(*[gluon.utils.split_and_load(b, ctx)
                                     for b in (images, sizes, labels)])]
    with mx.autograd.record():
        losses = task.losses(net, parts)
    assert list(losses) == ['loss_l2'] and len(losses['loss_l2']) == 2
    assert set(task.groups()) == {0, 1}
    assert 0 < task.validate(net, ctx)['mAP'] <= 1
