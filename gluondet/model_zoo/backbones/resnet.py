"""ResNet v1 (bottleneck) as a detection feature extractor."""
from mxnet import gluon
from mxnet.gluon import nn

__all__ = ['BottleneckV1', 'ResNetV1', 'resnet50_v1']

# blocks per stage
_DEPTHS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
_CHANNELS = (256, 512, 1024, 2048)


class BottleneckV1(gluon.HybridBlock):
    """ResNet v1 bottleneck: 1x1 (strided), 3x3, 1x1, plus the shortcut.

    As in GluonCV's ``resnet*_v1``, the two 1x1 convolutions have a bias and
    the stride sits on the first 1x1. ``project`` adds a 1x1 projection
    shortcut (first block of a stage).
    """

    def __init__(self, channels, stride, project, norm_layer=nn.BatchNorm, norm_kwargs=None,
                 **kwargs):
        super().__init__(**kwargs)
        norm_kwargs = norm_kwargs or {}
        mid = channels // 4
        with self.name_scope():
            self.conv1 = nn.Conv2D(mid, 1, stride)
            self.bn1 = norm_layer(**norm_kwargs)
            self.conv2 = nn.Conv2D(mid, 3, 1, 1, use_bias=False)
            self.bn2 = norm_layer(**norm_kwargs)
            self.conv3 = nn.Conv2D(channels, 1)
            self.bn3 = norm_layer(**norm_kwargs)
            if project:
                self.proj_conv = nn.Conv2D(channels, 1, stride, use_bias=False)
                self.proj_bn = norm_layer(**norm_kwargs)
            else:
                self.proj_conv = self.proj_bn = None

    def hybrid_forward(self, F, x):
        y = F.Activation(self.bn1(self.conv1(x)), act_type='relu')
        y = F.Activation(self.bn2(self.conv2(y)), act_type='relu')
        y = self.bn3(self.conv3(y))
        shortcut = x if self.proj_conv is None else self.proj_bn(self.proj_conv(x))
        return F.Activation(y + shortcut, act_type='relu')


class ResNetV1(gluon.HybridBlock):
    """ResNet v1 (He et al. 2015) with bottleneck blocks, without its classifier.

    Parameters
    ----------
    num_layers : int
        50, 101 or 152.
    out_stages : tuple of int
        Stages (1-4) whose outputs are returned; SSD takes 3 (stride 16) and 4 (stride 32).
    norm_layer, norm_kwargs
        Normalization block and its extra arguments.

    Input ``B x 3 x H x W``; output a list of feature maps, one per ``out_stages``.
    """

    def __init__(self, num_layers=50, out_stages=(3, 4), norm_layer=nn.BatchNorm,
                 norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        if num_layers not in _DEPTHS:
            raise ValueError('ResNetV1: num_layers must be one of %s, got %r'
                             % (sorted(_DEPTHS), num_layers))
        self._out_stages = tuple(out_stages)
        norm = dict(norm_layer=norm_layer, norm_kwargs=norm_kwargs)
        with self.name_scope():
            self.conv1 = nn.Conv2D(64, 7, 2, 3, use_bias=False)
            self.bn1 = norm_layer(**(norm_kwargs or {}))
            self.stages = nn.HybridSequential()
            for index, (depth, channels) in enumerate(zip(_DEPTHS[num_layers], _CHANNELS)):
                stage = nn.HybridSequential()
                with stage.name_scope():
                    for block in range(depth):
                        stride = 2 if block == 0 and index > 0 else 1
                        stage.add(BottleneckV1(channels, stride, block == 0, **norm))
                self.stages.add(stage)

    def hybrid_forward(self, F, x):
        x = F.Activation(self.bn1(self.conv1(x)), act_type='relu')
        x = F.Pooling(x, pool_type='max', kernel=(3, 3), stride=(2, 2), pad=(1, 1))
        outputs = []
        for number, stage in enumerate(self.stages, start=1):
            x = stage(x)
            if number in self._out_stages:
                outputs.append(x)
        return outputs


def resnet50_v1(**kwargs):
    """ResNet-50 v1 (GluonCV weights ``resnet50_v1``)."""
    return ResNetV1(50, **kwargs)
