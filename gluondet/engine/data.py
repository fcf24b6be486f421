"""The training loader: seeded, sharded, resumable batch samplers and per-sample seeding.

A sampler yields keys ``epoch * len(dataset) + index``. `SeededDataset`
decodes a key and seeds numpy's and python's global RNGs from
``(seed, epoch, index)`` before the task's transform runs, so a sample's
augmentation depends on nothing else: not on ``num_workers``, not on which
worker runs it, not on where a resumed run started. Transforms should draw
from ``numpy.random`` or ``random``; ``mx.nd.random`` inside a transform is
not seeded per sample.

The task's dataset is indexed with a `SampleIndex`: an ``int`` that also
carries the epoch and whether the epoch mixes images (``config.mixup``).
It is made from the key inside the process that reads the sample (a
DataLoader worker or the training process), so what changes per epoch
reaches a dataset wrapper without any mutable state.

`EpochBatchSampler` shuffles all samples; `GroupedBatchSampler` makes every
batch from one group (for example landscape or portrait images, so padding
to the batch's largest image wastes little). Both follow one protocol, which
a task's own sampler (``task.train_batch_sampler``) follows too:
``length``, ``batches_per_epoch`` (the same every epoch),
``set_epoch(epoch, start)`` and iteration yielding lists of keys.

Multi-scale training (YOLOv3's): a task may train each batch at its own input
size. `SizedBatchSampler` gives every ``interval`` steps a size drawn from
``(seed, step // interval)`` alone (``step`` the global batch index), so the
sizes are the same with any number of workers, on every rank, and after a
resume. Each key of a batch travels with its size, as ``(key, (width,
height))``, to the process that reads it, where `SampleIndex.size` carries it
to the task's dataset: no transform is swapped while workers prefetch.
"""
import contextlib
import numbers
import random

import mxnet as mx
import numpy as np
from mxnet import gluon

from ..helper_signals import end_loader_workers

# Purpose tags keep the seeds derived for different uses apart.
_SAMPLER, _SAMPLE, _STEP, _SIZE = 1, 2, 3, 4

SIZE_INTERVAL = 10  # steps between input size changes, GluonCV's YOLOv3 default


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


class SampleIndex(int):
    """The index of a training sample, with what the engine knows about its epoch.

    Behaves as the ``int`` index; arithmetic on it gives plain ints. A dataset
    wrapper reads the attributes with ``getattr(index, 'epoch', None)`` so it
    also works when indexed with a plain int.

    Attributes
    ----------
    epoch : int
        The epoch (0-based) the sample is read for.
    mixup : bool
        Whether this epoch trains with mixup (``config.mixup`` and not one of
        the last ``config.no_mixup_epochs``).
    size : (int, int) or None
        The ``(width, height)`` the sample's batch is made at (the task's
        ``train_sizes``, see `SizedBatchSampler`); None without per-batch sizes.
    """

    def __new__(cls, index, epoch, mixup=False, size=None):
        self = super().__new__(cls, index)
        self.epoch = int(epoch)
        self.mixup = bool(mixup)
        self.size = None if size is None else tuple(size)
        return self

    def __reduce__(self):
        return type(self), (int(self), self.epoch, self.mixup, self.size)

    def __repr__(self):
        return 'SampleIndex(%d, epoch=%d, mixup=%s, size=%s)' % (int(self), self.epoch,
                                                                  self.mixup, self.size)


class SeededDataset(gluon.data.Dataset):
    """Reads ``dataset`` by sampler key, seeding the host RNGs per sample.

    A key is an ``int`` or, from a `SizedBatchSampler`, ``(int, (width, height))``.

    Parameters
    ----------
    dataset : gluon.data.Dataset
        Items are the task's training samples (transform applied lazily).
        It is indexed with a `SampleIndex`.
    seed : int
    mixup_epochs : int
        Epochs ``0 .. mixup_epochs - 1`` are read with ``SampleIndex.mixup``
        True (``TrainConfig.mixup_epochs``).
    """

    def __init__(self, dataset, seed, mixup_epochs=0):
        self._dataset = dataset
        self._length = len(dataset)
        self._seed = seed
        self._mixup_epochs = mixup_epochs

    def __len__(self):
        return self._length

    def __getitem__(self, key):
        key, size = key if isinstance(key, tuple) else (key, None)
        epoch, index = divmod(int(key), self._length)
        with _seeded_host_rngs(derive_seed(_SAMPLE, self._seed, epoch, index)):
            return self._dataset[SampleIndex(index, epoch, epoch < self._mixup_epochs, size)]


class _EpochSampler(gluon.data.Sampler):
    """The protocol of the engine's batch samplers; subclasses give `_batches`."""

    def __init__(self, length, batch_size, seed, rank, world_size, batches_per_epoch):
        self.length = length
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.batches_per_epoch = batches_per_epoch
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
        batches = self._batches(rng)
        for b in range(self.start, self.batches_per_epoch):
            yield (self.epoch * self.length + batches[b]).tolist()

    def _batches(self, rng):
        """This rank's ``batches_per_epoch`` index arrays of this epoch, drawn from ``rng``."""
        raise NotImplementedError


class EpochBatchSampler(_EpochSampler):
    """Full batches of a per-epoch permutation, each global batch shared among the ranks.

    The permutation is seeded by ``(seed, epoch)`` and cut into global batches of
    ``batch_size * world_size`` samples (the remainder is dropped, so every batch has the
    same shape for static-shape hybridization); rank ``r`` takes the ``r``-th slice of
    each. So the ranks' batches of a step are, together, the batch one process would
    take with ``batch_size * world_size``.

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
        if length < batch_size * world_size:
            raise ValueError('the training dataset has %d samples: not one full batch of %d '
                             '(%d per rank over %d rank(s))' % (
                                 length, batch_size * world_size, batch_size, world_size))
        super().__init__(length, batch_size, seed, rank, world_size,
                         length // (batch_size * world_size))

    def _batches(self, rng):
        order = rng.permutation(self.length)[:self.batches_per_epoch * self.batch_size
                                             * self.world_size]
        return order.reshape(-1, self.world_size, self.batch_size)[:, self.rank]


class GroupedBatchSampler(_EpochSampler):
    """Full batches whose samples all share a group, shuffled, shared among the ranks.

    Each epoch (seeded by ``(seed, epoch)``): the samples are permuted; each
    group's samples, in that order, are cut into full global batches of ``batch_size *
    world_size`` (a group's remainder is dropped); the global batches of all groups are
    shuffled; rank ``r`` takes the ``r``-th slice of each (as `EpochBatchSampler`).

    For Faster R-CNN's aspect-ratio grouping a task gives, without reading
    an image, ``[int(w > h) for w, h in map(dataset.image_size, range(n))]``.

    Parameters
    ----------
    groups : sequence
        One group key per sample (ints, strings: anything numpy sorts).
    batch_size : int
        Samples per batch on this rank.
    seed : int
    rank, world_size : int
    """

    def __init__(self, groups, batch_size, seed, rank=0, world_size=1):
        keys, codes, counts = np.unique(np.asarray(groups), return_inverse=True,
                                        return_counts=True)
        total = int(sum(counts // (batch_size * world_size)))
        if total < 1:
            raise ValueError('the training dataset has %d samples in groups of %s: not one '
                             'full batch of %d (%d per rank over %d rank(s)) in any group'
                             % (len(codes), dict(zip(keys.tolist(), counts.tolist())),
                                batch_size * world_size, batch_size, world_size))
        super().__init__(len(codes), batch_size, seed, rank, world_size, total)
        self.groups = codes.reshape(-1)

    def _batches(self, rng):
        order = rng.permutation(self.length)
        size = self.batch_size * self.world_size
        batches = []
        for group in range(int(self.groups.max()) + 1):
            members = order[self.groups[order] == group]
            full = len(members) // size * size
            batches.extend(members[:full].reshape(-1, size))
        batches = [batches[i] for i in rng.permutation(len(batches))]
        return [b.reshape(self.world_size, self.batch_size)[self.rank] for b in batches]


def _is_positive_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def _input_sizes(sizes):
    """``sizes`` as a tuple of ``(width, height)`` pairs of ints, or ValueError."""
    def pair(size):
        width, height = (size, size) if _is_positive_int(size) else size
        if not (_is_positive_int(width) and _is_positive_int(height)):
            raise ValueError
        return int(width), int(height)
    try:
        out = tuple(pair(size) for size in sizes)
    except (TypeError, ValueError):
        out = ()
    if not out:
        raise ValueError('train_sizes must be a non-empty sequence of input sizes, each a '
                         'positive int or (width, height), got %r' % (sizes,))
    return out


class SizedBatchSampler:
    """A batch sampler's batches, each key paired with the input size of its batch.

    Global step ``s`` (``epoch * batches_per_epoch + batch``) is made at one of
    ``sizes``, drawn uniformly from ``(seed, s // interval)``: a new size every
    ``interval`` steps, as GluonCV's ``RandomTransformDataLoader`` draws a new transform
    every ``interval`` batches, but a function of the seed and the step alone.

    Parameters
    ----------
    sampler : batch sampler
        Follows the samplers' protocol (see the module docstring).
    sizes : sequence of int or (int, int)
        Input sizes: a side (square) or ``(width, height)``.
    interval : int
        Steps per size.
    seed : int

    Iteration yields the batches of ``sampler`` as lists of ``(key, (width, height))``.
    """

    def __init__(self, sampler, sizes, interval, seed):
        if not _is_positive_int(interval):
            raise ValueError('train_size_interval must be an integer >= 1, got %r'
                             % (interval,))
        self.sampler = sampler
        self.sizes = _input_sizes(sizes)
        self.interval = int(interval)
        self.seed = seed
        self.epoch = self.start = 0

    def size_at(self, step):
        """The ``(width, height)`` of global step ``step``."""
        block = step // self.interval
        return self.sizes[derive_seed(_SIZE, self.seed, block) % len(self.sizes)]

    def set_epoch(self, epoch, start=0):
        """Make the next iteration yield epoch ``epoch`` from batch ``start``."""
        self.sampler.set_epoch(epoch, start)
        self.epoch, self.start = epoch, start

    def __len__(self):
        return self.sampler.batches_per_epoch - self.start

    def __iter__(self):
        first = self.epoch * self.sampler.batches_per_epoch + self.start
        for step, keys in enumerate(self.sampler, first):
            size = self.size_at(step)
            yield [(key, size) for key in keys]


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
    sampler : batch sampler, optional
        Follows the samplers' protocol (see the module docstring); default an
        `EpochBatchSampler` from the arguments above.
    mixup_epochs : int
        See `SeededDataset`.
    sizes : sequence of int or (int, int), optional
        Per-batch input sizes (the task's ``train_sizes``): each sample is read with
        its batch's ``(width, height)`` in `SampleIndex.size` (see `SizedBatchSampler`).
    size_interval : int
        Steps per input size.
    """

    def __init__(self, dataset, batchify_fn, batch_size, num_workers, seed, rank=0, world_size=1,
                 sampler=None, mixup_epochs=0, sizes=None, size_interval=SIZE_INTERVAL):
        if sampler is None:
            sampler = EpochBatchSampler(len(dataset), batch_size, seed, rank, world_size)
        missing = [a for a in ('length', 'batches_per_epoch', 'set_epoch')
                   if not hasattr(sampler, a)]
        if missing:
            raise TypeError('the training batch sampler %s lacks %s (see gluondet.engine.data)'
                            % (type(sampler).__name__, ', '.join(missing)))
        if sampler.length != len(dataset):
            raise ValueError('the training batch sampler covers %d samples but the dataset has %d'
                             % (sampler.length, len(dataset)))
        self.sampler = sampler
        self.batches = sampler if sizes is None else SizedBatchSampler(sampler, sizes,
                                                                         size_interval, seed)
        self.loader = gluon.data.DataLoader(SeededDataset(dataset, seed, mixup_epochs),
                                            batch_sampler=self.batches,
                                            batchify_fn=batchify_fn, num_workers=num_workers)

    @property
    def iters_per_epoch(self):
        """Steps in one full epoch."""
        return self.sampler.batches_per_epoch

    def epoch(self, epoch, start=0):
        """An iterator over the batches of ``epoch`` from batch ``start``."""
        self.batches.set_epoch(epoch, start)
        return iter(self.loader)

    def close(self):
        """End the loader's worker processes (`fit` calls it when training ends)."""
        end_loader_workers(self.loader)
