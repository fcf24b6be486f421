"""A detector's validation preprocessing as data, and the transforms that carry it out.

A *preprocessing* is a small JSON-ready dict, one of two kinds:

- ``{'resize': 'fixed', 'data_shape': [height, width], 'mean': [...], 'std': [...]}``:
  every image is resized to ``data_shape`` (SSD; :class:`SSDValTransform`);
- ``{'resize': 'keep_ratio', 'short': s, 'max_size': m, 'multiple': k, 'mean': [...],
  'std': [...]}``: the shorter side goes to ``s``, the longer at most ``m``
  (:class:`~gluondet.data.rcnn_transforms.RCNNValTransform`), and the image is padded
  at the bottom and right to a multiple of ``k`` (Faster R-CNN; 32 with a feature
  pyramid).

:func:`preprocessing_of` derives it from a zoo network, :func:`preprocessing_from_metadata`
reads it back from an exported model's metadata (also the older SSD metadata, which only
recorded ``data_shape``, ``mean`` and ``std``), and :func:`val_transform` turns it into the
transform that the training's validation and every deployed backend apply. It lives in
``data/`` so that tasks and deployment share it (deployment never imports a task).
"""
import numbers

import numpy as np

from . import transforms as T
from .rcnn_transforms import RCNNValTransform

__all__ = ['RESIZE_MODES', 'SSDValTransform', 'check_preprocessing', 'fixed_size', 'input_range',
           'keep_ratio', 'padded_shape', 'preprocessing_from_metadata', 'preprocessing_of',
           'val_transform']

RESIZE_MODES = ('fixed', 'keep_ratio')


class SSDValTransform:
    """Resize to ``width x height`` and normalize; the label stays in original pixels.

    Returns
    -------
    image : float32 ``3 x height x width``
    label : float32 ``N x 6`` in the original image's pixels
    size : float32 ``[original_height, original_width]``
    """

    def __init__(self, width, height, mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD):
        self.size = (width, height)
        self.mean, self.std = mean, std

    def __call__(self, image, label):
        h, w = image.shape[:2]
        img, _ = T.resize(image, None, self.size, interp=T.INTERP_AUTO)
        return (T.normalize(img, self.mean, self.std), np.asarray(label, np.float32),
                np.array([h, w], np.float32))


# ---------------------------------------------------------------- building and checking

def _positive_int(value, what, source, allow_none=False):
    if value is None and allow_none:
        return None
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool)
          and float(value).is_integer() and value >= 1)
    if not ok:
        raise ValueError('%s: %s must be a positive integer%s, got %r'
                         % (source, what, ' or null' if allow_none else '', value))
    return int(value)


def _three(values, what, source, positive=False):
    try:
        values = [float(v) for v in values]
    except (TypeError, ValueError):
        values = []
    if len(values) != 3 or not all(np.isfinite(values)) or (positive and min(values) <= 0):
        raise ValueError('%s: %s must be 3 %snumbers (R, G, B), got %r'
                         % (source, what, 'positive ' if positive else '', values))
    return values


def _shape(data_shape, source):
    pair = ((data_shape, data_shape) if isinstance(data_shape, numbers.Real)
            else data_shape)
    try:
        height, width = pair
    except (TypeError, ValueError):
        raise ValueError('%s: data_shape must be a positive integer or [height, width], got %r'
                         % (source, data_shape)) from None
    return [_positive_int(height, 'data_shape height', source),
            _positive_int(width, 'data_shape width', source)]


def fixed_size(data_shape, mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD):
    """Resize every image to ``data_shape`` (an int or ``(height, width)``)."""
    return check_preprocessing({'resize': 'fixed', 'data_shape': data_shape, 'mean': mean,
                                'std': std})


def keep_ratio(short, max_size=None, multiple=1, mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD):
    """Shorter side to ``short``, longer side at most ``max_size``, batches padded to
    ``multiple``."""
    return check_preprocessing({'resize': 'keep_ratio', 'short': short, 'max_size': max_size,
                                'multiple': multiple, 'mean': mean, 'std': std})


def check_preprocessing(spec, source='preprocessing'):
    """A preprocessing dict checked and in its plain form (ints, lists), or ValueError
    naming ``source`` (the model file it was read from)."""
    if not isinstance(spec, dict):
        raise ValueError('%s: preprocessing must be a JSON object, got %r' % (source, spec))
    mode = spec.get('resize')
    if mode not in RESIZE_MODES:
        raise ValueError('%s: preprocessing resize must be one of %s, got %r'
                         % (source, ', '.join(map(repr, RESIZE_MODES)), mode))
    known = {'fixed': ('data_shape',), 'keep_ratio': ('short', 'max_size', 'multiple')}[mode]
    unknown = sorted(set(spec) - set(known) - {'resize', 'mean', 'std'})
    if unknown:
        raise ValueError('%s: %s preprocessing has unknown keys %s (it takes %s)'
                         % (source, mode, ', '.join(unknown), ', '.join(known + ('mean', 'std'))))
    out = {'resize': mode}
    if mode == 'fixed':
        out['data_shape'] = _shape(spec.get('data_shape'), source)
    else:
        out['short'] = _positive_int(spec.get('short'), 'short', source)
        out['max_size'] = _positive_int(spec.get('max_size'), 'max_size', source, True)
        out['multiple'] = _positive_int(spec.get('multiple', 1), 'multiple', source)
    out['mean'] = _three(spec.get('mean', T.IMAGENET_MEAN), 'mean', source)
    out['std'] = _three(spec.get('std', T.IMAGENET_STD), 'std', source, positive=True)
    return out


def preprocessing_of(net, data_shape=None, short=None, max_size=None):
    """The validation preprocessing of a zoo network (read from its attributes).

    A network with ``short`` and ``max_size`` (Faster R-CNN and RetinaNet, GluonCV's
    attribute names) keeps the aspect ratio, with batches padded to a multiple of its
    ``size_multiple`` (1 without); any other (SSD) is resized to ``data_shape``,
    default its ``base_size``. ImageNet mean and std, as in training.

    Parameters
    ----------
    net : HybridBlock
    data_shape : int or (int, int), optional
        Fixed-size networks: the input ``(height, width)``.
    short, max_size : int, optional
        Keep-ratio networks: the sizes trained with, instead of the network's
        (``short`` may be a multi-scale ``(low, high)`` range: validation uses ``low``).
    """
    name = type(net).__name__
    if getattr(net, 'short', None) is not None and hasattr(net, 'max_size'):
        short = net.short if short is None else short
        short = short if isinstance(short, numbers.Real) else short[0]
        multiple = getattr(net, 'size_multiple', 1)
        return check_preprocessing({'resize': 'keep_ratio', 'short': short,
                                    'max_size': net.max_size if max_size is None else max_size,
                                    'multiple': multiple}, name)
    shape = data_shape if data_shape is not None else getattr(net, 'base_size', None)
    if shape is None:
        raise ValueError('%s has no base_size: give its data_shape' % name)
    return check_preprocessing({'resize': 'fixed', 'data_shape': shape}, name)


def preprocessing_from_metadata(meta, source):
    """The preprocessing an exported model's metadata records, or None if it records none.

    ``meta['preprocessing']`` if present; else ``short`` (and ``max_size``, ``multiple``)
    keep the ratio, and ``data_shape`` alone (SSD exports made before ``preprocessing``
    was recorded) is a fixed size; ``mean`` and ``std`` beside them.
    """
    if meta.get('preprocessing') is not None:
        return check_preprocessing(meta['preprocessing'], source)
    norm = {'mean': meta.get('mean', T.IMAGENET_MEAN), 'std': meta.get('std', T.IMAGENET_STD)}
    if meta.get('short') is not None:
        return check_preprocessing(dict(norm, resize='keep_ratio', short=meta['short'],
                                        max_size=meta.get('max_size'),
                                        multiple=meta.get('multiple', 1)), source)
    if meta.get('data_shape') is None:
        return None
    return check_preprocessing(dict(norm, resize='fixed', data_shape=meta['data_shape']), source)


# ---------------------------------------------------------------- applying

def val_transform(spec, fit=None):
    """The validation transform ``(image, label) -> (data, label, original [h, w])`` of
    ``spec``.

    ``data`` is float32 ``3 x H x W``; ``label`` stays in the original image's pixels.
    ``fit`` ``(height, width)``: a keep-ratio image is made smaller if needed to fit a
    network input of that size (an ONNX model exported at a fixed size).
    """
    spec = check_preprocessing(spec)
    if spec['resize'] == 'fixed':
        height, width = spec['data_shape']
        return SSDValTransform(width, height, spec['mean'], spec['std'])
    return RCNNValTransform(spec['short'], spec['max_size'], spec['mean'], spec['std'], fit=fit)


def padded_shape(spec, size, fixed=None):
    """``(height, width)`` of the network input for an image of ``size`` ``[h, w]`` after
    :func:`val_transform`: the fixed network input if given, else a fixed-size spec's
    ``data_shape``, else ``size`` rounded up to the spec's multiple (padding at the bottom
    and right, as :class:`~gluondet.data.batchify.PadImages` pads)."""
    if fixed is not None:
        return tuple(int(v) for v in fixed)
    if spec['resize'] == 'fixed':
        return tuple(spec['data_shape'])
    multiple = spec['multiple']
    return tuple(-(-int(side) // multiple) * multiple for side in size)


def input_range(spec):
    """The network inputs a keep-ratio ``spec`` gives: ``(smallest, typical, largest)``
    ``(height, width)``, each side rounded up to the multiple.

    ``smallest``: one multiple (a side of an image of extreme aspect ratio); ``typical``:
    ``short x max_size`` (a landscape image that fills both); ``largest``: ``max_size`` on
    both sides (no image reaches both at once). An exported model taking inputs of any
    size up to ``largest`` takes every image at its own size.

    Raises
    ------
    ValueError
        If ``spec`` is a fixed size or has no ``max_size`` (no largest input).
    """
    if spec['resize'] != 'keep_ratio' or spec['max_size'] is None:
        raise ValueError('only a keep-ratio preprocessing with a max_size bounds the input '
                         'size, not %s' % (spec,))
    short, longest, multiple = spec['short'], spec['max_size'], spec['multiple']
    return ((multiple, multiple), padded_shape(spec, (min(short, longest), longest)),
            padded_shape(spec, (longest, longest)))
