"""A DeepStream ``Gst-nvinfer`` configuration for an exported detector (``gluondet export
--gen-ds-config``).

Beside the ONNX model (and the TensorRT engine) two files are written, each atomically:

- ``nvinfer_config.txt``: the ``[property]`` group of nvinfer's key file (the keys and
  their meaning are DeepStream's, see its Gst-nvinfer page), every value read from the
  exported model itself: its input (``infer-dims``, ``batch-size``), its outputs
  (``output-blob-names``) and its metadata (classes, preprocessing). Paths are relative
  to the file, as nvinfer resolves them, so the folder can be moved as a whole.
- ``labels.txt``: one class name per line, in the order of the model's class ids.

A keep-ratio model exported for any input size (``height`` and ``width`` symbolic) gets
``infer-dims`` of ``short x max_size`` (rounded up to its multiple): nvinfer builds its
engine for one input size and scales every frame into it.

Preprocessing. nvinfer computes ``y = net-scale-factor * (x - offsets[c])`` on 0-255
pixels; gluondet's networks take ``(x / 255 - mean[c]) / std[c]``. So ``offsets`` is
``255 * mean`` and ``net-scale-factor`` ``1 / (255 * std)``. There is one scale factor for
all channels: when the stds differ (ImageNet's 0.229, 0.224, 0.225) the mean of the stds is
used, and each channel's input is off by its std's ratio to that mean (ImageNet's: at most
1.3%); a warning and a comment in the file say so. Fixed-size models (SSD) are stretched
to the input (``maintain-aspect-ratio=0``), as gluondet resizes them; keep-ratio models
(Faster R-CNN, RetinaNet) are scaled to fit it and padded at the right and bottom
(``maintain-aspect-ratio=1``, ``symmetric-padding=0``), as gluondet pads them. nvinfer
scales an image to fit the whole input where gluondet resizes the short side to ``short``
within ``max_size``: the two agree for images whose aspect ratio the input's fits.

Post-processing. The model already ends with its NMS (``cluster-mode=4``: none more; the
comment names what its post-processing kind computes, :mod:`gluondet.deploy.postprocess`) and
returns ``ids`` and ``scores`` (``B x K x 1``, id -1 on padding rows) and ``boxes`` (``B x
K x 4``, ``xmin, ymin, xmax, ymax`` in network-input pixels). DeepStream's built-in
detector parsers read other layouts, so a parser for these tensors is needed
(``parse-bbox-func-name`` and ``custom-lib-path``), or ``output-tensor-meta=1`` and the
tensors read in a probe; the file says so in a comment.
"""
import logging
import os
import textwrap

import numpy as np

from ..data.preprocess import input_range, preprocessing_from_metadata
from ..detections import MASK_THRESHOLD
from ..files import atomic_write
from ..optional import require
from .postprocess import postprocess_from_metadata
from .sources import decode_metadata

__all__ = ['CONFIG_FILE', 'LABELS_FILE', 'NETWORK_MODES', 'nvinfer_properties',
           'write_deepstream_config']

LOG = logging.getLogger('gluondet')

CONFIG_FILE = 'nvinfer_config.txt'
LABELS_FILE = 'labels.txt'
NETWORK_MODES = {'fp32': 0, 'int8': 1, 'fp16': 2}     # nvinfer's network-mode values
CLUSTER_NONE = 4    # nvinfer's cluster-mode "no clustering" (3 in releases before the hybrid)
DRAW_THRESHOLD = 0.3    # pre-cluster-threshold: gluondet infer's default --threshold


def _model_io(model):
    """``(input dims, output names)`` of an ONNX model (dims: ints, or None where symbolic)."""
    weights = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in weights]
    if len(inputs) != 1:
        raise ValueError('a DeepStream config needs a model with one image input, this one '
                         'has %s' % [i.name for i in inputs])
    dims = [d.dim_value if d.HasField('dim_value') else None
            for d in inputs[0].type.tensor_type.shape.dim]
    if len(dims) != 4 or dims[1] is None:
        raise ValueError('a DeepStream config needs an N x C x H x W input of fixed C; '
                         '%s is %s' % (inputs[0].name, dims))
    return dims, [o.name for o in model.graph.output]


def nvinfer_properties(model, onnx_file, engine_file=None, precision='fp32',
                       calibration_file=None, labels_file=LABELS_FILE, batch_size=None,
                       unique_id=1, source='model'):
    """The ``[property]`` and ``[class-attrs-all]`` entries of an exported detector.

    Parameters
    ----------
    model : onnx.ModelProto
        An ONNX model written by :func:`~gluondet.deploy.onnx.export_onnx` (gluondet's metadata).
    onnx_file : str
        ``onnx-file``, as the config names it (relative to the config file).
    engine_file : str, optional
        ``model-engine-file`` (a TensorRT export).
    precision : {'fp32', 'fp16', 'int8'}
        ``network-mode``. An int8 ONNX model (ONNX Runtime's QDQ quantization) carries its
        scales and needs no calibration file.
    calibration_file : str, optional
        ``int8-calib-file``: TensorRT's calibration cache (int8 engines).
    labels_file : str
    batch_size : int, optional
        ``batch-size`` of a dynamic-batch model (default 1; a fixed batch is the model's).
    unique_id : int
        ``gie-unique-id``.
    source : str
        The model's path, for error messages.

    Returns
    -------
    properties : list of (key, value, comment)
        In file order; ``comment`` (or None) is written above the key.
    class_attrs : list of (key, value, comment)
    notes : list of str
        What the user should know (also written at the top of the file).
    """
    if precision not in NETWORK_MODES:
        raise ValueError('precision must be one of %s, got %r' % (', '.join(NETWORK_MODES),
                                                                  precision))
    meta = decode_metadata(model.metadata_props, source)
    classes = meta.get('classes')
    if not classes:
        raise ValueError('%s records no classes: export it with gluondet' % source)
    spec = preprocessing_from_metadata(meta, source)
    if spec is None:
        raise ValueError('%s records no preprocessing (mean, std, sizes)' % source)
    post = postprocess_from_metadata(meta, source)
    dims, outputs = _model_io(model)
    mean, std = np.array(spec['mean'], np.float64), np.array(spec['std'], np.float64)
    scale_std = float(std.mean())
    notes = []
    norm_note = ("y = net-scale-factor * (x - offsets), x an RGB pixel in 0..255; gluondet's "
                 'input is (x / 255 - mean) / std with mean %s, std %s'
                 % (_numbers(mean, ', '), _numbers(std, ', ')))
    spread = float(np.abs(std / scale_std - 1).max())
    if spread > 1e-6:
        notes.append('nvinfer scales every channel by one net-scale-factor: it is taken from '
                     'the mean of the stds (%.6g), so each channel differs from gluondet\'s '
                     'input by its std\'s ratio to that mean (up to %.2f%%)'
                     % (scale_std, 100 * spread))
    batch = dims[0] if dims[0] is not None else (batch_size or 1)
    keep_ratio = spec['resize'] == 'keep_ratio'
    size_note = 'C;H;W of the model input'
    if None in dims[2:]:    # a keep-ratio model taking any size: nvinfer needs one
        dims[2:] = input_range(spec)[1]
        size_note = ('C;H;W: the model takes any height and width up to %s; nvinfer scales '
                     'every frame into this one, short x max_size (a landscape frame)'
                     % 'x'.join(map(str, meta['data_shape'])))
    properties = [
        ('gie-unique-id', unique_id, None),
        ('net-scale-factor', repr(1.0 / (255.0 * scale_std)), norm_note),
        ('offsets', _numbers(255.0 * mean, ';'), None),
        ('model-color-format', 0, 'RGB'),
        ('onnx-file', onnx_file, None),
    ]
    if engine_file:
        properties.append(('model-engine-file', engine_file,
                           'built here; nvinfer rebuilds it from onnx-file if it cannot load it '
                           '(another TensorRT version or GPU)'))
    properties += [
        ('labelfile-path', labels_file, None),
        ('batch-size', batch, None if dims[0] is not None else
         'the model takes any batch; nvinfer builds its engine for this one'),
        ('network-mode', NETWORK_MODES[precision], '0 fp32, 1 int8, 2 fp16'),
    ]
    if calibration_file:
        properties.append(('int8-calib-file', calibration_file, "TensorRT's calibration cache"))
    properties += [
        ('num-detected-classes', len(classes), None),
        ('infer-dims', '%d;%d;%d' % tuple(dims[1:]), size_note),
    ]
    masks = 'masks' in meta.get('grid_fields', ())
    if masks:       # Mask R-CNN: each detection's M x M mask over its box
        properties += [
            ('network-type', 3, 'instance segmentation'),
            ('output-instance-mask', 1, None),
            ('segmentation-threshold', MASK_THRESHOLD,
             'a pixel is inside where its mask probability reaches this (gluondet pastes '
             'masks at it)'),
            ('output-blob-names', ';'.join(outputs),
             'ids, scores: B x K x 1 (id -1 on padding rows); boxes: B x K x 4, xmin ymin '
             "xmax ymax in network-input pixels; masks: B x K x %s, each detection's "
             "probabilities on a grid over its box (as DeepStream's instance masks). Its "
             'built-in parsers do not read these: set parse-bbox-instance-mask-func-name and '
             'custom-lib-path to a parser of them, or output-tensor-meta=1 and read the '
             'tensors in a probe' % 'x'.join(map(str, meta.get('mask_size', ('M', 'M')))))]
    else:
        properties += [
            ('network-type', 0, 'detector'),
            ('output-blob-names', ';'.join(outputs),
             'ids, scores: B x K x 1 (id -1 on padding rows); boxes: B x K x 4, xmin ymin xmax '
             "ymax in network-input pixels. DeepStream's built-in parsers do not read these: "
             'set parse-bbox-func-name and custom-lib-path to a parser of them, or '
             'output-tensor-meta=1 and read the tensors in a probe')]
    properties += [
        ('cluster-mode', CLUSTER_NONE, 'no clustering: the model ends with its own %s%s'
         % ('post-processing' if post and not post.has_nms else 'NMS',
            ' (%s)' % post.description if post else '')),
        ('maintain-aspect-ratio', int(keep_ratio),
         'keep-ratio model (%s): scaled to fit, padded at the right and bottom'
         % meta.get('network', '') if keep_ratio else 'fixed-size model: stretched to the input'),
    ]
    if keep_ratio:
        properties.append(('symmetric-padding', 0, None))
    class_attrs = [('pre-cluster-threshold', DRAW_THRESHOLD,
                    'least score kept (gluondet infer --threshold); the model keeps scores '
                    'from %s' % (meta.get('nms') or {}).get('score_thresh', '?'))]
    return properties, class_attrs, notes


def _numbers(values, sep):
    return sep.join('%.10g' % v for v in values)


def _comment(text):
    return ['# ' + line for line in textwrap.wrap(text, 88)]


def _render(properties, class_attrs, notes, header):
    lines = [line for text in header for line in _comment(text)]
    lines += [line for note in notes for line in _comment('NOTE: ' + note)]
    for group, entries in (('property', properties), ('class-attrs-all', class_attrs)):
        lines += ['', '[%s]' % group]
        for key, value, comment in entries:
            lines += _comment(comment) if comment else []
            lines.append('%s=%s' % (key, value))
    return '\n'.join(lines) + '\n'


def write_deepstream_config(onnx_path, engine_path=None, precision='fp32',
                            calibration_cache=None, batch_size=None):
    """Write ``nvinfer_config.txt`` and ``labels.txt`` beside an exported model.

    Parameters
    ----------
    onnx_path : str
        The exported ONNX model (its inputs, outputs and metadata are read).
    engine_path : str, optional
        The TensorRT engine built from it (``model-engine-file``), in the same folder.
    precision : {'fp32', 'fp16', 'int8'}
    calibration_cache : str, optional
        An int8 engine's TensorRT calibration cache (``int8-calib-file``).
    batch_size : int, optional
        For a dynamic-batch model: the batch nvinfer runs (default 1).

    Returns
    -------
    list of str
        The config and labels files.
    """
    from ..version import __version__
    onnx = require('onnx', 'a DeepStream config')
    model = onnx.load(onnx_path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(onnx_path))
    relative = lambda path: os.path.relpath(os.path.abspath(path), folder)  # noqa: E731
    properties, class_attrs, notes = nvinfer_properties(
        model, relative(onnx_path), engine_path and relative(engine_path), precision or 'fp32',
        calibration_cache and relative(calibration_cache), source=onnx_path,
        batch_size=batch_size)
    for note in notes:
        LOG.warning('DeepStream config: %s', note)
    meta = decode_metadata(model.metadata_props, onnx_path)
    header = ['DeepStream Gst-nvinfer configuration of %s (%s), written by gluondet %s export '
              '--gen-ds-config.' % (meta.get('network', 'a detector'),
                                    os.path.basename(onnx_path), __version__),
              'Paths are relative to this file. Use it as the config-file-path of an nvinfer '
              'element (primary detector).']
    config = os.path.join(folder, CONFIG_FILE)
    labels = os.path.join(folder, LABELS_FILE)
    for name in meta['classes']:
        if '\n' in str(name):
            raise ValueError('%s: class name %r has a line break: labels.txt takes one per line'
                             % (onnx_path, name))
    atomic_write(labels, ''.join('%s\n' % name for name in meta['classes']))
    atomic_write(config, _render(properties, class_attrs, notes, header))
    return [config, labels]
