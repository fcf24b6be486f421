"""TensorRT engines from exported ONNX detectors: build and run.

The flow is ``export_onnx`` (:mod:`gluondet.deploy.onnx`) -> :func:`build_engine`
-> :class:`TensorRTRunner`, which returns ``(ids, scores, boxes)`` as the
network does. Written against TensorRT 8.5 to 10.x (the tensor-name API of
8.5+; implicit int8 calibration is deprecated since 10.1 and, like the
FP16/INT8 builder flags, gone in 11) and the CUDA runtime of ``cuda-python``.

Everything that can be checked without a GPU is checked first: argument
values, the ONNX input (read with ``onnx``), batch sizes against it, TensorRT's
documented limits on the graph (:func:`check_tensorrt_limits`) and the
calibration data. Only then are ``tensorrt`` and ``cuda`` imported, so a
wrong call fails the same way on a machine without them.

int8 engines are calibrated with :class:`~gluondet.deploy.calibration.CalibrationBatches`
(:mod:`gluondet.deploy.calibration`, which also holds the lazy imports and
device buffer used here).
"""
import collections
import logging
import os
import time

import numpy as np

from ..data.preprocess import input_range, preprocessing_from_metadata
from ..detections import OUTPUT_NAMES
from ..files import atomic_write
from ..optional import require
from .calibration import (CalibrationBatches, _cuda, _DeviceBuffer, _import_cudart,
                          _import_tensorrt, _positive_int, make_calibrator)
from .postprocess import postprocess_from_metadata
from .sources import decode_metadata

__all__ = ['PRECISIONS', 'TOPK_LIMIT', 'TensorRTRunner', 'build_engine',
           'check_tensorrt_limits', 'input_sizes', 'read_onnx_input']

logger = logging.getLogger('gluondet.deploy')

PRECISIONS = ('fp32', 'fp16', 'int8')
# TensorRT's TopK takes k <= 3840 (its operator reference, 8.x to 10.x); its NMS considers at
# most 5000 boxes per image (2000 on SM 5.3 / 6.2), which the export's NMS inputs, each cut
# by a TopK, stay under.
TOPK_LIMIT = 3840

OnnxInput = collections.namedtuple('OnnxInput', ['name', 'shape', 'nodes'])
OnnxInput.__doc__ = ('The single input of an ONNX model: name, NCHW shape (-1 where dynamic), '
                     'and ``(name, op_type)`` of every graph node in order.')


# ---------------------------------------------------------------- building

def _check_build_args(onnx_path, engine_path, precision, max_batch_size, dynamic_batch,
                      opt_batch_size, calibrator, workspace_mb):
    if precision not in PRECISIONS:
        raise ValueError('precision must be one of %s, got %r'
                         % (', '.join(repr(p) for p in PRECISIONS), precision))
    if not os.path.isfile(onnx_path):
        raise FileNotFoundError('ONNX model not found: %s' % onnx_path)
    folder = os.path.dirname(os.path.abspath(engine_path))
    if os.path.isdir(engine_path) or not os.path.isdir(folder):
        raise ValueError('engine_path must be a file in an existing folder, got %s' % engine_path)
    if os.path.abspath(engine_path) == os.path.abspath(onnx_path):
        raise ValueError('engine_path would overwrite the ONNX model %s' % onnx_path)
    max_batch_size = _positive_int('max_batch_size', max_batch_size)
    if opt_batch_size is not None:
        if not dynamic_batch:
            raise ValueError('opt_batch_size is for dynamic_batch=True engines')
        if _positive_int('opt_batch_size', opt_batch_size) > max_batch_size:
            raise ValueError('opt_batch_size %d is above max_batch_size %d'
                             % (opt_batch_size, max_batch_size))
    if workspace_mb is not None:
        _positive_int('workspace_mb', workspace_mb)
    if precision != 'int8':
        if calibrator is not None:
            raise ValueError("a calibrator is only used with precision='int8', not %r" % precision)
        return
    if calibrator is None:
        raise ValueError("precision='int8' needs calibrator=CalibrationBatches(images, "
                         "data_shape, cache_path=...), or one whose cache_path holds an existing "
                         "cache")
    if not isinstance(calibrator, CalibrationBatches):
        raise TypeError('calibrator must be a CalibrationBatches, got %s'
                        % type(calibrator).__name__)
    calibrator.check()


def _load_onnx(onnx_path):
    onnx = require('onnx', 'reading the ONNX model')
    try:
        return onnx.load(onnx_path, load_external_data=False)
    except Exception as err:  # protobuf raises several types for bad data
        raise ValueError('%s is not a readable ONNX model (%s)' % (onnx_path, err)) from None


def read_onnx_input(onnx_path, model=None):
    """The single NCHW input of an ONNX model (with ``onnx``, no TensorRT).

    ``model``: the loaded ``onnx.ModelProto`` of ``onnx_path``, if the caller has it.

    Returns
    -------
    OnnxInput
        ``shape`` has -1 for a dynamic batch, height or width.

    Raises
    ------
    ValueError
        If the file is not an ONNX model, has several inputs, or an input
        that is not NCHW with fixed channels.
    """
    model = model if model is not None else _load_onnx(onnx_path)
    weights = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in weights]
    if len(inputs) != 1:
        raise ValueError('%s has %d inputs %s; the detector takes one image batch'
                         % (onnx_path, len(inputs), [i.name for i in inputs]))
    dims = inputs[0].type.tensor_type.shape.dim
    shape = tuple(d.dim_value if d.HasField('dim_value') else -1 for d in dims)
    if len(shape) != 4 or shape[1] < 1:
        raise ValueError('%s: input %r has shape %s; expected N x C x H x W with fixed C'
                         % (onnx_path, inputs[0].name, shape))
    nodes = [(node.name, node.op_type) for node in model.graph.node]
    return OnnxInput(inputs[0].name, shape, nodes)


def check_tensorrt_limits(onnx_path, model=None):
    """Refuse an ONNX model that TensorRT would refuse for a documented limit (on CPU).

    TensorRT's TopK takes ``k <= TOPK_LIMIT`` (3840); a gluondet export has one TopK
    per top-k cut of its post-processing, with ``k`` the cut (a Faster R-CNN at a large
    input with GluonCV's 6000 pre-NMS proposals, or its COCO settings that keep every
    one of classes x regions detections, exceed it). The error names each node, its
    ``k`` and the setting behind it (the ``topk_settings`` of the post-processing kind the
    model's metadata records, :mod:`gluondet.deploy.postprocess`).

    Parameters
    ----------
    onnx_path : str
    model : onnx.ModelProto, optional
        The loaded model, if the caller has it.

    Raises
    ------
    ValueError
    """
    from onnx import numpy_helper
    model = model if model is not None else _load_onnx(onnx_path)
    constants = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == 'Constant' and node.attribute and node.attribute[0].name == 'value':
            constants[node.output[0]] = node.attribute[0].t
    over = []
    for node in model.graph.node:
        if node.op_type != 'TopK' or node.input[1] not in constants:
            continue
        k = int(numpy_helper.to_array(constants[node.input[1]]).reshape(-1)[0])
        if k > TOPK_LIMIT:
            over.append((node.name, k))
    if not over:
        return
    post = postprocess_from_metadata(decode_metadata(model.metadata_props, onnx_path), onnx_path)
    settings = post.topk_settings if post else {}   # none recorded by older exports
    lines = []
    for name, k in over:
        setting = settings.get(name.split('/')[0])
        lines.append('  node %r: k = %d%s' % (name, k, ', set by %s' % setting if setting else ''))
    raise ValueError('%s cannot become a TensorRT engine: TensorRT takes TopK with k <= %d, '
                     'and\n%s\nExport with smaller settings (or a smaller input); ONNX '
                     'Runtime runs this model as it is.' % (onnx_path, TOPK_LIMIT,
                                                            '\n'.join(lines)))


def input_sizes(onnx_path, model, spec):
    """``(smallest, typical, largest)`` ``(height, width)`` of a model whose height and width
    are dynamic (the optimization profile's min, opt and max), read from the preprocessing
    its metadata records (:func:`~gluondet.data.preprocess.input_range`); None if they are
    fixed.

    Raises
    ------
    ValueError
        For a dynamic size without gluondet's keep-ratio preprocessing in the metadata.
    """
    if min(spec.shape[2:]) > 0:
        return None
    try:
        meta = decode_metadata(model.metadata_props, onnx_path)
        preprocessing = preprocessing_from_metadata(meta, onnx_path)
        return input_range(preprocessing)
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError('%s takes inputs of any height and width; a TensorRT engine needs '
                         'their range, from the keep-ratio preprocessing (short, max_size, '
                         "multiple) of gluondet's metadata: %s" % (onnx_path, err)) from None


def _batch_plan(spec, dynamic_batch, max_batch_size, opt_batch_size, calibrator, sizes=None):
    """The optimization profile and calibration shape for the engine.

    ``sizes``: :func:`input_sizes` of a model with a dynamic height and width.

    Returns
    -------
    profile : ((min, opt, max) shapes) or None
        None for a model with a fixed input shape (it needs no profile).
    calibration_shape : tuple or None
        Input shape of the calibration profile (for a model with a profile).
    """
    n, c, h, w = spec.shape
    sizes = sizes or ((h, w),) * 3
    if dynamic_batch:
        if n != -1:
            raise ValueError('the ONNX input %r has a fixed batch of %d: export it with '
                             'dynamic_batch=True to build a dynamic-batch engine' % (spec.name, n))
        batches = (1, opt_batch_size or max_batch_size, max_batch_size)
    elif n == -1:
        batches = (max_batch_size,) * 3
    elif max_batch_size != n:
        raise ValueError('the ONNX input %r has a fixed batch of %d but max_batch_size is %d: '
                         'pass max_batch_size=%d, or export with dynamic_batch=True'
                         % (spec.name, n, max_batch_size, n))
    else:
        batches = (n,) * 3
    profile = None
    if min(spec.shape) < 1:
        profile = tuple((batch, c) + tuple(size) for batch, size in zip(batches, sizes))
    if calibrator is None:
        return profile, None
    if calibrator.shape is not None and not _fits(calibrator.shape[1:], (c,) + sizes[0],
                                                  (c,) + sizes[2]):
        low, high = _dims((c,) + sizes[0]), _dims((c,) + sizes[2])
        raise ValueError('calibration batches are N x %s but the model input is N x %s: give '
                         'CalibrationBatches data_shape=(%d, %d)'
                         % (_dims(calibrator.shape[1:]), low if low == high else
                            'from %s to %s' % (low, high), sizes[1][1], sizes[1][0]))
    if n != -1 and calibrator.batch_size != n:
        raise ValueError('the model has a fixed batch of %d: calibrate with batch_size=%d, not %d'
                         % (n, n, calibrator.batch_size))
    if profile is None:
        return None, None
    size = calibrator.shape[2:] if calibrator.shape is not None else sizes[1]
    return profile, (calibrator.batch_size, c) + tuple(size)


def _fits(shape, low, high):
    return len(shape) == len(low) and all(a <= v <= b for v, a, b in zip(shape, low, high))


def _dims(shape):
    return 'x'.join(str(d) if d >= 0 else '?' for d in shape)


def _check_platform(trt, builder, precision):
    """Refuse fp16/int8 where TensorRT or the GPU cannot do them fast."""
    if precision == 'fp32':
        return
    flag = precision.upper()
    if not hasattr(trt.BuilderFlag, flag):
        raise RuntimeError('TensorRT %s has no BuilderFlag.%s (TensorRT 11 builds strongly typed '
                           'networks only): use TensorRT 8.5-10.x for %s engines'
                           % (trt.__version__, flag, precision))
    if not getattr(builder, 'platform_has_fast_' + precision):
        raise RuntimeError('this GPU has no fast %s: build precision=%r here, or build on a GPU '
                           'with %s support' % (precision, 'fp32', precision))


def _parser_errors(parser, onnx_path, nodes):
    """The ONNX parser's errors, one line each, naming the node."""
    lines = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        node = err.node()
        where = ('node %d %r (%s)' % ((node,) + nodes[node]) if 0 <= node < len(nodes)
                 else 'graph')
        lines.append('  %s: %s' % (where, err.desc()))
    return 'TensorRT cannot parse %s:\n%s' % (onnx_path, '\n'.join(lines))


def build_engine(onnx_path, engine_path, precision='fp32', max_batch_size=1, dynamic_batch=False,
                 calibrator=None, workspace_mb=None, opt_batch_size=None):
    """Build and save a TensorRT engine from an ONNX detector.

    Parameters
    ----------
    onnx_path : str
        The model, one NCHW float input (``gluondet.deploy.onnx.export_onnx``). With a
        dynamic height and width (a keep-ratio detector), the optimization profile takes
        every input its preprocessing gives (:func:`input_sizes`: from one multiple to
        ``max_size`` on each side, tuned for ``short x max_size``).
    engine_path : str
        Where the serialized engine goes (written to a temporary file, then
        renamed). An engine runs only with the TensorRT version and GPU model
        that built it.
    precision : {'fp32', 'fp16', 'int8'}
        fp16 and int8 are refused on GPUs without fast support. int8 also
        enables fp16 where the GPU has it, for layers without int8 kernels.
    max_batch_size : int
        Largest batch. A model exported with a fixed batch needs exactly
        that number; a dynamic-batch model with ``dynamic_batch=False`` gives
        an engine for batches of exactly ``max_batch_size``.
    dynamic_batch : bool
        Accept batches of 1 to ``max_batch_size`` (the model must be
        exported with a dynamic batch).
    calibrator : CalibrationBatches, optional
        Required for int8 (images, or an existing cache). On a dynamic-batch
        model it calibrates with its own ``batch_size``; on a fixed-batch one
        that must equal the model's batch. Its input size must be the model's, or
        within a dynamic model's range.
    workspace_mb : int, optional
        Limit of TensorRT's scratch memory (default: TensorRT's, the whole GPU).
    opt_batch_size : int, optional
        Batch size TensorRT tunes for (``dynamic_batch`` only; default
        ``max_batch_size``).

    Returns
    -------
    str
        ``engine_path``.

    Raises
    ------
    ValueError, TypeError, FileNotFoundError
        Bad arguments, or a model beyond TensorRT's limits, checked before tensorrt is
        imported.
    ImportError
        tensorrt or cuda-python missing.
    RuntimeError
        Platform without fast fp16/int8, ONNX parser errors (one line per
        node), or a failed build.
    """
    _check_build_args(onnx_path, engine_path, precision, max_batch_size, dynamic_batch,
                      opt_batch_size, calibrator, workspace_mb)
    model = _load_onnx(onnx_path)
    spec = read_onnx_input(onnx_path, model)
    check_tensorrt_limits(onnx_path, model)
    sizes = input_sizes(onnx_path, model, spec)
    del model
    profile, calibration_shape = _batch_plan(spec, dynamic_batch, max_batch_size, opt_batch_size,
                                             calibrator, sizes)
    trt = _import_tensorrt()
    trt_logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(trt_logger)
    _check_platform(trt, builder, precision)
    major = int(trt.__version__.split('.')[0])
    flags = 0 if major >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, trt_logger)
    if not parser.parse_from_file(os.path.abspath(onnx_path)):
        raise RuntimeError(_parser_errors(parser, onnx_path, spec.nodes))

    config = builder.create_builder_config()
    if workspace_mb is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mb << 20)
    if profile is not None:
        opt_profile = builder.create_optimization_profile()
        opt_profile.set_shape(spec.name, *profile)
        config.add_optimization_profile(opt_profile)
    if precision == 'fp16' or (precision == 'int8' and builder.platform_has_fast_fp16):
        config.set_flag(trt.BuilderFlag.FP16)
    entropy = None
    if precision == 'int8':
        config.set_flag(trt.BuilderFlag.INT8)
        entropy = make_calibrator(calibrator)
        config.int8_calibrator = entropy
        if calibration_shape is not None:
            calib_profile = builder.create_optimization_profile()
            calib_profile.set_shape(spec.name, *(calibration_shape,) * 3)
            config.set_calibration_profile(calib_profile)

    start = time.time()
    try:
        serialized = builder.build_serialized_network(network, config)
    finally:
        if entropy is not None:
            entropy.close()
    if entropy is not None and entropy.error is not None:
        raise entropy.error
    if serialized is None:
        raise RuntimeError('TensorRT could not build a %s engine from %s (the TensorRT log above '
                           'says why)' % (precision, onnx_path))
    atomic_write(engine_path, serialized)
    if entropy is not None and calibrator.num_yielded:
        logger.info('int8 calibration: %d batches of %d, %d images skipped, %d dropped',
                    calibrator.num_yielded, calibrator.batch_size, len(calibrator.skipped),
                    calibrator.dropped)
    logger.info('built %s engine %s in %.0f s', precision, engine_path, time.time() - start)
    return engine_path


# ---------------------------------------------------------------- running

def _check_batch(shape, low, high):
    """Raise ValueError unless a batch of ``shape`` fits the engine input, whose shapes run
    from ``low`` to ``high`` (equal where the engine's input is fixed)."""
    if len(shape) != len(low) or not _fits(shape[1:], low[1:], high[1:]):
        size = _dims(low[1:]) if low[1:] == high[1:] else 'from %s to %s (its optimization ' \
            'profile)' % (_dims(low[1:]), _dims(high[1:]))
        raise ValueError('batch of shape %s does not fit the engine input N x %s'
                         % (tuple(shape), size))
    if not low[0] <= shape[0] <= high[0]:
        allowed = ('exactly %d (fixed shape)' % low[0] if low[0] == high[0]
                   else '%d to %d (its optimization profile)' % (low[0], high[0]))
        raise ValueError('this engine takes batches of %s, got %d' % (allowed, shape[0]))


class TensorRTRunner:
    """A TensorRT engine as a callable: ``runner(batch) -> (ids, scores, boxes, *fields)``
    (``output_fields``: the engine's outputs beyond the three).

    Device buffers for the largest batch are allocated once.

    Parameters
    ----------
    engine_path : str
        A serialized engine from :func:`build_engine`, with one input and
        outputs named ``ids``, ``scores`` and ``boxes``.

    Attributes
    ----------
    input_name : str
    input_shape : tuple of int
        ``C, H, W``, -1 where dynamic.
    batch_range : (int, int)
        Smallest and largest batch the engine takes.
    shape_range : (tuple, tuple)
        Smallest and largest ``N x C x H x W`` input (its optimization profile, or its
        fixed shape twice).
    """

    def __init__(self, engine_path):
        if not os.path.isfile(engine_path):
            raise FileNotFoundError('TensorRT engine not found: %s' % engine_path)
        trt = _import_tensorrt()
        self._rt = rt = _import_cudart()
        self._trt_logger = trt.Logger(trt.Logger.WARNING)
        with open(engine_path, 'rb') as f:
            self.engine = trt.Runtime(self._trt_logger).deserialize_cuda_engine(f.read())
        if self.engine is None:
            raise RuntimeError('cannot load %s: an engine runs only with the TensorRT version and '
                               'GPU model that built it' % engine_path)
        engine = self.engine
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        if len(inputs) != 1 or not set(OUTPUT_NAMES) <= set(names):
            raise ValueError('%s has inputs %s and outputs %s; expected one input and outputs %s'
                             % (engine_path, inputs, [n for n in names if n not in inputs],
                                ', '.join(OUTPUT_NAMES)))
        self.input_name = inputs[0]
        self.output_fields = tuple(n for n in names if n not in inputs and n not in OUTPUT_NAMES)
        shape = tuple(engine.get_tensor_shape(self.input_name))
        self.input_shape = shape[1:]
        self._dynamic = min(shape) < 0
        if self._dynamic:
            low, _, high = engine.get_tensor_profile_shape(self.input_name, 0)
            self.shape_range = (tuple(low), tuple(high))
        else:
            self.shape_range = (shape, shape)
        self.batch_range = (self.shape_range[0][0], self.shape_range[1][0])
        self.context = engine.create_execution_context()
        if self._dynamic:   # output shapes follow; buffers are sized for the largest input
            self.context.set_input_shape(self.input_name, self.shape_range[1])
        self._stream = _cuda(rt, rt.cudaStreamCreate())
        self._dtypes, self._buffers = {}, {}
        for name in names:
            self._dtypes[name] = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
            size = int(np.prod(tuple(self.context.get_tensor_shape(name))))
            self._buffers[name] = _DeviceBuffer(rt, size * self._dtypes[name].itemsize)
            self.context.set_tensor_address(name, self._buffers[name].ptr)

    def __call__(self, batch):
        """Run a ``N x C x H x W`` batch; returns numpy ``(ids, scores, boxes, *fields)``
        (the ``output_fields``)."""
        batch = np.ascontiguousarray(batch, dtype=self._dtypes[self.input_name])
        _check_batch(batch.shape, *self.shape_range)
        if self._dynamic:
            self.context.set_input_shape(self.input_name, batch.shape)
        self._buffers[self.input_name].upload(batch, self._stream)
        if not self.context.execute_async_v3(int(self._stream)):
            raise RuntimeError('TensorRT execution failed (see the TensorRT log)')
        outputs = []
        for name in OUTPUT_NAMES + self.output_fields:
            out = np.empty(tuple(self.context.get_tensor_shape(name)), self._dtypes[name])
            self._buffers[name].download(out, self._stream)
            outputs.append(out)
        _cuda(self._rt, self._rt.cudaStreamSynchronize(self._stream))
        return tuple(outputs)

    def close(self):
        """Free the device buffers and the stream."""
        for buffer in self._buffers.values():
            buffer.free()
        self._buffers = {}
        if self._stream is not None:
            _cuda(self._rt, self._rt.cudaStreamDestroy(self._stream))
            self._stream = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
