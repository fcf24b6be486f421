"""What the json beside a trained model's ``.params`` says, read by deploy, the tasks and prune.

The engine writes ``{prefix}.json`` beside every ``{prefix}.params`` it saves
(:func:`gluondet.engine.checkpoint.save_params`): ``format``, the provenance (``version``,
``commit``), ``epoch``, ``iteration``, ``metrics``, ``config`` and ``meta``, the task's
description of the network, which is what rebuilds it:

- ``task``: the task's name (``ssd``, ...);
- ``network``: the model zoo name;
- ``classes``: the class names;
- ``model_kwargs``: the architecture arguments given to ``get_model`` (an object);
- per detector, the sizes it was trained at: ``data_shape`` and ``steps`` (SSD), ``short``
  (a number, or a multi-scale ``[low, high]``) and ``max_size`` (Faster R-CNN, RetinaNet);
- ``pruned``: ``{"channels": {layer: widths}}`` of a pruned model
  (:mod:`gluondet.model_zoo.pruned`, written by ``gluondet prune``).

It is a module of its own, importing only the standard library, so that the tasks and
``gluondet prune`` read it without loading deploy's runners and exporters, and deploy without
the engine that writes it.
"""
import json
import logging
import os

__all__ = ['read_json', 'training_meta']

logger = logging.getLogger('gluondet')


def _load(path, what):
    """The JSON value in ``path``; FileNotFoundError or ValueError naming ``what`` and the
    file."""
    try:
        with open(path, encoding='utf-8') as f:
            return json.load(f)
    except OSError as err:
        raise FileNotFoundError('cannot read %s %s: %s' % (what, path, err.strerror)) from None
    except ValueError as err:
        raise ValueError('%s %s is not valid JSON: %s' % (what, path, err)) from None


def read_json(path, what):
    """The JSON object in ``path``; FileNotFoundError or ValueError naming ``what`` and the
    file."""
    data = _load(path, what)
    if not isinstance(data, dict):
        raise ValueError('%s %s: expected a JSON object' % (what, path))
    return data


def training_meta(params):
    """The ``meta`` of a params file the engine wrote (from the ``.json`` beside), or None
    if there is no json, or if the json there is another one (no ``meta``: COCO results
    named after the model, say), which a warning names.

    Raises
    ------
    ValueError
        If the json is not valid JSON, has no ``meta.network`` or its ``meta.model_kwargs``
        is not an object.
    """
    path = os.path.splitext(params)[0] + '.json'
    if not os.path.isfile(path):
        return None
    data = _load(path, 'params description')
    if not isinstance(data, dict) or 'meta' not in data:
        logger.warning('%s is not the description gluondet writes beside %s (no "meta"): '
                       'ignored', path, os.path.basename(params))
        return None
    meta = data['meta']
    if not isinstance(meta, dict) or 'network' not in meta:
        raise ValueError('%s does not describe a network (no meta.network): is it the json the '
                         'training wrote beside %s?' % (path, params))
    if not isinstance(meta.get('model_kwargs', {}), dict):
        raise ValueError('%s: meta.model_kwargs must be an object of network arguments'
                         % path)
    return meta
