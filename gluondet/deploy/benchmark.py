"""What ``gluondet benchmark`` does: latency and throughput of a detector on a backend.

What is timed: one call of the predictor's runner on a preprocessed ``N x 3 x H x W``
float32 batch, that is the network's forward with its box decoding and NMS (both inside
the graph on every backend), until the outputs are numpy arrays in host memory. MXNet
computes asynchronously: the clock starts after ``mx.nd.waitall()`` and stops after the
outputs are copied out (``asnumpy`` waits for them) and ``mx.nd.waitall()``; ONNX Runtime,
OpenVINO and the TensorRT runner return when their outputs are in host memory. Not timed: reading
and decoding images, resizing and normalizing them, and the boxes' scaling back to the
original pixels (the predictor's numpy work around the runner).

The batch is made of synthetic demo images (:func:`~gluondet.data.demo.render_demo_image`,
640 x 480, one per slot) through the model's validation transform: a keep-ratio model
(Faster R-CNN, RetinaNet) sees the input of a 4:3 landscape photo.

Models are what ``gluondet infer --model`` takes. A zoo name without ``params`` or
``pretrained`` gets random weights made to detect many overlapping boxes
(:func:`~gluondet.deploy.compare.detecting_random_weights`), so that NMS has the work of a
trained model (plain random weights give a handful of boxes). A Gluon network (zoo name
or training output) benchmarked with ``onnxruntime``, ``openvino`` or ``tensorrt`` is first
exported to a temporary folder, as ``gluondet export --dynamic-batch`` would (a keep-ratio
network's height and width dynamic too, as by default; OpenVINO runs that ONNX model; for
TensorRT an fp32 engine up to the largest batch asked for).
"""
import datetime
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time

import cv2
import mxnet as mx
import numpy as np

from .. import threads as threads_module
from ..version import __version__
from ..data.base import empty_label
from ..data.demo import render_demo_image
from ..data.preprocess import padded_shape, preprocessing_of
from ..files import atomic_write
from ..model_zoo import get_model, get_model_info
from .calibration import _import_cudart, _import_tensorrt
from .compare import detecting_random_weights
from .commands import export_model
from .openvino import require_openvino
from .postprocess import postprocess_from_metadata, postprocess_of
from .predictor import Predictor
from .sources import BACKEND_OF, BACKENDS, ModelSource, shape_pair

__all__ = ['FORMAT', 'benchmark', 'load', 'time_runs', 'statistics', 'parse_batch_sizes',
           'format_table', 'machine', 'versions']

FORMAT = 'gluondet-benchmark'
DEFAULT_ITERS = 100         # timed runs per batch size unless a time limit is given
IMAGE_SIZE = (480, 640)     # height, width of the synthetic input images
DEMO_IMAGES = 8             # distinct images, repeated in larger batches
PERCENTILES = (50, 90, 99)


def parse_batch_sizes(text):
    """``'1,8'`` -> ``[1, 8]``: positive integers, comma-separated, without repeats."""
    parts = [part.strip() for part in str(text).split(',')]
    try:
        sizes = [int(part) for part in parts]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        raise ValueError('batch sizes must be positive integers separated by commas, without '
                         'repeats (for example 1,8), got %r' % (text,))
    return sizes


def _check_counts(warmup, iters, seconds, threads):
    if warmup < 0:
        raise ValueError('warmup must be 0 or more runs, got %r' % (warmup,))
    if iters is not None and iters < 1:
        raise ValueError('iters must be a positive number of runs, got %r' % (iters,))
    if seconds is not None and not seconds > 0:
        raise ValueError('seconds must be positive, got %r' % (seconds,))
    if threads is not None and threads < 1:
        raise ValueError('threads must be a positive number, got %r' % (threads,))


# ---------------------------------------------------------------- the model

def _random_params(model, classes, data_shape, path):
    """Save random detecting weights of the zoo network ``model`` to ``path``."""
    if os.sep in model:
        raise FileNotFoundError('no model at %s: expected a .params, .onnx or engine file, or '
                                'a symbol prefix (%s-symbol.json)' % (model, model))
    info = get_model_info(model)    # an unknown name fails here, with suggestions
    if info.classes is None and not classes:
        raise ValueError('%s takes the classes of its dataset: give classes (--classes A,B)'
                         % model)
    net = get_model(model, pretrained_base=False,
                    **({} if info.classes else {'classes': tuple(classes)}))
    spec = preprocessing_of(net, None if data_shape is None else shape_pair(data_shape))
    batch = _input_batch(Predictor(_Shapeless(), net.classes, spec), 1)
    detecting_random_weights(net, mx.nd.array(batch))
    net.save_parameters(path)


class _Shapeless:
    """A runner stand-in for a Predictor that only preprocesses."""
    batch_range = (1, None)


def load(source, threads=None, max_batch_size=8, workdir=None, nms=None):
    """The predictor to benchmark and what it runs.

    Parameters
    ----------
    source : ModelSource
        See :class:`~gluondet.deploy.sources.ModelSource`; a zoo name without weights gets
        random detecting weights.
    threads : int, optional
        ONNX Runtime's intra-op or OpenVINO's inference threads.
    max_batch_size : int
        The largest batch of a TensorRT engine built from a Gluon network.
    workdir : str, optional
        Folder for random weights and exports (needed for those).
    nms : NMSOptions, optional
        The final NMS's options (:mod:`gluondet.deploy.nms`); a Gluon network exported for
        them is exported without its NMS (``--no-nms``) if they change the suppression.

    Returns
    -------
    predictor : Predictor
    description : dict
        ``weights`` (``'random'``, ``'pretrained'``, a params path, or ``'exported'``) and
        ``exported`` (the format a Gluon network was exported to for this run, or None).
    """
    model, kind, params = source.model, source.kind, source.params
    backend = source.backend or BACKEND_OF[kind]
    if backend not in BACKENDS:
        raise ValueError('backend must be one of %s, got %r' % (', '.join(BACKENDS), backend))
    if kind == 'symbol' and backend != 'mxnet':
        raise ValueError('%s is an MXNet symbol: it runs with backend mxnet; for %s, benchmark '
                         'the network it was exported from (a zoo name or .params)'
                         % (model, backend))
    if kind in ('onnx', 'tensorrt', 'openvino') and not os.path.isfile(model):
        raise FileNotFoundError('model file not found: %s' % model)
    if backend == 'tensorrt':       # before loading or exporting anything
        _import_tensorrt()
        _import_cudart()
    if backend == 'openvino':
        require_openvino()
    gluon = kind == 'zoo'           # a zoo name or a training output
    if gluon and params is None and not source.pretrained \
            and not model.lower().endswith('.params'):
        params, weights = os.path.join(workdir, 'random.params'), 'random'
        _random_params(model, source.classes, source.data_shape, params)
        source = ModelSource.of(source, params=params)
    else:
        weights = (('pretrained' if source.pretrained else params or model) if gluon
                   else 'exported')
    if not gluon or backend == 'mxnet':
        predictor = Predictor.from_model(source, threads=threads, nms=nms)
        return predictor, {'weights': weights, 'exported': None}
    fmt = 'tensorrt' if backend == 'tensorrt' else 'onnx'
    output = os.path.join(workdir, 'model.onnx' if fmt == 'onnx' else 'model.engine')
    export_model(model, output, fmt, params, source.pretrained, source.classes,
                 source.data_shape,
                 batch_size=None if fmt == 'onnx' else max_batch_size, dynamic_batch=True,
                 verbose=False, with_nms=not (nms and nms.needs_candidates))
    predictor = Predictor.from_model(output, backend, threads=threads, nms=nms)
    dynamic = 'dynamic batch' + (', height and width' if predictor.data_shape is None else '')
    return predictor, {'weights': weights, 'exported': '%s (%s)' % (fmt, dynamic)}


# ---------------------------------------------------------------- timing

def _with_host_nms(runner, host):
    """``runner``, followed by the predictor's host NMS of each image if it has one."""
    if host is None:
        return runner

    def run(batch):
        outputs = [np.asarray(o) for o in runner(batch)]
        ids, scores, boxes = outputs[:3]
        for i in range(len(batch)):
            host(ids[i, :, 0], scores[i, :, 0], boxes[i])
        return outputs
    return run


def _timed(predictor):
    """What was timed: the runner with the post-processing its model declares, in its
    backend's words, and the predictor's host NMS (or cut) if it runs one."""
    meta = getattr(predictor.runner, 'metadata', None)
    block = getattr(predictor.runner, 'block', None)
    post = (postprocess_from_metadata(meta, 'the model') if meta else
            postprocess_of(block) if hasattr(block, 'postprocess_kind') else None)
    text = ('the runner on a preprocessed float32 batch: the network forward with %s; outputs '
            'copied to host memory%s; not image reading, resizing, normalization or the boxes '
            'scaled to original pixels' % (
                'its post-processing (%s)' % post.description if post else 'its post-processing',
                ' (MXNet synchronized)' if predictor.backend == 'mxnet' else ''))
    host = predictor.nms
    if host is None:
        return text
    return text + '; then the predictor\'s %s on the host, each image of the batch' % (
        'NMS' if host.nms else 'score and count cut')


def _input_batch(predictor, size):
    """``size x 3 x H x W`` float32: demo images through the predictor's transform."""
    samples = []
    for i in range(min(size, DEMO_IMAGES)):
        image = cv2.resize(render_demo_image(0, 'val', i)[0], IMAGE_SIZE[::-1])
        samples.append(predictor.transform(image, empty_label())[0])
    data = np.stack(samples)
    shape = padded_shape(predictor.preprocessing, data.shape[2:], predictor.data_shape)
    batch = np.zeros((size, 3) + shape, np.float32)
    for i in range(size):
        batch[i, :, :data.shape[2], :data.shape[3]] = data[i % len(data)]
    return batch


def time_runs(runner, batch, warmup=5, iters=DEFAULT_ITERS, seconds=None, sync=None):
    """Seconds of each timed ``runner(batch)`` call, after ``warmup`` untimed ones.

    Runs ``iters`` times (unbounded if None), stopping early once ``seconds`` have passed
    (at least one run). ``sync`` (``mx.nd.waitall`` for MXNet) is called before the clock
    starts and before it stops, and every output is made a numpy array.
    """
    sync = sync or (lambda: None)
    for _ in range(warmup):
        runner(batch)
    sync()
    times, start = [], time.perf_counter()
    while (iters is None or len(times) < iters) and (
            seconds is None or time.perf_counter() - start < seconds):
        begin = time.perf_counter()
        outputs = [np.asarray(o) for o in runner(batch)]
        sync()
        times.append(time.perf_counter() - begin)
        del outputs
    return times


def statistics(times, batch_size):
    """Latency (ms: mean, std, min, p50, p90, p99, max) and throughput (images/s)."""
    ms = np.asarray(times, np.float64) * 1000
    latency = {'mean': float(ms.mean()), 'std': float(ms.std()), 'min': float(ms.min())}
    latency.update({'p%d' % p: float(v) for p, v in zip(PERCENTILES,
                                                         np.percentile(ms, PERCENTILES))})
    latency['max'] = float(ms.max())
    return {'batch_size': batch_size, 'iterations': len(times), 'latency_ms': latency,
            'throughput': batch_size * 1000 / latency['mean']}


# ---------------------------------------------------------------- the record

def _cpu_model():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine():
    """``cpu`` (model name), ``cores`` (physical), ``cpus`` (usable), ``system``, ``python``."""
    return {'cpu': _cpu_model(), 'cores': threads_module.physical_cores(),
            'cpus': len(threads_module._cpus()), 'system': platform.platform(),
            'python': platform.python_version()}


def _version(module, distributions):
    if module in sys.modules:
        return getattr(sys.modules[module], '__version__', None)
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def versions():
    """Versions of gluondet, mxnet, onnxruntime, tensorrt, openvino and numpy (None: not
    installed)."""
    return {'gluondet': __version__, 'mxnet': mx.__version__,
            'onnxruntime': _version('onnxruntime', ('onnxruntime', 'onnxruntime-gpu')),
            'tensorrt': _version('tensorrt', ('tensorrt',)),
            'openvino': _version('openvino', ('openvino',)), 'numpy': np.__version__}


def format_table(record):
    """The results of :func:`benchmark` as a text table (a heading line, then a row per
    batch size)."""
    input_shape = 'x'.join(str(v) for v in record['input_shape'])
    count = record['threads']
    threads = ('%d thread%s' % (count, 's' * (count > 1))) if count else 'GPU'
    lines = ['%s on %s (weights: %s%s), input %s, %s; %s (%d cores)'
             % (record['model'], record['backend'], record['weights'],
                ', exported to %s' % record['exported'] if record['exported'] else '',
                input_shape, threads, record['machine']['cpu'], record['machine']['cores']),
             '%6s %6s %9s %9s %9s %9s %10s' % ('batch', 'runs', 'mean ms', 'p50 ms', 'p90 ms',
                                              'p99 ms', 'images/s')]
    for row in record['results']:
        ms = row['latency_ms']
        lines.append('%6d %6d %9.2f %9.2f %9.2f %9.2f %10.1f'
                     % (row['batch_size'], row['iterations'], ms['mean'], ms['p50'],
                        ms['p90'], ms['p99'], row['throughput']))
    return '\n'.join(lines)


# ---------------------------------------------------------------- the command

def benchmark(model, backend=None, batch_sizes='1', threads=None, warmup=5, iters=None,
              seconds=None, output=None, printed=True, nms=None, **model_source):
    """Time a detector's forward (see the module docstring) at each batch size.

    Parameters
    ----------
    model, backend, **model_source
        A :class:`~gluondet.deploy.sources.ModelSource`, or its ``model`` and its other
        fields by keyword (``backend``, ``params``, ``pretrained``, ``data_shape``,
        ``classes``); a zoo name without weights gets random detecting weights; a Gluon
        network with backend onnxruntime, openvino or tensorrt is exported first (to a
        temporary folder).
    batch_sizes : str or sequence of int
        ``'1,8'`` or ``[1, 8]``.
    threads : int, optional
        CPU threads: MXNet's OpenMP threads (they are set before mxnet is imported, by
        :func:`gluondet.threads.request_mxnet_threads`: a different count is an error once
        it is), ONNX Runtime's intra-op or OpenVINO's inference threads. Default: MXNet's
        count, ONNX Runtime's and OpenVINO's (one per physical core). Not for TensorRT.
    warmup : int
        Untimed runs before timing each batch size.
    iters : int, optional
        Timed runs per batch size; default 100 unless ``seconds`` is given.
    seconds : float, optional
        Stop timing a batch size after this long (at least one run).
    output : str, optional
        A json file for the record (written to a temporary name and renamed).
    printed : bool
        Print the table.
    nms : NMSOptions, optional
        The final NMS's options (:mod:`gluondet.deploy.nms`). When the predictor runs an
        NMS (or a cut) on the host, it is timed too, after the runner (``timed`` says so).

    Returns
    -------
    dict
        ``format``, ``model``, ``backend``, ``weights``, ``exported``, ``input_shape``,
        ``batch_sizes``, ``threads``, ``warmup``, ``iters``, ``seconds``, ``timed``,
        ``results`` (per batch size: ``batch_size``, ``iterations``, ``latency_ms`` with
        mean, std, min, p50, p90, p99, max, and ``throughput`` in images/s: batch size /
        mean latency), ``machine``, ``versions``, ``environment`` (OpenMP variables),
        ``date``.
    """
    sizes = parse_batch_sizes(batch_sizes if isinstance(batch_sizes, str)
                              else ','.join(str(size) for size in batch_sizes))
    _check_counts(warmup, iters, seconds, threads)
    if iters is None and seconds is None:
        iters = DEFAULT_ITERS
    source = ModelSource.of(model, backend=backend, **model_source)
    chosen = source.backend or BACKEND_OF[source.kind]
    if chosen == 'tensorrt' and threads is not None:
        raise ValueError('threads are for the CPU backends (MXNet, ONNX Runtime, OpenVINO): '
                         'TensorRT runs on the GPU')
    if chosen == 'mxnet' and threads is not None \
            and not threads_module.request_mxnet_threads(threads):
        raise ValueError('MXNet was imported with %d OpenMP threads before %d could be set: '
                         'set OMP_NUM_THREADS=%d before starting Python (gluondet benchmark '
                         '--threads does)' % (threads_module.mxnet_threads(), threads, threads))
    with tempfile.TemporaryDirectory(prefix='gluondet-benchmark-') as workdir:
        predictor, described = load(source, threads, max(sizes), workdir, nms)
        for size in sizes:
            predictor.batch_size(size)      # every size checked before any is timed
        runner = predictor.runner
        sync = mx.nd.waitall if predictor.backend == 'mxnet' else None
        batch = _input_batch(predictor, max(sizes))
        try:
            results = [statistics(time_runs(_with_host_nms(runner, predictor.nms),
                                            batch[:size], warmup, iters, seconds, sync), size)
                       for size in sizes]
        finally:
            if hasattr(runner, 'close'):    # TensorRT's device buffers
                runner.close()
    if predictor.backend == 'mxnet':
        used = threads_module.mxnet_threads()
    elif predictor.backend in ('onnxruntime', 'openvino'):
        used = threads or threads_module.physical_cores()
    else:
        used = None
    record = dict(format=FORMAT, model=source.model, backend=predictor.backend, **described,
                  input_shape=list(batch.shape[1:]), batch_sizes=sizes, threads=used,
                  warmup=warmup, iters=iters, seconds=seconds, timed=_timed(predictor),
                  results=results,
                  machine=machine(), versions=versions(),
                  environment={name: os.environ.get(name) for name in (
                      'OMP_NUM_THREADS', 'MXNET_OMP_MAX_THREADS', 'OMP_WAIT_POLICY')},
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(
                      timespec='seconds'))
    if output:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        atomic_write(output, json.dumps(record, indent=2) + '\n')
    if printed:
        print(format_table(record))
        print('timed: ' + record['timed'])
        if output:
            print('written to %s' % output)
    return record
