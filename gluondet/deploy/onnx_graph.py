"""SSD post-processing as standard ONNX (opset 13) nodes, equal to the Gluon inference output.

Gluon (:class:`gluondet.nn.MultiClassNMS` over MXNet's ``box_nms``) does, per image:
softmax; every (class, anchor) pair is a candidate; the ``nms_topk`` best candidates
scoring above ``score_thresh`` (sorted by score, ties in candidate order: class-major,
then anchor) go through a greedy NMS within each class (suppress when IoU > threshold,
corner boxes, no +1); the survivors keep that order, the first ``post_nms`` are
returned, padded with -1 rows. The graph below does the same steps:

1. ``TopK`` over the flattened ``B x (C * A)`` foreground probabilities gives the
   candidates in that order (ONNX Runtime's TopK puts tied values in index order, as
   ``box_nms``'s stable sort does); only their boxes are decoded, with ``box_decode``'s
   operation order. One difference remains: when equal scores straddle the
   ``nms_topk`` cut, MXNet's ``topk`` (not stable) picks any of them, the graph the
   first ones. Exact ties come from uniform image areas; at the cut they need more than
   ``nms_topk`` candidates above ``score_thresh``.
2. ``NonMaxSuppression`` gets each candidate's rank (``k, k-1, ..., 1``) as its score
   in its own class and 0 elsewhere: its per-class order is then the candidate order
   whatever its tie handling, its ``score > 0`` filter drops the other classes, and its
   IoU test is ``box_nms``'s.
3. The kept ranks, scattered back and sorted by ``TopK``, give the output rows.
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

__all__ = ['GraphBuilder', 'add_ssd_postprocess']


class GraphBuilder:
    """Collects ONNX nodes and constants under unique names ``{prefix}/{op}_{n}``."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.nodes = []
        self.initializers = []
        self._constants = {}
        self._count = 0

    def _name(self, kind):
        self._count += 1
        return '%s/%s_%d' % (self.prefix, kind, self._count)

    def const(self, array, dtype=None):
        """An initializer holding ``array`` (one per distinct value); returns its name."""
        array = np.asarray(array, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            self._constants[key] = self._name('const')
            self.initializers.append(numpy_helper.from_array(array, self._constants[key]))
        return self._constants[key]

    def op(self, op_type, inputs, num_outputs=1, outputs=None, **attrs):
        """Add a node; returns its output name, or a list of names if ``num_outputs > 1``.

        Outputs are named after the node unless ``outputs`` gives their names.
        """
        name = self._name(op_type)
        if outputs is None:
            outputs = [name] if num_outputs == 1 else ['%s:%d' % (name, i)
                                                        for i in range(num_outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attrs))
        return outputs[0] if num_outputs == 1 else outputs


def _decode(g, deltas, anchors, stds):
    """``box_decode(format='center', clip=-1)`` with MXNet's operation order."""
    delta_xy, delta_wh = g.op('Split', [deltas, g.const([2, 2], np.int64)], 2, axis=2)
    anchor_xy, anchor_wh = g.op('Split', [anchors, g.const([2, 2], np.int64)], 2, axis=2)
    std_xy = g.const(stds[:2], np.float32)
    std_wh = g.const(stds[2:], np.float32)
    center = g.op('Add', [g.op('Mul', [g.op('Mul', [delta_xy, std_xy]), anchor_wh]),
                          anchor_xy])
    size = g.op('Mul', [g.op('Exp', [g.op('Mul', [delta_wh, std_wh])]), anchor_wh])
    half = g.op('Mul', [size, g.const(0.5, np.float32)])
    return g.op('Concat', [g.op('Sub', [center, half]), g.op('Add', [center, half])], axis=2)


def add_ssd_postprocess(g, cls_preds, box_preds, anchors, num_classes, stds, score_thresh,
                        nms_thresh, nms_topk, post_nms, outputs=('ids', 'scores', 'boxes')):
    """Append the SSD inference post-processing to the graph of ``g``.

    Parameters
    ----------
    g : GraphBuilder
        Receives the nodes and constants.
    cls_preds, box_preds : str
        Names of the ``B x A x (C + 1)`` logits (background first) and the
        ``B x A x 4`` encoded offsets.
    anchors : numpy.ndarray
        ``1 x A x 4`` anchors in center format (becomes a constant).
    num_classes : int
        ``C``, the foreground classes.
    stds : 4 floats
        Box-coding divisors.
    score_thresh, nms_thresh, nms_topk, post_nms
        As :class:`gluondet.nn.MultiClassNMS`; ``0 < nms_thresh < 1`` and
        ``nms_topk > 0`` are required (the other settings have no NMS or no cap).
    outputs : 3 str
        Names of the outputs ``ids`` and ``scores`` ``B x K x 1`` and ``boxes``
        ``B x K x 4``.

    Returns
    -------
    int
        ``K``: ``post_nms``, or ``C * A`` when ``post_nms <= 0``.
    """
    if not 0 < nms_thresh < 1 or nms_topk <= 0:
        raise ValueError('ONNX export needs 0 < nms_thresh < 1 and nms_topk > 0 (set_nms), '
                         'got nms_thresh=%r nms_topk=%r' % (nms_thresh, nms_topk))
    anchors = np.asarray(anchors, np.float32).reshape(-1, 4)
    num_anchors = len(anchors)
    num_candidates = num_classes * num_anchors
    k = min(nms_topk, num_candidates)
    out_rows = post_nms if post_nms > 0 else num_candidates
    out_k = min(out_rows, k)

    # 1. candidates: the k best (class, anchor) probabilities, class-major like Gluon's table
    probs = g.op('Softmax', [cls_preds], axis=2)
    foreground = g.op('Slice', [probs, g.const([1], np.int64),
                                g.const([num_classes + 1], np.int64), g.const([2], np.int64)])
    flat = g.op('Reshape', [g.op('Transpose', [foreground], perm=[0, 2, 1]),
                            g.const([0, -1], np.int64)])
    scores, index = g.op('TopK', [flat, g.const([k], np.int64)], 2, axis=1)
    num_anchors_c = g.const(num_anchors, np.int64)
    class_id = g.op('Div', [index, num_anchors_c])                            # B x k
    anchor = g.op('Mod', [index, num_anchors_c])
    deltas = g.op('GatherND', [box_preds, g.op('Unsqueeze', [anchor, g.const([2], np.int64)])],
                  batch_dims=1)                                               # B x k x 4
    boxes = _decode(g, deltas, g.op('Gather', [g.const(anchors), anchor], axis=0), stds)

    # 2. NMS within each class, in candidate order (ranks k..1 as scores)
    rank = g.const(np.arange(k, 0, -1), np.float32)
    in_class = g.op('Equal', [g.op('Unsqueeze', [class_id, g.const([1], np.int64)]),
                              g.const(np.arange(num_classes).reshape(-1, 1), np.int64)])
    valid = g.op('Greater', [scores, g.const(score_thresh, np.float32)])
    in_class = g.op('And', [in_class, g.op('Unsqueeze', [valid, g.const([1], np.int64)])])
    nms_scores = g.op('Where', [in_class, rank, g.const(0, np.float32)])     # B x C x k
    selected = g.op('NonMaxSuppression', [boxes, nms_scores, g.const([k], np.int64),
                                          g.const([nms_thresh], np.float32),
                                          g.const([0], np.float32)])          # N x 3
    batch_and_position = g.op('Gather', [selected, g.const([0, 2], np.int64)], axis=1)
    position = g.op('Gather', [selected, g.const(2, np.int64)], axis=1)

    # 3. the kept candidates, in candidate order, padded with -1
    zeros = g.op('ConstantOfShape', [g.op('Shape', [scores])],
                 value=numpy_helper.from_array(np.zeros(1, np.float32)))
    kept_rank = g.op('ScatterND', [zeros, batch_and_position,
                                   g.op('Gather', [rank, position], axis=0)])  # B x k
    kept, order = g.op('TopK', [kept_rank, g.const([out_k], np.int64)], 2, axis=1)
    rows = g.op('Concat', [g.op('Unsqueeze', [g.op('Cast', [class_id], to=TensorProto.FLOAT),
                                              g.const([2], np.int64)]),
                           g.op('Unsqueeze', [scores, g.const([2], np.int64)]), boxes],
                axis=2)                                                       # B x k x 6
    rows = g.op('GatherND', [rows, g.op('Unsqueeze', [order, g.const([2], np.int64)])],
                batch_dims=1)
    is_kept = g.op('Unsqueeze', [g.op('Greater', [kept, g.const(0, np.float32)]),
                                 g.const([2], np.int64)])
    rows = g.op('Where', [is_kept, rows, g.const(-1, np.float32)])
    if out_rows > out_k:
        rows = g.op('Pad', [rows, g.const([0, 0, 0, 0, out_rows - out_k, 0], np.int64),
                            g.const(-1, np.float32)])
    g.op('Split', [rows, g.const([1, 1, 4], np.int64)], 3, outputs=list(outputs), axis=2)
    return out_rows
