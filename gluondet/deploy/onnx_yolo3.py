"""YOLOv3's ONNX export: the body up to the prediction layers (converted by mx2onnx), and its
decoding and post-processing (:class:`gluondet.model_zoo.yolo3.YOLONMS`) in standard ops.

The cell grid of each output is made in the graph from its map's shape (``Range``), so the
graph takes any input size, as the Gluon network does.
"""
import mxnet as mx
import numpy as np
from mxnet import autograd
from mxnet.gluon.parameter import DeferredInitializationError
from onnx import TensorProto

from .onnx_graph import _best_of_level, _sigmoid, _suppressed_rows, _take
from .symbol import input_shape

__all__ = ['yolo3_body', 'add_yolo3_postprocess']


def yolo3_body(net, data_shape):
    """A YOLOv3 up to its three prediction layers.

    Returns
    -------
    symbol : Symbol
        Input ``data``; outputs ``pred0 .. pred2``, each ``B x A * (5 + C) x H x W`` (the
        raw 1x1 prediction of an output, in the network's order: stride 32 first).
    params : dict of str to NDArray
        The symbol's arguments and auxiliary states other than ``data``.
    level_sizes : list of int
        Places (``H * W * A``) of each output at ``data_shape``, the largest input.
    """
    found = []
    hooks = [output.prediction.register_forward_hook(
        lambda block, inputs, out: found.append(out)) for output in net.yolo_outputs]
    try:
        with autograd.predict_mode():
            net(mx.sym.var('data', dtype='float32'))
    finally:
        for hook in hooks:
            hook.detach()
    symbol = mx.sym.Group([mx.sym.identity(p, name='pred%d' % i) for i, p in enumerate(found)])
    names = set(symbol.list_arguments()) | set(symbol.list_auxiliary_states())
    shape = input_shape(data_shape)
    try:
        params = {p.name: p.data() for p in net.collect_params().values() if p.name in names}
    except DeferredInitializationError:     # a forward sets the deferred shapes
        with autograd.predict_mode():
            net(mx.nd.zeros(shape))
        params = {p.name: p.data() for p in net.collect_params().values() if p.name in names}
    _, shapes, _ = symbol.infer_shape(data=shape)
    sizes = [s[2] * s[3] * output.num_anchors for s, output in zip(shapes, net.yolo_outputs)]
    return symbol, params, sizes


def _decode(g, pred, anchors, stride, num_classes):
    """One output's ``B x N x 4`` corner boxes and ``B x N x C`` scores from its raw
    prediction map, as :class:`~gluondet.model_zoo.yolo3.YOLOOutput` and ``YOLOV3``."""
    num_anchors = len(anchors) // 2
    width = 5 + num_classes
    x = g.op('Reshape', [pred, g.ints(0, num_anchors * width, -1)])
    x = g.op('Reshape', [g.op('Transpose', [x], perm=[0, 2, 1]),
                         g.ints(0, -1, num_anchors, width)])             # B x HW x A x P

    def part(begin, end):
        return g.op('Slice', [x, g.ints(begin), g.ints(end), g.ints(3)])

    def coords(axis):
        """``0 .. size - 1`` (float) of the map's dimension ``axis``."""
        size = g.op('Slice', [g.op('Shape', [pred]), g.ints(axis), g.ints(axis + 1)])
        size = g.op('Squeeze', [size, g.ints(0)])
        return g.op('Cast', [g.op('Range', [g.const(0, np.int64), size, g.const(1, np.int64)])],
                    to=TensorProto.FLOAT)

    rows = g.op('Unsqueeze', [coords(2), g.ints(1)])                          # H x 1
    cols = g.op('Unsqueeze', [coords(3), g.ints(0)])                          # 1 x W
    zero = g.scalar(0)
    grid_x = g.op('Add', [g.op('Mul', [rows, zero]), cols])
    grid_y = g.op('Add', [rows, g.op('Mul', [cols, zero])])
    offsets = g.op('Concat', [g.op('Unsqueeze', [grid_x, g.ints(2)]),
                              g.op('Unsqueeze', [grid_y, g.ints(2)])], axis=2)
    offsets = g.op('Reshape', [offsets, g.ints(1, -1, 1, 2)])
    centers = g.op('Mul', [g.op('Add', [_sigmoid(g, part(0, 2)), offsets]), g.scalar(stride)])
    sizes = g.op('Mul', [g.op('Exp', [part(2, 4)]),
                         g.const(np.reshape(anchors, (1, 1, -1, 2)), np.float32)])
    half = g.op('Div', [sizes, g.scalar(2)])
    boxes = g.op('Concat', [g.op('Sub', [centers, half]), g.op('Add', [centers, half])], axis=-1)
    scores = g.op('Mul', [_sigmoid(g, part(5, width)), _sigmoid(g, part(4, 5))])
    return (g.op('Reshape', [boxes, g.ints(0, -1, 4)]),
            g.op('Reshape', [scores, g.ints(0, -1, num_classes)]))


def add_yolo3_postprocess(g, preds, anchors, strides, level_sizes, num_classes, score_thresh,
                          nms_thresh, nms_topk, post_nms, outputs=('ids', 'scores', 'boxes'),
                          nms=True):
    """Append YOLOv3's decoding and post-processing, for any input size.

    Each output's candidates class-major, scores above ``score_thresh``; its
    ``max(nms_topk, post_nms)`` best (padded with invalid candidates of score 0 where it has
    fewer); the ``nms_topk`` best of all by score (ties: output, then place, as the Gluon
    block's table); NMS within each class; the first ``post_nms`` survivors.

    Parameters
    ----------
    g : GraphBuilder
    preds : list of str
        Each output's raw ``B x A * (5 + C) x H x W`` prediction.
    anchors : list of lists of int
        Each output's anchors, ``(width, height)`` pairs flat (``net.anchors``).
    strides : list of int
    level_sizes : list of int
        Places of each output at the largest input (they bound each cut's ``k``).
    num_classes : int
    score_thresh, nms_thresh, nms_topk, post_nms
        As :class:`~gluondet.model_zoo.yolo3.YOLONMS`; ``0 < nms_thresh < 1`` and
        ``nms_topk > 0`` are required.
    outputs : 3 str
    nms : bool
        False: end before the NMS, with its candidates.

    Returns
    -------
    int
        ``K``: ``post_nms``, or ``C x`` the places at the largest input when ``post_nms <= 0``
        (without ``nms``: the candidates, at most ``nms_topk``).
    """
    if not 0 < nms_thresh < 1 or nms_topk <= 0:
        raise ValueError('ONNX export needs 0 < nms_thresh < 1 and nms_topk > 0 (set_nms), '
                         'got nms_thresh=%r nms_topk=%r' % (nms_thresh, nms_topk))
    count = max(nms_topk, post_nms)
    all_boxes, scores, classes, places, cuts = [], [], [], [], []
    start = g.ints(0)
    for pred, group, stride, largest in zip(preds, anchors, strides, level_sizes):
        boxes, probs = _decode(g, pred, group, stride, num_classes)
        all_boxes.append(boxes)
        size = g.op('Slice', [g.op('Shape', [boxes]), g.ints(1), g.ints(2)])    # [N_l]
        k = min(count, num_classes * largest)
        best, class_id, place = _best_of_level(g, probs, size, start, k, score_thresh)
        scores.append(best)
        classes.append(class_id)
        places.append(place)
        start = g.op('Add', [start, size])
        cuts.append(k)
    k = min(nms_topk, sum(cuts))
    best, order = g.op('TopK', [g.op('Concat', scores, axis=1), g.ints(k)], 2, axis=1)
    class_id = g.op('GatherElements', [g.op('Concat', classes, axis=1), order], axis=1)
    place = g.op('GatherElements', [g.op('Concat', places, axis=1), order], axis=1)
    boxes = _take(g, g.op('Concat', all_boxes, axis=1), place)
    out_rows = post_nms if post_nms > 0 else num_classes * sum(level_sizes)
    return _suppressed_rows(g, best, class_id, boxes, k, nms_thresh, score_thresh, num_classes,
                            out_rows, outputs, nms)
