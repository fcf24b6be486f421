"""MobileNet v1 as a detection feature extractor."""
from mxnet import gluon
from mxnet.gluon import nn

__all__ = ['ConvBNReLU', 'DepthwiseSeparable', 'MobileNet', 'mobilenet1_0', 'mobilenet0_5',
           'mobilenet0_25']

# (depthwise channels, pointwise channels, stride) of the 13 separable blocks at width 1.0
_BLOCKS = ((32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1),
           (256, 512, 2)) + ((512, 512, 1),) * 5 + ((512, 1024, 2), (1024, 1024, 1))


class ConvBNReLU(gluon.HybridBlock):
    """Convolution without bias, normalization, ReLU.

    Parameters
    ----------
    channels, kernel, stride, padding, groups
        Of the convolution.
    norm_layer : type
        Normalization block (``nn.BatchNorm``, or a SyncBatchNorm).
    norm_kwargs : dict or None
        Extra arguments of ``norm_layer``.
    """

    def __init__(self, channels, kernel, stride=1, padding=0, groups=1,
                 norm_layer=nn.BatchNorm, norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv = nn.Conv2D(channels, kernel, stride, padding, groups=groups,
                                  use_bias=False)
            self.bn = norm_layer(**(norm_kwargs or {}))

    def hybrid_forward(self, F, x):
        return F.Activation(self.bn(self.conv(x)), act_type='relu')


class DepthwiseSeparable(gluon.HybridBlock):
    """A 3x3 depthwise ConvBNReLU followed by a 1x1 pointwise one."""

    def __init__(self, in_channels, channels, stride, norm_layer=nn.BatchNorm, norm_kwargs=None,
                 **kwargs):
        super().__init__(**kwargs)
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        with self.name_scope():
            self.depthwise = ConvBNReLU(in_channels, 3, stride, 1, groups=in_channels, **norm)
            self.pointwise = ConvBNReLU(channels, 1, **norm)

    def hybrid_forward(self, F, x):
        return self.pointwise(self.depthwise(x))


class MobileNet(gluon.HybridBlock):
    """MobileNet v1 (Howard et al. 2017) up to its last convolution.

    Parameters
    ----------
    multiplier : float
        Width multiplier (1.0, 0.75, 0.5, 0.25).
    out_blocks : tuple of int
        Indices (0-12) of the separable blocks whose outputs are returned;
        SSD takes 10 (stride 16) and 12 (stride 32). The blocks after the last are not built.
    norm_layer, norm_kwargs
        Normalization block and its extra arguments.

    Input ``B x 3 x H x W``; output a list of feature maps, one per ``out_blocks``, whose
    channels are ``out_channels``.
    """

    def __init__(self, multiplier=1.0, out_blocks=(10, 12), norm_layer=nn.BatchNorm,
                 norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        self._out_blocks = tuple(out_blocks)
        self.out_channels = [int(_BLOCKS[i][1] * multiplier) for i in self._out_blocks]
        with self.name_scope():
            self.stem = ConvBNReLU(int(32 * multiplier), 3, 2, 1, **norm)
            self.blocks = nn.HybridSequential()
            for dw, pw, stride in _BLOCKS[:max(self._out_blocks) + 1]:
                self.blocks.add(DepthwiseSeparable(int(dw * multiplier), int(pw * multiplier),
                                                   stride, **norm))

    def hybrid_forward(self, F, x):
        x = self.stem(x)
        outputs = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i in self._out_blocks:
                outputs.append(x)
        return outputs


def mobilenet1_0(**kwargs):
    """MobileNet v1 at width 1.0 (GluonCV weights ``mobilenet1.0``)."""
    return MobileNet(1.0, **kwargs)


def mobilenet0_5(**kwargs):
    """MobileNet v1 at width 0.5 (GluonCV weights ``mobilenet0.5``)."""
    return MobileNet(0.5, **kwargs)


def mobilenet0_25(**kwargs):
    """MobileNet v1 at width 0.25 (GluonCV weights ``mobilenet0.25``)."""
    return MobileNet(0.25, **kwargs)
