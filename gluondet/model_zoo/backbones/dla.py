"""DLA-34 (Yu et al. 2018, Deep Layer Aggregation, arXiv:1707.06484) as GluonCV's ``dla34``
builds it, as a feature extractor: the backbone of ``center_net_dla34``.

The attribute names are GluonCV's (``base_layer``, ``level0`` .. ``level5``; a level 2-5 is a
``Tree`` of ``tree1``, ``tree2``, ``root``, ``project``; a block has ``conv1``, ``bn1``,
``conv2``, ``bn2``), so the structural keys of GluonCV's ImageNet file
(``level3.tree1.tree2.conv1.weight``) are ours; its classifier ``fc.*`` is left out
(:func:`load_gluoncv_dla`).
"""
from mxnet import gluon
from mxnet.gluon import nn

from ..gluoncv_compat import load_arrays, read_params

__all__ = ['DLA', 'dla34', 'load_gluoncv_dla']


def _norm(norm_layer, norm_kwargs, channels, **kwargs):
    return norm_layer(in_channels=channels, **dict(norm_kwargs, **kwargs))


class DLABasicBlock(gluon.HybridBlock):
    """Two 3x3 convolutions (the first strided) and a residual: ``relu(body(x) + residual)``.

    Called as ``block(x, residual)``: the residual is given by the tree (the identity or
    its projection of the downsampled input).
    """

    def __init__(self, in_channels, channels, stride=1, norm_layer=nn.BatchNorm,
                 norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        norm_kwargs = norm_kwargs or {}
        with self.name_scope():
            self.conv1 = nn.Conv2D(channels, 3, stride, 1, use_bias=False,
                                   in_channels=in_channels)
            self.bn1 = _norm(norm_layer, norm_kwargs, channels)
            self.conv2 = nn.Conv2D(channels, 3, 1, 1, use_bias=False, in_channels=channels)
            self.bn2 = _norm(norm_layer, norm_kwargs, channels)

    def hybrid_forward(self, F, x, residual):
        y = F.Activation(self.bn1(self.conv1(x)), act_type='relu')
        return F.Activation(self.bn2(self.conv2(y)) + residual, act_type='relu')


class Root(gluon.HybridBlock):
    """A 1x1 convolution, norm and ReLU over the concatenation of its inputs (the first
    added back when ``residual``)."""

    def __init__(self, in_channels, channels, residual=False, norm_layer=nn.BatchNorm,
                 norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        self.residual = residual
        with self.name_scope():
            self.conv = nn.Conv2D(channels, 1, use_bias=False, in_channels=in_channels)
            self.bn = _norm(norm_layer, norm_kwargs or {}, channels)

    def hybrid_forward(self, F, *inputs):
        y = self.bn(self.conv(F.concat(*inputs, dim=1)))
        return F.Activation(y + inputs[0] if self.residual else y, act_type='relu')


class Tree(gluon.HybridBlock):
    """A DLA aggregation tree of ``levels`` levels of basic blocks (GluonCV's ``Tree``).

    Parameters
    ----------
    levels : int
        1: two blocks and a root; more: two sub-trees, the second aggregating the first's.
    in_channels, channels : int
    stride : int
        A max pool of this stride (``downsample``) before the first block.
    level_root : bool
        Whether the downsampled input joins the root.
    root_dim : int
        Input channels of the root (0: twice ``channels``).
    root_residual : bool
    norm_layer, norm_kwargs
    """

    def __init__(self, levels, in_channels, channels, stride=1, level_root=False, root_dim=0,
                 root_residual=False, norm_layer=nn.BatchNorm, norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        root_dim = (root_dim or 2 * channels) + (in_channels if level_root else 0)
        self.levels = levels
        self.level_root = level_root
        with self.name_scope():
            self.downsample = nn.HybridSequential()
            if stride > 1:
                self.downsample.add(nn.MaxPool2D(stride, stride))
            self.project = nn.HybridSequential()
            if levels == 1:
                self.tree1 = DLABasicBlock(in_channels, channels, stride, **norm)
                self.tree2 = DLABasicBlock(channels, channels, 1, **norm)
                if in_channels != channels:
                    self.project.add(nn.Conv2D(channels, 1, use_bias=False,
                                               in_channels=in_channels),
                                     _norm(norm_layer, norm_kwargs or {}, channels))
                self.root = Root(root_dim, channels, root_residual, **norm)
            else:
                self.tree1 = Tree(levels - 1, in_channels, channels, stride,
                                  root_residual=root_residual, **norm)
                self.tree2 = Tree(levels - 1, channels, channels, root_dim=root_dim + channels,
                                  root_residual=root_residual, **norm)

    def aggregate(self, x, children=()):
        """The tree's output for ``x``; ``children`` are earlier outputs joining the root."""
        bottom = self.downsample(x)
        children = list(children) + ([bottom] if self.level_root else [])
        if self.levels == 1:
            first = self.tree1(x, self.project(bottom))
            return self.root(self.tree2(first, first), first, *children)
        first = self.tree1.aggregate(x)
        return self.tree2.aggregate(first, children + [first])

    def hybrid_forward(self, F, x):
        return self.aggregate(x)


class DLA(gluon.HybridBlock):
    """Deep Layer Aggregation without its classifier (GluonCV's ``DLA(use_feature=True)``).

    Parameters
    ----------
    levels : sequence of int
        Convolutions of levels 0 and 1, tree depths of levels 2 to 5.
    channels : sequence of int
        Output channels of the six levels.
    norm_layer, norm_kwargs
        Normalization (built as ``norm_layer(in_channels=c, momentum=0.9, **norm_kwargs)``).

    Attributes ``channels`` and ``strides`` are the six outputs'. Input ``B x 3 x H x W``,
    output the list of the six levels' maps, strides 1, 2, 4, 8, 16, 32 (the same in
    training and inference).
    """

    strides = (1, 2, 4, 8, 16, 32)

    def __init__(self, levels, channels, norm_layer=nn.BatchNorm, norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        self.channels = tuple(channels)
        norm_kwargs = dict({'momentum': 0.9}, **(norm_kwargs or {}))
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        with self.name_scope():
            self.base_layer = nn.HybridSequential()
            self.base_layer.add(nn.Conv2D(channels[0], 7, 1, 3, use_bias=False, in_channels=3),
                                _norm(norm_layer, norm_kwargs, channels[0]),
                                nn.Activation('relu'))
            self.level0 = self._conv_level(channels[0], channels[0], levels[0], 1, **norm)
            self.level1 = self._conv_level(channels[0], channels[1], levels[1], 2, **norm)
            for i in range(2, 6):
                setattr(self, 'level%d' % i, Tree(levels[i], channels[i - 1], channels[i], 2,
                                                  level_root=i > 2, **norm))

    @staticmethod
    def _conv_level(in_channels, channels, convs, stride, norm_layer, norm_kwargs):
        level = nn.HybridSequential()
        for i in range(convs):
            level.add(nn.Conv2D(channels, 3, stride if i == 0 else 1, 1, use_bias=False,
                                in_channels=in_channels),
                      _norm(norm_layer, norm_kwargs, channels), nn.Activation('relu'))
            in_channels = channels
        return level

    def hybrid_forward(self, F, x):
        x = self.base_layer(x)
        outputs = []
        for i in range(6):
            x = getattr(self, 'level%d' % i)(x)
            outputs.append(x)
        return outputs


def dla34(**kwargs):
    """DLA-34 (GluonCV weights ``dla34``); ``kwargs`` as :class:`DLA`."""
    return DLA((1, 1, 1, 2, 2, 1), (16, 32, 64, 128, 256, 512), **kwargs)


def load_gluoncv_dla(backbone, filename, ctx=None):
    """Load GluonCV's ImageNet ``dla34`` ``.params`` into a :class:`DLA` (the classifier
    ``fc.*`` left out); any other mismatch raises ValueError listing it."""
    arrays = {k: v for k, v in read_params(filename).items() if not k.startswith('fc.')}
    load_arrays(backbone, arrays, '%s (for DLA)' % filename, ctx=ctx)
