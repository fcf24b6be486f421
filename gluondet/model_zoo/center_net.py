"""CenterNet (Zhou et al. 2019, Objects as Points, arXiv:1904.07850): a stride-4 map per class
whose local maxima are the objects' centres, with their sizes and sub-pixel offsets; GluonCV's
zoo names, outputs and parameter names."""
import os

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn

from . import registry
from .backbones import get_backbone
from .backbones.dla import dla34, load_gluoncv_dla
from .backbones.mobilenetv3 import MobileNetV3, load_gluoncv_mobilenetv3
from .center_net_necks import DeconvNeck, DLAUpNeck, DUCNeck
from .detector import DetectionNet, register_presets, reuse_mapping
from .gluoncv_compat import load_gluoncv_backbone, load_gluoncv_v1b
from .single_stage import reuse_rows

__all__ = ['CenterNet', 'CenterNetDecoder', 'CENTER_NET_ARCHS', 'build_center_net']

HEATMAP_BIAS = -2.19        # GluonCV's: -log((1 - 0.1) / 0.1), a 0.1 start everywhere


class CenterNetDecoder(gluon.HybridBlock):
    """CenterNet's inference post-processing: the peaks of the heatmap (the places equal to
    the maximum of their 3x3 neighbourhood, GluonCV's max-pool-and-equal), the ``K`` best over
    all classes and places, their boxes from the size and offset maps; no NMS.

    Parameters
    ----------
    topk : int
        Detections kept (GluonCV's ``topk``: 40 for VOC, 100 for COCO).
    scale : float
        Stride of the maps in input pixels.
    nms_thresh, nms_topk, post_nms
        As set by ``set_nms``: ``K`` is the least of ``topk`` and the positive ones of
        ``nms_topk`` and ``post_nms`` (GluonCV caps ``post_nms`` by both); ``nms_thresh`` is
        kept for the interface and applies nothing (GluonCV's CenterNet has no NMS either).

    Inputs: ``heatmap`` ``B x C x h x w`` (probabilities), ``wh`` and ``reg`` ``B x 2 x h x w``
    (size and offset in map cells). Outputs: ``ids``, ``scores`` ``B x K x 1`` and ``boxes``
    ``B x K x 4`` (``xmin, ymin, xmax, ymax`` in input pixels), sorted by score; rows of a
    place that is not a peak (score 0) are -1.
    """

    def __init__(self, topk=100, scale=4.0, nms_thresh=0, nms_topk=400, post_nms=100,
                 **kwargs):
        super().__init__(**kwargs)
        self.topk = topk
        self.scale = scale
        self.nms_thresh = nms_thresh
        self.nms_topk = nms_topk
        self.post_nms = post_nms

    @property
    def k(self):
        """Detections returned."""
        return min([self.topk] + [v for v in (self.nms_topk, self.post_nms) if v > 0])

    def hybrid_forward(self, F, heatmap, wh, reg):
        # pylint: disable=arguments-differ
        peak = F.broadcast_equal(F.Pooling(heatmap, kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                                           pool_type='max'), heatmap)
        k = self.k
        flat = (heatmap * peak).reshape((0, -1))
        # k zeros after the places: fewer places than k (a small input) give -1 rows, as
        # the ONNX graph does, instead of topk's error
        flat = F.concat(flat, F.broadcast_axis(F.slice_axis(flat, axis=1, begin=0, end=1) * 0,
                                               axis=1, size=k), dim=1)
        scores, index = F.topk(flat, k=k, ret_typ='both', dtype='int64')
        _, _, height, width = F.split(F.shape_array(heatmap), num_outputs=4, axis=0)
        area = height * width
        ids = F.cast(F.broadcast_div(index, area), 'float32')
        place = F.broadcast_mod(index, area)
        ys = F.cast(F.broadcast_div(place, width), 'float32')
        xs = F.cast(F.broadcast_mod(place, width), 'float32')
        batch = F.cast(F.broadcast_like(F.contrib.arange_like(scores, axis=0).reshape((-1, 1)),
                                        scores), 'int64')
        at = F.stack(batch, place, axis=0)                              # 2 x B x K

        def gather(maps):                                               # -> B x K x 2
            return F.gather_nd(F.transpose(maps.reshape((0, 0, -1)), (0, 2, 1)), at)
        size, offset = gather(wh), gather(reg)
        cx = xs + F.slice_axis(offset, axis=2, begin=0, end=1).reshape((0, 0))
        cy = ys + F.slice_axis(offset, axis=2, begin=1, end=2).reshape((0, 0))
        half_w = F.slice_axis(size, axis=2, begin=0, end=1).reshape((0, 0)) / 2
        half_h = F.slice_axis(size, axis=2, begin=1, end=2).reshape((0, 0)) / 2
        boxes = F.stack(cx - half_w, cy - half_h, cx + half_w, cy + half_h, axis=2) * self.scale
        valid = (scores > 0).expand_dims(-1)
        pad = F.ones_like(valid) * -1
        return (F.where(valid, ids.expand_dims(-1), pad),
                F.where(valid, scores.expand_dims(-1), pad),
                F.where(F.broadcast_like(valid, boxes), boxes, F.broadcast_like(pad, boxes)))


def _head(channels, head_conv, in_channels, bias):
    """GluonCV's head: 3x3 ``head_conv`` convolution and ReLU, then a 1x1 to ``channels``."""
    weight = mx.init.Normal(0.001) if bias == 0 else mx.init.Xavier()
    head = nn.HybridSequential()
    head.add(nn.Conv2D(head_conv, 3, 1, 1, in_channels=in_channels, weight_initializer=weight),
             nn.Activation('relu'), _predictor(channels, head_conv, bias))
    return head


def _predictor(channels, in_channels, bias, prefix=None):
    weight = mx.init.Normal(0.001) if bias == 0 else mx.init.Xavier()
    return nn.Conv2D(channels, 1, in_channels=in_channels, weight_initializer=weight,
                     bias_initializer=mx.init.Constant(bias), prefix=prefix)


class CenterNet(DetectionNet):
    """CenterNet over a neck bringing the input to stride 4.

    Parameters
    ----------
    base_network : HybridBlock
        Input -> the stride-``scale`` map of ``base_network.out_channels`` channels
        (:mod:`~gluondet.model_zoo.center_net_necks`).
    classes : sequence of str
    head_conv : int
        Width of the 3x3 convolution of each head (GluonCV: 64).
    scale : float
        Stride of the output maps (GluonCV: 4).
    topk : int
        Detections of inference (GluonCV: 40 for VOC, 100 for COCO); ``set_nms`` caps it.
    flip_test : bool
        Inference averages the heatmap and sizes with those of the flipped image (GluonCV's).
    size : int
        The data size: the longest side of the validation input (attributes ``short`` and
        ``max_size``; batches are padded to a multiple of ``size_multiple``, 32).
    nms_thresh, nms_topk, post_nms
        See :meth:`set_nms`.

    Outputs
    -------
    Training (``autograd.is_training()``): ``heatmap`` ``B x C x H/4 x W/4`` (sigmoid clipped
    to [1e-4, 1 - 1e-4]), ``wh`` ``B x 2 x H/4 x W/4`` (box width and height in map cells) and
    ``reg`` ``B x 2 x H/4 x W/4`` (the centre's offset in its cell, x then y), as GluonCV's.
    Inference: ``ids``, ``scores`` ``B x K x 1`` and ``boxes`` ``B x K x 4``
    (``xmin, ymin, xmax, ymax`` in input pixels), the ``K`` best peaks of the heatmap sorted
    by score, rows that are not peaks -1 (:class:`CenterNetDecoder`, ``net.postprocess``).
    """

    postprocess_kind = 'center_net'
    size_multiple = 32

    def __init__(self, base_network, classes, head_conv=64, scale=4.0, topk=100, flip_test=False,
                 size=512, nms_thresh=0, nms_topk=400, post_nms=100, **kwargs):
        super().__init__(classes, **kwargs)
        self.scale = scale
        self.short = self.max_size = size
        self._flip_test = flip_test
        with self.name_scope():
            self.base_network = base_network
            self.heads = nn.HybridSequential()
            for channels, bias in ((self.num_classes, HEATMAP_BIAS), (2, 0), (2, 0)):
                self.heads.add(_head(channels, head_conv, base_network.out_channels, bias))
            self.postprocess = CenterNetDecoder(topk, scale, nms_thresh, nms_topk, post_nms)

    @property
    def topk(self):
        """Detections of inference before ``set_nms``'s cap."""
        return self.postprocess.topk

    @property
    def flip_test(self):
        """Whether inference averages with the flipped image."""
        return self._flip_test

    @flip_test.setter
    def flip_test(self, value):
        self._clear_cached_op()
        self._flip_test = bool(value)

    def set_nms(self, nms_thresh=0, nms_topk=400, post_nms=100):
        """Cap the detections of inference (GluonCV's signature; CenterNet has no NMS).

        Parameters
        ----------
        nms_thresh : float
            Kept, unused: the peak search takes NMS's place.
        nms_topk, post_nms : int
            Inference returns the least of ``topk`` and those of them that are positive.
        """
        super().set_nms(nms_thresh, nms_topk, post_nms)

    def _maps(self, F, x):
        y = self.base_network(x)
        heatmap, wh, reg = (head(y) for head in self.heads)
        return F.sigmoid(heatmap), wh, reg

    def hybrid_forward(self, F, x):
        heatmap, wh, reg = self._maps(F, x)
        if autograd.is_training():
            return F.clip(heatmap, 1e-4, 1 - 1e-4), wh, reg
        if self._flip_test:
            flipped_heatmap, flipped_wh, _ = self._maps(F, F.flip(x, axis=3))
            heatmap = (heatmap + F.flip(flipped_heatmap, axis=3)) * 0.5
            wh = (wh + F.flip(flipped_wh, axis=3)) * 0.5
        return self.postprocess(heatmap, wh, reg)

    def reset_class(self, classes, reuse_weights=None):
        """Replace the classes and the heatmap's last convolution.

        Parameters
        ----------
        classes : sequence of str
            The new foreground classes.
        reuse_weights : dict or list or None
            Which new classes start from the weights of an old one: ``{new: old}`` with class
            names or indices, or a list of names kept by both (see
            :func:`~gluondet.model_zoo.detector.reuse_mapping`); the others start anew (at
            the heatmap's prior). The size and offset heads are kept.
        """
        mapping = reuse_mapping(reuse_weights, self.classes, tuple(classes))
        old_count = self.num_classes
        self.classes = tuple(classes)
        self._clear_cached_op()
        heatmap = self.heads[0]
        old = heatmap[2]
        new = _predictor(self.num_classes, old.weight.shape[1], HEATMAP_BIAS, old.prefix)
        reuse_rows(old, new, sorted(mapping.items()), old_count, self.num_classes)
        head = nn.HybridSequential(prefix=heatmap.prefix)
        head.add(heatmap[0], heatmap[1], new)
        heads = nn.HybridSequential(prefix=self.heads.prefix)
        heads.add(head, self.heads[1], self.heads[2])
        self.heads = heads


def _datasets(size, published=True, datasets=('voc', 'coco', 'custom')):
    topk = {'voc': 40, 'coco': 100, 'custom': 100}
    return dict(datasets={d: dict(short=size, max_size=size, topk=topk[d]) for d in datasets},
                published=published)


# CenterNet presets: backbone (its ImageNet weights), neck, its options. GluonCV's, at 512 px
# (GluonCV publishes no center_net_dla34 weights).
CENTER_NET_ARCHS = {}
for _depth in (18, 50, 101):
    for _dcn in (False, True):
        CENTER_NET_ARCHS['center_net_resnet%d_v1b%s' % (_depth, '_dcnv2' if _dcn else '')] = dict(
            backbone='resnet%d_v1b' % _depth, neck='deconv', use_dcnv2=_dcn, **_datasets(512))
for _dcn in (False, True):
    CENTER_NET_ARCHS['center_net_dla34' + ('_dcnv2' if _dcn else '')] = dict(
        backbone='dla34', neck='dla', use_dcnv2=_dcn, **_datasets(512, published=False))
for _kind, _filters in (('large', (512, 256, 256)), ('small', (512, 256, 128))):
    CENTER_NET_ARCHS['center_net_mobilenetv3_%s_duc' % _kind] = dict(
        backbone='mobilenetv3_' + _kind, neck='duc', filters=_filters, **_datasets(512))
# gluondet's small CenterNet for training from scratch on a CPU (the demo and BCCD recipes):
# MobileNet 0.5 (the small SSD's and YOLOv3's) up to its last stride-16 block, under
# deconvolutions of 128 and 32 channels and heads of 32, at 384 px. Cut at stride 32 (with a
# third deconvolution) it did not learn where the demo's shapes are; 32 channels at stride 4
# instead of 64 make a step 20% cheaper, and the demo learns as fast an epoch
# (docs/benchmarks.md, CenterNet, Learning).
CENTER_NET_ARCHS['center_net_mobilenet0.5'] = dict(
    backbone='mobilenet0.5', neck='deconv', out_block=10, filters=(128, 32), head_conv=32,
    **_datasets(384, published=False, datasets=('custom',)))
del _depth, _dcn, _kind, _filters


class _Holder(gluon.HybridBlock):
    """A block holding a MobileNet as ``backbone``: the layout GluonCV's ImageNet MobileNet
    loader (:func:`~gluondet.model_zoo.gluoncv_compat.load_gluoncv_backbone`) reads."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone


def _neck(spec, pretrained_base, ctx, root, norm):
    """The spec's backbone (with its GluonCV ImageNet weights when ``pretrained_base``) and
    neck."""
    name = spec['backbone']
    path = registry.weights_file(name, root) if pretrained_base else None
    dcn = spec.get('use_dcnv2', False)
    if name.startswith('resnet'):
        resnet = get_backbone(name, **norm)
        if path:
            load_gluoncv_v1b(resnet, path, ctx)
        layers = nn.HybridSequential(prefix='')
        layers.add(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool, *resnet.layers)
        in_channels = 512 * (4 if resnet.num_layers >= 50 else 1)
        return DeconvNeck(layers, in_channels, use_dcnv2=dcn, **norm)
    if name.startswith('mobilenet0'):
        mobilenet = get_backbone(name, out_blocks=(spec['out_block'],), **norm)
        if path:
            load_gluoncv_backbone(_Holder(mobilenet), path, ctx)
        return DeconvNeck(mobilenet, mobilenet.out_channels[0], spec['filters'], **norm)
    if name == 'dla34':
        dla = dla34(**norm)
        if path:
            load_gluoncv_dla(dla, path, ctx)
        return DLAUpNeck(dla, use_dcnv2=dcn, **norm)
    mobilenet = MobileNetV3(name.split('_')[1], **norm)
    if path:
        load_gluoncv_mobilenetv3(mobilenet, path, ctx)
    return DUCNeck(mobilenet, spec['filters'], **norm)


def build_center_net(arch, classes, dataset='custom', pretrained_base=True, ctx=mx.cpu(),
                     root=os.path.join('~', '.mxnet', 'models'), norm_layer=nn.BatchNorm,
                     norm_kwargs=None, **kwargs):
    """Build the CenterNet ``arch`` (a key of ``CENTER_NET_ARCHS``) for ``classes``.

    Parameters
    ----------
    arch : str
        For example ``center_net_resnet18_v1b``.
    classes : sequence of str
    dataset : str
        'voc', 'coco' or 'custom': sets ``topk`` (40, 100, 100).
    pretrained_base : bool
        Load the backbone's GluonCV ImageNet weights from ``root``.
    ctx, root
        Where loaded weights go; folder of weight files.
    norm_layer, norm_kwargs
        Normalization of the backbone and the neck (``SyncBatchNorm`` for SyncBN).
    **kwargs
        Override the preset's :class:`CenterNet` arguments (``topk``, ``flip_test``, ...).
    """
    spec = CENTER_NET_ARCHS[arch]
    options = spec['datasets'][dataset]
    neck = _neck(spec, pretrained_base, ctx, root,
                 dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs))
    defaults = dict(head_conv=spec.get('head_conv', 64), topk=options['topk'],
                    size=options['short'])
    return CenterNet(neck, classes, **dict(defaults, **kwargs))


register_presets(CENTER_NET_ARCHS, build_center_net, 'CenterNet')
