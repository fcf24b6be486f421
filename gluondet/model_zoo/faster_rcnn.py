"""Faster R-CNN (Ren et al. 2015, arXiv:1506.01497), C4 and FPN (Lin et al. 2017)."""
import os

import mxnet as mx
from mxnet import autograd
from mxnet.gluon import nn

from ..nn import (BoxCenterDecoder, FPN, PerClassNMS, RCNNTargetGenerator, RCNNTargetSampler,
                  ROIExtractor, RPNAnchorGenerator, RPNHead, RPNProposal, batch_take, roi_rows)
from . import gluoncv_compat, gluoncv_rcnn, registry
from .backbones import get_backbone
from .detector import (DetectionNet, initialized_ctx, norm_param_names, params_except,
                       register_presets, reuse_mapping)

__all__ = ['FasterRCNN', 'FASTER_RCNN_ARCHS', 'build_faster_rcnn', 'build_rcnn']


class FasterRCNN(DetectionNet):
    """Two-stage detector: RPN proposals, then per-region classes and class-specific boxes.

    Parameters
    ----------
    backbone : ResNetV1b
        Its ``out_stages`` are the maps used: ``(3,)`` for C4 (``layer4`` then
        runs on the pooled regions as the "top features"), ``(1, 2, 3, 4)`` with ``fpn``.
    classes : sequence of str
    fpn : FPN or None
        The pyramid over the backbone maps; its P2-P6 feed the RPN, P2-P5 the ROI Align.
    box_features : HybridBlock or None
        Head on the pooled features (FPN: two 1024-unit dense layers; with trainable norm
        layers, GluonCV's ``fpn_syncbn``: a 3x3 convolution, norm and ReLU, then one);
        None: ``layer4`` then global average pooling (C4).
    trainable_norm : bool
        Whether the norm layers train (GluonCV's ``faster_rcnn_fpn_syncbn_*``): then every
        parameter trains by default; False: the stem, ``layer1`` and the backbone's norm
        layers stay fixed (see :meth:`collect_train_params`).
    short, max_size : int
        Input resizing the network was trained for (shorter side, longer side
        limit), as GluonCV's ``net.short`` / ``net.max_size``.
    strides : sequence of int
        Stride of each RPN map (C4: ``(16,)``).
    anchor_sizes : sequence
        Anchor sides in pixels: C4 one tuple for its single map; FPN one size per map.
    ratios : sequence of float
        Anchor height / width ratios.
    alloc_size : (int, int)
        Anchors are precomputed for the first map up to this size (halved per level, at
        least 16).
    rpn_channel : int
        Channels of the RPN's 3x3 convolution.
    rpn_nms_thresh, rpn_train_pre_nms, rpn_train_post_nms, rpn_test_pre_nms,
    rpn_test_post_nms, rpn_min_size : see :class:`~gluondet.nn.RPNProposal`.
    roi_mode : {'align', 'pool'}
    roi_size : (int, int)
    clip : float or None
        Largest log-size box offset, for RPN and R-CNN decoding.
    num_sample, pos_iou_thresh, pos_ratio : see :class:`~gluondet.nn.RCNNTargetSampler`.
    box_stds : 4 floats
        R-CNN box-coding divisors (0.1, 0.1, 0.2, 0.2).
    nms_thresh, nms_topk, post_nms, force_nms : see :meth:`set_nms`.

    Outputs
    -------
    Training (``autograd.is_training()``), called as ``net(x, gt_boxes, gt_ids)``
    (``B x M x 4`` pixels and ``B x M x 1`` class ids, padding rows -1):
    ``rpn_scores`` ``B x A x 1`` objectness logits, ``rpn_boxes`` ``B x A x 4``
    offsets, ``anchors`` ``1 x A x 4`` corner boxes (all levels), ``cls_preds``
    ``B x S x (C + 1)`` logits of the ``S = num_sample`` sampled proposals,
    ``box_preds`` ``B x P x 4`` offsets of the ``P`` first samples for their
    ground-truth class, and their targets ``cls_targets`` ``B x S``,
    ``box_targets``, ``box_masks`` ``B x P x 4`` (see
    :class:`~gluondet.nn.RCNNTargetGenerator`).
    Inference, ``net(x)``: ``ids``, ``scores`` ``B x K x 1`` and ``boxes``
    ``B x K x 4`` in input pixels, best first, padded with -1 (``K = post_nms``,
    or ``C x rpn_test_post_nms`` when it is -1).
    """

    gluoncv_format = (gluoncv_rcnn.is_gluoncv_rcnn, gluoncv_rcnn.convert_faster_rcnn)
    postprocess_kind = 'rcnn'

    def __init__(self, backbone, classes, fpn=None, box_features=None, short=600,
                 max_size=1000, strides=(16,), anchor_sizes=((32, 64, 128, 256, 512),),
                 ratios=(0.5, 1, 2), alloc_size=(128, 128), rpn_channel=1024,
                 rpn_nms_thresh=0.7, rpn_train_pre_nms=12000, rpn_train_post_nms=2000,
                 rpn_test_pre_nms=6000, rpn_test_post_nms=300, rpn_min_size=16,
                 roi_mode='align', roi_size=(14, 14), clip=None, num_sample=128,
                 pos_iou_thresh=0.5, pos_ratio=0.25, box_stds=(.1, .1, .2, .2),
                 nms_thresh=0.3, nms_topk=400, post_nms=100, force_nms=False,
                 trainable_norm=False, **kwargs):
        super().__init__(classes, **kwargs)
        if len(anchor_sizes) != len(strides):
            raise ValueError('FasterRCNN: %d strides need %d anchor size groups, got %d'
                             % (len(strides), len(strides), len(anchor_sizes)))
        self.short, self.max_size = short, max_size
        self.strides = tuple(strides)
        self.roi_mode, self.roi_size = roi_mode, tuple(roi_size)
        self.box_stds = tuple(box_stds)
        self.trainable_norm = trainable_norm
        alloc = alloc_size
        with self.name_scope():
            self.backbone = backbone
            self.fpn = fpn
            self.box_features = box_features
            self.anchor_generators = nn.HybridSequential()
            for stride, sizes in zip(self.strides, anchor_sizes):
                sizes = tuple(sizes) if isinstance(sizes, (list, tuple)) else (sizes,)
                self.anchor_generators.add(RPNAnchorGenerator(stride, sizes, ratios, alloc))
                alloc = tuple(max(a // 2, 16) for a in alloc)
            self.rpn_head = RPNHead(rpn_channel, self.anchor_generators[0].num_anchors)
            self.proposal = RPNProposal(rpn_nms_thresh, rpn_train_pre_nms, rpn_train_post_nms,
                                        rpn_test_pre_nms, rpn_test_post_nms, rpn_min_size, clip)
            roi_strides = self.strides if fpn is None else self.strides[:4]
            self.roi_extractor = ROIExtractor(self.roi_size, roi_strides, roi_mode, min_level=2)
            self.sampler = RCNNTargetSampler(num_sample, pos_iou_thresh, pos_ratio)
            self.target_generator = RCNNTargetGenerator(self.sampler.max_pos, box_stds)
            self.class_predictor, self.box_predictor = self._predictors(0)
            self.box_decoder = BoxCenterDecoder(box_stds, clip=clip, anchor_format='corner')
            self.postprocess = PerClassNMS(self.num_classes, 0.01, nms_thresh, nms_topk,
                                           post_nms, force_nms)

    def _predictors(self, in_units, prefixes=(None, None)):
        return (nn.Dense(self.num_classes + 1, weight_initializer=mx.init.Normal(0.01),
                         in_units=in_units, prefix=prefixes[0]),
                nn.Dense(self.num_classes * 4, weight_initializer=mx.init.Normal(0.001),
                         in_units=in_units, prefix=prefixes[1]))

    @property
    def size_multiple(self):
        """Inputs are padded to a multiple of this: 32 with FPN (its coarsest ROI map), else 1."""
        return 1 if self.fpn is None else 32

    @property
    def force_nms(self):
        """Whether the inference NMS suppresses across classes."""
        return self.postprocess.force_nms

    def set_nms(self, nms_thresh=0.3, nms_topk=400, force_nms=False, post_nms=100):
        """Set the inference NMS (GluonCV's signature and defaults).

        Parameters
        ----------
        nms_thresh : float
            IoU above which a lower-scoring box (of the same class) is suppressed;
            1 or more suppresses nothing (MXNet's ``box_nms``, as GluonCV).
        nms_topk : int
            Best candidates per class entering NMS, -1 for all.
        force_nms : bool
            Suppress overlapping boxes of different classes too.
        post_nms : int
            Detections returned, -1 for all.
        """
        self._clear_cached_op()
        post = self.postprocess
        post.nms_thresh, post.nms_topk, post.force_nms, post.post_nms = (
            nms_thresh, nms_topk, force_nms, post_nms)

    def collect_train_params(self, select=None):
        """The parameters trained by default: all but the stem, ``layer1`` and every norm
        layer of the backbone (GluonCV's ``train_patterns``), or all with ``trainable_norm``
        (GluonCV's ``fpn_syncbn``); or those matching ``select``."""
        if select is not None:
            return self.collect_params(select)
        if self.trainable_norm:
            return self.collect_params()
        frozen = set(self.backbone.stage_params('stem', 'layer1').keys())
        frozen |= set(norm_param_names(self.backbone))
        return params_except(self, frozen)

    def features(self, x):
        """The maps the RPN runs on: ``[C4]``, or FPN's ``[P2, ..., P6]``."""
        maps = self.backbone(x)
        return maps if self.fpn is None else self.fpn(*maps)

    def top_features(self, pooled):
        """The pooled regions' maps for the heads: ``layer4`` on them (C4, GluonCV's "top
        features"), or the pooled features as they are (FPN)."""
        return self.backbone.layer4(pooled) if self.box_features is None else pooled

    def box_head(self, F, pooled):
        """Per-region features for the predictors: ``layer4`` and global average pooling
        (C4), or the box head's layers (FPN). ``R x C x h x w`` -> ``R x D``."""
        return self._box_vector(F, self.top_features(pooled))

    def _box_vector(self, F, top):
        if self.box_features is None:
            return F.contrib.AdaptiveAvgPooling2D(top, output_size=1).reshape((0, -1))
        return self.box_features(top)

    def pool(self, F, rois, maps):
        """ROI Align of ``B x N x 4`` boxes (input pixels) on the maps of `features`:
        ``(B * N) x C x h x w``, no gradient to the boxes."""
        roi_maps = maps if self.fpn is None else maps[:4]
        return self.roi_extractor(F.stop_gradient(roi_rows(F, rois)), *roi_maps)

    def _stages(self, F, x, gt_boxes, gt_ids):
        """Both stages; a dict of the outputs and of what a subclass's head needs: the maps,
        the regions' ``top`` features and, in training, the sampled ``rois``, ``matches``,
        the positives' ``indices`` and ``box_classes``."""
        training = autograd.is_training()
        if training and (gt_boxes is None or gt_ids is None):
            raise ValueError('%s in training mode needs net(x, gt_boxes, gt_ids)'
                             % type(self).__name__)
        maps = self.features(x)
        rpn_scores, rpn_boxes = [], []
        for feature in maps:
            scores, offsets = self.rpn_head(feature)
            rpn_scores.append(scores)
            rpn_boxes.append(offsets)
        anchors = [generate(m) for m, generate in zip(maps, self.anchor_generators)]
        proposal_scores, proposals = self.proposal(x, *(anchors + rpn_scores + rpn_boxes))
        out = {'maps': maps}
        if training:
            rois, samples, matches = self.sampler(proposals, proposal_scores, gt_boxes, gt_ids)
            cls_targets, box_targets, box_masks, box_classes, indices = self.target_generator(
                rois, samples, matches, gt_boxes, gt_ids)
            out.update(rois=rois, matches=matches, indices=indices, box_classes=box_classes)
        else:
            rois = proposals
        num_rois = self.sampler.num_sample if training else self.proposal.counts(False)[1]
        top = self.top_features(self.pool(F, rois, maps))
        box_feat = self._box_vector(F, top)
        out['top'] = top
        cls_preds = self.class_predictor(box_feat).reshape((-1, num_rois, self.num_classes + 1))
        if training:
            num_pos = self.sampler.max_pos
            taken = batch_take(F, box_feat.reshape((-4, -1, num_rois, -2)), indices)
            box_preds = self.box_predictor(taken.reshape((-3, -2)))
            box_preds = box_preds.reshape((-1, num_pos, self.num_classes, 4))
            own = F.broadcast_like(box_classes.expand_dims(-1), box_targets)
            box_preds = F.pick(box_preds, own, axis=2)
            out['outputs'] = (F.concat(*rpn_scores, dim=1), F.concat(*rpn_boxes, dim=1),
                              F.concat(*anchors, dim=1), cls_preds, box_preds, cls_targets,
                              box_targets, box_masks)
            return out
        box_preds = self.box_predictor(box_feat).reshape((-1, num_rois, self.num_classes, 4))
        repeated = F.broadcast_like(rois.expand_dims(2), box_preds, lhs_axes=(2,),
                                    rhs_axes=(2,))
        # one row of boxes: box_decode takes anchors of batch 1 only
        boxes = self.box_decoder(box_preds.reshape((1, -1, 4)), repeated.reshape((1, -1, 4)))
        boxes = boxes.reshape_like(box_preds)
        out['outputs'] = self.postprocess(F.softmax(cls_preds, axis=-1), boxes)
        return out

    def hybrid_forward(self, F, x, gt_boxes=None, gt_ids=None):
        return self._stages(F, x, gt_boxes, gt_ids)['outputs']

    def reset_class(self, classes, reuse_weights=None):
        """Replace the classes and the class and box predictors (GluonCV's ``reset_class``).

        ``reuse_weights`` as :func:`~gluondet.model_zoo.detector.reuse_mapping`:
        mapped classes keep their class row and their four box rows, and the
        background row is kept too.
        """
        old_classes = self.classes
        self.classes = tuple(classes)
        mapping = reuse_mapping(reuse_weights, old_classes, self.classes)
        self._clear_cached_op()
        old_cls, old_box = self.class_predictor, self.box_predictor
        ctx = initialized_ctx(old_cls)
        in_units = old_cls.weight.shape[1]
        if mapping and (ctx is None or not in_units):
            raise ValueError('reset_class: reuse_weights needs the old predictors to hold '
                             'weights (load or run the network first)')
        with self.name_scope():
            self.class_predictor, self.box_predictor = self._predictors(
                in_units, (old_cls.prefix, old_box.prefix))
        self.postprocess.num_classes = self.num_classes
        if ctx is not None:
            self.class_predictor.initialize(ctx=ctx)
            self.box_predictor.initialize(ctx=ctx)
        if mapping:
            rows = [(0, 0)] + [(n + 1, o + 1) for n, o in mapping.items()]
            _copy_rows(old_cls, self.class_predictor, rows, 1)
            _copy_rows(old_box, self.box_predictor, [(n, o) for n, o in mapping.items()], 4)


def _copy_rows(old, new, pairs, width):
    """Copy blocks of ``width`` rows ``old[o] -> new[n]`` of a dense layer's weight and bias."""
    for old_param, new_param in ((old.weight, new.weight), (old.bias, new.bias)):
        src, dst = old_param.data().asnumpy(), new_param.data().asnumpy()
        for n, o in pairs:
            dst[n * width:(n + 1) * width] = src[o * width:(o + 1) * width]
        new_param.set_data(mx.nd.array(dst, dtype=dst.dtype))


def _box_head(units, conv_channels=256, norm=None, convs=1, conv_bias=False, pool=False):
    """GluonCV's FPN box heads, with its child indices (so its file keys match): two dense
    layers; with ``norm`` (``(norm_layer, norm_kwargs)``, the ``fpn_syncbn`` heads) ``convs``
    3x3 convolutions (with bias if ``conv_bias``), each with the norm layer and ReLU, then one
    dense layer. ``pool``: a 3x3 average pool of stride 2 first (Mask R-CNN's 14 x 14 regions
    to 7 x 7)."""
    head = nn.HybridSequential()
    if pool:
        head.add(nn.AvgPool2D(pool_size=3, strides=2, padding=1))
    if norm is not None:
        norm_layer, norm_kwargs = norm
        for _ in range(convs):
            head.add(nn.Conv2D(conv_channels, 3, padding=1, use_bias=conv_bias),
                     norm_layer(**norm_kwargs), nn.Activation('relu'))
    for _ in range(1 if norm is not None else 2):
        head.add(nn.Dense(units, weight_initializer=mx.init.Normal(0.01)), nn.Activation('relu'))
    return head


_RPN_SIZES = (32, 64, 128, 256, 512)     # GluonCV: base_size 16 x scales (2, 4, 8, 16, 32)
_VOC_C4 = dict(short=600, max_size=1000, nms_thresh=0.3, nms_topk=400, post_nms=100,
               anchor_sizes=(_RPN_SIZES,), rpn_test_post_nms=300, rpn_min_size=16, clip=None)
_COCO_C4 = dict(short=800, max_size=1333, nms_thresh=0.5, nms_topk=-1, post_nms=-1,
                anchor_sizes=(_RPN_SIZES,), rpn_test_post_nms=1000, rpn_min_size=1, clip=4.14)
_COCO_FPN = dict(short=800, max_size=1333, nms_thresh=0.5, nms_topk=-1, post_nms=-1,
                 strides=(4, 8, 16, 32, 64), anchor_sizes=_RPN_SIZES, alloc_size=(384, 384),
                 roi_size=(7, 7), rpn_test_post_nms=1000, rpn_min_size=1, clip=4.14,
                 num_sample=512)
# GluonCV's faster_rcnn_fpn_syncbn_resnet50_v1b_coco: trainable BatchNorm in the backbone, the
# FPN (convolutions without bias) and the box head; RPN of 256 channels; multi-scale training.
_COCO_FPN_SYNCBN = dict(_COCO_FPN, short=(640, 800), rpn_channel=256)
# gluondet's small networks, to train on a CPU: a narrow RPN (and FPN and box head), fewer
# proposals, 100 detections.
_SMALL = dict(rpn_channel=256, rpn_train_pre_nms=4000, rpn_train_post_nms=1000,
              rpn_test_pre_nms=2000, rpn_test_post_nms=300, nms_thresh=0.5, nms_topk=-1,
              post_nms=100, rpn_min_size=4, clip=4.14)

# Faster R-CNN presets: backbone, FPN or not, and per dataset the constructor arguments
# (GluonCV's for its names; 'custom' of GluonCV's resnet50 C4 is its FasterRCNN defaults).
FASTER_RCNN_ARCHS = {
    'faster_rcnn_resnet50_v1b': dict(
        backbone='resnet50_v1b', fpn=False,
        datasets={'voc': _VOC_C4, 'coco': _COCO_C4,
                  'custom': dict(_VOC_C4, anchor_sizes=((128, 256, 512),))}),
    'faster_rcnn_fpn_resnet50_v1b': dict(
        backbone='resnet50_v1b', fpn=True, datasets={'coco': _COCO_FPN, 'custom': _COCO_FPN}),
    'faster_rcnn_resnet101_v1d': dict(    # (GluonCV publishes no weights of its _voc)
        backbone='resnet101_v1d', fpn=False,
        datasets={'coco': _COCO_C4,
                  'custom': dict(_VOC_C4, anchor_sizes=((128, 256, 512),))}),
    'faster_rcnn_fpn_resnet101_v1d': dict(
        backbone='resnet101_v1d', fpn=True, datasets={'coco': _COCO_FPN, 'custom': _COCO_FPN}),
    'faster_rcnn_resnet18_v1b': dict(
        backbone='resnet18_v1b', fpn=False, datasets={'custom': dict(_VOC_C4, **_SMALL)}),
    # GluonCV 0.10.5 publishes no weights of it (its model store lacks the name)
    'faster_rcnn_fpn_syncbn_resnet50_v1b': dict(
        backbone='resnet50_v1b', fpn=True, trainable_norm=True, published=False,
        datasets={'coco': _COCO_FPN_SYNCBN, 'custom': _COCO_FPN_SYNCBN}),
    'faster_rcnn_fpn_resnet18_v1b': dict(
        backbone='resnet18_v1b', fpn=True,
        datasets={'custom': dict(_COCO_FPN, short=600, max_size=1000, num_sample=128,
                                 **dict(_SMALL, rpn_channel=128, fpn_channels=128,
                                        box_units=512))}),
    'faster_rcnn_fpn_syncbn_resnet18_v1b': dict(
        backbone='resnet18_v1b', fpn=True, trainable_norm=True,
        datasets={'custom': dict(_COCO_FPN, short=600, max_size=1000, num_sample=128,
                                 **dict(_SMALL, rpn_channel=128, fpn_channels=128,
                                        box_units=512))}),
}


def build_faster_rcnn(arch, classes, dataset='custom', pretrained_base=True, ctx=mx.cpu(),
                      root=os.path.join('~', '.mxnet', 'models'), norm_layer=nn.BatchNorm,
                      norm_kwargs=None, **kwargs):
    """Build the Faster R-CNN ``arch`` (a key of ``FASTER_RCNN_ARCHS``) for ``classes``.

    Parameters
    ----------
    arch : str
        For example ``faster_rcnn_fpn_resnet50_v1b``.
    classes : sequence of str
    dataset : str
        Whose settings to use: a key of the preset's ``datasets``.
    pretrained_base : bool
        Load the backbone's GluonCV ImageNet weights from ``root``.
    ctx, root
        Where loaded weights go; folder of weight files.
    norm_layer, norm_kwargs
        The backbone's normalization; BatchNorm is frozen (global statistics)
        unless ``norm_kwargs`` says otherwise, as GluonCV. The ``fpn_syncbn`` presets
        (``trainable_norm``) train it, and use it in the FPN and the box head too:
        plain BatchNorm by default, a synchronized one when the task asks for it.
    **kwargs
        Override the preset's :class:`FasterRCNN` arguments; with FPN also
        ``fpn_channels`` (256) and ``box_units`` (1024, the dense layers' width).
    """
    return build_rcnn(FasterRCNN, FASTER_RCNN_ARCHS[arch], classes, dataset, pretrained_base,
                      ctx, root, norm_layer, norm_kwargs, **kwargs)


def build_rcnn(network, spec, classes, dataset, pretrained_base, ctx, root, norm_layer,
               norm_kwargs, **kwargs):
    """``network`` (:class:`FasterRCNN` or a subclass) of the preset ``spec``: its backbone,
    FPN and box head, then the constructor with the dataset's options (see
    :func:`build_faster_rcnn`). A spec's ``box_head`` holds `_box_head`'s keywords, its
    ``fpn_bias`` whether the FPN's convolutions have a bias beside norm layers."""
    trainable_norm = spec.get('trainable_norm', False)
    frozen = norm_layer is nn.BatchNorm and not trainable_norm
    norm_kwargs = dict({'use_global_stats': True} if frozen else {}, **(norm_kwargs or {}))
    stages = (1, 2, 3, 4) if spec['fpn'] else (3,)
    backbone = get_backbone(spec['backbone'], out_stages=stages, norm_layer=norm_layer,
                            norm_kwargs=norm_kwargs)
    if pretrained_base:
        gluoncv_compat.load_gluoncv_base(backbone, registry.weights_file(spec['backbone'], root),
                                         ctx)
    options = dict(spec['datasets'][dataset], **kwargs)
    fpn_channels, box_units = options.pop('fpn_channels', 256), options.pop('box_units', 1024)
    if spec['fpn']:
        norm = (norm_layer, norm_kwargs) if trainable_norm else None
        # GluonCV's FPN norms are mx.sym.contrib.SyncBatchNorm at its defaults: eps 1e-3 (and
        # fix_gamma; here gamma trains from 1: gluondet's SyncBatchNorm, a custom operator,
        # needs every input's gradient)
        options.setdefault('fpn', FPN(fpn_channels, num_inputs=4,
                                      use_bias=spec.get('fpn_bias', norm is None),
                                      norm_layer=norm and norm_layer,
                                      norm_kwargs=norm and dict(norm_kwargs, epsilon=1e-3)))
        head = dict({'conv_channels': fpn_channels}, **spec.get('box_head', {}))
        options.setdefault('box_features', _box_head(box_units, norm=norm, **head))
    return network(backbone, classes, trainable_norm=trainable_norm, **options)


register_presets(FASTER_RCNN_ARCHS, build_faster_rcnn, 'Faster R-CNN')
