"""The registry of model names: ``get_model(name)`` and ``get_model_list()``."""
import difflib
import os
from collections import namedtuple

import mxnet as mx

from ..class_names import COCO_CLASSES, VOC_CLASSES

__all__ = ['VOC_CLASSES', 'COCO_CLASSES', 'ModelInfo', 'register_model', 'get_model',
           'get_model_list', 'get_model_info', 'weights_file']

ModelInfo = namedtuple('ModelInfo', ['name', 'builder', 'classes', 'data_shape', 'backbone',
                                     'dataset', 'has_weights'])
ModelInfo.__doc__ = """What a registered name builds.

name : the registered name.
builder : callable(pretrained, pretrained_base, ctx, root, **kwargs) -> network.
classes : tuple of class names, or None when the caller gives them (``*_custom``).
data_shape : (height, width) the network was designed and trained for.
backbone : name of the backbone's ImageNet weights (``mobilenet1.0``, ...).
dataset : 'voc', 'coco' or 'custom'.
has_weights : whether ``pretrained=True`` has published weights to load.
"""

_REGISTRY = {}


def register_model(name, classes, data_shape, backbone, dataset, has_weights=True):
    """Decorator registering a network builder under ``name`` with its metadata.

    Raises ValueError if ``name`` is registered already.
    """
    def decorate(builder):
        if name in _REGISTRY:
            raise ValueError('model %r is already registered by %s'
                             % (name, _REGISTRY[name].builder.__qualname__))
        _REGISTRY[name] = ModelInfo(name, builder, None if classes is None else tuple(classes),
                                    tuple(data_shape), backbone, dataset, has_weights)
        return builder
    return decorate


def get_model_info(name):
    """The :class:`ModelInfo` of ``name``; unknown names raise ValueError with suggestions."""
    key = name.lower()
    if key not in _REGISTRY:
        close = difflib.get_close_matches(key, _REGISTRY, n=3, cutoff=0.6)
        hint = ('; did you mean %s?' % ' or '.join(repr(c) for c in close)) if close else ''
        raise ValueError('unknown model %r%s (get_model_list() lists the %d names)'
                         % (name, hint, len(_REGISTRY)))
    return _REGISTRY[key]


def get_model(name, pretrained=False, pretrained_base=True, ctx=mx.cpu(),
              root=os.path.join('~', '.mxnet', 'models'), **kwargs):
    """Build a network of the model zoo by its GluonCV-style name.

    Parameters
    ----------
    name : str
        For example ``ssd_512_mobilenet1.0_voc``; see :func:`get_model_list`.
    pretrained : bool
        Load the published weights of ``name`` (from ``root``, else downloaded).
    pretrained_base : bool
        Load ImageNet weights into the backbone (ignored when ``pretrained``).
    ctx : Context
        Where loaded weights go.
    root : str
        Folder of weight files, GluonCV's layout (``{name}-{sha1[:8]}.params``).
    **kwargs
        Passed to the builder: ``classes`` for ``*_custom`` names,
        ``norm_layer``/``norm_kwargs``, NMS settings.

    Returns
    -------
    HybridBlock
        Parameters not loaded from a file are left uninitialized (call
        ``net.initialize()``), as in GluonCV.
    """
    info = get_model_info(name)
    return info.builder(pretrained=pretrained, pretrained_base=pretrained_base, ctx=ctx,
                        root=root, **kwargs)


def get_model_list():
    """All registered names, in registration order."""
    return list(_REGISTRY)


def weights_file(name, root):
    """Path of the weight file ``name`` in ``root``, downloaded if needed (the default root
    follows ``MXNET_HOME``, as GluonCV's)."""
    from .store import get_model_file
    return get_model_file(name, root=root)
