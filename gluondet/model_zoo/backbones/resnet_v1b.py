"""ResNet v1b and v1d (GluonCV's ``resnet*_v1b``, ``resnet*_v1d``) as feature extractors.

The backbone of Faster R-CNN and RetinaNet. v1b differs from v1 (``resnet.py``)
in where the stride sits (on the 3x3 convolution of a bottleneck, not the
first 1x1) and in having no convolution biases. v1d is v1b with a deep stem
(``conv1`` is three 3x3 convolutions of 32, 32 and 64 channels, the first of
stride 2, with a norm layer and ReLU after the first two) and average-pool
downsampling (a shortcut is a ``stride`` x ``stride`` average pool, then a 1x1
convolution of stride 1 and a norm layer). The layout and the attribute
names are GluonCV's ``ResNetV1b``, so the structural parameter names of a
GluonCV ImageNet file (``conv1.weight``, ``bn1.gamma``, ``layer1.0.conv1.weight``,
``layer2.0.downsample.0.weight``, ``layer2.0.downsample.1.running_mean``; v1d:
``conv1.0.weight``, ``conv1.1.gamma``, ``conv1.3.weight``, ``conv1.4.gamma``,
``conv1.6.weight``, ``layer2.0.downsample.1.weight``, ``layer2.0.downsample.2.gamma``)
are ours, and its weights load unchanged (less the classifier ``fc.*``)::

    from gluondet.model_zoo import registry
    from gluondet.model_zoo.backbones import get_backbone
    from gluondet.model_zoo.gluoncv_compat import load_gluoncv_v1b

    backbone = get_backbone('resnet50_v1b', out_stages=(3,),
                            norm_kwargs={'use_global_stats': True})
    if pretrained_base:
        load_gluoncv_v1b(backbone, registry.weights_file('resnet50_v1b', root), ctx)

Running parts of it (all work inside a parent's ``hybrid_forward`` and on NDArrays):

- ``backbone(x)``: the list of the maps of ``out_stages``, in order. The forward
  stops after the last stage asked for, so ``out_stages=(3,)`` runs the stem and
  layers 1-3 only (Faster R-CNN C4), and the later layers stay available.
- ``backbone.stem(x)``: conv1 (7x7/2, or v1d's three 3x3), bn1, relu, max pool 3x3/2
  (stride 4, 64 channels).
- ``backbone.layer1`` .. ``backbone.layer4`` (also ``backbone.layers``): the stages as
  ``HybridSequential`` blocks, e.g. ``backbone.layer4(pooled_rois)`` as Faster R-CNN's
  "top features". A detector keeping ``backbone`` as one child gets every parameter
  once, under ``backbone.``, whichever parts it calls.
- ``backbone.out_channels`` / ``backbone.out_strides``: per entry of ``out_stages``;
  stages 1-4 have strides 4, 8, 16, 32 and channels 64-512 (basic) or 256-2048
  (bottleneck).

Selecting parameters (to freeze the stem and layer1 as GluonCV's detectors do):

- ``backbone.stage_params('stem', 'layer1')``: a ``ParameterDict`` of those stages.
- Structural names (``save_parameters`` keys) start with ``conv1.`` / ``bn1.`` (stem),
  ``layer1.`` .. ``layer4.``; full parameter names are the same with ``_`` for ``.``
  after ``backbone.prefix``: ``{prefix}conv1_weight`` (v1d ``{prefix}conv1_0_weight``),
  ``{prefix}bn1_gamma``, ``{prefix}layer1_0_conv1_weight``,
  ``{prefix}layer2_0_downsample_1_beta``, so
  ``net.collect_params(re.escape(backbone.prefix) + '(conv1|bn1|layer1)_')`` selects the
  stem and layer1 (``backbone.prefix`` includes the prefixes of the blocks around it).
  Every convolution is bias-free: names ending in ``weight`` are convolutions, the rest
  belong to the norm layers (GluonCV's Faster R-CNN trains only the convolutions of
  layers 2-4).

``norm_layer(in_channels=c, **norm_kwargs)`` builds every norm layer, including the
downsample ones: ``norm_kwargs={'use_global_stats': True}`` freezes all batch statistics.
"""
from mxnet import gluon
from mxnet.gluon import nn

__all__ = ['BasicBlockV1b', 'BottleneckV1b', 'ResNetV1b', 'resnet18_v1b', 'resnet34_v1b',
           'resnet50_v1b', 'resnet101_v1b', 'resnet101_v1d']

STAGES = ('stem', 'layer1', 'layer2', 'layer3', 'layer4')
_STRIDES = (4, 8, 16, 32)
_PLANES = (64, 128, 256, 512)


def _conv(in_channels, channels, kernel, stride, prefix):
    return nn.Conv2D(channels, kernel, stride, kernel // 2, use_bias=False,
                     in_channels=in_channels, prefix=prefix)


class _ResidualV1b(gluon.HybridBlock):
    """A v1b residual block: ``relu(body(x) + shortcut(x))``.

    The shortcut is the identity, or, when the stride or the width changes,
    ``downsample``: a strided 1x1 convolution and a norm layer (``avg_down``: a
    ``stride`` x ``stride`` average pool, as GluonCV's with ``ceil_mode`` and without
    the padding in the count, then a 1x1 convolution and a norm layer). Subclasses
    build ``body`` in ``_build`` and run it in ``_body``.
    """

    expansion = 1

    def __init__(self, in_channels, planes, stride=1, norm_layer=nn.BatchNorm, norm_kwargs=None,
                 avg_down=False, **kwargs):
        super().__init__(**kwargs)
        self._norm_layer, self._norm_kwargs = norm_layer, dict(norm_kwargs or {})
        out = planes * self.expansion
        with self.name_scope():
            self._build(in_channels, planes, stride)
            if stride != 1 or in_channels != out:
                self.downsample = nn.HybridSequential(prefix='downsample_')
                with self.downsample.name_scope():
                    if avg_down:
                        self.downsample.add(
                            nn.AvgPool2D(stride, stride, ceil_mode=True,
                                         count_include_pad=False, prefix='0_'),
                            _conv(in_channels, out, 1, 1, '1_'), self._norm(out, '2_'))
                    else:
                        self.downsample.add(_conv(in_channels, out, 1, stride, '0_'),
                                            self._norm(out, '1_'))
            else:
                self.downsample = None

    def _norm(self, channels, prefix):
        return self._norm_layer(in_channels=channels, prefix=prefix, **self._norm_kwargs)

    def _build(self, in_channels, planes, stride):
        raise NotImplementedError

    def _body(self, F, x):
        raise NotImplementedError

    def hybrid_forward(self, F, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.Activation(self._body(F, x) + shortcut, act_type='relu')


class BasicBlockV1b(_ResidualV1b):
    """Two 3x3 convolutions, the first strided (ResNet-18/34).

    Parameters
    ----------
    in_channels, planes, stride
        Input channels, output channels, stride.
    norm_layer, norm_kwargs
        Normalization block (built as ``norm_layer(in_channels=c, **norm_kwargs)``).
    avg_down : bool
        Average-pool downsampling in the shortcut (v1d).
    """

    def _build(self, in_channels, planes, stride):
        self.conv1 = _conv(in_channels, planes, 3, stride, 'conv1_')
        self.bn1 = self._norm(planes, 'bn1_')
        self.conv2 = _conv(planes, planes, 3, 1, 'conv2_')
        self.bn2 = self._norm(planes, 'bn2_')

    def _body(self, F, x):
        y = F.Activation(self.bn1(self.conv1(x)), act_type='relu')
        return self.bn2(self.conv2(y))


class BottleneckV1b(_ResidualV1b):
    """1x1, 3x3 (strided), 1x1 to ``4 * planes`` channels (ResNet-50/101).

    Parameters as :class:`BasicBlockV1b`; the output has ``4 * planes`` channels.
    """

    expansion = 4

    def _build(self, in_channels, planes, stride):
        self.conv1 = _conv(in_channels, planes, 1, 1, 'conv1_')
        self.bn1 = self._norm(planes, 'bn1_')
        self.conv2 = _conv(planes, planes, 3, stride, 'conv2_')
        self.bn2 = self._norm(planes, 'bn2_')
        self.conv3 = _conv(planes, planes * 4, 1, 1, 'conv3_')
        self.bn3 = self._norm(planes * 4, 'bn3_')

    def _body(self, F, x):
        y = F.Activation(self.bn1(self.conv1(x)), act_type='relu')
        y = F.Activation(self.bn2(self.conv2(y)), act_type='relu')
        return self.bn3(self.conv3(y))


# depth -> (block, blocks per stage)
_SPECS = {18: (BasicBlockV1b, (2, 2, 2, 2)), 34: (BasicBlockV1b, (3, 4, 6, 3)),
          50: (BottleneckV1b, (3, 4, 6, 3)), 101: (BottleneckV1b, (3, 4, 23, 3)),
          152: (BottleneckV1b, (3, 8, 36, 3))}


class ResNetV1b(gluon.HybridBlock):
    """ResNet v1b or v1d (GluonCV's ``ResNetV1b``, not dilated) without its classifier.

    Parameters
    ----------
    num_layers : int
        18, 34 (basic blocks), 50, 101 or 152 (bottlenecks).
    out_stages : tuple of int
        Stages (1-4, strides 4, 8, 16, 32) whose outputs are returned, increasing. The
        forward stops after the last of them; later layers are still built (and
        loaded) and can be called on their own.
    norm_layer : type
        Normalization block, called as ``norm_layer(in_channels=c, **norm_kwargs)``
        (``nn.BatchNorm``, ``SyncBatchNorm``, ``GroupNorm`` ...).
    norm_kwargs : dict or None
        Extra arguments of every norm layer, e.g. ``{'use_global_stats': True}``.
    deep_stem : bool
        ``conv1`` as three 3x3 convolutions (``stem_width``, ``stem_width``,
        ``2 * stem_width`` channels) with norm layers and ReLUs between (v1d).
    stem_width : int
        Width of the deep stem (GluonCV's v1d: 32).
    avg_down : bool
        Average-pool downsampling in the shortcuts (v1d).

    Attributes
    ----------
    num_layers : int
    deep_stem, avg_down : bool
    out_channels, out_strides : tuple of int
        Channels and stride of each output, in the order of ``out_stages``.
    layer1, layer2, layer3, layer4 : nn.HybridSequential
        The stages; ``layers`` is the tuple of them, ``stem(x)`` runs what precedes them.

    Input ``B x 3 x H x W``; output a list of ``B x C_s x H/stride_s x W/stride_s``
    maps, one per ``out_stages`` (rounding as a 3x3 pad-1 stride-2 convolution does).
    The same in training and inference. See the module docstring for the parts.
    """

    def __init__(self, num_layers=50, out_stages=(1, 2, 3, 4), norm_layer=nn.BatchNorm,
                 norm_kwargs=None, deep_stem=False, stem_width=32, avg_down=False, **kwargs):
        super().__init__(**kwargs)
        if num_layers not in _SPECS:
            raise ValueError('ResNetV1b: num_layers must be one of %s, got %r'
                             % (sorted(_SPECS), num_layers))
        out_stages = tuple(out_stages)
        if not out_stages or list(out_stages) != sorted(set(out_stages)) \
                or not set(out_stages) <= {1, 2, 3, 4}:
            raise ValueError('ResNetV1b: out_stages must be increasing stage numbers in 1-4, '
                             'got %r' % (out_stages,))
        self._out_stages = out_stages
        self.num_layers = num_layers
        self.deep_stem, self.avg_down = deep_stem, avg_down
        block, depths = _SPECS[num_layers]
        norm_kwargs = dict(norm_kwargs or {})
        self.out_channels = tuple(_PLANES[s - 1] * block.expansion for s in out_stages)
        self.out_strides = tuple(_STRIDES[s - 1] for s in out_stages)
        in_channels = 2 * stem_width if deep_stem else 64
        with self.name_scope():
            if deep_stem:
                self.conv1 = self._deep_stem(stem_width, norm_layer, norm_kwargs)
            else:
                self.conv1 = _conv(3, 64, 7, 2, 'conv1_')
            self.bn1 = norm_layer(in_channels=in_channels, prefix='bn1_', **norm_kwargs)
            self.relu = nn.Activation('relu')
            self.maxpool = nn.MaxPool2D(3, 2, 1)
            for number, (planes, depth) in enumerate(zip(_PLANES, depths), start=1):
                layer = nn.HybridSequential(prefix='layer%d_' % number)
                with layer.name_scope():
                    for index in range(depth):
                        stride = 2 if index == 0 and number > 1 else 1
                        layer.add(block(in_channels, planes, stride, norm_layer, norm_kwargs,
                                        avg_down, prefix='%d_' % index))
                        in_channels = planes * block.expansion
                setattr(self, 'layer%d' % number, layer)

    @staticmethod
    def _deep_stem(width, norm_layer, norm_kwargs):
        """v1d's conv1: GluonCV's child indices (convolutions 0, 3, 6; norm layers 1, 4)."""
        stem = nn.HybridSequential(prefix='conv1_')
        with stem.name_scope():
            stem.add(_conv(3, width, 3, 2, '0_'),
                     norm_layer(in_channels=width, prefix='1_', **norm_kwargs),
                     nn.Activation('relu'),
                     _conv(width, width, 3, 1, '3_'),
                     norm_layer(in_channels=width, prefix='4_', **norm_kwargs),
                     nn.Activation('relu'),
                     _conv(width, 2 * width, 3, 1, '6_'))
        return stem

    @property
    def layers(self):
        """``(layer1, layer2, layer3, layer4)``."""
        return self.layer1, self.layer2, self.layer3, self.layer4

    def stem(self, x):
        """conv1, bn1, relu, max pool: stride 4, 64 channels (``2 * stem_width`` with the deep
        stem; NDArray or Symbol)."""
        return self.maxpool(self.relu(self.bn1(self.conv1(x))))

    def stage_params(self, *stages):
        """The ``ParameterDict`` of the named stages: ``'stem'``, ``'layer1'`` .. ``'layer4'``."""
        unknown = [s for s in stages if s not in STAGES]
        if unknown:
            raise ValueError('ResNetV1b has no stage %s; stages: %s'
                             % (', '.join(map(repr, unknown)), ', '.join(STAGES)))
        params = gluon.ParameterDict(self.prefix)
        for stage in stages:
            for part in (self.conv1, self.bn1) if stage == 'stem' else (getattr(self, stage),):
                params.update(part.collect_params())
        return params

    def hybrid_forward(self, F, x):
        x = self.stem(x)
        outputs = []
        for number, layer in enumerate(self.layers[:self._out_stages[-1]], start=1):
            x = layer(x)
            if number in self._out_stages:
                outputs.append(x)
        return outputs


def resnet18_v1b(**kwargs):
    """ResNet-18 v1b (GluonCV weights ``resnet18_v1b``); ``kwargs`` as :class:`ResNetV1b`."""
    return ResNetV1b(18, **kwargs)


def resnet34_v1b(**kwargs):
    """ResNet-34 v1b (GluonCV weights ``resnet34_v1b``); ``kwargs`` as :class:`ResNetV1b`."""
    return ResNetV1b(34, **kwargs)


def resnet50_v1b(**kwargs):
    """ResNet-50 v1b (GluonCV weights ``resnet50_v1b``); ``kwargs`` as :class:`ResNetV1b`."""
    return ResNetV1b(50, **kwargs)


def resnet101_v1b(**kwargs):
    """ResNet-101 v1b (GluonCV weights ``resnet101_v1b``); ``kwargs`` as :class:`ResNetV1b`."""
    return ResNetV1b(101, **kwargs)


def resnet101_v1d(**kwargs):
    """ResNet-101 v1d (GluonCV weights ``resnet101_v1d``): the deep stem and average-pool
    downsampling; ``kwargs`` as :class:`ResNetV1b`."""
    return ResNetV1b(101, deep_stem=True, avg_down=True, **kwargs)
