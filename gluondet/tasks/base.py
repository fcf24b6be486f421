"""What every task shares: building the zoo network for the data's classes, the predictor the
engine validates through, and (for the detectors that keep the aspect ratio) the resizing,
grouping and padding of training batches."""
import os
import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd

from ..data.autoaugment import DetectionAutoAugment
from ..data.batchify import Pad, PadImages, Tuple
from ..data.preprocess import preprocessing_of
from ..data.rcnn_transforms import RCNNTrainTransform
from ..deploy.predictor import Predictor
from ..deploy.runners import MXNetRunner
from ..engine import GroupedBatchSampler
from ..metadata import training_meta
from ..metrics.evaluation import evaluate_voc07
from ..model_zoo import get_model, get_model_info
from ..model_zoo.pruned import apply_channels, pruned_channels
from ..nn.sync_bn import sync_norm_layer

__all__ = ['DetectionTask', 'KeepRatioTask', 'check_pruned_model', 'dense_targets']

_NOT_ARCHITECTURE = ('norm_layer', 'norm_kwargs', 'root', 'ctx')


def check_pruned_model(path):
    """ValueError unless ``path`` is a pruned gluondet model: a ``.params`` with the json
    ``gluondet prune`` wrote beside it (``meta.pruned``)."""
    if not str(path).lower().endswith('.params') or not os.path.isfile(path):
        raise ValueError('pruned model: no such .params file %s' % path)
    meta = training_meta(path)
    if meta is None:
        raise ValueError('pruned model %s has no json beside it (%s): give the .params that '
                         'gluondet prune wrote' % (path, os.path.splitext(path)[0] + '.json'))
    if pruned_channels(meta, path) is None:
        raise ValueError('%s is not a pruned model (its json has no meta.pruned); prune it with '
                         'gluondet prune first' % path)


class DetectionTask:
    """A network name, a train and a val dataset (the engine's task contract, in part).

    Parameters
    ----------
    network : str
        A model zoo name; a ``*_custom`` one gets the data's classes.
    train_dataset, val_dataset : DetectionDataset
    classes : sequence of str, optional
        Foreground classes (default: the train dataset's).
    pretrained_base : bool
        Start the backbone from its ImageNet weights (from the weight store).
    model_kwargs : dict
        More arguments for ``get_model`` (``norm_layer``, ``root``, ...); ``norm_layer``
        ``'syncbn'``: BatchNorm synchronized over the devices and processes of training.
    val_batch_size, num_workers : int
        For the validation loader.
    fine_tune : str, optional
        A trained ``.params`` of this network (gluondet's, with its ``.json`` beside it, or
        GluonCV's) to start from instead of the initialization (ODTK's ``--fine-tune``). If
        it was trained on other classes (its json says which; ``*_custom`` names only),
        the class predictor starts anew, keeping the rows of the classes both share.
    pruned_model : str, optional
        A ``.params`` written by ``gluondet prune`` (its ``.json`` beside it; TAO's
        ``pruned_model_path``): the network is rebuilt with its channels and starts from its
        weights (classes handled as ``fine_tune``). The channel table goes into ``meta()``,
        so every checkpoint and saved model of the run rebuilds the same network. A dict
        ``{'channels': table}`` (a resumed checkpoint's ``meta.pruned``) rebuilds those
        channels only: the checkpoint brings the weights.

    A subclass defines ``build_net``, ``train_dataset``, ``losses`` and ``preprocessing``.
    """

    def __init__(self, network, train_dataset, val_dataset, classes=None, pretrained_base=True,
                 model_kwargs=None, val_batch_size=4, num_workers=0, fine_tune=None,
                 pruned_model=None):
        self.network = network
        self.classes = tuple(classes or train_dataset.classes)
        self._train, self._val = train_dataset, val_dataset
        self.pretrained_base = pretrained_base
        self.model_kwargs = dict(model_kwargs or {})
        self.val_batch_size, self.num_workers = val_batch_size, num_workers
        self.fine_tune = fine_tune
        if fine_tune is not None and not os.path.isfile(fine_tune):
            raise ValueError('fine_tune: no such file %s' % fine_tune)
        self.pruned_model = pruned_model
        self.pruned = None      # the channel table of the network built, if pruned
        if isinstance(pruned_model, str):
            check_pruned_model(pruned_model)

    def _meta(self, **extra):
        """The checkpoint's description of the network: name, classes, the architecture
        arguments of ``model_kwargs`` (what rebuilds it; not the norm layer or paths)."""
        arch = {k: v for k, v in self.model_kwargs.items() if k not in _NOT_ARCHITECTURE}
        meta = {'task': self.name, 'network': self.network, 'classes': list(self.classes)}
        if arch:
            meta['model_kwargs'] = arch
        if self.pruned is not None:
            meta['pruned'] = {'channels': self.pruned}
        return dict(meta, **extra)

    def _takes_classes(self):
        """Whether the network is built for the data's classes (``*_custom``,
        ``custom_mask_rcnn_fpn``: no fixed classes in the zoo)."""
        return get_model_info(self.network).classes is None

    def _model_kwargs(self, ctx_list=(mx.cpu(),), **kwargs):
        """``get_model``'s arguments: ``model_kwargs``, ``kwargs``, the data's classes for a
        ``*_custom`` name; ``norm_layer='syncbn'`` becomes the synchronized BatchNorm for
        training on ``ctx_list`` (`gluondet.nn.sync_norm_layer`)."""
        kwargs = dict(self.model_kwargs, **kwargs)
        if self._takes_classes():
            kwargs['classes'] = self.classes
        if kwargs.get('norm_layer') == 'syncbn':
            kwargs['norm_layer'], sync_kwargs = sync_norm_layer(list(ctx_list))
            kwargs['norm_kwargs'] = dict(kwargs.get('norm_kwargs') or {}, **sync_kwargs)
        return kwargs

    def _get_model(self, ctx_list=(mx.cpu(),), **kwargs):
        """``get_model(network)`` (from ``fine_tune`` if given, else with the task's
        ``pretrained_base``) for training on ``ctx_list``; ValueError when a fixed-class
        network does not predict the data's classes."""
        kwargs = self._model_kwargs(ctx_list, **kwargs)
        if isinstance(self.pruned_model, dict):     # resuming: the checkpoint has the weights
            net = get_model(self.network, pretrained_base=False, **kwargs)
            self.pruned = self.pruned_model['channels']
            apply_channels(net, self.pruned)
            return net
        if self.pruned_model is not None:
            return self._fine_tuned(kwargs, self.pruned_model, 'pruned_model')
        if self.fine_tune is not None:
            return self._fine_tuned(kwargs)
        net = get_model(self.network, pretrained_base=self.pretrained_base, **kwargs)
        if tuple(net.classes) != self.classes:
            raise ValueError('%s predicts %d classes %s but the data has %s; use the *_custom '
                             'network' % (self.network, len(net.classes), net.classes[:3],
                                          self.classes[:3]))
        return net

    def _fine_tuned(self, kwargs, path=None, what='fine_tune'):
        """The network with the weights of ``path`` (default ``fine_tune``), with its channel
        table if it was pruned, predicting the data's classes."""
        path = path or self.fine_tune
        meta = training_meta(path) or {}
        if meta.get('network', self.network) != self.network:
            raise ValueError('%s: %s is a %s, not a %s' % (what, path, meta['network'],
                                                           self.network))
        kwargs = dict(meta.get('model_kwargs') or {}, **kwargs)   # its architecture
        # ... which this run's checkpoints and params record, so that they rebuild it too
        self.model_kwargs = dict(meta.get('model_kwargs') or {}, **self.model_kwargs)
        old = tuple(meta.get('classes') or kwargs.get('classes') or ())
        if 'classes' in kwargs and old:
            kwargs['classes'] = old
        net = get_model(self.network, pretrained_base=False, **kwargs)
        self.pruned = pruned_channels(meta, path)
        if self.pruned:
            apply_channels(net, self.pruned)
        net.initialize()
        net.load_parameters(path)
        if tuple(net.classes) != self.classes:
            if not self._takes_classes():
                raise ValueError('%s: %s predicts %s, the data has %s: use the *_custom '
                                 'network' % (what, self.network, net.classes[:3],
                                              self.classes[:3]))
            net.reset_class(self.classes, reuse_weights=[c for c in self.classes
                                                         if c in net.classes])
        return net

    @staticmethod
    def _place(net, ctx_list):
        """Initialize what was not loaded (Xavier, fan-out Gaussian) and put it on ``ctx_list``."""
        with warnings.catch_warnings():  # parameters loaded from the store stay as they are
            warnings.simplefilter('ignore')
            net.initialize(mx.init.Xavier(rnd_type='gaussian', factor_type='out', magnitude=2))
        net.collect_params().reset_ctx(ctx_list)
        return net

    def preprocessing(self, net):
        """The validation preprocessing spec of ``net`` (:mod:`gluondet.data.preprocess`)."""
        raise NotImplementedError

    def predictor(self, net, ctx_list):
        """The net being trained as a :class:`~gluondet.deploy.Predictor`, with the
        preprocessing it trains at; batches of ``val_batch_size`` split over ``ctx_list``."""
        return Predictor(MXNetRunner(net, ctx_list), self.classes, self.preprocessing(net))

    def batch_images(self, batch, count):
        """The first ``count`` images of a training batch as the network sees them, for
        TensorBoard (:mod:`gluondet.engine.batch_images`): ``[(image, boxes, names)]``, each
        image ``H x W x 3`` uint8 RGB with the train transform's normalization undone (padding
        included), its ground-truth boxes ``N x 4`` in those pixels and their class names
        (empty where the batch's last element holds boxes only)."""
        transform = self.train_transform()
        mean, std = (np.array(v, np.float32).reshape(3, 1, 1)
                     for v in (transform.mean, transform.std))
        images, labels = batch[0][:count].asnumpy(), batch[-1][:count].asnumpy()
        shown = []
        for image, label in zip(images, labels):
            pixels = np.clip((image * std + mean) * 255, 0, 255).round().astype(np.uint8)
            if label.shape[1] < 5:      # boxes only (YOLOv3's classes travel in its targets)
                label = label[(label != -1).any(axis=1)]
                names = [''] * len(label)
            else:
                label = label[label[:, 4] >= 0]
                names = [self.classes[c] if c < len(self.classes) else str(c)
                         for c in label[:, 4].astype(int)]
            shown.append((pixels.transpose(1, 2, 0), label[:, :4], names))
        return shown

    def validate(self, net, ctx_list, group=None):
        """VOC07 mAP on the val dataset, by the evaluation ``gluondet evaluate`` runs (its
        batches shared among the processes of ``group``)."""
        return evaluate_voc07(self.predictor(net, ctx_list), self._val, self.val_batch_size,
                              num_workers=self.num_workers, group=group)


class KeepRatioTask(DetectionTask):
    """A detector fed images resized keeping their aspect ratio (Faster R-CNN, RetinaNet).

    Extra parameters: ``short``, ``max_size`` (default: the network's; ``short`` may be a
    ``(low, high)`` range for multi-scale training, validation using ``low``);
    ``auto_augment``: a :class:`~gluondet.data.autoaugment.DetectionAutoAugment` policy
    (``'v0'``, ``'scale_aware'`` or a list of sub-policies) applied first. From scratch
    (``pretrained_base=False``) the backbone's BatchNorm uses batch statistics unless
    ``model_kwargs`` sets the norm layer: the global statistics of a random network
    normalize nothing. Training batches group landscape and portrait images apart
    (:class:`~gluondet.engine.GroupedBatchSampler`) and are padded to the network's
    ``size_multiple``.
    """

    def __init__(self, network, train_dataset, val_dataset, short=None, max_size=None,
                 auto_augment=None, **kwargs):
        super().__init__(network, train_dataset, val_dataset, **kwargs)
        self.short, self.max_size = short, max_size
        self.augment = None if auto_augment is None else DetectionAutoAugment(auto_augment)
        self.multiple = 1
        self.train_batchify = None

    def meta(self):
        return self._meta(short=self.short, max_size=self.max_size)

    def build_net(self, ctx_list):
        kwargs = {}
        if not self.pretrained_base and 'norm_layer' not in self.model_kwargs:
            kwargs['norm_kwargs'] = self.model_kwargs.get('norm_kwargs',
                                                          {'use_global_stats': False})
        net = self._get_model(ctx_list, **kwargs)
        self.short = self.short or net.short
        self.max_size = self.max_size or net.max_size
        self.multiple = net.size_multiple
        self.train_batchify = Tuple(PadImages(self.multiple), Pad(pad_val=-1))
        return self._place(net, ctx_list)

    def train_transform(self):
        return RCNNTrainTransform(self.short, self.max_size, augment=self.augment)

    def train_batch_sampler(self, length, batch_size, seed, rank, world_size):
        """Batches of landscape or of portrait images only, so a batch pads little."""
        groups = [int(w >= h) for w, h in map(self._train.image_size, range(length))]
        return GroupedBatchSampler(groups, batch_size, seed, rank, world_size)

    def preprocessing(self, net):
        """Each image resized keeping its ratio to the sizes it trains at (the low end of
        a multi-scale ``short``) and padded to the net's multiple."""
        return preprocessing_of(net, short=self.short, max_size=self.max_size)


def dense_targets(net, parts, targets):
    """A single-stage detector's predictions and anchor targets over the parts of a batch.

    ``parts`` are ``(images, labels)`` or ``(images, sizes, labels)`` (padded batches) per
    context (labels ``B x M x 6+``, padding -1);
    ``targets(anchors, boxes, ids)`` is an :class:`~gluondet.nn.AnchorTargetGenerator`.
    Returns the per-context lists ``cls_preds, box_preds, cls_targets, box_targets``.
    """
    columns = ([], [], [], [])
    for part in parts:
        images, labels = part[0], part[-1]
        cls_pred, box_pred, anchors = net(images)
        with autograd.pause():
            cls_target, box_target = targets(anchors, labels[:, :, :4], labels[:, :, 4:5])
        for column, value in zip(columns, (cls_pred, box_pred, cls_target, box_target)):
            column.append(value)
    return columns
