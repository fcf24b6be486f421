"""SSD bound to the training engine (see the task contract in `gluondet.engine`)."""
import mxnet as mx
import numpy as np

from ..data import transforms as T
from ..data.batchify import Pad, Stack, Tuple
from ..data.preprocess import SSDValTransform, fixed_size
from ..losses import SSDMultiBoxLoss
from ..nn import SSDTargetGenerator
from ..model_zoo import get_model
from .base import DetectionTask, dense_targets

__all__ = ['SSDTask', 'SSDTrainTransform', 'SSDValTransform', 'anchor_steps', 'feature_sizes']

# Hard negatives of a background image (no object): about what an image of one object mines
# (2.4 and 5.4 positive anchors an object in the demo's SSD at 300 and 160 px, 3 negatives
# each); GluonCV's SSD mines none there, so such an image teaches nothing.
BACKGROUND_NEGATIVES = 16


class SSDTrainTransform:
    """SSD's training augmentation (as GluonCV's ``SSDDefaultTrainTransform``).

    Colour jitter, zoom-out with probability 0.5, constrained random crop,
    resize to ``width x height`` with a random interpolation, horizontal flip,
    normalization. ``zoom=False`` leaves out the zoom-out and the crop (for
    data whose objects already come in every size and place, such as the
    demo set: it learns faster). Random draws come from numpy's global RNG,
    which the engine seeds per sample. Targets are made later, batched, by
    the task. ``augment`` (optional, ``(image, label) -> (image, label)``, e.g.
    :class:`~gluondet.data.autoaugment.DetectionAutoAugment`) runs first.

    Returns
    -------
    image : float32 ``3 x height x width``
    label : float32 ``N x 6`` in the resized image's pixels
    """

    def __init__(self, width, height, mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD, zoom=True,
                 augment=None):
        self.size = (width, height)
        self.mean, self.std = mean, std
        self.zoom = zoom
        self.augment = augment

    def __call__(self, image, label):
        if self.augment is not None:
            image, label = self.augment(image, label)
        return T.fixed_size_augment(image, label, self.size, self.mean, self.std, self.zoom)


def feature_sizes(net, width, height):
    """``(height, width)`` of each feature map SSD predicts from, for this input size."""
    outputs = net.features(mx.sym.var('data'))
    _, shapes, _ = mx.sym.Group(outputs).infer_shape(data=(1, 3, height, width))
    return [tuple(shape[2:]) for shape in shapes]


def anchor_steps(net, width, height, mode='auto'):
    """Anchor steps for training ``net`` at ``width x height``, or None for the zoo's.

    ``'zoo'`` keeps the network's preset (GluonCV's numbers). ``'fit'`` sets
    each map's step to its real stride at this size, so the anchor centres
    span the whole image. ``'auto'`` fits only where the preset leaves part of
    the image without anchors: GluonCV's ``ssd_300_mobilenet0.25`` uses steps
    8 and 16 on maps of stride 16 and 32, which covers only the top-left
    two thirds of a 300 px image.
    """
    if mode not in ('auto', 'zoo', 'fit'):
        raise ValueError("anchor steps must be 'auto', 'zoo' or 'fit', got %r" % (mode,))
    sizes = feature_sizes(net, width, height)
    preset = [g.step for g in net.anchor_generators]
    covered = all(h * step >= 0.9 * height and w * step >= 0.9 * width
                  for (h, w), step in zip(sizes, preset))
    if mode == 'zoo' or (mode == 'auto' and covered):
        return None
    return [round((width / w + height / h) / 2, 4) for h, w in sizes]


class SSDTask(DetectionTask):
    """SSD: one network name, a train and a val dataset.

    Parameters
    ----------
    network : str
        A model zoo name, e.g. ``ssd_300_mobilenet0.25_custom``.
    train_dataset, val_dataset : DetectionDataset
    data_shape : int or (width, height)
    classes : sequence of str, optional
        Foreground classes for ``*_custom`` names (default: the train dataset's).
    pretrained_base : bool
        Start the backbone from its ImageNet weights (from the weight store).
    zoom : bool
        Train with SSD's zoom-out and constrained crop (see `SSDTrainTransform`).
    steps : {'auto', 'zoo', 'fit'}
        Anchor steps (see `anchor_steps`).
    model_kwargs : dict
        More arguments for ``get_model`` (``norm_layer``, ``root``, ...).
    val_batch_size, num_workers : int
        For the validation loader.
    pruned_model : str, optional
        A model ``gluondet prune`` wrote, to retrain (see
        :class:`~gluondet.tasks.base.DetectionTask`).
    """

    def __init__(self, network, train_dataset, val_dataset, data_shape, classes=None,
                 pretrained_base=True, model_kwargs=None, val_batch_size=16, num_workers=0,
                 zoom=True, steps='auto', pruned_model=None):
        super().__init__(network, train_dataset, val_dataset, classes, pretrained_base,
                         model_kwargs, val_batch_size, num_workers, pruned_model=pruned_model)
        self.width, self.height = ((data_shape, data_shape) if np.isscalar(data_shape)
                                   else tuple(data_shape))
        self.zoom = zoom
        self.steps_mode = steps
        self.steps = None
        self.targets = SSDTargetGenerator(iou_thresh=0.5, stds=(0.1, 0.1, 0.2, 0.2))
        self.loss = SSDMultiBoxLoss(background_negatives=BACKGROUND_NEGATIVES)
        self.train_batchify = Tuple(Stack(), Pad(pad_val=-1))

    name = 'ssd'

    def meta(self):
        return self._meta(data_shape=[self.height, self.width], steps=self.steps)

    def build_net(self, ctx_list):
        probe = get_model(self.network, pretrained_base=False, **self._model_kwargs())
        self.steps = anchor_steps(probe, self.width, self.height, self.steps_mode)
        net = self._get_model(ctx_list, **({} if self.steps is None else {'steps': self.steps}))
        return self._place(net, ctx_list)

    def train_transform(self):
        return SSDTrainTransform(self.width, self.height, zoom=self.zoom)

    def train_dataset(self):
        return self._train.transform(self.train_transform())

    def dali_train_data(self, sampler, config, runtime):
        """The training batches read by DALI (``config.dali``), `SSDTrainTransform`'s
        augmentation there (:class:`~gluondet.data.dali.SSDDaliAugment`)."""
        from ..data import dali
        return dali.DaliTrainData(dali.SSDDaliAugment(self.width, self.height, zoom=self.zoom),
                                  self._train, sampler, config.seed, config.num_workers,
                                  dali.dali_device(runtime.ctx))

    def losses(self, net, parts):
        _, cls_losses, box_losses = self.loss(*dense_targets(net, parts, self.targets))
        return {'loss_cls': cls_losses, 'loss_box': box_losses}

    def preprocessing(self, net):
        """The fixed size it trains at."""
        return fixed_size((self.height, self.width))
