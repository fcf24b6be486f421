"""VGG-16 with atrous fc6/fc7 (SSD's base network) as a feature extractor."""
import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn

__all__ = ['L2Norm', 'VGGAtrous', 'vgg16_atrous', 'vgg_init']

_VGG16 = ((2, 64), (2, 128), (3, 256), (3, 512), (3, 512))  # (convs, channels) per stage
# GluonCV's ImageNet weights come from Caffe (0-255 inputs): the input, normalized
# with ImageNet mean/std, is multiplied back by std * 255.
_IMAGENET_STD = (0.229, 0.224, 0.225)


def vgg_init():
    """Keyword arguments giving a Conv2D SSD's VGG initialization."""
    return dict(weight_initializer=mx.init.Xavier(rnd_type='gaussian', factor_type='out',
                                                  magnitude=2),
                bias_initializer='zeros')


class L2Norm(gluon.HybridBlock):
    """L2-normalize over channels, then multiply by a learned per-channel scale.

    Parameters
    ----------
    channels : int
        Number of input channels.
    scale : float
        Initial scale (SSD: 20 for conv4_3).
    eps : float
        Added to the norm.
    """

    def __init__(self, channels, scale=20.0, eps=1e-5, **kwargs):
        super().__init__(**kwargs)
        self._eps = eps
        with self.name_scope():
            self.scale = self.params.get('scale', shape=(1, channels, 1, 1),
                                         init=mx.init.Constant(scale))

    def hybrid_forward(self, F, x, scale):
        return F.broadcast_mul(F.L2Normalization(x, mode='channel', eps=self._eps), scale)


class VGGAtrous(gluon.HybridBlock):
    """VGG-16 whose fc6/fc7 are convolutions (fc6 dilated 6), as in SSD.

    Returns ``[L2Norm(conv4_3), fc7]``: strides 8 and 16. Pooling rounds up
    (Caffe's convention) and pool5 is 3x3 stride 1.

    Parameters
    ----------
    norm_scale : float
        Initial scale of the conv4_3 L2 normalization.
    """

    def __init__(self, norm_scale=20.0, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.init_scale = self.params.get_constant(
                'init_scale', mx.nd.array(_IMAGENET_STD).reshape((1, 3, 1, 1)) * 255)
            for number, (convs, channels) in enumerate(_VGG16, start=1):
                stage = nn.HybridSequential(prefix='stage%d_' % number)
                with stage.name_scope():
                    for _ in range(convs):
                        stage.add(nn.Conv2D(channels, 3, padding=1, activation='relu',
                                            **vgg_init()))
                setattr(self, 'stage%d' % number, stage)
            self.fc6 = nn.Conv2D(1024, 3, padding=6, dilation=6, activation='relu', **vgg_init())
            self.fc7 = nn.Conv2D(1024, 1, activation='relu', **vgg_init())
            self.conv4_3_norm = L2Norm(_VGG16[3][1], norm_scale)

    def hybrid_forward(self, F, x, init_scale):
        x = F.broadcast_mul(x, init_scale)
        for stage in (self.stage1, self.stage2, self.stage3):
            x = _pool(F, stage(x))
        conv4_3 = self.stage4(x)
        x = self.stage5(_pool(F, conv4_3))
        x = F.Pooling(x, pool_type='max', kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                      pooling_convention='full')
        fc7 = self.fc7(self.fc6(x))
        return [self.conv4_3_norm(conv4_3), fc7]


def _pool(F, x):
    return F.Pooling(x, pool_type='max', kernel=(2, 2), stride=(2, 2), pooling_convention='full')


def vgg16_atrous(**kwargs):
    """VGG-16 atrous (GluonCV weights ``vgg16_atrous``)."""
    return VGGAtrous(**kwargs)
