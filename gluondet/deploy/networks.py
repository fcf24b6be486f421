"""Gluon networks of deploy: a model zoo name or a training output with its weights.

A training output is a ``.params`` with the json the engine wrote beside it
(:mod:`gluondet.metadata`): its network, classes, sizes, anchor steps and, for a pruned
model, its channel table (:mod:`gluondet.model_zoo.pruned`) rebuild the network it holds.
"""
import os

import mxnet as mx
import numpy as np

from ..data.preprocess import padded_shape, preprocessing_of
from ..metadata import training_meta
from ..model_zoo import get_model, get_model_info
from ..model_zoo.pruned import apply_channels, pruned_channels
from .sources import agree, shape_pair

__all__ = ['apply_nms', 'load_network']


def load_network(model, params=None, pretrained=False, classes=None, data_shape=None, ctx=None):
    """A model zoo network with its weights, from a zoo name or a training output.

    Parameters
    ----------
    model : str
        A zoo name (``ssd_300_mobilenet0.25_voc``), or a ``.params`` file with the
        training's ``.json`` beside it.
    params : str, optional
        Weights for a zoo name (gluondet or GluonCV ``.params``); if the training's
        ``.json`` is beside it, its classes, sizes and anchor steps are used.
    pretrained : bool
        Load the zoo name's published weights instead.
    classes : sequence of str, optional
        Class names of a ``*_custom`` name without a training json; otherwise
        checked against the network's.
    data_shape : int or (int, int), optional
        Input ``(height, width)``. SSD: the size images are resized to, default the
        training's, else the zoo's. Faster R-CNN and RetinaNet (each image keeps its
        aspect ratio): the input of an export at one size, default ``short x max_size``
        rounded up to the network's multiple (every landscape image fits).
    ctx : Context, optional
        Default: the CPU.

    Returns
    -------
    net : DetectionNet (:mod:`gluondet.model_zoo`)
        Hybridized, weights loaded; a Faster R-CNN's ``short`` and ``max_size`` are
        the training's.
    info : dict
        ``network``, ``classes`` (tuple), ``data_shape`` ``(height, width)`` and
        ``preprocessing`` (see :mod:`gluondet.data.preprocess`).
    """
    ctx = ctx or mx.cpu()
    if model.lower().endswith('.params'):
        if params is not None or pretrained:
            raise ValueError('%s is already a params file: give params/pretrained only with a '
                             'model zoo name' % model)
        if not os.path.isfile(model):
            raise FileNotFoundError('params file not found: %s' % model)
        meta = training_meta(model)
        if meta is None:
            raise ValueError('%s has no training json (%s) beside it: give the model zoo name, '
                             'with this file as its params'
                             % (model, os.path.splitext(model)[0] + '.json'))
        network, params = meta['network'], model
    else:
        network, meta = model, None
        get_model_info(network)     # an unknown name fails first, with suggestions
        if (params is None) == (not pretrained):
            raise ValueError('%s: give its weights, --params FILE (params=) or --pretrained '
                             '(the published ones), not %s'
                             % (model, 'both' if pretrained else 'neither'))
        if params is not None:
            if not os.path.isfile(params):
                raise FileNotFoundError('params file not found: %s' % params)
            meta = training_meta(params)
            if meta is not None and meta['network'] != network:
                raise ValueError('%s was trained as %s, not %s' % (params, meta['network'],
                                                                   network))
    info = get_model_info(network)
    source = params or network
    meta = meta or {}
    known = info.classes or (tuple(meta['classes']) if 'classes' in meta else None)
    classes = agree(known, None if classes is None else tuple(classes), 'classes', source)
    if pretrained and not info.has_weights:
        raise ValueError('%s has no published weights: give params' % network)
    kwargs = dict(meta.get('model_kwargs') or {})   # the architecture the training set
    if info.classes is None:
        kwargs['classes'] = classes
    for key in ('steps', 'max_size'):       # SSD's anchor steps, Faster R-CNN's sizes
        if meta.get(key):
            kwargs[key] = meta[key]
    if meta.get('short'):                   # a multi-scale range validates at its low end
        kwargs['short'] = meta['short'] if np.isscalar(meta['short']) else meta['short'][0]
    net = get_model(network, pretrained=pretrained, pretrained_base=False, ctx=ctx, **kwargs)
    channels = pruned_channels(meta, source)    # a pruned model (gluondet prune): its widths
    if channels:
        apply_channels(net, channels)
    if params is not None:
        net.load_parameters(params, ctx=ctx)
    net.hybridize()
    preprocessing = preprocessing_of(net, shape_pair(data_shape or meta.get('data_shape')
                                                or info.data_shape))
    if preprocessing['resize'] == 'fixed':
        shape = preprocessing['data_shape']
    else:
        sides = [preprocessing['short'], preprocessing['max_size'] or preprocessing['short']]
        shape = data_shape or padded_shape(preprocessing, sides)
    return net, {'network': network, 'classes': classes, 'data_shape': shape_pair(shape),
                 'preprocessing': preprocessing}


def apply_nms(net, nms):
    """Set a network's inference NMS from a dict with any of ``score_thresh``,
    ``nms_thresh``, ``post_nms`` (an experiment spec's ``nms_config``); others keep theirs."""
    post = net.postprocess
    if 'score_thresh' in nms:
        post.score_thresh = nms['score_thresh']
    kept = {'force_nms': post.force_nms} if hasattr(post, 'force_nms') else {}  # Faster R-CNN's
    net.set_nms(nms_thresh=nms.get('nms_thresh', post.nms_thresh), nms_topk=post.nms_topk,
                post_nms=nms.get('post_nms', post.post_nms), **kept)
    return net
