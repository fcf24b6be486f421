"""CenterNet's necks, as GluonCV builds them: a backbone brought to stride 4 by deconvolution
layers (ResNet, gluondet's MobileNet 0.5), by iterative deep aggregation (DLA-34) or by dense
upsampling convolutions (MobileNetV3), and the modulated deformable convolution (DCNv2) of the
``_dcnv2`` variants.

Every neck keeps GluonCV's attribute names, so the keys of a GluonCV ``center_net_*`` file
under ``base_network.`` are its keys: ``base_network.{0,1,4-7}`` and ``deconv.{i}``
(:class:`DeconvNeck`), ``base``, ``dla_up.idas.{i}`` and ``ida_up`` with their ``projs``,
``ups``, ``nodes`` (:class:`DLAUpNeck`), ``feature`` and ``upsampling.{i}``
(:class:`DUCNeck`). A neck's input is ``B x 3 x H x W`` (H and W multiples of 32), its output
the ``B x C x H/4 x W/4`` map (``out_channels``), the same in training and inference.
"""
import math

import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn
from mxnet.gluon.contrib.nn import PixelShuffle2D

__all__ = ['BilinearUpsampling', 'ModulatedDeformableConv2D', 'DeconvNeck', 'DLAUpNeck',
           'DUCNeck']


class BilinearUpsampling(mx.init.Initializer):
    """GluonCV's start of its upsampling deconvolutions: N(0, 0.01), with the bilinear kernel
    of the stride in ``weight[c, 0]`` for every input channel ``c``."""

    def _init_weight(self, _, arr):
        mx.nd.random.normal(0, 0.01, arr.shape, out=arr)
        k = arr.shape[2]
        f = math.ceil(k / 2)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        ramp = [1 - abs(i / f - c) for i in range(k)]
        kernel = mx.nd.array([[a * b for b in ramp] for a in ramp], dtype=arr.dtype)
        for channel in range(arr.shape[0]):
            arr[channel, 0] = kernel


class ModulatedDeformableConv2D(gluon.HybridBlock):
    """A 3x3, stride 1, pad 1 modulated deformable convolution (DCNv2, Zhu et al. 2019), one
    deformable group: MXNet's ``contrib.cnn.ModulatedDeformableConvolution`` block, its
    parameters (``offset_weight``, ``offset_bias``: the 27-channel offset and mask
    convolution, zero at start; ``deformable_conv_weight``, ``deformable_conv_bias``) and
    results, in standard operators.

    MXNet 1.9.1 has no CPU backward of its operator; this one samples the input at the nine
    offset taps with ``BilinearSampler`` (zero outside the map, as the operator), weighs each
    by its mask (``2 * sigmoid``, as the block) and applies the weights as a 1x1 convolution
    over the taps, so it trains anywhere.

    Parameters
    ----------
    channels, in_channels : int
    """

    def __init__(self, channels, in_channels, **kwargs):
        super().__init__(**kwargs)
        self._channels = channels
        with self.name_scope():
            self.offset_weight = self.params.get('offset_weight', shape=(27, in_channels, 3, 3),
                                                 init='zeros')
            self.offset_bias = self.params.get('offset_bias', shape=(27,), init='zeros')
            self.deformable_conv_weight = self.params.get(
                'deformable_conv_weight', shape=(channels, in_channels, 3, 3))
            self.deformable_conv_bias = self.params.get('deformable_conv_bias',
                                                        shape=(channels,), init='zeros')

    def hybrid_forward(self, F, x, offset_weight, offset_bias, deformable_conv_weight,
                       deformable_conv_bias):
        # pylint: disable=arguments-differ
        offset = F.Convolution(x, offset_weight, offset_bias, kernel=(3, 3), pad=(1, 1),
                               num_filter=27)
        mask = F.sigmoid(F.slice_axis(offset, axis=1, begin=18, end=27)) * 2
        rows = F.contrib.arange_like(x, axis=2).reshape((1, 1, -1, 1))
        cols = F.contrib.arange_like(x, axis=3).reshape((1, 1, 1, -1))
        # BilinearSampler's grid: -1 .. 1 over the pixel centres 0 .. size - 1
        row_scale = 2.0 / F.maximum(F.max(rows), 1)
        col_scale = 2.0 / F.maximum(F.max(cols), 1)
        taps = []
        for k in range(9):
            dy, dx = k // 3 - 1, k % 3 - 1
            y = F.broadcast_add(F.slice_axis(offset, axis=1, begin=2 * k, end=2 * k + 1),
                                rows + dy)
            x_at = F.broadcast_add(F.slice_axis(offset, axis=1, begin=2 * k + 1, end=2 * k + 2),
                                   cols + dx)
            grid = F.concat(F.broadcast_mul(x_at, col_scale) - 1,
                            F.broadcast_mul(y, row_scale) - 1, dim=1)
            sampled = F.BilinearSampler(x, grid)
            taps.append(F.broadcast_mul(sampled, F.slice_axis(mask, axis=1, begin=k, end=k + 1)))
        columns = F.stack(*taps, axis=2).reshape((0, -3, -2))     # B x (C * 9) x H x W
        return F.Convolution(columns, deformable_conv_weight.reshape((0, -1, 1, 1)),
                             deformable_conv_bias, kernel=(1, 1), num_filter=self._channels)


def _conv3x3(channels, in_channels, use_dcnv2):
    if use_dcnv2:
        return ModulatedDeformableConv2D(channels, in_channels)
    return nn.Conv2D(channels, 3, 1, 1, in_channels=in_channels)


def _norm(norm_layer, norm_kwargs, channels):
    return norm_layer(in_channels=channels, **dict({'momentum': 0.9}, **(norm_kwargs or {})))


class DeconvNeck(gluon.HybridBlock):
    """A backbone, then per entry of ``filters``: a 3x3 convolution (DCNv2 with
    ``use_dcnv2``), norm, ReLU, a 4x4 stride-2 deconvolution, norm, ReLU (GluonCV's
    ``DeconvResnet``).

    Parameters
    ----------
    base_network : HybridBlock
        Input -> its last map (or a list ending with it), of stride 32, or 16 with one entry
        less in ``filters`` (the output has stride 4); for ResNet v1b the sequential
        of its stem layers and layers 1-4 (GluonCV's keys).
    in_channels : int
        Channels of that map.
    filters : sequence of int
        Widths of the upsampling stages (GluonCV: 256, 128, 64).
    use_dcnv2 : bool
    norm_layer, norm_kwargs
    """

    def __init__(self, base_network, in_channels, filters=(256, 128, 64), use_dcnv2=False,
                 norm_layer=nn.BatchNorm, norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        self.out_channels = filters[-1]
        with self.name_scope():
            self.base_network = base_network
            self.deconv = nn.HybridSequential()
            for channels in filters:
                self.deconv.add(_conv3x3(channels, in_channels, use_dcnv2),
                                _norm(norm_layer, norm_kwargs, channels), nn.Activation('relu'),
                                nn.Conv2DTranspose(channels, 4, 2, 1, use_bias=False,
                                                   in_channels=channels,
                                                   weight_initializer=BilinearUpsampling()),
                                _norm(norm_layer, norm_kwargs, channels), nn.Activation('relu'))
                in_channels = channels

    def hybrid_forward(self, F, x):
        y = self.base_network(x)
        return self.deconv(y[-1] if isinstance(y, (list, tuple)) else y)


class _ConvNormReLU(gluon.HybridBlock):
    """3x3 convolution with bias (or DCNv2), then ``actf``: norm and ReLU (GluonCV's
    ``CustomConv``)."""

    def __init__(self, in_channels, channels, use_dcnv2, norm_layer, norm_kwargs, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.actf = nn.HybridSequential()
            self.actf.add(_norm(norm_layer, norm_kwargs, channels), nn.Activation('relu'))
            self.conv = _conv3x3(channels, in_channels, use_dcnv2)

    def hybrid_forward(self, F, x):
        return self.actf(self.conv(x))


class IDAUp(gluon.HybridBlock):
    """Iterative deep aggregation: each map after the first is projected to ``channels``
    (``projs``), upsampled by its factor (``ups``, a depthwise deconvolution) and merged with
    the previous result (``nodes``).

    Parameters
    ----------
    channels : int
    in_channels : sequence of int
        Of the maps, the first's unused (it is merged as it is).
    factors : sequence of int
        Upsampling factor of each map (the first's unused).
    use_dcnv2, norm_layer, norm_kwargs
    """

    def __init__(self, channels, in_channels, factors, use_dcnv2=False, norm_layer=nn.BatchNorm,
                 norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        norm = dict(use_dcnv2=use_dcnv2, norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        with self.name_scope():
            self.projs = nn.HybridSequential()
            self.ups = nn.HybridSequential()
            self.nodes = nn.HybridSequential()
            for width, factor in zip(in_channels[1:], factors[1:]):
                factor = int(factor)
                self.projs.add(_ConvNormReLU(width, channels, **norm))
                self.ups.add(nn.Conv2DTranspose(channels, 2 * factor, factor, factor // 2,
                                                groups=channels, use_bias=False,
                                                in_channels=channels,
                                                weight_initializer=BilinearUpsampling()))
                self.nodes.add(_ConvNormReLU(channels, channels, **norm))

    def merge(self, maps, start):
        """``maps`` with ``maps[start + 1:]`` replaced, in order, by their merges."""
        maps = list(maps)
        for i in range(start + 1, len(maps)):
            j = i - start - 1
            maps[i] = self.nodes[j](self.ups[j](self.projs[j](maps[i])) + maps[i - 1])
        return maps

    def hybrid_forward(self, F, *maps):
        return self.merge(maps, 0)[-1]


class DLAUpNeck(gluon.HybridBlock):
    """DLA brought to stride 4 (GluonCV's ``DeconvDLA``, down ratio 4, last level 5):
    ``dla_up`` aggregates the stride 4-32 maps from the coarsest down, ``ida_up`` merges
    its stride 4, 8 and 16 outputs into the stride-4 map of ``base.channels[2]`` channels.

    Parameters
    ----------
    base : :class:`~gluondet.model_zoo.backbones.dla.DLA`
    use_dcnv2, norm_layer, norm_kwargs
    """

    _FIRST = 2      # the stride-4 level

    def __init__(self, base, use_dcnv2=False, norm_layer=nn.BatchNorm, norm_kwargs=None,
                 **kwargs):
        super().__init__(**kwargs)
        norm = dict(use_dcnv2=use_dcnv2, norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        channels = list(base.channels[self._FIRST:])
        self.out_channels = channels[0]
        with self.name_scope():
            self.base = base
            self.dla_up = _DLAUp(channels, **norm)
            self.ida_up = IDAUp(channels[0], channels[:3], [1, 2, 4], **norm)

    def hybrid_forward(self, F, x):
        return self.ida_up.merge(self.dla_up(*self.base(x)[self._FIRST:])[:3], 0)[-1]


class _DLAUp(gluon.HybridBlock):
    """DLA's upward aggregation (GluonCV's ``DLAUp``): from the coarsest, each IDA (``idas``)
    merges one more finer map into the coarser results. Input: the maps of ``channels``,
    finest first; output: the merged map of each stride, finest first."""

    def __init__(self, channels, **norm):
        super().__init__()
        widths, scales = list(channels), [2 ** i for i in range(len(channels))]
        with self.name_scope():
            self.idas = nn.HybridSequential()
            for j in range(-2, -len(channels) - 1, -1):
                self.idas.add(IDAUp(channels[j], widths[j:],
                                    [s // scales[j] for s in scales[j:]], **norm))
                scales[j + 1:] = [scales[j]] * (-j - 1)
                widths[j + 1:] = [channels[j]] * (-j - 1)

    def hybrid_forward(self, F, *maps):
        outputs = [maps[-1]]
        for i, ida in enumerate(self.idas):
            maps = ida.merge(maps, len(maps) - i - 2)
            outputs.insert(0, maps[-1])
        return outputs


class _DUC(gluon.HybridBlock):
    """3x3 convolution, batch norm, ReLU, pixel shuffle by ``factor`` (GluonCV's ``DUC``)."""

    def __init__(self, channels, factor=2, norm_layer=nn.BatchNorm, norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv = nn.Conv2D(channels, 3, 1, 1, use_bias=False)
            self.bn = norm_layer(**(norm_kwargs or {}))
            self.pixel_shuffle = PixelShuffle2D(factor)

    def hybrid_forward(self, F, x):
        return self.pixel_shuffle(F.Activation(self.bn(self.conv(x)), act_type='relu'))


class DUCNeck(gluon.HybridBlock):
    """A stride-32 MobileNetV3 (``feature``: its ``features``), then three dense upsampling
    convolutions by 2 (``upsampling``; GluonCV's ``DUCMobilenet``).

    Parameters
    ----------
    backbone : :class:`~gluondet.model_zoo.backbones.mobilenetv3.MobileNetV3`
    filters : sequence of int
        Convolution widths of the upsampling stages (each output a quarter of it).
    norm_layer, norm_kwargs
    """

    def __init__(self, backbone, filters=(512, 256, 128), norm_layer=nn.BatchNorm,
                 norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        self.out_channels = filters[-1] // 4
        with self.name_scope():
            self.feature = backbone.features
            self.upsampling = nn.HybridSequential()
            for channels in filters:
                self.upsampling.add(_DUC(channels, 2, norm_layer, norm_kwargs))

    def hybrid_forward(self, F, x):
        return self.upsampling(self.feature(x))
