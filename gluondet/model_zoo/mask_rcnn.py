"""Mask R-CNN (He et al. 2017, arXiv:1703.06870): Faster R-CNN with a mask head, C4 and FPN."""
import os

import mxnet as mx
from mxnet import autograd
from mxnet.gluon import nn

from ..nn import batch_take
from . import registry
from .detector import initialized_ctx, register_presets, reuse_mapping
from .faster_rcnn import _COCO_C4, _COCO_FPN, _SMALL, FasterRCNN, build_rcnn

__all__ = ['MaskHead', 'MaskRCNN', 'MASK_RCNN_ARCHS', 'build_mask_rcnn', 'custom_mask_rcnn_fpn']

# GluonCV's Mask head initializer (MSRA: Gaussian, fan out, magnitude 2)
_MSRA = mx.init.Xavier(rnd_type='gaussian', factor_type='out', magnitude=2)


class MaskHead(nn.HybridBlock):
    """Per-class mask logits of regions: ``num_convs`` 3x3 convolutions with ReLU (and a
    norm layer each with ``norm``), a 2x2 transposed convolution of stride 2 (then the norm),
    ReLU, and a 1x1 convolution to one map per class (GluonCV's ``Mask``, its child names:
    ``deconv`` is the transposed convolution alone when ``num_convs`` is 0).

    Input ``R x C x h x w``, output ``R x num_classes x 2h x 2w``.
    """

    def __init__(self, num_classes, channels=256, num_convs=0, norm=None, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            deconv = nn.Conv2DTranspose(channels, 2, strides=2, weight_initializer=_MSRA)
            if num_convs:
                self.deconv = nn.HybridSequential()
                for _ in range(num_convs):
                    self.deconv.add(nn.Conv2D(channels, 3, padding=1, weight_initializer=_MSRA))
                    if norm is not None:
                        self.deconv.add(norm[0](**norm[1]))
                    self.deconv.add(nn.Activation('relu'))
                self.deconv.add(deconv)
                if norm is not None:
                    self.deconv.add(norm[0](**norm[1]))
            else:
                self.deconv = deconv
            self.mask = self._predictor(num_classes)

    def _predictor(self, num_classes, in_channels=0, prefix=None):
        return nn.Conv2D(num_classes, 1, weight_initializer=_MSRA, in_channels=in_channels,
                         prefix=prefix)

    def hybrid_forward(self, F, x):
        return self.mask(F.relu(self.deconv(x)))


class MaskRCNN(FasterRCNN):
    """Faster R-CNN whose detections each get a mask: the probabilities, on an ``M x M``
    grid over the detection's box, that its pixels belong to the detected object.

    Parameters
    ----------
    backbone, classes, **kwargs
        As :class:`FasterRCNN`.
    mask_channels : int
        Channels of the mask head's convolutions (GluonCV 256).
    num_mask_convs : int
        3x3 convolutions of the mask head before its upsampling (GluonCV's
        ``num_fcn_convs``: 0 for C4, whose regions first pass ``layer4``; 4 or 2 with FPN).
    rcnn_max_dets : int
        Detections that get a mask, the best ones (GluonCV's ``rcnn_max_dets``, 1000); the
        network returns at most this many.
    norm : (norm_layer, norm_kwargs) or None
        Norm layers in the mask head (GluonCV's ``fpn_syncbn`` networks).

    The mask grid is ``M = 2 x roi_size`` with FPN (the pooled regions upsampled once) and
    ``M = roi_size`` for C4 (``layer4`` halves the pooled regions first): :attr:`mask_size`.

    Outputs
    -------
    Training, ``net(x, gt_boxes, gt_ids)``: :class:`FasterRCNN`'s eight outputs, then
    ``mask_preds`` ``B x P x M x M`` the mask logits of the ``P`` first samples (positives
    first) for their ground truth's class, ``mask_rois`` ``B x P x 4`` those samples' boxes
    and ``mask_matches`` ``B x P`` their ground truths' indices; the positives among them are
    where ``box_masks`` is 1 (see :class:`~gluondet.nn.MaskTargetGenerator` for the targets).
    Inference, ``net(x)``: ``ids``, ``scores`` ``B x K x 1``, ``boxes`` ``B x K x 4`` as
    :class:`FasterRCNN`'s, best first, and ``masks`` ``B x K x M x M``, each detection's
    probabilities for its class (GluonCV's ``(ids, scores, boxes, masks)``; ``K`` the
    smaller of ``rcnn_max_dets`` and Faster R-CNN's count).
    """

    output_fields = ('masks',)
    grid_fields = ('masks',)        # grids over their boxes (gluondet.detections)
    postprocess_kind = 'mask_rcnn'

    def __init__(self, backbone, classes, mask_channels=256, num_mask_convs=0,
                 rcnn_max_dets=1000, norm=None, **kwargs):
        super().__init__(backbone, classes, **kwargs)
        self.rcnn_max_dets = min(rcnn_max_dets, self.proposal.counts(False)[1])
        with self.name_scope():
            self.mask = MaskHead(self.num_classes, mask_channels, num_mask_convs, norm)

    @property
    def mask_size(self):
        """``(M, M)``: the mask grid of each detection (GluonCV's ``target_roi_size``)."""
        scale = 1 if self.box_features is None else 2
        return tuple(s * scale for s in self.roi_size)

    def _num_detections(self):
        post_nms = self.postprocess.post_nms
        count = post_nms if post_nms > 0 else (
            self.num_classes * self.proposal.counts(False)[1])
        return min(count, self.rcnn_max_dets)

    def _own_class(self, F, logits, classes):
        """``B x N x C x M x M`` logits at ``B x N`` classes: ``B x N x M x M``."""
        first = F.slice_axis(logits, axis=2, begin=0, end=1).reshape((0, 0, -3, -2))
        return F.pick(logits, F.broadcast_like(classes.reshape((0, 0, 1, 1)), first), axis=2)

    def hybrid_forward(self, F, x, gt_boxes=None, gt_ids=None):
        out = self._stages(F, x, gt_boxes, gt_ids)
        if autograd.is_training():
            indices = out['indices']
            num_pos, num_rois = self.sampler.max_pos, self.sampler.num_sample
            top = batch_take(F, out['top'].reshape((-4, -1, num_rois, -2)), indices)
            logits = self.mask(top.reshape((-3, -2))).reshape((-4, -1, num_pos, -2))
            return out['outputs'] + (self._own_class(F, logits, out['box_classes']),
                                     batch_take(F, out['rois'], indices),
                                     batch_take(F, out['matches'], indices))
        count = self._num_detections()
        ids, scores, boxes = (F.slice_axis(o, axis=1, begin=0, end=count)
                              for o in out['outputs'])
        top = self.top_features(self.pool(F, boxes, out['maps']))
        logits = self.mask(top).reshape((-4, -1, count, -2))
        classes = F.clip(ids.reshape((0, -1)), 0, self.num_classes - 1)
        return ids, scores, boxes, F.sigmoid(self._own_class(F, logits, classes))

    def reset_class(self, classes, reuse_weights=None):
        """:meth:`FasterRCNN.reset_class`, and a new mask predictor (mapped classes keep
        their mask maps)."""
        old_classes = self.classes
        super().reset_class(classes, reuse_weights)
        mapping = reuse_mapping(reuse_weights, old_classes, self.classes)
        old = self.mask.mask
        ctx = initialized_ctx(old)
        with self.mask.name_scope():
            self.mask.mask = self.mask._predictor(self.num_classes, old.weight.shape[1],
                                                  old.prefix)
        if ctx is not None:
            self.mask.mask.initialize(ctx=ctx)
        for old_param, new_param in ((old.weight, self.mask.mask.weight),
                                     (old.bias, self.mask.mask.bias)):
            if mapping:
                data = new_param.data().asnumpy()
                src = old_param.data().asnumpy()
                for new, previous in mapping.items():
                    data[new] = src[previous]
                new_param.set_data(mx.nd.array(data, dtype=data.dtype))


_MASK_C4 = dict(_COCO_C4, clip=4.42, roi_size=(14, 14), rcnn_max_dets=1000)
_MASK_FPN = dict(_COCO_FPN, clip=4.42, roi_size=(14, 14), rcnn_max_dets=1000, num_mask_convs=4)
_MASK_FPN_SMALL = dict(_MASK_FPN, roi_size=(7, 7), num_mask_convs=2)
_MASK_SYNCBN = dict(_MASK_FPN_SMALL, short=(640, 800))
# gluondet's small FPN networks, to train on a CPU (as Faster R-CNN's: narrow, fewer proposals)
_MASK_FPN_CPU = dict(_MASK_FPN_SMALL, short=600, max_size=1000, num_sample=128,
                     **dict(_SMALL, clip=4.42, rcnn_max_dets=100, rpn_channel=128,
                            fpn_channels=128, box_units=512, mask_channels=128))
# GluonCV's box heads: the 14 x 14 regions pooled to 7 x 7 first; its syncbn heads' one
# convolution has a bias, and so do their FPN convolutions beside the norm layers
_POOLED = {'pool': True}
_SYNCBN_HEAD = {'conv_bias': True}

# Mask R-CNN presets, read as FASTER_RCNN_ARCHS's (GluonCV's settings for its names).
MASK_RCNN_ARCHS = {
    'mask_rcnn_resnet18_v1b': dict(
        backbone='resnet18_v1b', fpn=False,
        datasets={'coco': dict(_MASK_C4, num_sample=256),
                  'custom': dict(_MASK_C4, **dict(_SMALL, clip=4.42, rcnn_max_dets=100))}),
    'mask_rcnn_resnet50_v1b': dict(
        backbone='resnet50_v1b', fpn=False, datasets={'coco': _MASK_C4}),
    'mask_rcnn_resnet101_v1d': dict(
        backbone='resnet101_v1d', fpn=False, datasets={'coco': _MASK_C4}),
    'mask_rcnn_fpn_resnet18_v1b': dict(
        backbone='resnet18_v1b', fpn=True,
        datasets={'coco': _MASK_FPN_SMALL,
                  'custom': _MASK_FPN_CPU}),
    'mask_rcnn_fpn_resnet50_v1b': dict(
        backbone='resnet50_v1b', fpn=True, box_head=_POOLED, datasets={'coco': _MASK_FPN}),
    'mask_rcnn_fpn_resnet101_v1d': dict(
        backbone='resnet101_v1d', fpn=True, box_head=_POOLED, datasets={'coco': _MASK_FPN}),
    # GluonCV 0.10.5 publishes no weights of these two
    'mask_rcnn_fpn_syncbn_resnet18_v1b': dict(
        backbone='resnet18_v1b', fpn=True, trainable_norm=True, fpn_bias=True,
        box_head=_SYNCBN_HEAD, published=False,
        datasets={'coco': _MASK_SYNCBN,
                  'custom': _MASK_FPN_CPU}),
    'mask_rcnn_fpn_syncbn_mobilenet1.0': dict(
        backbone='mobilenet1.0', fpn=True, trainable_norm=True, fpn_bias=True,
        box_head=dict(_POOLED, **_SYNCBN_HEAD), published=False,
        datasets={'coco': dict(_MASK_SYNCBN, roi_size=(14, 14))}),
}


def build_mask_rcnn(arch, classes, dataset='custom', pretrained_base=True, ctx=mx.cpu(),
                    root=os.path.join('~', '.mxnet', 'models'), norm_layer=nn.BatchNorm,
                    norm_kwargs=None, **kwargs):
    """Build the Mask R-CNN ``arch`` (a key of ``MASK_RCNN_ARCHS``) for ``classes``; the
    arguments are :func:`~gluondet.model_zoo.faster_rcnn.build_faster_rcnn`'s, ``kwargs``
    also :class:`MaskRCNN`'s (``mask_channels``, ``num_mask_convs``, ``rcnn_max_dets``)."""
    spec = MASK_RCNN_ARCHS[arch]
    if spec.get('trainable_norm'):
        kwargs.setdefault('norm', (norm_layer, dict(norm_kwargs or {})))
    return build_rcnn(MaskRCNN, spec, classes, dataset, pretrained_base, ctx, root, norm_layer,
                      norm_kwargs, **kwargs)


register_presets(MASK_RCNN_ARCHS, build_mask_rcnn, 'Mask R-CNN')

# GluonCV's train_mask_rcnn.py custom-model defaults, which its custom_mask_rcnn_fpn is built
# with (its own defaults, Faster R-CNN's C4 ones, do not build an FPN network)
_CUSTOM_FPN = dict(_COCO_FPN, roi_size=(14, 14), rpn_channel=256, rcnn_max_dets=1000,
                   num_mask_convs=4)
# GluonCV keywords of the R-CNN constructors that gluondet names otherwise or does not need
_GLUONCV_FIXED = {'min_stage': 2, 'max_stage': 6, 'target_roi_scale': 2}
_GLUONCV_IGNORED = ('per_device_batch_size', 'max_num_gt', 'train_patterns', 'minimal_opset')


def _gluoncv_keywords(kwargs, name):
    """GluonCV's R-CNN keywords as :class:`MaskRCNN`'s: ``base_size`` x ``scales`` are the
    FPN's anchor sizes, ``num_fcn_convs`` is ``num_mask_convs``; ``min_stage``, ``max_stage``
    and ``target_roi_scale`` must be the FPN's (2, 6, 2); batch sizes and the number of
    ground truths need no setting here (any batch, any count)."""
    kwargs = dict(kwargs)
    for key, value in _GLUONCV_FIXED.items():
        if key in kwargs and kwargs.pop(key) != value:
            raise ValueError('%s: %s must be %r for an FPN network' % (name, key, value))
    for key in _GLUONCV_IGNORED:
        kwargs.pop(key, None)
    if 'base_size' in kwargs or 'scales' in kwargs:
        base, scales = kwargs.pop('base_size', 16), kwargs.pop('scales', (2, 4, 8, 16, 32))
        kwargs['anchor_sizes'] = tuple(base * s for s in scales)
    if 'num_fcn_convs' in kwargs:
        kwargs['num_mask_convs'] = kwargs.pop('num_fcn_convs')
    if isinstance(kwargs.get('strides'), int):
        kwargs['strides'] = (kwargs['strides'],)
    return kwargs


def custom_mask_rcnn_fpn(classes=None, transfer=None, dataset='custom', pretrained_base=True,
                         base_network_name='resnet18_v1b', norm_layer=nn.BatchNorm,
                         norm_kwargs=None, sym_norm_layer=None, sym_norm_kwargs=None,
                         num_fpn_filters=256, num_box_head_conv=4, num_box_head_conv_filters=256,
                         num_box_head_dense_filters=1024, pretrained=False, ctx=mx.cpu(),
                         root=os.path.join('~', '.mxnet', 'models'), **kwargs):
    """GluonCV's ``custom_mask_rcnn_fpn``: an FPN Mask R-CNN on ``base_network_name`` for
    ``classes``, with GluonCV's keywords.

    With frozen BatchNorm (``norm_layer`` ``nn.BatchNorm``) the box head is an average pool
    and two dense layers of ``num_box_head_dense_filters``; with another ``norm_layer``
    everything trains, and the box head has ``num_box_head_conv`` convolutions of
    ``num_box_head_conv_filters`` with that norm before one dense layer, the FPN and mask
    head norm layers too (``sym_norm_layer`` and ``sym_norm_kwargs``, GluonCV's symbol norm
    for its FPN, are read as ``norm_layer``'s). ``transfer='coco'`` starts from
    ``mask_rcnn_fpn[_syncbn]_{base_network_name}_coco``'s weights, keeping the classes the two
    share. Other keywords: :class:`MaskRCNN`'s, or GluonCV's (``base_size``, ``scales``,
    ``num_fcn_convs``, ...), defaults those of GluonCV's ``train_mask_rcnn.py custom-model``.
    """
    if not classes:
        raise ValueError('custom_mask_rcnn_fpn needs classes=[...], the foreground class names')
    frozen = norm_layer is nn.BatchNorm
    if transfer is not None:
        name = 'mask_rcnn_fpn_%s%s_%s' % ('' if frozen else 'syncbn_', base_network_name,
                                          transfer)
        net = registry.get_model(name, pretrained=True, ctx=ctx, root=root, **kwargs)
        net.reset_class(classes, reuse_weights=[c for c in classes if c in net.classes])
        return net
    del sym_norm_layer, sym_norm_kwargs     # the norm layers are norm_layer's
    options = dict(_CUSTOM_FPN, **_gluoncv_keywords(kwargs, 'custom_mask_rcnn_fpn'))
    spec = dict(backbone=base_network_name, fpn=True, trainable_norm=not frozen,
                fpn_bias=frozen, datasets={dataset: options},
                box_head=dict(pool=True, convs=num_box_head_conv,
                              conv_channels=num_box_head_conv_filters))
    norm = None if frozen else (norm_layer, dict(norm_kwargs or {}))
    options.setdefault('norm', norm)
    return build_rcnn(MaskRCNN, spec, classes, dataset, pretrained_base, ctx, root, norm_layer,
                      norm_kwargs, fpn_channels=num_fpn_filters,
                      box_units=num_box_head_dense_filters)


registry.register_model('custom_mask_rcnn_fpn', None, (800, 1333), 'resnet18_v1b', 'custom',
                        has_weights=False)(custom_mask_rcnn_fpn)
