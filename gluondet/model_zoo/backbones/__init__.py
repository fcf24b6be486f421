"""Backbones as feature extractors, by their GluonCV ImageNet-weight names."""
from .darknet import DarkNet, darknet53
from .mobilenet import MobileNet, mobilenet0_5, mobilenet0_25, mobilenet1_0
from .resnet import ResNetV1, resnet50_v1
from .resnet_v1b import (ResNetV1b, resnet18_v1b, resnet34_v1b, resnet50_v1b, resnet101_v1b,
                         resnet101_v1d)
from .vgg import VGGAtrous, vgg16_atrous

__all__ = ['DarkNet', 'MobileNet', 'ResNetV1', 'ResNetV1b', 'VGGAtrous', 'BACKBONES',
           'get_backbone']

# weight-file name -> builder
BACKBONES = {
    'vgg16_atrous': vgg16_atrous,
    'resnet50_v1': resnet50_v1,
    'resnet18_v1b': resnet18_v1b,
    'resnet34_v1b': resnet34_v1b,
    'resnet50_v1b': resnet50_v1b,
    'resnet101_v1b': resnet101_v1b,
    'resnet101_v1d': resnet101_v1d,
    'darknet53': darknet53,
    'mobilenet1.0': mobilenet1_0,
    'mobilenet0.5': mobilenet0_5,
    'mobilenet0.25': mobilenet0_25,
}


def get_backbone(name, **kwargs):
    """Build the backbone called ``name`` (a key of ``BACKBONES``), without weights."""
    if name not in BACKBONES:
        raise ValueError('unknown backbone %r; known: %s' % (name, ', '.join(sorted(BACKBONES))))
    return BACKBONES[name](**kwargs)
