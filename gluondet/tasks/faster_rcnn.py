"""Faster R-CNN bound to the training engine (see the task contract in `gluondet.engine`)."""
import warnings

import mxnet as mx
from mxnet import autograd

from ..data.batchify import Pad, PadImages, Tuple
from ..data.mixup import MixupDetection
from ..data.preprocess import preprocessing_of
from ..data.rcnn_transforms import RCNNTrainTransform
from ..deploy.predictor import Predictor
from ..deploy.runners import MXNetRunner
from ..engine import GroupedBatchSampler
from ..losses import RCNNLoss
from ..metrics.evaluation import evaluate_voc07
from ..model_zoo import get_model
from ..nn import RPNTargetGenerator


class FasterRCNNTask:
    """Faster R-CNN: one network name, a train and a val dataset.

    Parameters
    ----------
    network : str
        A model zoo name, e.g. ``faster_rcnn_fpn_resnet18_v1b_custom``.
    train_dataset, val_dataset : DetectionDataset
    classes : sequence of str, optional
        Foreground classes for ``*_custom`` names (default: the train dataset's).
    short, max_size : int, optional
        Image resizing (default: the network's, GluonCV's per name); ``short`` may be a
        ``(low, high)`` range for multi-scale training (validation uses ``low``).
    pretrained_base : bool
        Start the backbone from its ImageNet weights. Then the stem, ``layer1`` and
        every norm layer stay frozen (GluonCV's ``train_patterns``). From scratch every
        parameter trains and the backbone's BatchNorm uses batch statistics (unless
        ``model_kwargs`` sets the norm layer): the global statistics of a random network
        normalize nothing, and so trained, a ResNet-50's losses diverged.
    model_kwargs : dict
        More arguments for ``get_model``.
    rpn_rho, rcnn_rho : float
        Smooth L1 transitions (GluonCV's ``--rpn-smoothl1-rho`` 1/9, ``--rcnn-smoothl1-rho`` 1).
    val_batch_size, num_workers : int
        For the validation loader.

    Mixup (``config.mixup``) blends two training images at GluonCV's fixed ratio 0.5, and
    each image's four losses are multiplied by its label weight (the 7th column: 0.5 for
    every box of a mixed image, 1 otherwise), as GluonCV multiplies them by ``mix_ratio``.
    """

    supports_mixup = True
    MIX_RATIO = 0.5    # GluonCV's train_faster_rcnn.py: set_mixup(np.random.uniform, 0.5, 0.5)

    def __init__(self, network, train_dataset, val_dataset, classes=None, short=None,
                 max_size=None, pretrained_base=True, model_kwargs=None, rpn_rho=1. / 9,
                 rcnn_rho=1., val_batch_size=4, num_workers=0):
        self.network = network
        self.classes = tuple(classes or train_dataset.classes)
        self._train, self._val = train_dataset, val_dataset
        self.short, self.max_size = short, max_size
        self.pretrained_base = pretrained_base
        self.model_kwargs = dict(model_kwargs or {})
        self.val_batch_size, self.num_workers = val_batch_size, num_workers
        self.rpn_targets = RPNTargetGenerator()
        self.loss = RCNNLoss(rpn_rho, rcnn_rho)
        self.multiple = 1
        self.train_batchify = None

    def meta(self):
        return {'task': 'faster_rcnn', 'network': self.network, 'classes': list(self.classes),
                'short': self.short, 'max_size': self.max_size}

    def build_net(self, ctx_list):
        kwargs = dict(self.model_kwargs)
        if self.network.endswith('_custom'):
            kwargs['classes'] = self.classes
        if not self.pretrained_base and 'norm_layer' not in kwargs:
            kwargs.setdefault('norm_kwargs', {'use_global_stats': False})
        net = get_model(self.network, pretrained_base=self.pretrained_base, **kwargs)
        if tuple(net.classes) != self.classes:
            raise ValueError('%s predicts %d classes %s but the data has %s; use the *_custom '
                             'network' % (self.network, len(net.classes), net.classes[:3],
                                          self.classes[:3]))
        self.short = self.short or net.short
        self.max_size = self.max_size or net.max_size
        self.multiple = 32 if net.fpn is not None else 1
        self.train_batchify = Tuple(PadImages(self.multiple), Pad(pad_val=-1))
        with warnings.catch_warnings():  # parameters loaded from the store stay as they are
            warnings.simplefilter('ignore')
            net.initialize(mx.init.Xavier(rnd_type='gaussian', factor_type='out', magnitude=2))
        net.collect_params().reset_ctx(ctx_list)
        return net

    def train_params(self, net):
        if self.pretrained_base:
            return net.collect_train_params()
        return net.collect_params()

    def train_dataset(self):
        dataset = self._train
        if len(dataset) > 1:     # mixes only when the engine's SampleIndex says so
            dataset = MixupDetection(dataset, ratio=self.MIX_RATIO)
        return dataset.transform(RCNNTrainTransform(self.short, self.max_size))

    def train_batch_sampler(self, length, batch_size, seed, rank, world_size):
        """Batches of landscape or of portrait images only, so a batch pads little."""
        groups = [int(w >= h) for w, h in map(self._train.image_size, range(length))]
        return GroupedBatchSampler(groups, batch_size, seed, rank, world_size)

    def losses(self, net, parts):
        outputs = [[] for _ in range(10)]
        weights = []
        for images, sizes, labels in parts:
            gt_boxes, gt_ids = labels[:, :, :4], labels[:, :, 4:5]
            (rpn_scores, rpn_boxes, anchors, cls_preds, box_preds, cls_targets, box_targets,
             box_masks) = net(images, gt_boxes, gt_ids)
            with autograd.pause():
                rpn_targets = self.rpn_targets(anchors, gt_boxes, gt_ids, sizes)
            for column, value in zip(outputs, (rpn_scores, rpn_boxes) + tuple(rpn_targets) + (
                    cls_preds, box_preds, cls_targets, box_targets, box_masks)):
                column.append(value)
            weights.append(_mix_weights(labels))
        return {name: [value if w is None else value * w for value, w in zip(values, weights)]
                for name, values in self.loss(*outputs).items()}

    def predictor(self, net, ctx_list):
        """The net being trained as a :class:`~gluondet.deploy.Predictor`: each image resized
        keeping its ratio to the sizes it trains at (the low end of a multi-scale ``short``)
        and padded to the net's multiple, batches of ``val_batch_size`` split over ``ctx_list``."""
        return Predictor(MXNetRunner(net, ctx_list), self.classes,
                         preprocessing_of(net, short=self.short, max_size=self.max_size))

    def validate(self, net, ctx_list):
        """VOC07 mAP on the val dataset, by the evaluation ``gluondet evaluate`` runs."""
        return evaluate_voc07(self.predictor(net, ctx_list), self._val, self.val_batch_size,
                              num_workers=self.num_workers)


def _mix_weights(labels):
    """Per image, the largest weight of its boxes (label column 7, padding -1), 1 without
    boxes; None for labels without a weight column."""
    if labels.shape[-1] < 7:
        return None
    weight = labels[:, :, 6].max(axis=1)
    return mx.nd.where(weight > 0, weight, mx.nd.ones_like(weight))
