"""RetinaNet (Lin et al. 2017, arXiv:1708.02002): FPN P3-P7, shared heads, focal loss."""
import math
import os

import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn

from ..nn import FPN, BoxCenterDecoder, GridAnchorGenerator, LevelTopKNMS, retina_anchor_shapes
from . import gluoncv_compat, registry
from .backbones import MobileNet, ResNetV1b, get_backbone
from .detector import register_presets
from .single_stage import SingleStageDetector

__all__ = ['RetinaNet', 'RetinaNetFeatures', 'RetinaNetHead', 'RETINANET_ARCHS', 'build_retinanet']


class RetinaNetFeatures(gluon.HybridBlock):
    """Backbone maps C3-C5 through the pyramid: P3-P7 (``fpn``)."""

    def __init__(self, backbone, fpn, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.backbone = backbone
            self.fpn = fpn

    def hybrid_forward(self, F, x):
        return self.fpn(*self.backbone(x))


HEAD_NORMS = (None, 'group', 'batch')


class RetinaNetHead(gluon.HybridBlock):
    """A class or box tower: ``layers`` times conv 3x3 (+ norm) + ReLU, shared by the levels.

    Parameters
    ----------
    channels, layers : int
    init : {'normal', 'msra'}
        Initial conv weights: N(0, 0.01) (the paper's) or He's; biases 0.
    norm : {None, 'group', 'batch'}
        After each conv: nothing (the paper's), GroupNorm of 32 groups shared by the levels,
        or BatchNorm of each level's own (detectron2's per-level BatchNorm: the levels'
        statistics differ, so they are kept apart).
    num_levels : int
        Pyramid levels the tower serves (for ``norm='batch'``).

    Call :meth:`tower` with the level of the map, not the block itself.
    """

    def __init__(self, channels, layers, init='normal', norm=None, num_levels=5, **kwargs):
        super().__init__(**kwargs)
        if norm not in HEAD_NORMS:
            raise ValueError('head_norm must be one of %s, got %r' % (HEAD_NORMS, norm))
        weight = mx.init.Normal(0.01) if init == 'normal' else mx.init.MSRAPrelu(slope=0)
        self.norm, self.num_levels = norm, num_levels
        with self.name_scope():
            self.convs = nn.HybridSequential()
            self.norms = nn.HybridSequential()
            for _ in range(layers):
                self.convs.add(nn.Conv2D(channels, 3, padding=1, weight_initializer=weight,
                                         bias_initializer='zeros'))
                if norm == 'group':
                    self.norms.add(nn.GroupNorm(32))
                elif norm == 'batch':
                    for _ in range(num_levels):
                        self.norms.add(nn.BatchNorm(in_channels=channels))

    def tower(self, F, x, level):
        """The tower on the map ``x`` of pyramid level ``level`` (0: the finest)."""
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if self.norm == 'group':
                x = self.norms[i](x)
            elif self.norm == 'batch':
                x = self.norms[i * self.num_levels + level](x)
            x = F.relu(x)
        return x

    def hybrid_forward(self, F, x):   # pylint: disable=arguments-differ
        raise TypeError('call RetinaNetHead.tower(F, x, level)')


class RetinaNet(SingleStageDetector):
    """One-stage detector over a feature pyramid, with sigmoid class scores.

    Parameters
    ----------
    features : HybridBlock
        Returns the pyramid levels, finest first (:class:`RetinaNetFeatures`).
    classes : sequence of str
    strides : sequence of int
        Stride of each level (8, 16, 32, 64, 128).
    ratios, scales : sequence of float
        Anchor aspect ratios (height / width) and scales of each place; sizes are
        ``anchor_base * stride * scale`` (see :func:`~gluondet.nn.retina_anchor_shapes`).
    anchor_base : float
        Anchor size per stride (4).
    head_channels, head_layers : int
        The class and box heads (each ``head_layers`` conv 3x3 + ReLU, shared by the levels).
    head_norm : {None, 'group', 'batch'}
        Normalization after each head conv (:class:`RetinaNetHead`): none (the paper's),
        GroupNorm, or per-level BatchNorm. Trained from scratch, normalized heads take a
        learning rate four times higher (measured on the demo data, see ``gluondet.demo``).
    head_init : {'normal', 'msra'}
        Initial weights of the heads' convolutions: N(0, 0.01) (the paper's, made for a
        pretrained backbone), or He's, which keeps the signal's scale through the four
        layers: trained from scratch the paper's initialization leaves the class loss at
        its prior for epochs (measured on the demo data: 1.10 after an epoch against 0.8
        after 50 steps).
    prior : float
        Initial foreground probability of every anchor (the class bias, 0.01).
    short, max_size : int
        Input resizing the network is trained for (shorter side, longer side limit).
    stds : 4 floats
        Box-coding divisors (1, 1, 1, 1 as ODTK and torchvision).
    score_thresh, nms_thresh, nms_topk, post_nms
        Inference, see :class:`~gluondet.nn.LevelTopKNMS` and :meth:`set_nms`.
    alloc_size : (int, int)
        Anchors are precomputed for the first level up to this size (halved per level).

    Outputs
    -------
    As :class:`~gluondet.model_zoo.single_stage.SingleStageDetector`: training
    ``cls_preds`` ``B x A x C`` (sigmoid logits, no background), ``box_preds``,
    ``anchors``; inference ``ids``, ``scores``, ``boxes`` with ``K = post_nms``.
    """

    background = False
    postprocess_kind = 'sigmoid_topk_nms'

    def __init__(self, features, classes, strides=(8, 16, 32, 64, 128), ratios=(0.5, 1, 2),
                 scales=(1, 2 ** (1 / 3), 2 ** (2 / 3)), anchor_base=4, head_channels=256,
                 head_layers=4, head_init='normal', head_norm=None, prior=0.01, short=800,
                 max_size=1333,
                 stds=(1., 1., 1., 1.), score_thresh=0.05, nms_thresh=0.5, nms_topk=1000,
                 post_nms=100, alloc_size=(256, 256), **kwargs):
        super().__init__(classes, **kwargs)
        if head_init not in ('normal', 'msra'):
            raise ValueError("head_init must be 'normal' or 'msra', got %r" % (head_init,))
        self.short, self.max_size = short, max_size
        self.strides = tuple(strides)
        self.prior = prior
        alloc = alloc_size
        with self.name_scope():
            self.features = features
            self.anchor_generators = nn.HybridSequential()
            for stride in self.strides:
                shapes = retina_anchor_shapes(stride, ratios, scales, anchor_base)
                self.anchor_generators.add(GridAnchorGenerator(shapes, stride, alloc))
                alloc = tuple(max(a // 2, 4) for a in alloc)
            num_anchors = self.anchor_generators[0].num_anchors
            levels = len(self.strides)
            self.class_head = RetinaNetHead(head_channels, head_layers, head_init, head_norm,
                                            levels)
            self.box_head = RetinaNetHead(head_channels, head_layers, head_init, head_norm,
                                          levels)
            self.class_predictors = nn.HybridSequential()
            self.class_predictors.add(self._class_predictor(num_anchors * self.num_classes))
            self.box_predictors = nn.HybridSequential()
            self.box_predictors.add(nn.Conv2D(num_anchors * 4, 3, padding=1,
                                              weight_initializer=mx.init.Normal(0.01),
                                              bias_initializer='zeros'))
            self.box_decoder = BoxCenterDecoder(stds, clip=math.log(1000. / 16))
            self.postprocess = LevelTopKNMS(score_thresh, nms_thresh, nms_topk, post_nms)

    @property
    def size_multiple(self):
        """Inputs are padded to a multiple of the coarsest stride (ODTK's 128)."""
        return max(self.strides)

    def _class_predictor(self, channels, in_channels=0, prefix=None):
        bias = -math.log((1 - self.prior) / self.prior)
        return nn.Conv2D(channels, 3, padding=1, in_channels=in_channels, prefix=prefix,
                         weight_initializer=mx.init.Normal(0.01),
                         bias_initializer=mx.init.Constant(bias))

    def set_nms(self, nms_thresh=0.5, nms_topk=1000, post_nms=100):
        """Set the inference NMS.

        Parameters
        ----------
        nms_thresh : float
            IoU above which a lower-scoring box of the same class is suppressed.
        nms_topk : int
            Candidates kept per pyramid level before NMS.
        post_nms : int
            Detections returned, -1 for all.
        """
        super().set_nms(nms_thresh, nms_topk, post_nms)

    def predict(self, F, level, feature):
        return (self.class_predictors[0](self.class_head.tower(F, feature, level)),
                self.box_predictors[0](self.box_head.tower(F, feature, level)))

    def detect(self, F, cls_preds, box_preds, anchors):
        boxes = [self.box_decoder(b, a) for b, a in zip(box_preds, anchors)]
        return self.postprocess(*([F.sigmoid(c) for c in cls_preds] + boxes))


# RetinaNet presets: backbone (its C3-C5) and per dataset the constructor arguments.
_VOC = dict(short=600, max_size=1000)
_COCO = dict(short=800, max_size=1333)
_DATASETS = {'voc': _VOC, 'coco': _COCO, 'custom': _COCO}
RETINANET_ARCHS = {     # GluonCV publishes no RetinaNet weights
    name: dict(backbone=backbone, datasets=_DATASETS, published=False)
    for name, backbone in (('retinanet_resnet18_v1b', 'resnet18_v1b'),
                           ('retinanet_resnet34_v1b', 'resnet34_v1b'),
                           ('retinanet_resnet50_v1b', 'resnet50_v1b'),
                           ('retinanet_resnet101_v1b', 'resnet101_v1b'),
                           ('retinanet_mobilenet1.0', 'mobilenet1.0'))}


def _backbone(name, norm_layer, norm_kwargs):
    """The backbone returning C3, C4, C5 (strides 8, 16, 32)."""
    if name.startswith('mobilenet'):
        return get_backbone(name, out_blocks=(4, 10, 12), norm_layer=norm_layer,
                            norm_kwargs=norm_kwargs)
    return get_backbone(name, out_stages=(2, 3, 4), norm_layer=norm_layer,
                        norm_kwargs=norm_kwargs)


def build_retinanet(arch, classes, dataset='custom', pretrained_base=True, ctx=mx.cpu(),
                    root=os.path.join('~', '.mxnet', 'models'), norm_layer=nn.BatchNorm,
                    norm_kwargs=None, fpn_channels=256, **kwargs):
    """Build the RetinaNet ``arch`` (a key of ``RETINANET_ARCHS``) for ``classes``.

    Parameters
    ----------
    arch : str
        For example ``retinanet_resnet50_v1b``.
    classes : sequence of str
    dataset : str
        Whose settings to use: 'voc', 'coco' or 'custom'.
    pretrained_base : bool
        Load the backbone's GluonCV ImageNet weights from ``root``.
    ctx, root
        Where loaded weights go; folder of weight files.
    norm_layer, norm_kwargs
        The backbone's normalization; BatchNorm is frozen (global statistics, as ODTK)
        unless ``norm_kwargs`` says otherwise.
    fpn_channels : int
        Channels of the pyramid (256); P6 comes from C5 (ODTK and the paper), P7 from
        ``relu(P6)``.
    **kwargs
        Override the preset's :class:`RetinaNet` arguments.
    """
    spec = RETINANET_ARCHS[arch]
    norm_kwargs = dict({'use_global_stats': True} if norm_layer is nn.BatchNorm else {},
                       **(norm_kwargs or {}))
    backbone = _backbone(spec['backbone'], norm_layer, norm_kwargs)
    features = RetinaNetFeatures(backbone, FPN(fpn_channels, num_inputs=3, p6='c5', p7=True))
    if pretrained_base:
        path = registry.weights_file(spec['backbone'], root)
        if isinstance(backbone, ResNetV1b):
            gluoncv_compat.load_gluoncv_v1b(backbone, path, ctx)
        elif isinstance(backbone, MobileNet):
            gluoncv_compat.load_gluoncv_backbone(features, path, ctx)
    return RetinaNet(features, classes, **dict(spec['datasets'][dataset], **kwargs))


register_presets(RETINANET_ARCHS, build_retinanet, 'RetinaNet')
