"""CenterNet's ONNX export: the body (backbone, neck, the three heads) converted by mx2onnx, and
its post-processing (:class:`gluondet.model_zoo.center_net.CenterNetDecoder`) in standard ops.

The graph: the sigmoid heatmap (averaged with the flipped image's with ``flip_test``, as the
sizes are); its peaks, the places equal to the ``MaxPool`` (3x3, stride 1, pad 1) of their
neighbourhood (``Equal``); the ``K`` best of classes x places (``TopK``), their class, row
and column from the index; their size and offset gathered; boxes in input pixels (x the
stride); rows of score 0 (not a peak) -1. Everything is read from the maps' shapes, so the
graph takes any input size, as the Gluon network does; there is no NMS.

The ``_dcnv2`` networks are refused: their deformable convolutions sample the input at learned
offsets (MXNet's ``BilinearSampler``, which mx2onnx cannot convert); ONNX has GridSample only
from opset 16 and DeformConv from opset 19, and this export is opset 13.
"""
import mxnet as mx
from mxnet import autograd
from mxnet.gluon.parameter import DeferredInitializationError
from onnx import TensorProto

from ..model_zoo.center_net_necks import ModulatedDeformableConv2D
from .onnx_graph import _rows, _sigmoid, _take
from .symbol import input_shape

__all__ = ['center_net_body', 'deformable_blocks', 'flip_width', 'add_center_net_postprocess']

MAPS = ('heatmap', 'wh', 'reg')


def deformable_blocks(net):
    """Names of the network's modulated deformable convolutions (the ``_dcnv2`` networks'),
    which this export cannot convert (see the module docstring)."""
    found = []
    net.apply(lambda block: found.append(block.name)
              if isinstance(block, ModulatedDeformableConv2D) else None)
    return found


def center_net_body(net, data_shape):
    """A CenterNet up to its three heads (and, with ``flip_test``, those of the flipped image).

    Returns
    -------
    symbol : Symbol
        Input ``data`` (with ``flip_test`` also ``data_flip``, the flipped image: the graph
        flips ``data`` itself, mx2onnx's ``reverse`` fails on symbolic sizes); outputs
        ``heatmap`` (the heatmap head's logits, ``B x C x h x w``), ``wh`` and ``reg``
        (``B x 2 x h x w``), and with ``flip_test`` ``heatmap_flip`` and ``wh_flip``, those
        of ``data_flip`` (not flipped back).
    params : dict of str to NDArray
        The symbol's arguments and auxiliary states other than the inputs.
    """

    def heads(name, maps):
        y = net.base_network(mx.sym.var(name, dtype='float32'))
        return [mx.sym.identity(head(y), name=n) for head, n in zip(net.heads, maps)]

    with autograd.predict_mode():
        outputs = heads('data', MAPS)
        if net.flip_test:
            outputs += heads('data_flip', [n + '_flip' for n in MAPS])[:2]
    symbol = mx.sym.Group(outputs)
    names = set(symbol.list_arguments()) | set(symbol.list_auxiliary_states())
    try:
        params = {p.name: p.data() for p in net.collect_params().values() if p.name in names}
    except DeferredInitializationError:     # a forward sets the deferred shapes
        with autograd.predict_mode():
            net(mx.nd.zeros(input_shape(data_shape)))
        params = {p.name: p.data() for p in net.collect_params().values() if p.name in names}
    return symbol, params


def flip_width(g, x, outputs=None):
    """``x`` (``B x C x H x W``) mirrored left to right (``Slice`` with step -1)."""
    return g.op('Slice', [x, g.ints(-1), g.ints(-2 ** 63), g.ints(3), g.ints(-1)],
                outputs=outputs)


def add_center_net_postprocess(g, heatmap, wh, reg, k, scale, flipped=None,
                               outputs=('ids', 'scores', 'boxes')):
    """Append CenterNet's decoding, for any input size.

    Parameters
    ----------
    g : GraphBuilder
    heatmap, wh, reg : str
        The heads' ``B x C x h x w`` heatmap logits and ``B x 2 x h x w`` sizes and offsets
        (map cells).
    k : int
        Detections (``CenterNetDecoder.k``); inputs with fewer classes x places than ``k``
        give rows of -1 after theirs.
    scale : float
        The maps' stride in input pixels.
    flipped : (str, str), optional
        ``flip_test``: the flipped image's heatmap logits and sizes; flipped back, each is
        averaged with the image's (the heatmap after the sigmoid), as the network does.
    outputs : 3 str

    Returns
    -------
    int
        ``k``, the rows.
    """
    heat = _sigmoid(g, heatmap)
    if flipped is not None:
        half = g.scalar(0.5)
        heat = g.op('Mul', [g.op('Add', [heat, flip_width(g, _sigmoid(g, flipped[0]))]), half])
        wh = g.op('Mul', [g.op('Add', [wh, flip_width(g, flipped[1])]), half])
    peak = g.op('Equal', [g.op('MaxPool', [heat], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                strides=[1, 1]), heat])
    flat = g.op('Reshape', [g.op('Mul', [heat, g.op('Cast', [peak], to=TensorProto.FLOAT)]),
                            g.ints(0, -1)])
    # k zeros after the places, so that TopK has k values at any size (rows of -1 then)
    pad = g.op('Expand', [g.scalar(0), g.op('Concat', [g.op('Slice', [g.op('Shape', [flat]),
                                                                      g.ints(0), g.ints(1)]),
                                                       g.ints(k)], axis=0)])
    scores, index = g.op('TopK', [g.op('Concat', [flat, pad], axis=1), g.ints(k)], 2, axis=1)
    shape = g.op('Shape', [heatmap])
    height, width = (g.op('Slice', [shape, g.ints(axis), g.ints(axis + 1)]) for axis in (2, 3))
    area = g.op('Mul', [height, width])
    index = g.op('Min', [index, g.op('Sub', [g.op('Mul', [area, g.op('Slice', [
        shape, g.ints(1), g.ints(2)])]), g.ints(1)])])          # a padding one: any place
    class_id = g.op('Div', [index, area])
    place = g.op('Sub', [index, g.op('Mul', [class_id, area])])
    row = g.op('Div', [place, width])
    col = g.op('Sub', [place, g.op('Mul', [row, width])])

    def gather(maps):                                           # B x 2 x h x w -> B x K x 2
        cells = g.op('Transpose', [g.op('Reshape', [maps, g.ints(0, 2, -1)])], perm=[0, 2, 1])
        return g.op('Split', [_take(g, cells, place), g.ints(1, 1)], 2, axis=2)

    size_w, size_h = gather(wh)
    off_x, off_y = gather(reg)

    def column(values):
        return g.op('Unsqueeze', [g.op('Cast', [values], to=TensorProto.FLOAT), g.ints(2)])

    cx = g.op('Add', [column(col), off_x])
    cy = g.op('Add', [column(row), off_y])
    two = g.scalar(2)
    half_w, half_h = g.op('Div', [size_w, two]), g.op('Div', [size_h, two])
    boxes = g.op('Concat', [g.op('Sub', [cx, half_w]), g.op('Sub', [cy, half_h]),
                            g.op('Add', [cx, half_w]), g.op('Add', [cy, half_h])], axis=2)
    boxes = g.op('Mul', [boxes, g.scalar(scale)])
    valid = g.op('Greater', [scores, g.scalar(0)])
    _rows(g, [column(class_id), g.op('Unsqueeze', [scores, g.ints(2)]), boxes], None, valid,
          k, k, outputs)
    return k
