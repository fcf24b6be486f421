"""Mask R-CNN's ONNX export: the masks of the detections, after Faster R-CNN's graph.

:func:`gluondet.deploy.onnx.mask_rcnn_graph` builds Faster R-CNN's graph with the network's
count of detections ``K`` (``rcnn_max_dets``: the post-processing's first rows), then, as
:class:`~gluondet.model_zoo.mask_rcnn.MaskRCNN` does at inference: ROI Align of the ``K``
detection boxes (padding rows of -1 too) on the maps the regions were pooled from (FPN: each
box from its own level, as the regions), the mask head converted by mx2onnx
(:func:`mask_head_body`: C4's ``layer4`` "top features" then the mask head, the cut
:func:`~gluondet.deploy.symbol.rcnn_body` makes of the box head), and the graph of
:func:`add_mask_postprocess`: each detection's map of its own class (ids clipped to ``[0,
C - 1]``), its sigmoid. The output ``masks`` is ``B x K x M x M``, probabilities on a grid
over each box (``M``: the network's ``mask_size``, in the metadata); pasting them into the
image is the host's (:func:`gluondet.masks.paste`).
"""
import json

import mxnet as mx
from mxnet import autograd
from onnx import TensorProto

from .onnx_graph import _sigmoid
from .symbol import _params

__all__ = ['MASK_POOLED', 'MASK_LOGITS', 'MASK_OUTPUT', 'mask_head_body',
           'add_mask_postprocess']

MASK_POOLED = 'mask_pooled'     # the detections' pooled regions, the head's input
MASK_LOGITS = 'mask_logits'     # its output, every class's logits
MASK_OUTPUT = 'masks'
# the head's operators are renamed with this suffix: C4's layer4 runs in the box head too,
# whose mx2onnx graph has nodes (and constants named after them) of the same names
_SUFFIX = '/mask'


def mask_head_body(net, data_shape):
    """A Mask R-CNN's mask head on pooled regions, as mx2onnx converts it.

    Parameters
    ----------
    net : :class:`~gluondet.model_zoo.mask_rcnn.MaskRCNN`
        Initialized.
    data_shape : (int, int)
        An input size, for a forward if the network was initialized but never run.

    Returns
    -------
    symbol : Symbol
        Input ``mask_pooled`` ``R x C x h x w`` (the ROI Align of the detection boxes);
        output ``mask_logits`` ``R x classes x M x M`` (``net.top_features`` then
        ``net.mask``). Its operators' names end with ``/mask``.
    params : dict of str to NDArray
        Its arguments and auxiliary states, other than the input.
    """
    pooled = mx.sym.var(MASK_POOLED, dtype='float32')
    with autograd.predict_mode():
        logits = net.mask(net.top_features(pooled))
    symbol = _renamed(mx.sym.identity(logits, name=MASK_LOGITS), keep=(MASK_LOGITS,))
    return symbol, _params(net, [symbol], data_shape)


def _renamed(symbol, keep):
    """``symbol`` with ``_SUFFIX`` after the name of each operator not in ``keep``."""
    graph = json.loads(symbol.tojson())
    for node in graph['nodes']:
        if node['op'] != 'null' and node['name'] not in keep:
            node['name'] += _SUFFIX
    return mx.sym.load_json(json.dumps(graph))


def add_mask_postprocess(g, logits, ids, count, num_classes, output=MASK_OUTPUT):
    """Append each detection's mask: the logits of its class, their sigmoid.

    Parameters
    ----------
    g : GraphBuilder
    logits : str
        ``(B * K) x C x M x M`` mask logits of the detections, image after image.
    ids : str
        ``B x K x 1`` class ids of the detections (float, -1 for padding rows).
    count : int
        ``K``.
    num_classes : int
        ``C``; ids are clipped to ``[0, C - 1]`` (a padding row takes class 0's map, as
        the network's ``pick`` of its clipped ids).
    output : str
        Name of the ``B x K x M x M`` probabilities (MXNet's ``sigmoid``).
    """
    shape = g.op('Concat', [g.ints(-1, count), g.op('Slice', [g.op('Shape', [logits]),
                                                              g.ints(1), g.ints(4)])], axis=0)
    logits = g.op('Reshape', [logits, shape])                              # B x K x C x M x M
    classes = g.op('Clip', [ids, g.scalar(0), g.scalar(num_classes - 1)])
    classes = g.op('Cast', [classes], to=TensorProto.INT64)                # B x K x 1
    own = g.op('GatherND', [logits, classes], batch_dims=2)                # B x K x M x M
    probs = _sigmoid(g, own)
    return g.op('Identity', [probs], outputs=[output])

