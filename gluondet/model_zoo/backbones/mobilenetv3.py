"""MobileNetV3 large and small (Howard et al. 2019, arXiv:1905.02244) as GluonCV's
``mobilenetv3_large`` / ``mobilenetv3_small`` build them, up to the last 1x1 convolution
before the pooling: the backbone of the ``center_net_mobilenetv3_*_duc`` networks.

``features`` is GluonCV's sequential cut before its global pool (stem convolution, norm,
hard swish, the inverted residual units, the 1x1 convolution, norm, hard swish), a unit's
parts named as GluonCV's (``expand``, ``conv1`` the depthwise one, ``se`` with ``conv1`` and
``conv2``, ``conv2`` the linear one; each ``conv``, ``bn``), so the keys ``features.{i}.*`` of
GluonCV's ImageNet file are ours (:func:`load_gluoncv_mobilenetv3` leaves out the rest).
"""
import math

from mxnet import gluon
from mxnet.gluon import nn

from ..gluoncv_compat import load_arrays, read_params

__all__ = ['MobileNetV3', 'mobilenetv3_large', 'mobilenetv3_small',
           'load_gluoncv_mobilenetv3']

# per unit: kernel, expanded channels, output channels, squeeze-excitation, activation, stride
_LARGE = ((3, 16, 16, False, 'relu', 1), (3, 64, 24, False, 'relu', 2),
          (3, 72, 24, False, 'relu', 1), (5, 72, 40, True, 'relu', 2),
          (5, 120, 40, True, 'relu', 1), (5, 120, 40, True, 'relu', 1),
          (3, 240, 80, False, 'hard_swish', 2), (3, 200, 80, False, 'hard_swish', 1),
          (3, 184, 80, False, 'hard_swish', 1), (3, 184, 80, False, 'hard_swish', 1),
          (3, 480, 112, True, 'hard_swish', 1), (3, 672, 112, True, 'hard_swish', 1),
          (5, 672, 160, True, 'hard_swish', 2), (5, 960, 160, True, 'hard_swish', 1),
          (5, 960, 160, True, 'hard_swish', 1))
_SMALL = ((3, 16, 16, True, 'relu', 2), (3, 72, 24, False, 'relu', 2),
          (3, 88, 24, False, 'relu', 1), (5, 96, 40, True, 'hard_swish', 2),
          (5, 240, 40, True, 'hard_swish', 1), (5, 240, 40, True, 'hard_swish', 1),
          (5, 120, 48, True, 'hard_swish', 1), (5, 144, 48, True, 'hard_swish', 1),
          (5, 288, 96, True, 'hard_swish', 2), (5, 576, 96, True, 'hard_swish', 1),
          (5, 576, 96, True, 'hard_swish', 1))
# kind -> (units, channels of the last 1x1 convolution)
_SPECS = {'large': (_LARGE, 960), 'small': (_SMALL, 576)}


def _divisible(x, by=8):
    return int(math.ceil(x / by) * by)


def _activate(F, x, kind):
    if kind == 'relu':
        return F.Activation(x, act_type='relu')
    if kind == 'hard_sigmoid':
        return F.clip(x + 3.0, 0, 6) / 6.0
    return x * (F.clip(x + 3.0, 0, 6) / 6.0)      # hard swish


class HardSwish(gluon.HybridBlock):
    """``x * relu6(x + 3) / 6``."""

    def hybrid_forward(self, F, x):
        return _activate(F, x, 'hard_swish')


class _ConvNorm(gluon.HybridBlock):
    """Convolution without bias, norm, then ``act`` (None: none)."""

    def __init__(self, channels, kernel, stride=1, groups=1, act='relu', norm_layer=nn.BatchNorm,
                 norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        self.act = act
        with self.name_scope():
            self.conv = nn.Conv2D(channels, kernel, stride, kernel // 2, groups=groups,
                                  use_bias=False)
            self.bn = norm_layer(**(norm_kwargs or {}))

    def hybrid_forward(self, F, x):
        x = self.bn(self.conv(x))
        return x if self.act is None else _activate(F, x, self.act)


class _SqueezeExcite(gluon.HybridBlock):
    """Channel gates: global pool, 1x1 to a quarter (rounded up to 8) with ReLU, 1x1 back
    with a hard sigmoid."""

    def __init__(self, channels, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv1 = nn.Conv2D(_divisible(channels // 4), 1)
            self.conv2 = nn.Conv2D(channels, 1)

    def hybrid_forward(self, F, x):
        pooled = F.Pooling(x, kernel=(1, 1), global_pool=True, pool_type='avg')
        gate = F.Activation(self.conv1(pooled), act_type='relu')
        return F.broadcast_mul(x, _activate(F, self.conv2(gate), 'hard_sigmoid'))


class _InvertedResidual(gluon.HybridBlock):
    """1x1 expansion (when the widths differ), depthwise ``kernel``, optional
    squeeze-excitation, linear 1x1; the input added back when the shape is kept."""

    def __init__(self, in_channels, kernel, expanded, channels, se, act, stride, norm_layer,
                 norm_kwargs, **kwargs):
        super().__init__(**kwargs)
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        self.shortcut = in_channels == channels and stride == 1
        with self.name_scope():
            self.expand = _ConvNorm(expanded, 1, act=act, **norm) if expanded != channels \
                else None
            self.conv1 = _ConvNorm(expanded, kernel, stride, groups=expanded, act=act, **norm)
            self.se = _SqueezeExcite(expanded) if se else None
            self.conv2 = _ConvNorm(channels, 1, act=None, **norm)

    def hybrid_forward(self, F, x):
        y = x if self.expand is None else self.expand(x)
        y = self.conv1(y)
        y = y if self.se is None else self.se(y)
        y = self.conv2(y)
        return x + y if self.shortcut else y


class MobileNetV3(gluon.HybridBlock):
    """MobileNetV3 up to its last 1x1 convolution (stride 32).

    Parameters
    ----------
    kind : str
        'large' (960 output channels) or 'small' (576).
    multiplier : float
        Width multiplier (GluonCV's zoo: 1.0).
    norm_layer, norm_kwargs
        Normalization block and its extra arguments.

    Attribute ``out_channels``. Input ``B x 3 x H x W``, output the ``B x C x H/32 x W/32``
    map (the same in training and inference).
    """

    def __init__(self, kind='large', multiplier=1.0, norm_layer=nn.BatchNorm, norm_kwargs=None,
                 **kwargs):
        super().__init__(**kwargs)
        if kind not in _SPECS:
            raise ValueError('MobileNetV3: kind must be one of %s, got %r'
                             % (sorted(_SPECS), kind))
        units, last = _SPECS[kind]
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        self.out_channels = _divisible(multiplier * last)
        with self.name_scope():
            self.features = nn.HybridSequential()
            in_channels = _divisible(multiplier * 16)
            self.features.add(nn.Conv2D(in_channels, 3, 2, 1, use_bias=False),
                              norm_layer(**(norm_kwargs or {})), HardSwish())
            for kernel, expanded, channels, se, act, stride in units:
                channels = _divisible(multiplier * channels)
                self.features.add(_InvertedResidual(in_channels, kernel,
                                                    _divisible(multiplier * expanded), channels,
                                                    se, act, stride, **norm))
                in_channels = channels
            self.features.add(nn.Conv2D(self.out_channels, 1, use_bias=False),
                              norm_layer(**(norm_kwargs or {})), HardSwish())

    def hybrid_forward(self, F, x):
        return self.features(x)


def mobilenetv3_large(**kwargs):
    """MobileNetV3 large (GluonCV weights ``mobilenetv3_large``); ``kwargs`` as
    :class:`MobileNetV3`."""
    return MobileNetV3('large', **kwargs)


def mobilenetv3_small(**kwargs):
    """MobileNetV3 small (GluonCV weights ``mobilenetv3_small``); ``kwargs`` as
    :class:`MobileNetV3`."""
    return MobileNetV3('small', **kwargs)


def load_gluoncv_mobilenetv3(backbone, filename, ctx=None):
    """Load GluonCV's ImageNet ``mobilenetv3_*`` ``.params`` into a :class:`MobileNetV3`:
    its ``features`` up to the pooling (the layers after it and the classifier ``output.*``
    are left out); any other mismatch raises ValueError listing it."""
    kept = len(backbone.features)
    arrays = {k: v for k, v in read_params(filename).items()
              if k.startswith('features.') and int(k.split('.')[1]) < kept}
    load_arrays(backbone, arrays, '%s (for MobileNetV3)' % filename, ctx=ctx)
