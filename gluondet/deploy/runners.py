"""Runners for MXNet and ONNX Runtime: ``runner(batch) -> (ids, scores, boxes, *fields)``.

A runner's ``output_fields`` names its outputs after the three (``()`` for the zoo's
detectors): more per-detection fields, which the predictor carries into each image's
:class:`~gluondet.detections.Detections`. A Gluon network declares them as its
``output_fields`` attribute, those of them holding points in input pixels (keypoints) as
its ``point_fields`` and those holding grids over each detection's box (Mask R-CNN's
``masks``) as its ``grid_fields``; an exported model's are its outputs beyond the three,
its grid fields those its metadata names (``grid_fields``, set on the runner by the
predictor), no points.

:class:`MXNetRunner` runs a Gluon network or an imported MXNet symbol,
:class:`ONNXRuntimeRunner` an exported ONNX model;
:class:`~gluondet.deploy.tensorrt.TensorRTRunner` is the third runner. What a
runner takes and returns is in :mod:`gluondet.deploy.predictor`, whose
:class:`~gluondet.deploy.predictor.Predictor` runs them all the same way.
"""
import os
import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from ..optional import require
from ..detections import OUTPUT_NAMES
from .sources import decode_metadata

__all__ = ['MXNetRunner', 'ONNXRuntimeRunner']


def _block_context(block):
    for param in block.collect_params().values():
        try:
            return param.list_ctx()[0]
        except RuntimeError:    # not initialized
            continue
    return mx.cpu()


class MXNetRunner:
    """A Gluon block (a model zoo network or an imported symbol) as a runner.

    Parameters
    ----------
    block : HybridBlock
        Takes ``data`` and returns ``(ids, scores, boxes)`` in inference mode, then one
        more output for each name of its ``output_fields`` attribute, if it has one
        (``point_fields``: those of them holding points in input pixels; ``grid_fields``:
        those holding grids over the boxes).
    ctx : Context or list of Context, optional
        Where the batch goes (default: where the block's parameters are). With
        several (the training's contexts), each batch is split over them as
        training splits its batches, and the outputs are joined in order.
    """

    batch_range = (1, None)

    def __init__(self, block, ctx=None):
        self.block = block
        ctx = ctx or _block_context(block)
        self.ctx_list = list(ctx) if isinstance(ctx, (list, tuple)) else [ctx]
        self.ctx = self.ctx_list[0]
        self.output_fields = tuple(getattr(block, 'output_fields', ()))
        self.point_fields = tuple(getattr(block, 'point_fields', ()))
        self.grid_fields = tuple(getattr(block, 'grid_fields', ()))

    def __call__(self, batch):
        with autograd.predict_mode():
            if len(self.ctx_list) == 1:
                outputs = self.block(mx.nd.array(batch, ctx=self.ctx))
                return tuple(o.asnumpy() for o in outputs)
            parts = gluon.utils.split_and_load(batch, self.ctx_list, even_split=False)
            outputs = [self.block(part) for part in parts]
        return tuple(np.concatenate([o[k].asnumpy() for o in outputs])
                     for k in range(len(OUTPUT_NAMES) + len(self.output_fields)))


class ONNXRuntimeRunner:
    """An ONNX detector (``gluondet.deploy.onnx.export_onnx``) in ONNX Runtime, as a runner.

    The session uses every graph optimization (``ORT_ENABLE_ALL``).

    Parameters
    ----------
    path : str
        The ``.onnx`` file.
    providers : list of str, optional
        ONNX Runtime execution providers (default: the CPU).
    threads : int, optional
        Intra-op threads (``intra_op_num_threads``; default ONNX Runtime's, one per
        physical core).

    Attributes
    ----------
    input_shape : tuple of int
        ``C, H, W`` of the input.
    batch_range : (int, int or None)
        ``(B, B)`` for a model exported with a fixed batch ``B``, else ``(1, None)``.
    metadata : dict
        The model's metadata, JSON-decoded (``classes``, ``data_shape``, ...).
    """

    def __init__(self, path, providers=None, threads=None):
        ort = require('onnxruntime', 'the onnxruntime backend')
        if not os.path.isfile(path):
            raise FileNotFoundError('ONNX model not found: %s' % path)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads is not None:
            options.intra_op_num_threads = int(threads)
        self.session = ort.InferenceSession(path, options,
                                            providers=providers or ['CPUExecutionProvider'])
        inputs = self.session.get_inputs()
        outputs = [o.name for o in self.session.get_outputs()]
        if len(inputs) != 1 or not set(OUTPUT_NAMES) <= set(outputs):
            raise ValueError('%s has inputs %s and outputs %s; a gluondet detector has one input '
                             'and outputs %s' % (path, [i.name for i in inputs], outputs,
                                                 ', '.join(OUTPUT_NAMES)))
        self.input_name = inputs[0].name
        self.output_fields = tuple(o for o in outputs if o not in OUTPUT_NAMES)
        batch, *shape = inputs[0].shape
        self.input_shape = tuple(shape)
        self.batch_range = (batch, batch) if isinstance(batch, int) else (1, None)
        self.metadata = decode_metadata(self.session.get_modelmeta().custom_metadata_map, path)

    def __call__(self, batch):
        return tuple(self.session.run(list(OUTPUT_NAMES + self.output_fields),
                                      {self.input_name: batch}))


# ---------------------------------------------------------------- loading

def _symbol_prefix(model):
    return model[:-len('-symbol.json')] if model.lower().endswith('-symbol.json') else model


def _symbol_runner(model, ctx):
    prefix = _symbol_prefix(model)
    params = prefix + '-0000.params'
    if not os.path.isfile(params):
        raise FileNotFoundError('symbol weights not found: %s' % params)
    ctx = ctx or mx.cpu()
    with warnings.catch_warnings():     # MXNet's note that it cannot tell the input's type
        warnings.filterwarnings('ignore', 'Cannot decide type')
        block = gluon.SymbolBlock.imports(prefix + '-symbol.json', ['data'], params, ctx=ctx)
    block.hybridize()
    return MXNetRunner(block, ctx)
