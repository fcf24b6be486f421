"""CenterNet bound to the training engine (see the task contract in `gluondet.engine`)."""
import numbers

import numpy as np

from ..data.batchify import Stack, Tuple
from ..data.center_net_transforms import CenterNetTrainTransform
from ..data.preprocess import preprocessing_of
from ..losses import CenterNetLoss
from ..nn import CenterNetTargetGenerator
from .base import DetectionTask

__all__ = ['CenterNetTask', 'NO_WD_BIAS']

# GluonCV's train_center_net.py: no weight decay on the biases (BatchNorm's gamma and beta
# keep theirs unless --no-wd)
NO_WD_BIAS = '.*bias'


class CenterNetTask(DetectionTask):
    """CenterNet: one network name, a train and a val dataset.

    Parameters
    ----------
    network : str
        A model zoo name, e.g. ``center_net_resnet18_v1b_voc``.
    train_dataset, val_dataset : DetectionDataset
    data_shape : int
        The side of the square training input (GluonCV's ``--data-shape``) and, unless
        ``val_size`` is given, the longest side of the validation input.
    val_size : int, optional
        The longest side of the validation (and, recorded in the checkpoint, prediction)
        input: the network's ``size`` (each image resized keeping its ratio, padded to a
        multiple of 32).
    wh_weight, center_reg_weight : float
        The weights of the size and center-offset losses (`~gluondet.losses.CenterNetLoss`).
    flip_validation : bool
        Validate (and predict) averaging with the mirrored image (GluonCV's
        ``--flip-validation``, the network's ``flip_test``).
    zoom_sigma, max_shift : float
        The strength of the random zoom and shift
        (`~gluondet.data.center_net_transforms.CenterNetTrainTransform`; GluonCV's by default).
    **kwargs
        ``classes``, ``pretrained_base``, ``model_kwargs``, ``val_batch_size``,
        ``num_workers``, ``fine_tune``, ``pruned_model``: see
        :class:`~gluondet.tasks.base.DetectionTask`.

    The training samples are GluonCV's augmentation with the targets made in the data
    workers (`~gluondet.data.center_net_transforms.CenterNetTrainTransform`), stacked; the
    biases take no weight decay, as GluonCV's.
    """

    name = 'center_net'

    def __init__(self, network, train_dataset, val_dataset, data_shape=512, wh_weight=0.1,
                 center_reg_weight=1.0, flip_validation=False, zoom_sigma=0.4, max_shift=None,
                 val_size=None, val_batch_size=8, **kwargs):
        super().__init__(network, train_dataset, val_dataset, val_batch_size=val_batch_size,
                         **kwargs)
        val_size = data_shape if val_size is None else val_size
        for name, value in (('data_shape', data_shape), ('val_size', val_size)):
            if not isinstance(value, numbers.Integral) or value < 32:
                raise ValueError('CenterNet: %s must be an int >= 32, got %r' % (name, value))
        self.data_shape = int(data_shape)
        self.model_kwargs['size'] = int(val_size)     # recorded in meta: rebuilds the net
        self.flip_validation = flip_validation
        self.augment = dict(zoom_sigma=zoom_sigma, max_shift=max_shift)
        self.loss = CenterNetLoss(wh_weight, center_reg_weight)
        self.scale = 4
        self.train_batchify = Tuple(*[Stack()] * 6)

    def meta(self):
        return self._meta()

    def build_net(self, ctx_list):
        net = self._get_model(ctx_list)
        for param in net.collect_params(NO_WD_BIAS).values():
            param.wd_mult = 0.0
        net.flip_test = self.flip_validation
        self.scale = int(net.scale)
        return self._place(net, ctx_list)

    def train_transform(self):
        return CenterNetTrainTransform(self.data_shape, self.data_shape, len(self.classes),
                                       scale_factor=self.scale,
                                       targets=CenterNetTargetGenerator, **self.augment)

    def train_dataset(self):
        return self._train.transform(self.train_transform())

    def losses(self, net, parts):
        outputs = [net(part[0]) for part in parts]
        return self.loss(outputs, [part[1:] for part in parts])

    def preprocessing(self, net):
        """Each image's longest side to the data shape, padded to the net's multiple."""
        return preprocessing_of(net)

    def batch_images(self, batch, count):
        """See :meth:`DetectionTask.batch_images`; the boxes are read back from the targets
        (each object's size and center offset at its center's cell, its class the heatmap
        at 1 there)."""
        transform = self.train_transform()
        mean, std = (np.array(v, np.float32).reshape(3, 1, 1)
                     for v in (transform.mean, transform.std))
        images, heatmaps, sizes, masks, offsets = (b[:count].asnumpy() for b in batch[:5])
        shown = []
        for image, heatmap, size, mask, offset in zip(images, heatmaps, sizes, masks, offsets):
            pixels = np.clip((image * std + mean) * 255, 0, 255).round().astype(np.uint8)
            ys, xs = np.nonzero(mask[0])
            centers = np.stack([xs + offset[0, ys, xs], ys + offset[1, ys, xs]], axis=1)
            half = size[:, ys, xs].T / 2
            boxes = np.hstack([centers - half, centers + half]) * self.scale
            ids = heatmap[:, ys, xs].argmax(axis=0)
            shown.append((pixels.transpose(1, 2, 0), boxes.reshape(-1, 4),
                          [self.classes[c] for c in ids]))
        return shown
