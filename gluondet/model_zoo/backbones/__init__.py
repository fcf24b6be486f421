"""Backbones as feature extractors, by their GluonCV ImageNet-weight names."""
from .mobilenet import MobileNet, mobilenet0_5, mobilenet0_25, mobilenet1_0
from .resnet import ResNetV1, resnet50_v1
from .vgg import VGGAtrous, vgg16_atrous

__all__ = ['MobileNet', 'ResNetV1', 'VGGAtrous', 'BACKBONES', 'get_backbone']

# weight-file name -> builder
BACKBONES = {
    'vgg16_atrous': vgg16_atrous,
    'resnet50_v1': resnet50_v1,
    'mobilenet1.0': mobilenet1_0,
    'mobilenet0.5': mobilenet0_5,
    'mobilenet0.25': mobilenet0_25,
}


def get_backbone(name, **kwargs):
    """Build the backbone called ``name`` (a key of ``BACKBONES``), without weights."""
    if name not in BACKBONES:
        raise ValueError('unknown backbone %r; known: %s' % (name, ', '.join(sorted(BACKBONES))))
    return BACKBONES[name](**kwargs)
