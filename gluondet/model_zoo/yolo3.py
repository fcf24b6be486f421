"""YOLOv3 (Redmon and Farhadi 2018, arXiv:1804.02767): three-scale head over DarkNet-53 or
MobileNet, GluonCV's zoo names, outputs and parameter names."""
import os

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

from ..nn import MultiClassNMS
from ..nn.nms import top_candidates
from . import gluoncv_compat, gluoncv_yolo, registry
from .backbones import DarkNet, get_backbone
from .backbones.darknet import conv_bn_leaky
from .detector import DetectionNet, register_presets, reuse_mapping
from .single_stage import reuse_rows

__all__ = ['YOLOV3', 'YOLODetectionBlock', 'YOLOOutput', 'YOLONMS', 'YOLO3_ARCHS',
           'ANCHORS', 'STRIDES', 'build_yolo3']

# GluonCV's (and the paper's) anchors, (width, height) pairs in input pixels, of the maps at
# strides 8, 16 and 32
ANCHORS = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))
STRIDES = (8, 16, 32)
_BOX = 5        # per anchor: center x, y, log-scale w, h, objectness; then the classes


class YOLODetectionBlock(gluon.HybridBlock):
    """Five cells alternating 1x1 (``channels``) and 3x3 (twice ``channels``) convolutions
    (``body``), then a 3x3 cell (``tip``) feeding the output layer.

    Returns ``(route, tip)``: ``body``'s output, which the next finer scale upsamples, and
    the tip.
    """

    def __init__(self, channels, norm_layer=nn.BatchNorm, norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        with self.name_scope():
            self.body = nn.HybridSequential()
            for kernel in (1, 3, 1, 3, 1):
                self.body.add(conv_bn_leaky(channels * (1 + kernel // 3), kernel, **norm))
            self.tip = conv_bn_leaky(channels * 2, 3, **norm)

    def hybrid_forward(self, F, x):
        route = self.body(x)
        return route, self.tip(route)


class YOLOOutput(gluon.HybridBlock):
    """One scale's 1x1 prediction and its decoding.

    Parameters
    ----------
    num_classes : int
    anchors : sequence of float
        ``(width, height)`` pairs in input pixels, one per anchor (a constant parameter
        ``anchors``, ``1 x 1 x A x 2``, saved with the weights as GluonCV's).
    stride : int
        Of the feature map.
    base_size : int
        The input size the initial objectness is set for.

    The prediction starts near zero (weights from N(0, 0.01)) with biases at the priors
    Ultralytics' YOLOs start from: objectness as 8 objects in a ``base_size`` image,
    classes at 0.6 over their number (GluonCV's start at zero biases; loaded weights are
    untouched). From scratch on the demo data, the trainer's Xavier start (objectness loss
    near 400 at the first step) made SGD diverge above lr 0.005; this start trains at 0.02.

    Input: the map ``B x C x H x W``. Output, every array ``B x (H * W * A) x k`` (rows,
    then columns, then anchors): ``boxes`` (k = 4, ``xmin, ymin, xmax, ymax`` in input
    pixels), ``raw_centers`` (2, pre-sigmoid offsets in the cell), ``raw_scales`` (2, log of
    the size over the anchor's), ``objness`` (1, logit), ``class_pred`` (C, logits).
    """

    def __init__(self, num_classes, anchors, stride, base_size=416, **kwargs):
        super().__init__(**kwargs)
        anchors = np.asarray(anchors, np.float32).reshape(1, 1, -1, 2)
        self.num_anchors = anchors.shape[2]
        self.num_classes = num_classes
        self.stride = stride
        self.base_size = base_size
        with self.name_scope():
            self.prediction = self.predictor(num_classes)
            self.anchors = self.params.get_constant('anchors', anchors)

    def predictor(self, num_classes, in_channels=0, prefix=None):
        """A fresh 1x1 prediction convolution for ``num_classes``, starting at the priors."""
        bias = np.zeros((self.num_anchors, _BOX + num_classes), np.float32)
        bias[:, 4] = np.log(8.0 / (self.base_size / self.stride) ** 2)
        bias[:, _BOX:] = np.log(0.6 / max(num_classes - 0.99, 0.01))
        return nn.Conv2D(self.num_anchors * (_BOX + num_classes), 1, in_channels=in_channels,
                         prefix=prefix, weight_initializer=mx.init.Normal(0.01),
                         bias_initializer=mx.init.Constant(bias.ravel()))

    def hybrid_forward(self, F, x, anchors):
        width = _BOX + self.num_classes
        pred = self.prediction(x).reshape((0, self.num_anchors * width, -1))
        pred = F.transpose(pred, (0, 2, 1)).reshape((0, -1, self.num_anchors, width))
        raw_centers = F.slice_axis(pred, axis=-1, begin=0, end=2)
        raw_scales = F.slice_axis(pred, axis=-1, begin=2, end=4)
        objness = F.slice_axis(pred, axis=-1, begin=4, end=5)
        class_pred = F.slice_axis(pred, axis=-1, begin=5, end=None)
        # the cell of each place: (column, row), 1 x (H * W) x 1 x 2
        rows = F.contrib.arange_like(x, axis=2).reshape((-1, 1))
        cols = F.contrib.arange_like(x, axis=3).reshape((1, -1))
        offsets = F.stack(F.broadcast_add(rows * 0, cols), F.broadcast_add(rows, cols * 0),
                          axis=-1).reshape((1, -1, 1, 2))
        centers = F.broadcast_add(F.sigmoid(raw_centers), offsets) * self.stride
        half = F.broadcast_mul(F.exp(raw_scales), anchors) / 2.0
        boxes = F.concat(centers - half, centers + half, dim=-1)
        return tuple(a.reshape((0, -1, k)) for a, k in (
            (boxes, 4), (raw_centers, 2), (raw_scales, 2), (objness, 1),
            (class_pred, self.num_classes)))


class YOLONMS(MultiClassNMS):
    """GluonCV's YOLOv3 post-processing: the candidates of each scale class-major, the
    scales one after the other; the ``nms_topk`` best (scoring above ``score_thresh``) go
    through NMS within each class and the ``post_nms`` best are returned, sorted by score,
    padded with -1. As :class:`~gluondet.nn.MultiClassNMS`, the best candidates of each scale
    are picked before the table is built, which keeps GluonCV's detections and the order
    its tied scores resolve in.

    Inputs: ``scores_0 .. scores_{L-1}`` ``B x N_l x C`` (objectness times class
    probability), then ``boxes_0 .. boxes_{L-1}`` ``B x N_l x 4``. Outputs: ``ids``,
    ``scores`` ``B x K x 1``, ``boxes`` ``B x K x 4``, ``K = post_nms``.
    """

    def hybrid_forward(self, F, *inputs):   # pylint: disable=arguments-differ
        levels = len(inputs) // 2
        pick = 0 < self.nms_thresh < 1 and self.nms_topk > 0 and self.post_nms > 0
        rows = []
        for scores, boxes in zip(inputs[:levels], inputs[levels:]):
            scores = F.transpose(scores, (0, 2, 1))             # B x C x N, class-major
            scores = F.where(scores > self.score_thresh, scores, F.zeros_like(scores))
            rows.append(top_candidates(F, scores.reshape((0, -1)), boxes,
                                       max(self.nms_topk, self.post_nms)) if pick
                        else self._all_candidates(F, scores, boxes))
        return self._suppress(F, F.concat(*rows, dim=1))


class YOLOV3(DetectionNet):
    """YOLOv3 over a backbone returning maps at three strides.

    Parameters
    ----------
    backbone : HybridBlock
        Returns the maps at ``strides``, finest first (:class:`DarkNet`, or
        :class:`~gluondet.model_zoo.backbones.MobileNet` with ``out_blocks=(4, 10, 12)``).
    classes : sequence of str
    channels : sequence of int
        Channels of the detection blocks (and transitions), coarsest scale first
        (GluonCV: 512, 256, 128).
    anchors : sequence of sequences of float
        Per map, finest first, its ``(width, height)`` pairs (default :data:`ANCHORS`).
    strides : sequence of int
        Of the maps, finest first (default :data:`STRIDES`).
    base_size : int
        The square input size the network is evaluated at (GluonCV: 416).
    nms_thresh, nms_topk, post_nms
        See :meth:`set_nms`.
    norm_layer, norm_kwargs
        Normalization of the head's cells (the backbone gets its own).

    Attributes ``anchors`` and ``strides`` list the three outputs' anchors (lists of 6 ints)
    and strides in the outputs' order: coarsest (stride 32) first, as GluonCV's
    ``yolo_outputs``.

    Outputs
    -------
    Training (``autograd.is_training()``): ``box_preds`` ``B x N x 4`` (corner boxes in
    input pixels), ``raw_centers`` ``B x N x 2`` (pre-sigmoid), ``raw_scales`` ``B x N x 2``
    (log of the size over the anchor's), ``objness`` ``B x N x 1`` and ``class_pred``
    ``B x N x C`` (logits), ``N`` the sum of ``H * W * 3`` over the outputs, ordered by
    output (stride 32 first), row, column, anchor.
    Inference: ``ids``, ``scores`` ``B x K x 1`` and ``boxes`` ``B x K x 4``
    (``xmin, ymin, xmax, ymax`` in input pixels), scores sigmoid(objectness) x
    sigmoid(class), sorted, padded with -1, ``K = post_nms``.
    """

    gluoncv_format = (gluoncv_yolo.is_gluoncv_yolo, gluoncv_yolo.convert_yolo)
    postprocess_kind = 'yolo3'

    def __init__(self, backbone, classes, channels=(512, 256, 128), anchors=ANCHORS,
                 strides=STRIDES, base_size=416, nms_thresh=0.45, nms_topk=400, post_nms=100,
                 norm_layer=nn.BatchNorm, norm_kwargs=None, **kwargs):
        super().__init__(classes, **kwargs)
        if not len(channels) == len(anchors) == len(strides):
            raise ValueError('YOLOV3: %d channels, %d anchor lists and %d strides: one of each '
                             'per output' % (len(channels), len(anchors), len(strides)))
        self.anchors = [[int(a) for a in group] for group in anchors[::-1]]
        self.strides = [int(s) for s in strides[::-1]]
        self.base_size = base_size
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        with self.name_scope():
            self.backbone = backbone
            self.transitions = nn.HybridSequential()
            self.yolo_blocks = nn.HybridSequential()
            self.yolo_outputs = nn.HybridSequential()
            for i, (width, group, stride) in enumerate(zip(channels, self.anchors,
                                                           self.strides)):
                self.yolo_blocks.add(YOLODetectionBlock(width, **norm))
                self.yolo_outputs.add(YOLOOutput(self.num_classes, group, stride, base_size))
                if i > 0:
                    self.transitions.add(conv_bn_leaky(width, 1, **norm))
            self.postprocess = YOLONMS(0.01, nms_thresh, nms_topk, post_nms)

    def hybrid_forward(self, F, x):
        maps = self.backbone(x)
        x = maps[-1]
        outputs = []
        for i, (block, output) in enumerate(zip(self.yolo_blocks, self.yolo_outputs)):
            x, tip = block(x)
            outputs.append(output(tip))
            if i < len(self.transitions):
                route = maps[-2 - i]
                x = F.UpSampling(self.transitions[i](x), scale=2, sample_type='nearest')
                x = F.concat(F.slice_like(x, route, axes=(2, 3)), route, dim=1)
        if autograd.is_training():
            return tuple(F.concat(*parts, dim=1) for parts in zip(*outputs))
        scores = [F.broadcast_mul(F.sigmoid(o[4]), F.sigmoid(o[3])) for o in outputs]
        return self.postprocess(*(scores + [o[0] for o in outputs]))

    def reset_class(self, classes, reuse_weights=None):
        """Replace the classes and the prediction layers.

        Parameters
        ----------
        classes : sequence of str
            The new foreground classes.
        reuse_weights : dict or list or None
            Which new classes start from the weights of an old one: ``{new: old}`` with
            class names or indices, or a list of names kept by both (see
            :func:`~gluondet.model_zoo.detector.reuse_mapping`). The box and objectness
            weights are then reused too (GluonCV's); other rows start anew.
        """
        old_width = _BOX + self.num_classes
        mapping = reuse_mapping(reuse_weights, self.classes, tuple(classes))
        self.classes = tuple(classes)
        self._clear_cached_op()
        for output in self.yolo_outputs:
            old = output.prediction
            new = output.predictor(self.num_classes, old.weight.shape[1], old.prefix)
            pairs = [(k, k) for k in range(_BOX)]
            pairs += [(_BOX + n, _BOX + o) for n, o in mapping.items()]
            reuse_rows(old, new, pairs if mapping else [], old_width, _BOX + self.num_classes)
            output.num_classes = self.num_classes
            output.prediction = new


def _yolo_datasets(size, published=True, datasets=('voc', 'coco', 'custom')):
    return dict(datasets={d: dict(short=size, max_size=size) for d in datasets},
                published=published)


# YOLOv3 presets: backbone, detection block channels (coarsest first), input size. The first
# three are GluonCV's (GluonCV publishes no weights of yolo3_mobilenet0.25).
YOLO3_ARCHS = {
    'yolo3_darknet53': dict(backbone='darknet53', channels=(512, 256, 128),
                            **_yolo_datasets(416)),
    'yolo3_mobilenet1.0': dict(backbone='mobilenet1.0', channels=(512, 256, 128),
                               **_yolo_datasets(416)),
    'yolo3_mobilenet0.25': dict(backbone='mobilenet0.25', channels=(256, 128, 128),
                                **_yolo_datasets(416, published=False)),
    # gluondet's small YOLOv3 for training from scratch on a CPU (the demo and BCCD recipes):
    # MobileNet 0.5 (the demo SSD's) under a head a quarter of GluonCV's widths, which hold
    # most of the work: a training step of 8 images at 256 px took 0.95 s on two cores,
    # against 2.0 s for yolo3_mobilenet0.25 (hybridized, forward and backward).
    'yolo3_mobilenet0.5': dict(backbone='mobilenet0.5', channels=(128, 64, 64),
                               **_yolo_datasets(320, published=False, datasets=('custom',))),
}


def build_yolo3(arch, classes, dataset='custom', pretrained_base=True, ctx=mx.cpu(),
                root=os.path.join('~', '.mxnet', 'models'), norm_layer=nn.BatchNorm,
                norm_kwargs=None, **kwargs):
    """Build the YOLOv3 ``arch`` (a key of ``YOLO3_ARCHS``) for ``classes``.

    Parameters
    ----------
    arch : str
        For example ``yolo3_darknet53``.
    classes : sequence of str
    dataset : str
        'voc', 'coco' or 'custom' (the same network).
    pretrained_base : bool
        Load the backbone's GluonCV ImageNet weights from ``root``.
    ctx, root
        Where loaded weights go; folder of weight files.
    norm_layer, norm_kwargs
        Normalization of the backbone and the head (``SyncBatchNorm`` for SyncBN).
    **kwargs
        Override the preset's :class:`YOLOV3` arguments (``anchors``, ``nms_thresh``, ...).
    """
    spec = YOLO3_ARCHS[arch]
    norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
    name = spec['backbone']
    backbone = get_backbone(name, **norm) if name.startswith('darknet') \
        else get_backbone(name, out_blocks=(4, 10, 12), **norm)
    options = dict(channels=spec['channels'], base_size=spec['datasets'][dataset]['short'])
    net = YOLOV3(backbone, classes, **dict(options, **kwargs), **norm)
    if pretrained_base:
        path = registry.weights_file(name, root)
        if isinstance(backbone, DarkNet):
            gluoncv_yolo.load_gluoncv_darknet(backbone, path, ctx)
        else:
            gluoncv_compat.load_gluoncv_backbone(net, path, ctx)
    return net


register_presets(YOLO3_ARCHS, build_yolo3, 'YOLOv3')
