"""Training data read and augmented by NVIDIA DALI (``--dali``): SSD and keep-ratio detectors.

`DaliTrainData` has the interface of the engine's ``TrainData`` (``iters_per_epoch``,
``epoch(epoch, start)``) and yields the task's batch tuple as CPU NDArrays. It reads
the engine's batch sampler, so the samples, their order and the share of each Horovod
rank are the DataLoader's. A Python ``external_source`` feeds DALI, per sample, the
encoded image of a `DetectionDataset` (a record's bytes, ``encoded_image(i)``, or its file,
``image_path(i)``; the images of a dataset without either are encoded to PNG) and the
augmentation drawn for it on the host; DALI decodes, zooms out, crops, resizes, colours,
mirrors, normalizes and pads, on the GPU (``device='mixed'`` decoding) when training on
one, on the CPU otherwise.

Seeding: what can be drawn per sample (colour, zoom-out canvas, flip, the short side)
is drawn on the host from ``(seed, epoch, index)``, as the DataLoader seeds a sample, so
it depends on nothing else. SSD's constrained crop is DALI's ``random_bbox_crop``,
whose random stream belongs to the pipeline: the pipeline is built per epoch with a
seed of ``(seed, epoch, rank)``, and ``epoch(e, start)`` runs and drops the first
``start`` batches when the crop is on (a resumed run repeats the same crops), and
starts at once otherwise.

DALI is imported where it is used; :func:`require_dali` says how to install it.

The augmentations, against the OpenCV ones (`gluondet.data.transforms`):

- `SSDDaliAugment`: `SSDTrainTransform` (GluonCV's SSD DALI pipeline in spirit): the
  zoom-out with probability 0.5 onto a canvas of the mean colour and SSD's crop
  (``random_bbox_crop`` on the canvas: minimum IoU 0.1 to 0.9, any, or no crop; scale
  0.3 to 1, aspect 1/2 to 2) cut from the image in one padded ``slice`` (DALI's
  ``paste`` is GPU-only, and the canvas is never made); the resize (bilinear, not a
  random OpenCV method); the same colour jitter (its affine colour map drawn by the
  same code), applied after the resize as GluonCV's DALI pipeline does, on the fewest
  pixels (``coord_transform``; so the canvas is jittered too); ``bb_flip`` and mirror
  with probability 0.5; normalization.
- `KeepRatioDaliAugment`: `RCNNTrainTransform` + ``PadImages``: the short side to
  ``short`` (a random integer within a range) capped by ``max_size``, with the sizes
  computed on the host as `transforms.resize_short_within` rounds them; flip;
  normalization; the batch padded at the bottom and right to a multiple of the net's
  ``size_multiple``. Boxes are scaled and flipped on the host.
"""
import collections
import os

import cv2
import mxnet as mx
import numpy as np

from . import transforms as T
from .batchify import Pad

__all__ = ['require_dali', 'SSDDaliAugment', 'KeepRatioDaliAugment', 'DaliTrainData',
           'dali_device']

INSTALL = "pip install 'gluondet[dali]'"
_PLAN, _CROP = 11, 12       # purpose words of the seeds (the engine's data uses 1 to 3)

# SSD's patch sampler as DALI's random_bbox_crop takes it (GluonCV's SSD DALI pipeline):
# minimum IoU 0 (any window), 0.1 ... 0.9, or no crop.
SSD_CROP_THRESHOLDS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9)
SSD_CROP_SCALING = (0.3, 1.0)
SSD_CROP_ASPECT = (0.5, 2.0)
SSD_CROP_ATTEMPTS = 50


def require_dali():
    """``nvidia.dali``, or ImportError with the one line that installs it."""
    try:
        import nvidia.dali
    except ImportError:
        raise ImportError('--dali needs NVIDIA DALI, which is not installed: %s' % INSTALL) \
            from None
    return nvidia.dali


def _seed(*words):
    return int(np.random.SeedSequence([int(w) for w in words]).generate_state(1)[0])


def dali_device(ctx_list):
    """``device_id`` for a pipeline feeding ``ctx_list``: the first GPU's id, or None (CPU)."""
    gpus = [c for c in ctx_list if c.device_type == 'gpu']
    return gpus[0].device_id if gpus else None


# -- the augmentations --------------------------------------------------------------------


class _Augment:
    """One detector's DALI augmentation: a host plan per sample, a graph, a batch maker.

    ``plan(rng, width, height)`` draws a sample's host-side randomness; ``columns`` turns
    a sample into the external source's arrays; ``graph`` builds the DALI outputs from
    them; ``batch`` turns one run's outputs into the task's batch tuple.
    ``uses_dali_rng``: the outputs depend on DALI's own random ops (then a mid-epoch
    start replays the batches before it).
    """

    uses_dali_rng = False
    num_columns = 0

    def __init__(self, mean, std):
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)

    def _normalize(self, fn, types, images, flip):
        return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout='CHW',
                                        mean=[255 * m for m in self.mean],
                                        std=[255 * s for s in self.std], mirror=flip)


class SSDDaliAugment(_Augment):
    """`SSDTrainTransform` in DALI: images ``B x 3 x height x width``, labels ``B x M x 6``.

    Parameters
    ----------
    width, height : int
    mean, std : sequence of 3 floats
    zoom : bool
        The zoom-out and the constrained crop (``SSDTask(zoom=...)``).
    """

    def __init__(self, width, height, mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD, zoom=True):
        super().__init__(mean, std)
        self.width, self.height = int(width), int(height)
        self.zoom = bool(zoom)
        self.uses_dali_rng = self.zoom
        self.num_columns = 7 if self.zoom else 5

    def plan(self, rng, width, height):
        """Colour map, zoom-out canvas ``(x, y, w, h)`` (the image at ``x, y`` on a ``w x h``
        canvas), flip."""
        matrix, bias = T._color_transform(rng, 32, (0.5, 1.5), (0.5, 1.5), 18)
        canvas = (0, 0, width, height)
        if self.zoom and rng.uniform() > 0.5:
            ratio = rng.uniform(1, 4)
            out_w, out_h = int(width * ratio), int(height * ratio)
            off_y = int(rng.integers(0, out_h - height + 1))
            off_x = int(rng.integers(0, out_w - width + 1))
            canvas = (off_x, off_y, out_w, out_h)
        return {'colour': np.hstack([matrix, bias[:, None]]).astype(np.float32),
                'canvas': canvas, 'flip': bool(rng.uniform() < 0.5)}

    def columns(self, encoded, label, plan, width, height):
        off_x, off_y, out_w, out_h = plan['canvas']
        boxes = (label[:, :4] + np.array([off_x, off_y] * 2, np.float32)) \
            / np.array([out_w, out_h] * 2, np.float32)
        codes = label[:, 4].astype(np.int32) * 2 + (label[:, 5] > 0).astype(np.int32)
        columns = (encoded, np.ascontiguousarray(boxes, np.float32), codes, plan['colour'],
                   np.array(int(plan['flip']), np.int32))
        if self.zoom:
            columns += (np.array([off_x, off_y], np.float32), np.array([out_w, out_h], np.float32))
        return columns

    def graph(self, fn, types, columns, device, seed):
        encoded, boxes, codes, colour, flip = columns[:5]
        images = fn.decoders.image(encoded, device='mixed' if device == 'gpu' else 'cpu',
                                   output_type=types.RGB)
        if self.zoom:
            # The crop window, drawn on the zoom-out canvas, cut from the image in one
            # slice: what lies outside the image is the canvas (never made in full).
            offset, canvas = columns[5], columns[6]
            anchor, shape, boxes, codes = fn.random_bbox_crop(
                boxes, codes, device='cpu', bbox_layout='xyXY',
                thresholds=list(SSD_CROP_THRESHOLDS), scaling=list(SSD_CROP_SCALING),
                aspect_ratio=list(SSD_CROP_ASPECT), allow_no_crop=True,
                num_attempts=SSD_CROP_ATTEMPTS, seed=_seed(_CROP, seed))
            images = fn.slice(images, anchor * canvas - offset, shape * canvas,
                              normalized_anchor=False, normalized_shape=False, axis_names='WH',
                              out_of_bounds_policy='pad',
                              fill_values=[float(np.round(255 * m)) for m in self.mean])
        images = fn.resize(images, resize_x=self.width, resize_y=self.height,
                           interp_type=types.INTERP_LINEAR, antialias=False)
        # the colour map last, on the fewest pixels (as GluonCV's DALI pipeline): it commutes
        # with the crop and, but for rounding, with the resize
        images = fn.coord_transform(images, MT=colour, dtype=types.UINT8)
        boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
        return self._normalize(fn, types, images, flip), boxes, codes

    def batch(self, outputs, plans):
        images, boxes, codes = outputs
        scale = np.array([self.width, self.height] * 2, np.float32)
        labels = []
        for i in range(len(plans)):
            box = np.array(boxes.at(i), np.float32).reshape(-1, 4)
            code = np.array(codes.at(i)).reshape(-1).astype(np.int64)
            labels.append(np.concatenate([np.clip(box, 0, 1) * scale, (code // 2)[:, None],
                                          (code % 2)[:, None]], axis=1).astype(np.float32))
        return _ndarray(images), Pad(pad_val=-1)(labels)


class KeepRatioDaliAugment(_Augment):
    """`RCNNTrainTransform` + ``PadImages`` in DALI: ``(images, sizes, labels)``.

    Parameters
    ----------
    short : int or (low, high)
        Short side (a random integer in ``[low, high]`` per image).
    max_size : int
        Cap on the long side.
    multiple : int
        The batch's height and width are rounded up to it (the net's ``size_multiple``).
    flip_p : float
    mean, std : sequence of 3 floats
    """

    num_columns = 4

    def __init__(self, short, max_size, multiple=1, flip_p=0.5, mean=T.IMAGENET_MEAN,
                 std=T.IMAGENET_STD):
        super().__init__(mean, std)
        self.short = (int(short), int(short)) if np.isscalar(short) else \
            (int(short[0]), int(short[1]))
        self.max_size, self.multiple, self.flip_p = max_size, int(multiple), flip_p

    def plan(self, rng, width, height):
        """The resized ``(width, height)`` (as `transforms.resize_short_within`) and flip."""
        low, high = self.short
        short = low if low == high else int(rng.integers(low, high + 1))
        scale = float(short) / min(width, height)
        if self.max_size is not None and np.round(scale * max(width, height)) > self.max_size:
            scale = float(self.max_size) / max(width, height)
        size = (max(1, int(np.round(width * scale))), max(1, int(np.round(height * scale))))
        return {'size': size, 'flip': bool(rng.uniform(0, 1) < self.flip_p)}

    def columns(self, encoded, label, plan, width, height):
        return (encoded, np.array(plan['size'][0], np.float32),
                np.array(plan['size'][1], np.float32), np.array(int(plan['flip']), np.int32))

    def graph(self, fn, types, columns, device, seed):
        encoded, new_w, new_h, flip = columns
        images = fn.decoders.image(encoded, device='mixed' if device == 'gpu' else 'cpu',
                                   output_type=types.RGB)
        images = fn.resize(images, resize_x=new_w, resize_y=new_h,
                           interp_type=types.INTERP_LINEAR, antialias=False)
        images = self._normalize(fn, types, images, flip)
        return (fn.pad(images, axis_names='HW', align=self.multiple, fill_value=0.0),)

    def labels(self, label, plan, width, height):
        """A sample's label in the resized (and flipped) image's pixels, on the host."""
        new_w, new_h = plan['size']
        label = T.bbox_resize(label, (width, height), (new_w, new_h))
        return T.bbox_flip(label, (new_w, new_h), flip_x=plan['flip'])

    def batch(self, outputs, plans):
        sizes = np.array([p['size'][::-1] for p in plans], np.float32)
        return (_ndarray(outputs[0]), mx.nd.array(sizes, dtype=np.float32),
                Pad(pad_val=-1)([p['label'] for p in plans]))


def _ndarray(tensor_list):
    """A uniform DALI TensorList (CPU or GPU) as one CPU NDArray, copied once."""
    if hasattr(tensor_list, 'as_cpu'):
        tensor_list = tensor_list.as_cpu()
    return mx.nd.from_numpy(np.array(tensor_list.as_tensor()), zero_copy=True)


# -- the data --------------------------------------------------------------------------


class _Source:
    """The external source of one epoch: the sampler's batches as the graph's columns.

    Each call makes the next batch and queues its host plans; `DaliTrainData` pops them
    with the outputs of the same run (DALI keeps the order).
    """

    def __init__(self, data, batches):
        self.data = data
        self.batches = iter(batches)
        self.plans = collections.deque()

    def __call__(self):
        keys = next(self.batches)       # StopIteration ends the epoch
        samples, plans = [], []
        for key in keys:
            cols, plan = self.data.sample(key)
            samples.append(cols)
            plans.append(plan)
        self.plans.append(plans)
        return tuple(list(column) for column in zip(*samples))


class DaliTrainData:
    """The engine's training data (as ``gluondet.engine.TrainData``), read by DALI.

    Parameters
    ----------
    augment : SSDDaliAugment or KeepRatioDaliAugment
    dataset : DetectionDataset
        Without a transform: items ``(image, label)``; read through ``image_path(i)``
        and ``label(i)`` when it has them.
    sampler : batch sampler
        The engine's (``EpochBatchSampler``, ``GroupedBatchSampler`` or the task's):
        ``length``, ``batch_size``, ``rank``, ``batches_per_epoch``, ``set_epoch`` and
        iteration over lists of keys ``epoch * length + index``.
    seed : int
    num_threads : int, optional
        DALI's CPU threads; default: the cores this process may use.
    device_id : int, optional
        The GPU to run on (``'mixed'`` decoding); None: the CPU.
    prefetch : int
        Batches DALI prepares ahead.
    """

    def __init__(self, augment, dataset, sampler, seed, num_threads=None, device_id=None,
                 prefetch=2):
        require_dali()
        if sampler.length != len(dataset):
            raise ValueError('the training batch sampler covers %d samples but the dataset has '
                             '%d' % (sampler.length, len(dataset)))
        self.augment, self.dataset, self.sampler = augment, dataset, sampler
        self.seed = int(seed)
        self.num_threads = int(num_threads or len(os.sched_getaffinity(0)))
        self.device_id, self.prefetch = device_id, int(prefetch)

    @property
    def iters_per_epoch(self):
        """Steps in one full epoch."""
        return self.sampler.batches_per_epoch

    def sample(self, key):
        """The external source's columns of sampler key ``key`` and the sample's plan."""
        epoch, index = divmod(int(key), self.sampler.length)
        encoded, label, (width, height) = self._read(index)
        rng = np.random.default_rng(_seed(_PLAN, self.seed, epoch, index))
        plan = self.augment.plan(rng, width, height)
        if hasattr(self.augment, 'labels'):
            plan['label'] = self.augment.labels(label, plan, width, height)
        return self.augment.columns(encoded, label, plan, width, height), plan

    def _read(self, index):
        data = self.dataset
        if hasattr(data, 'encoded_image'):      # records: the bytes as stored
            encoded = np.frombuffer(data.encoded_image(index), np.uint8)
            return encoded, np.asarray(data.label(index), np.float32), data.image_size(index)
        if hasattr(data, 'image_path'):
            with open(data.image_path(index), 'rb') as f:
                encoded = np.frombuffer(f.read(), np.uint8)
            return encoded, np.asarray(data.label(index), np.float32), data.image_size(index)
        image, label = data[index]
        image = image.asnumpy() if hasattr(image, 'asnumpy') else np.asarray(image)
        ok, png = cv2.imencode('.png', cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        if not ok:
            raise ValueError('DALI: cannot encode image %d of %r' % (index, data))
        return (png.reshape(-1), np.asarray(label, np.float32).reshape(-1, 6),
                (image.shape[1], image.shape[0]))

    def pipeline(self, epoch, source):
        """The DALI pipeline of ``epoch`` over ``source`` (built)."""
        dali = require_dali()
        from nvidia.dali import fn, types
        seed = _seed(self.seed, epoch, self.sampler.rank)
        pipe = dali.Pipeline(batch_size=self.sampler.batch_size, num_threads=self.num_threads,
                             device_id=self.device_id, seed=seed,
                             prefetch_queue_depth=self.prefetch)
        with pipe:
            columns = fn.external_source(source=source, num_outputs=self.augment.num_columns,
                                         batch=True)
            outputs = self.augment.graph(fn, types, columns,
                                         'cpu' if self.device_id is None else 'gpu', seed)
            pipe.set_outputs(*outputs)
        pipe.build()
        return pipe

    def epoch(self, epoch, start=0):
        """An iterator over the batches of ``epoch`` from batch ``start``."""
        replay = start if self.augment.uses_dali_rng else 0
        self.sampler.set_epoch(epoch, start - replay)
        count = len(self.sampler)
        source = _Source(self, list(self.sampler))
        return self._run(self.pipeline(epoch, source), source, count, replay)

    def _run(self, pipe, source, count, replay):
        try:
            for step in range(count):
                outputs = pipe.run()
                plans = source.plans.popleft()
                if step >= replay:
                    yield self.augment.batch(outputs, plans)
        finally:
            del pipe
