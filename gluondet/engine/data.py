"""The training loader: a seeded, sharded, resumable batch sampler and per-sample seeding.

The sampler yields keys ``epoch * len(dataset) + index``. `SeededDataset`
decodes a key and seeds numpy's and python's global RNGs from
``(seed, epoch, index)`` before the task's transform runs, so a sample's
augmentation depends on nothing else: not on ``num_workers``, not on which
worker runs it, not on where a resumed run started. Transforms should draw
from ``numpy.random`` or ``random``; ``mx.nd.random`` inside a transform is
not seeded per sample.
"""
import contextlib
import random

import mxnet as mx
import numpy as np
from mxnet import gluon

# Purpose tags keep the seeds derived for different uses apart.
_SAMPLER, _SAMPLE, _STEP = 1, 2, 3


def derive_seed(*words):
    """A 32-bit seed mixed from non-negative integers (numpy's SeedSequence)."""
    return int(np.random.SeedSequence([int(w) for w in words]).generate_state(1)[0])


def seed_all(seed):
    """Seed python's, numpy's and MXNet's global RNGs with ``seed``."""
    random.seed(seed)
    np.random.seed(seed)
    mx.random.seed(seed)


def seed_step(seed, iteration):
    """Seed all global RNGs for the step with global index ``iteration``."""
    seed_all(derive_seed(_STEP, seed, iteration))


@contextlib.contextmanager
def _seeded_host_rngs(seed):
    """Seed numpy's and python's RNGs inside the block, restore them after."""
    np_state, py_state = np.random.get_state(), random.getstate()
    np.random.seed(seed)
    random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


class SeededDataset(gluon.data.Dataset):
    """Reads ``dataset`` by sampler key, seeding the host RNGs per sample.

    Parameters
    ----------
    dataset : gluon.data.Dataset
        Items are the task's training samples (transform applied lazily).
    seed : int
    """

    def __init__(self, dataset, seed):
        self._dataset = dataset
        self._length = len(dataset)
        self._seed = seed

    def __len__(self):
        return self._length

    def __getitem__(self, key):
        epoch, index = divmod(int(key), self._length)
        with _seeded_host_rngs(derive_seed(_SAMPLE, self._seed, epoch, index)):
            return self._dataset[index]


class EpochBatchSampler(gluon.data.Sampler):
    """Full batches of one rank's shard of a per-epoch permutation.

    The permutation is seeded by ``(seed, epoch)``; rank ``r`` of ``w`` takes
    the ``r``-th of ``w`` equal slices of it (the remainder is dropped so all
    ranks take the same number of steps); the last incomplete batch is
    dropped so every batch has the same shape (static-shape hybridization).

    Parameters
    ----------
    length : int
        Dataset length.
    batch_size : int
        Samples per batch on this rank.
    seed : int
    rank, world_size : int
    """

    def __init__(self, length, batch_size, seed, rank=0, world_size=1):
        per_rank = length // world_size
        if per_rank < batch_size:
            raise ValueError('the training dataset has %d samples, %d per rank over %d rank(s): '
                             'not one full batch of %d' % (length, per_rank, world_size, batch_size))
        self.length = length
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.per_rank = per_rank
        self.batches_per_epoch = per_rank // batch_size
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch, start=0):
        """Make the next iteration yield epoch ``epoch`` from batch ``start``."""
        if not 0 <= start <= self.batches_per_epoch:
            raise ValueError('start batch %d outside 0..%d' % (start, self.batches_per_epoch))
        self.epoch = epoch
        self.start = start

    def __len__(self):
        return self.batches_per_epoch - self.start

    def __iter__(self):
        rng = np.random.RandomState(derive_seed(_SAMPLER, self.seed, self.epoch))
        order = rng.permutation(self.length)
        shard = order[self.rank * self.per_rank:(self.rank + 1) * self.per_rank]
        keys = self.epoch * self.length + shard
        for b in range(self.start, self.batches_per_epoch):
            yield keys[b * self.batch_size:(b + 1) * self.batch_size].tolist()


class TrainData:
    """The engine's training DataLoader over a task's dataset.

    Parameters
    ----------
    dataset : gluon.data.Dataset
    batchify_fn : callable
    batch_size : int
        Samples per batch on this rank.
    num_workers : int
    seed : int
    rank, world_size : int
    """

    def __init__(self, dataset, batchify_fn, batch_size, num_workers, seed, rank=0, world_size=1):
        self.sampler = EpochBatchSampler(len(dataset), batch_size, seed, rank, world_size)
        self.loader = gluon.data.DataLoader(SeededDataset(dataset, seed),
                                            batch_sampler=self.sampler,
                                            batchify_fn=batchify_fn, num_workers=num_workers)

    @property
    def iters_per_epoch(self):
        """Steps in one full epoch."""
        return self.sampler.batches_per_epoch

    def epoch(self, epoch, start=0):
        """An iterator over the batches of ``epoch`` from batch ``start``."""
        self.sampler.set_epoch(epoch, start)
        return iter(self.loader)
