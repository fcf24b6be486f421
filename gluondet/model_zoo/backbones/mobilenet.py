"""MobileNet v1 as a detection feature extractor."""
from mxnet import gluon
from mxnet.gluon import nn

__all__ = ['ConvBNReLU', 'DepthwiseSeparable', 'MobileNet', 'mobilenet1_0', 'mobilenet0_5',
           'mobilenet0_25']

# (depthwise channels, pointwise channels, stride) of the 13 separable blocks at width 1.0
_BLOCKS = ((32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1),
           (256, 512, 2)) + ((512, 512, 1),) * 5 + ((512, 1024, 2), (1024, 1024, 1))
STAGES = ('stem', 'layer1', 'layer2', 'layer3', 'layer4')
# the last block of each stride (4, 8, 16, 32): the outputs of out_stages 1-4
STAGE_BLOCKS = (2, 4, 10, 12)


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
    out_blocks : tuple of int or None
        Indices (0-12, increasing) of the separable blocks whose outputs are returned;
        SSD takes 10 (stride 16) and 12 (stride 32). The blocks after the last are not built.
        None: ``(10, 12)``, or the blocks of ``out_stages``.
    norm_layer, norm_kwargs
        Normalization block and its extra arguments.
    out_stages : tuple of int or None
        Instead of ``out_blocks``, as :class:`ResNetV1b`'s: stages 1-4, the last blocks of
        strides 4, 8, 16 and 32 (blocks 2, 4, 10, 12: GluonCV's FPN taps ``relu6``,
        ``relu10``, ``relu22``, ``relu26``).

    Attributes
    ----------
    out_channels, out_strides : list of int
        Channels and stride of each output, in the order of ``out_blocks``.
    stem, blocks
        The first convolution and the ``HybridSequential`` of separable blocks.

    Input ``B x 3 x H x W``; output a list of feature maps, one per ``out_blocks``, the
    same in training and inference. :meth:`stage_params` groups the parameters as
    ResNet's stages (to freeze the first ones).
    """

    def __init__(self, multiplier=1.0, out_blocks=None, norm_layer=nn.BatchNorm,
                 norm_kwargs=None, out_stages=None, **kwargs):
        super().__init__(**kwargs)
        if out_stages is not None:
            if out_blocks is not None:
                raise ValueError('MobileNet takes out_blocks or out_stages, not both')
            if not set(out_stages) <= {1, 2, 3, 4}:
                raise ValueError('MobileNet: out_stages must be stage numbers in 1-4, got %r'
                                 % (tuple(out_stages),))
            out_blocks = tuple(STAGE_BLOCKS[s - 1] for s in out_stages)
        out_blocks = (10, 12) if out_blocks is None else tuple(out_blocks)
        if not out_blocks or list(out_blocks) != sorted(set(out_blocks)) \
                or not set(out_blocks) <= set(range(len(_BLOCKS))):
            raise ValueError('MobileNet: out_blocks must be increasing block indices in 0-%d, '
                             'got %r' % (len(_BLOCKS) - 1, out_blocks))
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        self._out_blocks = out_blocks
        self.out_channels = [int(_BLOCKS[i][1] * multiplier) for i in out_blocks]
        self.out_strides = [_block_stride(i) for i in out_blocks]
        with self.name_scope():
            self.stem = ConvBNReLU(int(32 * multiplier), 3, 2, 1, **norm)
            self.blocks = nn.HybridSequential()
            for dw, pw, stride in _BLOCKS[:out_blocks[-1] + 1]:
                self.blocks.add(DepthwiseSeparable(int(dw * multiplier), int(pw * multiplier),
                                                   stride, **norm))

    def stage_params(self, *stages):
        """The ``ParameterDict`` of the named stages: ``'stem'`` (the first convolution),
        ``'layer1'`` .. ``'layer4'`` (the blocks up to stride 4, 8, 16, 32: 0-2, 3-4, 5-10,
        11-12); ValueError for an unknown stage or one whose blocks are not built."""
        unknown = [s for s in stages if s not in STAGES]
        if unknown:
            raise ValueError('MobileNet has no stage %s; stages: %s'
                             % (', '.join(map(repr, unknown)), ', '.join(STAGES)))
        params = gluon.ParameterDict(self.prefix)
        for stage in stages:
            if stage == 'stem':
                params.update(self.stem.collect_params())
                continue
            number = int(stage[len('layer'):])
            first = STAGE_BLOCKS[number - 2] + 1 if number > 1 else 0
            last = STAGE_BLOCKS[number - 1]
            if last >= len(self.blocks):
                raise ValueError('MobileNet: stage %r (blocks %d-%d) is not built: the last '
                                 'output is block %d' % (stage, first, last, self._out_blocks[-1]))
            for index in range(first, last + 1):
                params.update(self.blocks[index].collect_params())
        return params

    def hybrid_forward(self, F, x):
        x = self.stem(x)
        outputs = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i in self._out_blocks:
                outputs.append(x)
        return outputs


def _block_stride(index):
    """The stride of separable block ``index``'s output (the stem has stride 2)."""
    stride = 2
    for _, _, step in _BLOCKS[:index + 1]:
        stride *= step
    return stride


def mobilenet1_0(**kwargs):
    """MobileNet v1 at width 1.0 (GluonCV weights ``mobilenet1.0``)."""
    return MobileNet(1.0, **kwargs)


def mobilenet0_5(**kwargs):
    """MobileNet v1 at width 0.5 (GluonCV weights ``mobilenet0.5``)."""
    return MobileNet(0.5, **kwargs)


def mobilenet0_25(**kwargs):
    """MobileNet v1 at width 0.25 (GluonCV weights ``mobilenet0.25``)."""
    return MobileNet(0.25, **kwargs)
