"""SSD bound to the training engine (see the task contract in `gluondet.engine`)."""
import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd

from ..data import transforms as T
from ..data.batchify import Pad, Stack, Tuple
from ..data.preprocess import SSDValTransform, fixed_size
from ..deploy.predictor import Predictor
from ..deploy.runners import MXNetRunner
from ..losses import SSDMultiBoxLoss
from ..metrics.evaluation import evaluate_voc07
from ..model_zoo import get_model
from ..nn import SSDTargetGenerator

__all__ = ['SSDTask', 'SSDTrainTransform', 'SSDValTransform', 'anchor_steps', 'feature_sizes']


class SSDTrainTransform:
    """SSD's training augmentation (as GluonCV's ``SSDDefaultTrainTransform``).

    Colour jitter, zoom-out with probability 0.5, constrained random crop,
    resize to ``width x height`` with a random interpolation, horizontal flip,
    normalization. ``zoom=False`` leaves out the zoom-out and the crop (for
    data whose objects already come in every size and place, such as the
    demo set: it learns faster). Random draws come from numpy's global RNG,
    which the engine seeds per sample. Targets are made later, batched, by
    the task.

    Returns
    -------
    image : float32 ``3 x height x width``
    label : float32 ``N x 6`` in the resized image's pixels
    """

    def __init__(self, width, height, mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD, zoom=True):
        self.size = (width, height)
        self.mean, self.std = mean, std
        self.zoom = zoom

    def __call__(self, image, label):
        img = T.random_color_distort(image)
        if self.zoom:
            if np.random.uniform() > 0.5:
                img, label, _ = T.random_expand(img, label, fill=[255 * m for m in self.mean])
            img, label, _ = T.random_crop_with_constraints(img, label)
        img, label = T.resize(img, label, self.size, interp=T.INTERP_RANDOM)
        img, label, _ = T.random_flip(img, label)
        return T.normalize(img, self.mean, self.std), label


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


class SSDTask:
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
    """

    def __init__(self, network, train_dataset, val_dataset, data_shape, classes=None,
                 pretrained_base=True, model_kwargs=None, val_batch_size=16, num_workers=0,
                 zoom=True, steps='auto'):
        self.network = network
        self.width, self.height = ((data_shape, data_shape) if np.isscalar(data_shape)
                                   else tuple(data_shape))
        self.classes = tuple(classes or train_dataset.classes)
        self._train, self._val = train_dataset, val_dataset
        self.pretrained_base = pretrained_base
        self.model_kwargs = dict(model_kwargs or {})
        self.val_batch_size, self.num_workers = val_batch_size, num_workers
        self.zoom = zoom
        self.steps_mode = steps
        self.steps = None
        self.targets = SSDTargetGenerator(iou_thresh=0.5, stds=(0.1, 0.1, 0.2, 0.2))
        self.loss = SSDMultiBoxLoss()
        self.train_batchify = Tuple(Stack(), Pad(pad_val=-1))

    def meta(self):
        return {'task': 'ssd', 'network': self.network, 'classes': list(self.classes),
                'data_shape': [self.height, self.width], 'steps': self.steps}

    def build_net(self, ctx_list):
        kwargs = dict(self.model_kwargs)
        if self.network.endswith('_custom'):
            kwargs['classes'] = self.classes
        net = get_model(self.network, pretrained_base=False, **kwargs)
        self.steps = anchor_steps(net, self.width, self.height, self.steps_mode)
        if self.steps is not None:
            kwargs['steps'] = self.steps
        net = get_model(self.network, pretrained_base=self.pretrained_base, **kwargs)
        if tuple(net.classes) != self.classes:
            raise ValueError('%s predicts %d classes %s but the data has %s; use the *_custom '
                             'network' % (self.network, len(net.classes), net.classes[:3],
                                          self.classes[:3]))
        with warnings.catch_warnings():  # parameters loaded from the store stay as they are
            warnings.simplefilter('ignore')
            net.initialize(mx.init.Xavier(rnd_type='gaussian', factor_type='out', magnitude=2))
        net.collect_params().reset_ctx(ctx_list)
        return net

    def train_dataset(self):
        return self._train.transform(SSDTrainTransform(self.width, self.height, zoom=self.zoom))

    def losses(self, net, parts):
        cls_preds, box_preds, cls_targets, box_targets = [], [], [], []
        for images, labels in parts:
            cls_pred, box_pred, anchors = net(images)
            with autograd.pause():
                cls_target, box_target = self.targets(anchors, labels[:, :, :4],
                                                      labels[:, :, 4:5])
            cls_preds.append(cls_pred)
            box_preds.append(box_pred)
            cls_targets.append(cls_target)
            box_targets.append(box_target)
        _, cls_losses, box_losses = self.loss(cls_preds, box_preds, cls_targets, box_targets)
        return {'loss_cls': cls_losses, 'loss_box': box_losses}

    def predictor(self, net, ctx_list):
        """The net being trained as a :class:`~gluondet.deploy.Predictor`: the fixed-size
        preprocessing it trains at, batches of ``val_batch_size`` split over ``ctx_list``."""
        return Predictor(MXNetRunner(net, ctx_list), self.classes,
                         fixed_size((self.height, self.width)))

    def validate(self, net, ctx_list):
        """VOC07 mAP on the val dataset, by the evaluation ``gluondet evaluate`` runs."""
        return evaluate_voc07(self.predictor(net, ctx_list), self._val, self.val_batch_size,
                              num_workers=self.num_workers)
