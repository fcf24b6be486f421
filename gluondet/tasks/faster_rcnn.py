"""Faster R-CNN bound to the training engine (see the task contract in `gluondet.engine`)."""
import mxnet as mx
from mxnet import autograd

from ..data.mixup import MixupDetection
from ..losses import RCNNLoss
from ..nn import RPNTargetGenerator, SyncBatchNorm
from .base import KeepRatioTask


class FasterRCNNTask(KeepRatioTask):
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
        every norm layer stay frozen (GluonCV's ``train_patterns``), except in the
        ``fpn_syncbn`` networks, which train every parameter (GluonCV's too). From scratch every
        parameter trains and the backbone's BatchNorm uses batch statistics (unless
        ``model_kwargs`` sets the norm layer): the global statistics of a random network
        normalize nothing, and so trained, a ResNet-50's losses diverged.
    model_kwargs : dict
        More arguments for ``get_model``; ``{'norm_layer': 'syncbn'}`` with an
        ``fpn_syncbn`` network synchronizes the BatchNorm of its backbone, FPN and box head
        across the processes (or GPUs) of the training (GluonCV's ``--norm-layer syncbn``).
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

    name = 'faster_rcnn'

    def __init__(self, network, train_dataset, val_dataset, rpn_rho=1. / 9, rcnn_rho=1.,
                 **kwargs):
        super().__init__(network, train_dataset, val_dataset, **kwargs)
        self.rpn_targets = RPNTargetGenerator()
        self.loss = RCNNLoss(rpn_rho, rcnn_rho)

    def build_net(self, ctx_list):
        """The network; on CPUs its ROI Align trains with the sparse backward
        (:mod:`gluondet.nn.roi_align`: MXNet's CPU kernel is a third of a step), in one
        process or several, unless a `SyncBatchNorm` follows it: MXNet then calls the sparse
        backward's custom operator without a gradient buffer for its ROIs, and the step
        fails. (Under Horovod it was off after rank 0 died of a segmentation fault in 2 of
        about 30 runs, at the first step, where Horovod's own broadcast then ran, whose
        use-after-free later killed ranks without it: `HorovodRuntime.broadcast_parameters`.)"""
        net = super().build_net(ctx_list)
        synced = any(isinstance(b, SyncBatchNorm) for b in _blocks(net))
        net.roi_extractor.sparse_backward = not synced and all(
            c.device_type == 'cpu' for c in ctx_list)
        return net

    def train_params(self, net):
        if self.pretrained_base:
            return net.collect_train_params()
        return net.collect_params()

    def train_dataset(self):
        dataset = self._train
        if len(dataset) > 1:     # mixes only when the engine's SampleIndex says so
            dataset = MixupDetection(dataset, ratio=self.MIX_RATIO)
        return dataset.transform(self.train_transform())

    def losses(self, net, parts):
        forwards = [self._forward(net, part) for part in parts]
        return self._weighted(self.loss(*zip(*(f[0] for f in forwards))),
                              [f[2] for f in forwards])

    def _forward(self, net, part):
        """One context's ``(images, sizes, [...,] labels)``: `RCNNLoss`'s ten inputs, the
        network's further training outputs, the images' mix weights."""
        images, sizes, labels = part[0], part[1], part[-1]
        gt_boxes, gt_ids = labels[:, :, :4], labels[:, :, 4:5]
        outputs = tuple(net(images, gt_boxes, gt_ids))
        with autograd.pause():
            rpn_targets = self.rpn_targets(outputs[2], gt_boxes, gt_ids, sizes)
        return outputs[:2] + tuple(rpn_targets) + outputs[3:8], outputs[8:], _mix_weights(labels)

    @staticmethod
    def _weighted(losses, weights):
        """Each context's losses times its images' mix weights (None: as they are)."""
        return {name: [value if w is None else value * w for value, w in zip(values, weights)]
                for name, values in losses.items()}


def _blocks(block):
    """``block`` and every block under it (none for None)."""
    if block is None:
        return []
    return [block] + [b for child in block._children.values()  # pylint: disable=protected-access
                      for b in _blocks(child)]


def _mix_weights(labels):
    """Per image, the largest weight of its boxes (label column 7, padding -1), 1 without
    boxes; None for labels without a weight column."""
    if labels.shape[-1] < 7:
        return None
    weight = labels[:, :, 6].max(axis=1)
    return mx.nd.where(weight > 0, weight, mx.nd.ones_like(weight))
