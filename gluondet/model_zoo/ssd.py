"""SSD: Single Shot MultiBox Detector (Liu et al. 2016, arXiv:1512.02325)."""
import contextlib
import functools
import io
import os

import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn

from ..nn import BoxCenterDecoder, MultiClassNMS, SSDAnchorGenerator
from ..float32 import keep_float32
from . import gluoncv_compat, registry
from .detector import custom_builder, dataset_builder
from .single_stage import SingleStageDetector
from .backbones import get_backbone
from .registry import COCO_CLASSES, VOC_CLASSES, register_model

__all__ = ['SSD', 'SSDFeatures', 'ExtraLayer', 'SSD_ARCHS', 'build_ssd', 'min_input_size']


def _xavier_out():
    return dict(weight_initializer=mx.init.Xavier(rnd_type='gaussian', factor_type='out',
                                                  magnitude=2),
                bias_initializer='zeros')


def _predictor(channels, in_channels=0, prefix=None):
    return nn.Conv2D(channels, 3, padding=1, in_channels=in_channels, prefix=prefix,
                     weight_initializer=mx.init.Xavier(magnitude=2), bias_initializer='zeros')


class ExtraLayer(gluon.HybridBlock):
    """An extra SSD layer: 1x1 reduction then a (strided) convolution, each with ReLU.

    Parameters
    ----------
    mid_channels, channels : int
        Outputs of the 1x1 and of the second convolution.
    kernel, stride, padding : int
        Of the second convolution.
    norm_layer : type or None
        None: convolutions with bias, no normalization (the VGG SSDs). Else a
        normalization after each bias-free convolution (GluonCV's extra layers
        on MobileNet/ResNet: epsilon 1e-3, gamma fixed to 1, unless
        ``norm_kwargs`` says otherwise).
    norm_kwargs : dict or None
        Extra arguments of ``norm_layer``.
    """

    def __init__(self, mid_channels, channels, kernel=3, stride=2, padding=1, norm_layer=None,
                 norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        use_norm = norm_layer is not None
        norm_kwargs = dict({'epsilon': 1e-3, 'scale': False}, **(norm_kwargs or {}))
        with self.name_scope():
            self.conv1 = nn.Conv2D(mid_channels, 1, use_bias=not use_norm, **_xavier_out())
            self.bn1 = norm_layer(**norm_kwargs) if use_norm else None
            self.conv2 = nn.Conv2D(channels, kernel, stride, padding, use_bias=not use_norm,
                                   **_xavier_out())
            self.bn2 = norm_layer(**norm_kwargs) if use_norm else None

    def hybrid_forward(self, F, x):
        for conv, norm in ((self.conv1, self.bn1), (self.conv2, self.bn2)):
            x = conv(x)
            x = F.Activation(x if norm is None else norm(x), act_type='relu')
        return x


class SSDFeatures(gluon.HybridBlock):
    """Backbone feature maps, then extra layers each applied to the previous map.

    Parameters
    ----------
    backbone : HybridBlock
        Returns a list of feature maps.
    extras : list of HybridBlock
        Appended layers.

    Output: the list of backbone maps followed by one map per extra layer.
    """

    def __init__(self, backbone, extras, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.backbone = backbone
            self.extras = nn.HybridSequential()
            for layer in extras:
                self.extras.add(layer)
        keep_float32(self.extras)      # their tiny maps: see gluondet.float32

    def hybrid_forward(self, F, x):
        outputs = list(self.backbone(x))
        for layer in self.extras:
            outputs.append(layer(outputs[-1]))
        return outputs


class SSD(SingleStageDetector):
    """Single-shot detector over a multi-scale feature extractor.

    Parameters
    ----------
    features : HybridBlock
        Returns the list of feature maps to predict from (:class:`SSDFeatures`).
    classes : sequence of str
        Foreground class names.
    sizes : sequence of float
        Anchor sizes in pixels, one more than the number of maps: map ``i``
        uses ``(sizes[i], sizes[i + 1])``.
    ratios : sequence of sequences of float
        Aspect ratios per map (first 1), or one sequence for all.
    steps : sequence of float
        Anchor stride in pixels per map.
    base_size : int
        The input size the anchors were designed for.
    stds : 4 floats
        Box-coding divisors.
    nms_thresh, nms_topk, post_nms : float, int, int
        See :meth:`set_nms`.
    anchor_alloc_size : int
        Anchors are precomputed for maps up to this size (halved per map, at
        least 16); larger inputs need a larger value.

    Outputs
    -------
    As :class:`~gluondet.model_zoo.single_stage.SingleStageDetector`: training
    ``cls_preds`` ``B x A x (C + 1)`` (softmax logits, background first), ``box_preds``,
    ``anchors``; inference ``ids``, ``scores``, ``boxes`` with ``K = post_nms``.
    """

    gluoncv_format = (gluoncv_compat.is_gluoncv_ssd, gluoncv_compat.convert_ssd)
    postprocess_kind = 'softmax_nms'

    def __init__(self, features, classes, sizes, ratios, steps, base_size,
                 stds=(0.1, 0.1, 0.2, 0.2), nms_thresh=0.45, nms_topk=400, post_nms=100,
                 anchor_alloc_size=128, **kwargs):
        super().__init__(classes, **kwargs)
        num_maps = len(steps)
        if ratios and not isinstance(ratios[0], (list, tuple)):
            ratios = [ratios] * num_maps
        if len(sizes) != num_maps + 1 or len(ratios) != num_maps:
            raise ValueError('SSD: %d steps need %d sizes and %d ratio lists, got %d and %d'
                             % (num_maps, num_maps + 1, num_maps, len(sizes), len(ratios)))
        self.base_size = base_size
        alloc = anchor_alloc_size
        with self.name_scope():
            self.features = features
            self.class_predictors = nn.HybridSequential()
            self.box_predictors = nn.HybridSequential()
            self.anchor_generators = nn.HybridSequential()
            for i in range(num_maps):
                generator = SSDAnchorGenerator((sizes[i], sizes[i + 1]), ratios[i], steps[i],
                                               (alloc, alloc))
                alloc = max(alloc // 2, 16)
                self.anchor_generators.add(generator)
                self.class_predictors.add(
                    _predictor(generator.num_anchors * (self.num_classes + 1)))
                self.box_predictors.add(_predictor(generator.num_anchors * 4))
            self.box_decoder = BoxCenterDecoder(stds)
            self.postprocess = MultiClassNMS(0.01, nms_thresh, nms_topk, post_nms)

    def predict(self, F, level, feature):
        return self.class_predictors[level](feature), self.box_predictors[level](feature)

    def detect(self, F, cls_preds, box_preds, anchors):
        boxes = self.box_decoder(F.concat(*box_preds, dim=1), F.concat(*anchors, dim=1))
        return self.postprocess(F.softmax(F.concat(*cls_preds, dim=1), axis=-1), boxes)

    def _class_predictor(self, channels, in_channels, prefix):
        return _predictor(channels, in_channels, prefix)


_RATIOS_6 = [[1, 2, 0.5]] + [[1, 2, 0.5, 3, 1.0 / 3]] * 3 + [[1, 2, 0.5]] * 2
_RATIOS_7 = [[1, 2, 0.5]] + [[1, 2, 0.5, 3, 1.0 / 3]] * 4 + [[1, 2, 0.5]] * 2
_SIZES_300 = [21, 45, 99, 153, 207, 261, 315]
_SIZES_512_A = [51.2, 102.4, 189.4, 276.4, 363.52, 450.6, 492]

# SSD presets: anchor sizes per dataset ('custom' uses the COCO ones unless it has its own),
# extra layers as (mid_channels, channels, kernel, stride, padding). The first five are
# GluonCV's (their numbers must stay GluonCV's); names are registered for every key of
# `datasets` (default voc and coco) plus custom.
SSD_ARCHS = {
    'ssd_300_vgg16_atrous': dict(
        backbone='vgg16_atrous', base_size=300, batch_norm=False,
        extras=[(256, 512, 3, 2, 1), (128, 256, 3, 2, 1), (128, 256, 3, 1, 0),
                (128, 256, 3, 1, 0)],
        sizes={'voc': [30, 60, 111, 162, 213, 264, 315], 'coco': _SIZES_300},
        ratios=_RATIOS_6, steps=[8, 16, 32, 64, 100, 300]),
    'ssd_512_vgg16_atrous': dict(
        backbone='vgg16_atrous', base_size=512, batch_norm=False,
        extras=[(256, 512, 3, 2, 1), (128, 256, 3, 2, 1), (128, 256, 3, 2, 1),
                (128, 256, 3, 2, 1), (128, 256, 4, 1, 1)],
        sizes={'voc': [51.2, 76.8, 153.6, 230.4, 307.2, 384.0, 460.8, 537.6],
               'coco': [51.2, 76.8, 153.6, 230.4, 307.2, 384.0, 460.8, 537.6]},
        ratios=_RATIOS_7, steps=[8, 16, 32, 64, 128, 256, 512]),
    'ssd_512_resnet50_v1': dict(
        backbone='resnet50_v1', base_size=512, batch_norm=True,
        extras=[(f, f, 3, 2, 1) for f in (512, 512, 256, 256)],
        sizes={'voc': _SIZES_512_A,
               'coco': [51.2, 133.12, 215.04, 296.96, 378.88, 460.8, 542.72]},
        ratios=_RATIOS_6, steps=[16, 32, 64, 128, 256, 512]),
    'ssd_512_mobilenet1.0': dict(
        backbone='mobilenet1.0', base_size=512, batch_norm=True,
        extras=[(f, f, 3, 2, 1) for f in (512, 512, 256, 256)],
        sizes={'voc': _SIZES_512_A, 'coco': _SIZES_512_A},
        ratios=_RATIOS_6, steps=[16, 32, 64, 128, 256, 512]),
    'ssd_300_mobilenet0.25': dict(      # GluonCV publishes no weights of it
        backbone='mobilenet0.25', base_size=300, batch_norm=True, published=False,
        extras=[(f, f, 3, 2, 1) for f in (256, 256, 128, 128)],
        sizes={'voc': _SIZES_300, 'coco': _SIZES_300},
        ratios=_RATIOS_6, steps=[8, 16, 32, 64, 100, 300]),
    # gluondet's small SSD for training from scratch on a CPU (the demo): MobileNet 0.5 at
    # strides 8, 16 and 32, no extra layers, anchors about three strides wide, so that an
    # object of 20-75 px overlaps several anchors with IoU >= 0.5. No published weights.
    'ssd_160_mobilenet0.5': dict(
        backbone='mobilenet0.5', backbone_kwargs={'out_blocks': (4, 10, 12)}, base_size=160,
        batch_norm=True, extras=[], datasets=(), sizes={'custom': [24, 44, 76, 110]},
        ratios=[1, 2, 0.5], steps=[8, 16, 32]),
}


def build_ssd(arch, classes, dataset='custom', pretrained_base=True, ctx=mx.cpu(),
              root=os.path.join('~', '.mxnet', 'models'), norm_layer=nn.BatchNorm,
              norm_kwargs=None, sizes=None, ratios=None, steps=None, **kwargs):
    """Build the SSD ``arch`` (a key of ``SSD_ARCHS``) for ``classes``.

    Parameters
    ----------
    arch : str
        For example ``ssd_512_mobilenet1.0``.
    classes : sequence of str
        Foreground classes.
    dataset : str
        Whose anchor sizes to use: 'voc', 'coco' or 'custom' (the preset's own, else 'coco').
    pretrained_base : bool
        Load the backbone's GluonCV ImageNet weights from ``root``.
    ctx, root
        Where loaded weights go; folder of weight files.
    norm_layer, norm_kwargs
        Normalization of the backbone and extra layers (ignored by VGG, which has none).
    sizes, ratios, steps
        Override the anchors of the preset (see :class:`SSD`); None keeps GluonCV's.
    **kwargs
        Passed to :class:`SSD`.
    """
    spec = SSD_ARCHS[arch]
    norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs) if spec['batch_norm'] else {}
    backbone = get_backbone(spec['backbone'], **spec.get('backbone_kwargs', {}), **norm)
    extras = [ExtraLayer(*config, **norm) for config in spec['extras']]
    features = SSDFeatures(backbone, extras)
    if pretrained_base:
        path = registry.weights_file(spec['backbone'], root)
        gluoncv_compat.load_gluoncv_backbone(features, path, ctx)
    if sizes is None:
        sizes = spec['sizes'][dataset if dataset in spec['sizes'] else 'coco']
    return SSD(features, classes, sizes, ratios or spec['ratios'], steps or spec['steps'],
               spec['base_size'], **kwargs)


@functools.lru_cache(maxsize=None)
def min_input_size(arch):
    """The smallest square input size, a multiple of 16, whose feature maps the layers of
    the SSD ``arch`` accept (the last extra layers need some pixels left)."""
    features = build_ssd(arch, ['object'], pretrained_base=False).features
    outputs = mx.sym.Group(list(features(mx.sym.var('data'))))
    for size in range(16, 4097, 16):
        try:
            with contextlib.redirect_stdout(io.StringIO()):     # MXNet prints its failures
                outputs.infer_shape(data=(1, 3, size, size))
        except mx.base.MXNetError:
            continue
        return size
    raise ValueError('%s takes no input of 4096 px or less' % arch)


def _register_all():
    for arch, spec in SSD_ARCHS.items():
        shape = (spec['base_size'], spec['base_size'])
        for dataset in spec.get('datasets', ('voc', 'coco')):
            classes = {'voc': VOC_CLASSES, 'coco': COCO_CLASSES}[dataset]
            register_model('%s_%s' % (arch, dataset), classes, shape, spec['backbone'],
                           dataset, has_weights=spec.get('published', True))(
                dataset_builder(build_ssd, arch, dataset, classes, 'SSD'))
        register_model(arch + '_custom', None, shape, spec['backbone'], 'custom',
                       has_weights=False)(custom_builder(build_ssd, arch, 'SSD'))


_register_all()
