"""OpenVINO as a CPU backend: an exported ONNX model or an OpenVINO IR, as a runner.

:class:`OpenVINORunner` runs what ``gluondet export`` writes, on OpenVINO's CPU plugin: an
ONNX model (fp32, or the int8 QDQ model of ``--precision int8``, which OpenVINO runs with
its int8 kernels) or the IR of ``--format openvino`` (:func:`save_openvino`: a ``.xml``
graph and its ``.bin`` weights, converted from that ONNX model with the weights kept in
fp32). The runner computes in fp32: OpenVINO's default on CPUs with bf16 instructions is
bf16, whose detections differ from ONNX Runtime's.

The model's description (:func:`~gluondet.deploy.sources.model_metadata`) travels as the
ONNX model's metadata, which OpenVINO reads into the model's ``rt_info`` under
``framework`` and keeps in the IR. OpenVINO comes with the ``openvino`` extra
(``pip install 'gluondet[openvino]'``).
"""
import functools
import os
import shutil
import tempfile

import numpy as np

from ..detections import OUTPUT_NAMES
from ..files import atomic_save_all
from ..optional import require
from ..model_formats import SOURCES
from .sources import decode_metadata

__all__ = ['IR_EXTENSION', 'OpenVINORunner', 'require_openvino', 'save_openvino', 'weights_path']

IR_EXTENSION = SOURCES['openvino'].extensions[0]
METADATA_KEY = 'framework'      # where OpenVINO puts an ONNX model's metadata


def require_openvino():
    """``import openvino``, or an ImportError naming the ``openvino`` extra; with OpenVINO's
    telemetry off in this process (`quiet_telemetry`)."""
    quiet_telemetry()
    return require('openvino', 'the openvino backend')


def quiet_telemetry():
    """Turn OpenVINO's telemetry off in this process, before OpenVINO starts it.

    It sends each event from a thread that forks the process (to time out a request that
    cannot reach the internet): a fork of a training or test process at any moment, with
    MXNet's engine stopped and restarted around it under the main thread's work, which
    crashed a pytest worker (issue 35). The user's own consent file is left as it is.
    """
    try:
        import openvino_telemetry
    except ImportError:
        return
    try:        # a singleton: the first one made is everyone's
        instance = openvino_telemetry.Telemetry(app_name='gluondet', app_version='', tid='')
    except Exception:       # nosec: a telemetry of another version: left alone
        return
    instance.consent = False
    instance.init = lambda *args, **kwargs: None    # OpenVINO's tools init it again


def weights_path(xml):
    """The ``.bin`` of an IR ``.xml`` (OpenVINO reads the weights of the same stem)."""
    return os.path.splitext(xml)[0] + '.bin'


def _read_model(ov, core, path):
    """The ``ov.Model`` of an IR or an ONNX model, or FileNotFoundError naming a missing file.

    An ONNX model goes through ``ov.convert_model``, as :func:`save_openvino` converts it:
    ``core.read_model`` of an int8 QDQ model gave other scores (an SSD's BCCD test mAP 0.33
    instead of ONNX Runtime's 0.82; converted, 0.82).
    """
    ir = path.lower().endswith(IR_EXTENSION)
    missing = [p for p in ([path, weights_path(path)] if ir else [path]) if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError('OpenVINO model file not found: %s' % missing[0])
    return core.read_model(path) if ir else ov.convert_model(path)


def _metadata(model, path):
    """The gluondet description in ``model``'s rt_info, decoded ({} if none)."""
    if not model.has_rt_info([METADATA_KEY]):
        return {}
    texts = {key: value.astype(str) for key, value in model.get_rt_info()[METADATA_KEY].items()}
    return decode_metadata(texts, path)


class OpenVINORunner:
    """An exported gluondet detector (ONNX model or OpenVINO IR) in OpenVINO, as a runner.

    Parameters
    ----------
    path : str
        A ``.onnx`` file or an IR ``.xml`` (its ``.bin`` beside).
    threads : int, optional
        OpenVINO's inference threads (``INFERENCE_NUM_THREADS``; default its own, one per
        physical core).
    device : str
        OpenVINO's device (default ``'CPU'``).

    Attributes
    ----------
    input_shape : tuple of int
        ``C, H, W`` of the input, -1 where a dimension is dynamic.
    batch_range : (int, int or None)
        ``(B, B)`` for a model exported with a fixed batch ``B``, else ``(1, None)``.
    metadata : dict
        The model's description (``classes``, ``data_shape``, ...).
    """

    def __init__(self, path, threads=None, device='CPU'):
        ov = require_openvino()
        import openvino.properties as props
        core = _core()
        model = _read_model(ov, core, path)
        outputs = [name for o in model.outputs for name in o.get_names()]
        if len(model.inputs) != 1 or not set(OUTPUT_NAMES) <= set(outputs):
            raise ValueError('%s has inputs %s and outputs %s; a gluondet detector has one input '
                             'and outputs %s' % (path, [i.get_any_name() for i in model.inputs],
                                                 outputs, ', '.join(OUTPUT_NAMES)))
        batch, *shape = (d.get_length() if d.is_static else -1
                         for d in model.inputs[0].get_partial_shape())
        self.input_shape = tuple(shape)
        self.batch_range = (batch, batch) if batch > 0 else (1, None)
        if min(batch, *shape) > 0:
            # the CPU plugin cannot compile some fully static detectors (Faster R-CNN's:
            # "Can not create StaticMemory object"); with the batch left free it can, and the
            # predictor still sends the exported batch only
            model.reshape({model.inputs[0]: ov.PartialShape([-1] + shape)})
        self.metadata = _metadata(model, path)
        config = {props.hint.inference_precision: ov.Type.f32,
                  props.hint.performance_mode: props.hint.PerformanceMode.LATENCY}
        if threads is not None:
            config[props.inference_num_threads] = int(threads)
        compiled = core.compile_model(model, device, config)
        self.output_fields = tuple(o.get_any_name() for o in model.outputs
                                   if not o.get_names() & set(OUTPUT_NAMES))
        self._outputs = [compiled.output(name) for name in OUTPUT_NAMES + self.output_fields]
        self._request = compiled.create_infer_request()

    def __call__(self, batch):
        results = self._request.infer([np.ascontiguousarray(batch, np.float32)],
                                      share_inputs=True)
        return tuple(results[output] for output in self._outputs)


@functools.lru_cache(maxsize=None)
def _core():
    """The one OpenVINO ``Core`` of this process, kept to its end.

    Each Core's CPU plugin points the calling thread's alternate signal stack at a buffer of
    its own and, when the Core is destroyed, points it back at what it found. Cores destroyed
    out of the order they were made (two predictors, the first freed first) left the main
    thread's pointing at freed memory, and the next signal it handled (Python's handlers run
    on that stack) killed the process with SIGSEGV instead: a Ctrl-C or SIGTERM stopping
    training or inference after an OpenVINO predictor had been used (OpenVINO 2026.4).
    """
    return require_openvino().Core()


def save_openvino(onnx_path, output):
    """Convert an exported ONNX model to an OpenVINO IR: ``output`` (``.xml``) and its ``.bin``.

    Weights stay fp32 (``compress_to_fp16=False``), an int8 QDQ model's quantization is kept;
    the ONNX model's metadata (the gluondet description) goes into the IR's ``rt_info``. Both
    files are written to temporary names and renamed, the weights first.

    Returns
    -------
    list of str
        ``[the .bin, output]``.
    """
    ov = require_openvino()
    model = ov.convert_model(onnx_path)
    staging = tempfile.mkdtemp(prefix='.openvino', dir=os.path.dirname(os.path.abspath(output)))
    try:
        staged = os.path.join(staging, 'model' + IR_EXTENSION)
        ov.save_model(model, staged, compress_to_fp16=False)
        files = [weights_path(output), output]
        atomic_save_all([(functools.partial(shutil.copyfile, source), path) for source, path
                         in zip([weights_path(staged), staged], files)])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return files
