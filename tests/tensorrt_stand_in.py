"""Stand-ins for ``tensorrt`` and cuda-python's runtime on a machine without a GPU.

:class:`FakeCudart` is the few CUDA runtime calls gluondet makes, on host memory.
:func:`install` puts a ``tensorrt`` module in place whose runtime deserializes a stand-in
"engine": an ONNX model run in ONNX Runtime behind TensorRT's tensor API (names, modes,
shapes with -1 where dynamic, the optimization profile, an execution context with input
shapes, device addresses and ``execute_async_v3``). :class:`gluondet.deploy.tensorrt.
TensorRTRunner` runs on it as on a real engine: its buffers, shape checks and copies are
exercised; TensorRT's own kernels are not.
"""
import ctypes
import json
import os
import sys
import types
from types import SimpleNamespace

import numpy as np

from gluondet.deploy import calibration, tensorrt
from gluondet.deploy.sources import metadata_path


class FakeCudart(types.ModuleType):
    """cuda-python's runtime calls of gluondet, on host memory (``ctypes`` buffers)."""

    def __init__(self):
        super().__init__('cudart')
        self.cudaError_t = SimpleNamespace(cudaSuccess=0)
        self.cudaMemcpyKind = SimpleNamespace(cudaMemcpyHostToDevice=1, cudaMemcpyDeviceToHost=2)
        self.memory, self.freed = {}, []

    def cudaMalloc(self, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        self.memory[ctypes.addressof(buf)] = buf
        return 0, ctypes.addressof(buf)

    def cudaMemcpyAsync(self, dst, src, nbytes, kind, stream):
        ctypes.memmove(dst, src, nbytes)
        return (0,)

    def cudaDeviceSynchronize(self):
        return (0,)

    def cudaStreamCreate(self):
        return 0, 1

    def cudaStreamSynchronize(self, stream):
        return (0,)

    def cudaStreamDestroy(self, stream):
        return (0,)

    def cudaFree(self, ptr):
        self.freed.append(ptr)
        return (0,)


def engine_bytes(onnx_path, profile):
    """What a stand-in engine file holds: the ONNX model it runs and its input's
    ``(min, opt, max)`` optimization profile (None: the model's fixed shape)."""
    return json.dumps({'onnx': onnx_path, 'profile': profile}).encode()


class _Engine:
    def __init__(self, data, trt):
        import onnxruntime as ort
        spec = json.loads(data.decode())
        self.session = ort.InferenceSession(spec['onnx'], providers=['CPUExecutionProvider'])
        self.profile = spec['profile']
        self.trt = trt
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        self.input = inputs[0].name
        self.names = [self.input] + [o.name for o in outputs]
        self.shapes = {value.name: tuple(d if isinstance(d, int) else -1 for d in value.shape)
                       for value in inputs + outputs}
        self.num_io_tensors = len(self.names)

    def get_tensor_name(self, index):
        return self.names[index]

    def get_tensor_mode(self, name):
        modes = self.trt.TensorIOMode
        return modes.INPUT if name == self.input else modes.OUTPUT

    def get_tensor_shape(self, name):
        return self.shapes[name]

    def get_tensor_dtype(self, name):
        return 'float32'

    def get_tensor_profile_shape(self, name, profile):
        return self.profile

    def create_execution_context(self):
        return _Context(self)


class _Context:
    def __init__(self, engine):
        self.engine = engine
        self.input_shape = engine.shapes[engine.input]
        self.addresses = {}

    def set_input_shape(self, name, shape):
        low, _, high = self.engine.profile
        if not all(a <= v <= b for v, a, b in zip(shape, low, high)):
            raise AssertionError('input shape %s outside the profile %s' % (shape, (low, high)))
        self.input_shape = tuple(shape)

    def get_tensor_shape(self, name):
        if name == self.engine.input:
            return self.input_shape
        return (self.input_shape[0],) + self.engine.shapes[name][1:]

    def set_tensor_address(self, name, ptr):
        self.addresses[name] = ptr

    def execute_async_v3(self, stream):
        count = int(np.prod(self.input_shape))
        batch = np.frombuffer(ctypes.string_at(self.addresses[self.engine.input], count * 4),
                              np.float32).reshape(self.input_shape)
        names = self.engine.names[1:]
        for name, value in zip(names, self.engine.session.run(names, {self.engine.input: batch})):
            value = np.ascontiguousarray(value, np.float32)
            ctypes.memmove(self.addresses[name], value.ctypes.data, value.nbytes)
        return True


def install(monkeypatch):
    """Put the stand-in ``tensorrt`` and CUDA runtime in place; returns the runtime."""
    trt = types.ModuleType('tensorrt')
    trt.__version__ = '10.3.0'
    trt.Logger = type('Logger', (), {'WARNING': 2, '__init__': lambda self, level: None})
    trt.TensorIOMode = SimpleNamespace(INPUT=0, OUTPUT=1)
    trt.nptype = np.dtype
    trt.Runtime = lambda logger: SimpleNamespace(
        deserialize_cuda_engine=lambda data: _Engine(data, trt))

    class IInt8EntropyCalibrator2:
        def __init__(self):
            self.base_initialized = True
    trt.IInt8EntropyCalibrator2 = IInt8EntropyCalibrator2
    cudart = FakeCudart()
    monkeypatch.setitem(sys.modules, 'tensorrt', trt)
    for module in (calibration, tensorrt):
        monkeypatch.setattr(module, '_import_cudart', lambda: cudart)
    return cudart


def engine_beside(onnx_path):
    """A stand-in engine of ``onnx_path`` beside it (``stand_in.engine``), with the profile
    ``build_engine`` would set and the json ``gluondet export`` writes beside an engine (the
    ONNX model's metadata)."""
    import onnx
    model = onnx.load(onnx_path)
    spec = tensorrt.read_onnx_input(onnx_path, model)
    profile, _ = tensorrt._batch_plan(spec, False, spec.shape[0], None, None,
                                      tensorrt.input_sizes(onnx_path, model, spec))
    engine = os.path.join(os.path.dirname(onnx_path), 'stand_in.engine')
    with open(engine, 'wb') as f:
        f.write(engine_bytes(onnx_path, profile))
    with open(metadata_path(engine), 'w') as f:
        json.dump({p.key: json.loads(p.value) for p in model.metadata_props}, f)
    return engine
