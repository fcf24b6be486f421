"""DarkNet-53 (Redmon and Farhadi 2018, arXiv:1804.02767) as a detection feature extractor."""
from mxnet import gluon
from mxnet.gluon import nn

__all__ = ['conv_bn_leaky', 'DarkNetBlock', 'DarkNet', 'darknet53']

# DarkNet-53: residual blocks and output channels of the five downsampling stages
_DARKNET53 = ((1, 64), (2, 128), (8, 256), (8, 512), (4, 1024))


def conv_bn_leaky(channels, kernel, stride=1, norm_layer=nn.BatchNorm, norm_kwargs=None):
    """Convolution without bias ('same' padding), normalization, LeakyReLU(0.1): DarkNet's
    cell, a sequential of those three (``.0`` conv, ``.1`` norm, GluonCV's parameter names).

    Parameters
    ----------
    channels, kernel, stride : int
        Of the convolution.
    norm_layer : type
        Normalization block (``nn.BatchNorm``, or a SyncBatchNorm).
    norm_kwargs : dict or None
        Extra arguments of ``norm_layer`` (default epsilon 1e-5, momentum 0.9).
    """
    cell = nn.HybridSequential()
    cell.add(nn.Conv2D(channels, kernel, stride, kernel // 2, use_bias=False),
             norm_layer(**dict({'epsilon': 1e-5, 'momentum': 0.9}, **(norm_kwargs or {}))),
             nn.LeakyReLU(0.1))
    return cell


class DarkNetBlock(gluon.HybridBlock):
    """Residual block: a 1x1 cell halving ``channels``, a 3x3 cell restoring them, plus the
    input (``body``: the two cells)."""

    def __init__(self, channels, norm_layer=nn.BatchNorm, norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        with self.name_scope():
            self.body = nn.HybridSequential()
            self.body.add(conv_bn_leaky(channels // 2, 1, **norm),
                          conv_bn_leaky(channels, 3, **norm))

    def hybrid_forward(self, F, x):
        return x + self.body(x)


class DarkNet(gluon.HybridBlock):
    """DarkNet v3 up to its last residual block, one flat ``features`` sequential (the layout
    of GluonCV's ImageNet ``darknet53`` weights, which load without renaming but for the
    classifier ``output.*`` they add).

    Parameters
    ----------
    stages : sequence of (int, int)
        Per downsampling stage: residual blocks and output channels.
    stem_channels : int
        Of the first 3x3 cell (stride 1).
    out_stages : tuple of int
        Stages (0-based) whose outputs are returned; (2, 3, 4) are strides 8, 16 and 32.
    norm_layer, norm_kwargs
        Normalization block and its extra arguments.

    Input ``B x 3 x H x W``; output a list of feature maps, one per ``out_stages``.
    """

    def __init__(self, stages=_DARKNET53, stem_channels=32, out_stages=(2, 3, 4),
                 norm_layer=nn.BatchNorm, norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        self._out_layers = []
        with self.name_scope():
            self.features = nn.HybridSequential()
            self.features.add(conv_bn_leaky(stem_channels, 3, **norm))
            for blocks, channels in stages:
                self.features.add(conv_bn_leaky(channels, 3, 2, **norm))
                for _ in range(blocks):
                    self.features.add(DarkNetBlock(channels, **norm))
                self._out_layers.append(len(self.features) - 1)
        self._out_layers = [self._out_layers[s] for s in out_stages]

    @property
    def stage_ends(self):
        """Index in ``features`` of the last layer of each returned stage."""
        return tuple(self._out_layers)

    def hybrid_forward(self, F, x):
        outputs = []
        for i, layer in enumerate(self.features):
            x = layer(x)
            if i in self._out_layers:
                outputs.append(x)
        return outputs


def darknet53(**kwargs):
    """DarkNet-53 (GluonCV weights ``darknet53``); keyword arguments as :class:`DarkNet`."""
    return DarkNet(_DARKNET53, **kwargs)
