"""int8 ONNX models for ONNX Runtime on the CPU, calibrated on images.

The CPU counterpart of a TensorRT int8 engine, fed by the same
:class:`~gluondet.deploy.calibration.CalibrationBatches` (images preprocessed
exactly as for validation). ONNX Runtime's static quantization rewrites the
network body's convolutions in the QDQ format: int8 weights per output
channel, uint8 activations with scales from the calibration. Decoding, NMS
and top-k stay float32. ONNX Runtime runs the result with its int8 kernels
(VNNI where the CPU has it); the detections are close to the float model's,
not equal: measure the mAP of the quantized model before deploying it.
"""
import json
import os
import tempfile

import onnx

from ..optional import require

__all__ = ['quantize_onnx', 'CALIBRATION_METHODS']

CALIBRATION_METHODS = ('minmax', 'percentile')


class _Reader:
    """ONNX Runtime's CalibrationDataReader over :class:`CalibrationBatches`."""

    def __init__(self, input_name, batches):
        self.input_name = input_name
        self.batches = iter(batches)

    def get_next(self):
        batch = next(self.batches, None)
        return None if batch is None else {self.input_name: batch}


def quantize_onnx(model_path, output, batches, method='minmax'):
    """Write an int8 version of the float ONNX model ``model_path`` to ``output``.

    Parameters
    ----------
    model_path : str
        A float model of :func:`~gluondet.deploy.onnx.export_onnx`.
    output : str
        The int8 ``.onnx`` file, written atomically. Its metadata is the float
        model's, plus ``precision`` (``"int8"``) and ``calibration`` (method, and
        the batches and images used and skipped, or the cache file read).
    batches : CalibrationBatches
        Calibration images, batched as the model takes them (a fixed-batch
        model needs its own batch size). Its ``cache_path``, if set, holds the
        activation ranges (ONNX Runtime's JSON): read instead of the images if
        it exists, else written (atomically) after the calibration.
    method : {'minmax', 'percentile'}
        How activation ranges are chosen: ``minmax`` takes the whole observed
        range, ``percentile`` clips it to its 99.999th percentile. (ONNX
        Runtime's entropy method is not offered: in an early trial on the BCCD
        SSD it lost much of the float model's mAP.)

    Returns
    -------
    onnx.ModelProto
        The quantized model.
    """
    if method not in CALIBRATION_METHODS:
        raise ValueError('calibration method must be one of %s, got %r'
                         % (', '.join(CALIBRATION_METHODS), method))
    require('onnxruntime.quantization', 'int8 quantization')
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    source = onnx.load(model_path)
    fixed = source.graph.input[0].type.tensor_type.shape.dim[0].dim_value
    if fixed and fixed != batches.batch_size:
        raise ValueError('%s takes batches of %d images; calibrate with batch_size=%d, not %d'
                         % (model_path, fixed, fixed, batches.batch_size))
    calibrate = {'minmax': CalibrationMethod.MinMax,
                 'percentile': CalibrationMethod.Percentile}[method]
    cached = batches.read_cache() is not None
    folder = os.path.dirname(os.path.abspath(output))
    with tempfile.TemporaryDirectory(dir=folder, prefix='.quantize') as tmp:
        prepared = os.path.join(tmp, 'prepared.onnx')
        # folds BatchNorm into the convolutions first, so they quantize as one
        quant_pre_process(model_path, prepared, skip_symbolic_shape=True)
        ranges = batches.cache_path if cached else os.path.join(tmp, 'ranges.json')
        quantized = os.path.join(tmp, 'int8.onnx')
        quantize_static(prepared, quantized, _Reader(source.graph.input[0].name, batches),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        op_types_to_quantize=['Conv'], calibrate_method=calibrate,
                        extra_options={'CalibTensorRangeSymmetric': False},
                        calibration_cache_path=ranges)
        if not cached and batches.cache_path is not None:
            with open(ranges, 'rb') as f:
                batches.write_cache(f.read())
        model = onnx.load(quantized)
        props = {p.key: p.value for p in source.metadata_props}
        props['precision'] = json.dumps('int8')
        props['calibration'] = json.dumps(
            {'method': method, 'cache': os.path.basename(batches.cache_path)} if cached else
            {'method': method, 'batches': batches.num_yielded,
             'images': batches.num_yielded * batches.batch_size, 'skipped': len(batches.skipped)})
        onnx.helper.set_model_props(model, props)
        staged = os.path.join(tmp, 'model.onnx')
        onnx.save(model, staged)
        os.replace(staged, output)
    return model
