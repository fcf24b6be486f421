"""Detector post-processing as standard ONNX (opset 13) nodes, equal to the Gluon inference output.

Every NMS of gluondet's detectors is MXNet's ``box_nms``. Per row of candidates it
keeps those scoring above ``valid_thresh``, sorts them by score (a stable sort: ties
in input order), runs a greedy NMS over the first ``topk`` (suppress when IoU >
threshold, corner boxes, no +1; within a class unless forced) and returns the
survivors in that order, then rows of -1. The graph does the same in three steps:

1. ``TopK`` gives the candidates in that order (ONNX Runtime's TopK puts tied values
   in index order, as the stable sort does); only they are decoded or gathered
   further. One difference remains: when equal scores straddle a ``topk`` cut, MXNet's
   ``topk`` (not stable) may pick any of them, the graph the first ones. Exact ties
   come from uniform image areas; at the cut they need more than ``topk`` candidates.
2. ``NonMaxSuppression`` (:func:`_nms`) gets each candidate's rank (``k, k-1, ...,
   1``) as its score in its own class and 0 elsewhere: its per-class order is then the
   candidate order whatever its tie handling, its ``score > 0`` filter drops invalid
   candidates and other classes, and its IoU test is ``box_nms``'s.
3. The kept ranks, scattered back and sorted by ``TopK``, give the output rows in order.

On it: SSD's post-processing (:func:`add_ssd_postprocess`), RetinaNet's
(:func:`add_retinanet_postprocess`), and Faster R-CNN's region proposals
(:func:`add_rpn_proposals`), ROI Align (:func:`add_roi_align`) and per-class detection
(:func:`add_rcnn_postprocess`). Arithmetic follows MXNet's kernels operation by operation;
``box_decode``'s ``exp`` is computed in double as MXNet's is, so decoding the same offsets
gives the same bits. RetinaNet's and the proposals' graphs take inputs of any size: their
anchors are graph inputs, and each ``TopK`` cut has a constant ``k`` (bounded by the
candidates at the largest input), its candidates padded with invalid ones when fewer.
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

__all__ = ['GraphBuilder', 'add_ssd_postprocess', 'add_retinanet_postprocess',
           'add_rpn_proposals', 'add_roi_align', 'add_rcnn_postprocess']


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

    def ints(self, *values):
        """An int64 vector constant (axes, shapes, slice bounds)."""
        return self.const(list(values), np.int64)

    def scalar(self, value):
        """A float32 scalar constant."""
        return self.const(value, np.float32)


# ---------------------------------------------------------------- arithmetic as MXNet's

def _exp(g, x):
    """``exp`` in double precision, rounded to float32: MXNet's ``box_decode`` calls the
    double ``exp``, so this gives its bits (ONNX Runtime's float Exp differs in the last
    bit for a few percent of inputs)."""
    wide = g.op('Exp', [g.op('Cast', [x], to=TensorProto.DOUBLE)])
    return g.op('Cast', [wide], to=TensorProto.FLOAT)


def _sigmoid(g, x):
    """MXNet's ``sigmoid``, ``1 / (1 + exp(-x))``. (MXNet's float ``expf`` is off by one
    bit for ~0.06% of inputs, ONNX Runtime's Sigmoid op for most.)"""
    one = g.scalar(1)
    return g.op('Div', [one, g.op('Add', [one, _exp(g, g.op('Neg', [x]))])])


def _decode(g, deltas, anchors, stds, clip=None, corner=False):
    """``box_decode`` with MXNet's operation order; ``anchors`` broadcast against ``deltas``.

    ``corner``: anchors are ``(xmin, ymin, xmax, ymax)`` (else center, width, height);
    ``clip``: largest log-size offset after ``stds`` (None: no limit).
    """
    delta_xy, delta_wh = g.op('Split', [deltas, g.ints(2, 2)], 2, axis=-1)
    anchor_xy, anchor_wh = g.op('Split', [anchors, g.ints(2, 2)], 2, axis=-1)
    if corner:
        anchor_wh = g.op('Sub', [anchor_wh, anchor_xy])
        anchor_xy = g.op('Add', [anchor_xy, g.op('Mul', [anchor_wh, g.scalar(0.5)])])
    std_xy = g.const(stds[:2], np.float32)
    std_wh = g.const(stds[2:], np.float32)
    center = g.op('Add', [g.op('Mul', [g.op('Mul', [delta_xy, std_xy]), anchor_wh]),
                          anchor_xy])
    log_size = g.op('Mul', [delta_wh, std_wh])
    if clip is not None and clip > 0:
        log_size = g.op('Min', [log_size, g.scalar(clip)])
    half = g.op('Mul', [g.op('Mul', [_exp(g, log_size), anchor_wh]), g.scalar(0.5)])
    return g.op('Concat', [g.op('Sub', [center, half]), g.op('Add', [center, half])], axis=-1)


# ---------------------------------------------------------------- box_nms

def _nms(g, scores, boxes, k, nms_thresh, valid_thresh, class_id=None, num_classes=1):
    """The suppression of ``box_nms`` over ``k`` candidates already in its order.

    Parameters
    ----------
    scores : str
        ``B x k`` scores, descending, ties in input order (what ``TopK`` gives).
    boxes : str
        ``B x k x 4`` corner boxes.
    k : int
    nms_thresh, valid_thresh : float
        Suppress at IoU above ``nms_thresh``; only scores above ``valid_thresh`` count.
    class_id, num_classes
        ``B x k`` int64 class of each candidate, suppressing within classes only; None:
        one class (class-agnostic, ``force_suppress``).

    Returns
    -------
    str
        ``B x k`` float: the rank of each kept candidate (``k`` the first ... 1 the
        last), 0 for the others.
    """
    if not 0 <= nms_thresh:
        raise ValueError('ONNX export needs nms_thresh >= 0, got %r' % (nms_thresh,))
    rank = g.const(np.arange(k, 0, -1), np.float32)
    zero = g.scalar(0)
    valid = g.op('Greater', [scores, g.scalar(valid_thresh)])
    if class_id is None:
        nms_scores = g.op('Unsqueeze', [g.op('Where', [valid, rank, zero]), g.ints(1)])
    else:
        in_class = g.op('Equal', [g.op('Unsqueeze', [class_id, g.ints(1)]),
                                  g.const(np.arange(num_classes).reshape(-1, 1), np.int64)])
        in_class = g.op('And', [in_class, g.op('Unsqueeze', [valid, g.ints(1)])])
        nms_scores = g.op('Where', [in_class, rank, zero])                  # B x C x k
    # IoU > 1 never happens: a larger threshold suppresses nothing, as in box_nms
    selected = g.op('NonMaxSuppression', [boxes, nms_scores, g.ints(k),
                                          g.const([min(nms_thresh, 1.0)], np.float32),
                                          g.const([0], np.float32)])          # N x 3
    batch_and_position = g.op('Gather', [selected, g.ints(0, 2)], axis=1)
    position = g.op('Gather', [selected, g.const(2, np.int64)], axis=1)
    zeros = g.op('ConstantOfShape', [g.op('Shape', [scores])],
                 value=numpy_helper.from_array(np.zeros(1, np.float32)))
    return g.op('ScatterND', [zeros, batch_and_position,
                              g.op('Gather', [rank, position], axis=0)])


def _take(g, data, index):
    """``data[b, index[b, j]]``: ``B x N x ...`` by ``B x K`` -> ``B x K x ...``."""
    return g.op('GatherND', [data, g.op('Unsqueeze', [index, g.ints(2)])], batch_dims=1)


def _column(g, values, cast=False):
    """``B x K`` -> ``B x K x 1`` float (cast from int64 if ``cast``)."""
    if cast:
        values = g.op('Cast', [values], to=TensorProto.FLOAT)
    return g.op('Unsqueeze', [values, g.ints(2)])


def _rows(g, columns, order, is_kept, picked, num_rows, outputs):
    """The output rows: the ``B x K x n`` ``columns`` concatenated, taken in ``order``
    (None: as they are), -1 where not ``is_kept``, padded from ``picked`` (``K``) to
    ``num_rows`` rows of -1; split into ``outputs`` (``ids``, ``scores``, ``boxes``, or one
    name for the whole rows)."""
    rows = g.op('Concat', columns, axis=2) if len(columns) > 1 else columns[0]
    if order is not None:
        rows = _take(g, rows, order)
    rows = g.op('Where', [g.op('Unsqueeze', [is_kept, g.ints(2)]), rows, g.scalar(-1)])
    if num_rows > picked:
        rows = g.op('Pad', [rows, g.ints(0, 0, 0, 0, num_rows - picked, 0), g.scalar(-1)])
    if len(outputs) == 1:
        return g.op('Identity', [rows], outputs=list(outputs))
    return g.op('Split', [rows, g.ints(1, 1, 4)], 3, outputs=list(outputs), axis=2)


# ---------------------------------------------------------------- SSD

def add_ssd_postprocess(g, cls_preds, box_preds, anchors, num_classes, stds, score_thresh,
                        nms_thresh, nms_topk, post_nms, outputs=('ids', 'scores', 'boxes'),
                        nms=True):
    """Append the SSD inference post-processing (:class:`gluondet.nn.MultiClassNMS`).

    Softmax; every (class, anchor) pair is a candidate, class-major; the ``nms_topk``
    best scoring above ``score_thresh`` go through NMS within each class; the first
    ``post_nms`` survivors are returned.

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
    nms : bool
        False: end before the NMS, with its candidates (:func:`_detections`).

    Returns
    -------
    int
        ``K``: ``post_nms``, or ``C * A`` when ``post_nms <= 0`` (without ``nms``: the
        candidates, ``min(nms_topk, C * A)``).
    """
    if not 0 < nms_thresh < 1 or nms_topk <= 0:
        raise ValueError('ONNX export needs 0 < nms_thresh < 1 and nms_topk > 0 (set_nms), '
                         'got nms_thresh=%r nms_topk=%r' % (nms_thresh, nms_topk))
    anchors = np.asarray(anchors, np.float32).reshape(-1, 4)
    num_anchors = len(anchors)
    num_candidates = num_classes * num_anchors
    k = min(nms_topk, num_candidates)
    out_rows = post_nms if post_nms > 0 else num_candidates

    probs = g.op('Softmax', [cls_preds], axis=2)
    foreground = g.op('Slice', [probs, g.ints(1), g.ints(num_classes + 1), g.ints(2)])
    flat = g.op('Reshape', [g.op('Transpose', [foreground], perm=[0, 2, 1]), g.ints(0, -1)])
    scores, index = g.op('TopK', [flat, g.ints(k)], 2, axis=1)
    num_anchors_c = g.const(num_anchors, np.int64)
    class_id = g.op('Div', [index, num_anchors_c])                            # B x k
    anchor = g.op('Mod', [index, num_anchors_c])
    return _detections(g, scores, class_id, anchor, box_preds, g.const(anchors), stds, None,
                       k, nms_thresh, score_thresh, num_classes, out_rows, outputs, nms)


def _detections(g, scores, class_id, anchor, box_preds, anchors, stds, clip, k, nms_thresh,
                score_thresh, num_classes, out_rows, outputs, nms=True):
    """From ``k`` candidates sorted by score (``B x k`` scores, int64 class ids and anchor
    indices): decode their boxes (``anchors`` names the ``A x 4`` anchors), NMS within
    classes, the ``out_rows`` first survivors; returns the number of rows. Without ``nms``:
    the ``k`` candidates, rows of -1 for those not scoring above ``score_thresh``."""
    boxes = _decode(g, _take(g, box_preds, anchor),
                    g.op('Gather', [anchors, anchor], axis=0), stds, clip)
    return _suppressed_rows(g, scores, class_id, boxes, k, nms_thresh, score_thresh,
                            num_classes, out_rows, outputs, nms)


def _suppressed_rows(g, scores, class_id, boxes, k, nms_thresh, valid_thresh, num_classes,
                     out_rows, outputs, nms=True):
    """The rows of ``k`` candidates sorted by score (``B x k`` scores and int64 class ids,
    ``B x k x 4`` boxes) after NMS within classes: the ``out_rows`` first survivors. Without
    ``nms``, the candidates themselves (``k`` rows; -1 where not above ``valid_thresh``).
    Returns the number of rows."""
    columns = [_column(g, class_id, True), _column(g, scores), boxes]
    if not nms:
        _rows(g, columns, None, g.op('Greater', [scores, g.scalar(valid_thresh)]), k, k,
              outputs)
        return k
    kept_rank = _nms(g, scores, boxes, k, nms_thresh, valid_thresh, class_id, num_classes)
    out_k = min(out_rows, k)
    kept, order = g.op('TopK', [kept_rank, g.ints(out_k)], 2, axis=1)
    _rows(g, columns, order, g.op('Greater', [kept, g.scalar(0)]), out_k, out_rows, outputs)
    return out_rows


# ---------------------------------------------------------------- RetinaNet

def _best_of_level(g, probs, size, start, k, score_thresh):
    """The ``k`` best candidates of one level (of a map, or an output) of a dense detector.

    ``probs`` ``B x N_l x C`` scores; ``size`` its ``[N_l]`` (int64); ``start`` the index of
    its first place among all levels'. Candidates are class-major, those not above
    ``score_thresh`` score 0, and padding candidates of score 0 make ``k`` at least.
    Returns ``B x k`` scores, int64 class ids (a padding's is C or more: never kept) and
    places (``start`` + place in the level).
    """
    flat = g.op('Reshape', [g.op('Transpose', [probs], perm=[0, 2, 1]), g.ints(0, -1)])
    flat = g.op('Where', [g.op('Greater', [flat, g.scalar(score_thresh)]), flat, g.scalar(0)])
    flat = g.op('Pad', [flat, g.ints(0, 0, 0, k), g.scalar(0)])
    best, index = g.op('TopK', [flat, g.ints(k)], 2, axis=1)
    return best, g.op('Div', [index, size]), g.op('Add', [g.op('Mod', [index, size]), start])


def add_retinanet_postprocess(g, cls_preds, box_preds, anchors, level_sizes, num_classes, stds,
                              clip, score_thresh, nms_thresh, level_topk, post_nms,
                              outputs=('ids', 'scores', 'boxes'), nms=True):
    """Append RetinaNet's inference (:class:`gluondet.nn.LevelTopKNMS`), for any input size.

    Sigmoid scores; in each level the ``level_topk`` best (class, anchor) candidates
    scoring above ``score_thresh``; all of them by score (ties: level, then place, as the
    Gluon block's table); NMS within each class; the first ``post_nms`` survivors. Each
    level's size is read from its anchors; a level with fewer candidates than its top-k
    cut is padded with candidates of score 0 (invalid, as the block's -1 rows), so that
    every cut has a constant ``k`` (TensorRT's TopK needs one).

    Parameters
    ----------
    g : GraphBuilder
    cls_preds, box_preds : str
        ``B x A x C`` logits (no background) and ``B x A x 4`` offsets, levels concatenated.
    anchors : list of str
        Each level's ``1 x A_l x 4`` center-format anchors (``A`` is their sum).
    level_sizes : sequence of int
        Anchors of each level at the largest input (they bound each cut's ``k``).
    num_classes : int
    stds : 4 floats
    clip : float or None
        Largest log-size offset.
    score_thresh, nms_thresh, level_topk, post_nms
        As :class:`gluondet.nn.LevelTopKNMS`.
    outputs : 3 str
    nms : bool
        False: end before the NMS, with its candidates.

    Returns
    -------
    int
        ``K``: ``post_nms``, or ``len(level_sizes) * level_topk`` when ``post_nms <= 0``
        (without ``nms``: the candidates of all levels).
    """
    if not 0 < nms_thresh < 1 or level_topk <= 0:
        raise ValueError('ONNX export needs 0 < nms_thresh < 1 and nms_topk > 0 (set_nms), '
                         'got nms_thresh=%r nms_topk=%r' % (nms_thresh, level_topk))
    probs = _sigmoid(g, cls_preds)
    scores, classes, places = [], [], []
    start = g.ints(0)
    for level, largest in zip(anchors, level_sizes):
        size = g.op('Slice', [g.op('Shape', [level]), g.ints(1), g.ints(2)])    # [A_l]
        end = g.op('Add', [start, size])
        best, class_id, place = _best_of_level(
            g, g.op('Slice', [probs, start, end, g.ints(1)]), size, start,
            min(level_topk, num_classes * largest), score_thresh)
        scores.append(best)
        classes.append(class_id)
        places.append(place)
        start = end
    k = sum(min(level_topk, num_classes * size) for size in level_sizes)
    scores, order = g.op('TopK', [g.op('Concat', scores, axis=1), g.ints(k)], 2, axis=1)
    class_id = g.op('GatherElements', [g.op('Concat', classes, axis=1), order], axis=1)
    anchor = g.op('GatherElements', [g.op('Concat', places, axis=1), order], axis=1)
    out_rows = post_nms if post_nms > 0 else len(level_sizes) * level_topk   # as the block's
    all_anchors = g.op('Reshape', [g.op('Concat', anchors, axis=1), g.ints(-1, 4)])
    return _detections(g, scores, class_id, anchor, box_preds, all_anchors, stds, clip, k,
                       nms_thresh, score_thresh, num_classes, out_rows, outputs, nms)


# ---------------------------------------------------------------- Faster R-CNN

def add_rpn_proposals(g, scores, offsets, anchors, image, num_anchors, nms_thresh, pre_nms,
                      post_nms, min_size, clip=None, output='proposals'):
    """Append :class:`gluondet.nn.RPNProposal` in inference: decode, clip, drop small, NMS.

    Offsets are decoded against the anchors (stds 1), clipped to the input ``[0, W] x [0,
    H]`` (read from the shape of ``image``); boxes narrower or lower than ``min_size``
    (``xmax - xmin + 1``) get score -1 and box -1; the ``pre_nms`` best of all levels
    (scores ``sigmoid``, only those above 0 count) go through class-agnostic NMS and the
    first ``post_nms`` survivors are kept, rows of -1 after them. The candidates are
    padded with rows of -1 (invalid, as the block's filler rows), so the top-k cut has a
    constant ``k`` at any input size.

    Parameters
    ----------
    g : GraphBuilder
    scores, offsets : str
        ``B x A x 1`` objectness logits and ``B x A x 4`` offsets of all levels.
    anchors : str
        ``1 x A x 4`` corner anchors.
    image : str
        The ``B x 3 x H x W`` input (only its shape is used).
    num_anchors : int
        ``A`` at the largest input (it bounds the cut's ``k``).
    nms_thresh, pre_nms, post_nms, min_size, clip
        As :class:`~gluondet.nn.RPNProposal` (inference counts; ``clip`` None or <= 0:
        no limit).
    output : str
        Name of the ``B x post_nms x 4`` proposals.
    """
    k = min(pre_nms, num_anchors)
    boxes = _decode(g, offsets, anchors, (1.0,) * 4, clip, corner=True)
    limit = g.op('Cast', [g.op('Gather', [g.op('Shape', [image]), g.ints(3, 2, 3, 2)], axis=0)],
                 to=TensorProto.FLOAT)                                       # W, H, W, H
    boxes = g.op('Min', [g.op('Max', [boxes, g.scalar(0)]), limit])
    xmin, ymin, xmax, ymax = g.op('Split', [boxes, g.ints(1, 1, 1, 1)], 4, axis=2)
    limit, one = g.scalar(min_size), g.scalar(1)
    small = g.op('Or', [
        g.op('Less', [g.op('Add', [g.op('Sub', [xmax, xmin]), one]), limit]),
        g.op('Less', [g.op('Add', [g.op('Sub', [ymax, ymin]), one]), limit])])   # B x A x 1
    minus_one = g.scalar(-1)
    probs = g.op('Where', [small, minus_one, _sigmoid(g, scores)])
    boxes = g.op('Where', [small, minus_one, boxes])
    padding = g.ints(0, 0, 0, 0, k, 0)
    probs, boxes = (g.op('Pad', [value, padding, minus_one]) for value in (probs, boxes))
    top, index = g.op('TopK', [g.op('Squeeze', [probs, g.ints(2)]), g.ints(k)], 2, axis=1)
    boxes = _take(g, boxes, index)                                             # B x k x 4
    kept_rank = _nms(g, top, boxes, k, nms_thresh, 0.0)
    out_k = min(post_nms, k)
    kept, order = g.op('TopK', [kept_rank, g.ints(out_k)], 2, axis=1)
    return _rows(g, [boxes], order, g.op('Greater', [kept, g.scalar(0)]), out_k, post_nms,
                 [output])


def add_roi_align(g, proposals, maps, size, strides, sample_ratio=2, levels=None,
                  output='pooled'):
    """Append :class:`gluondet.nn.ROIExtractor` (ROI Align, not pixel-aligned).

    ONNX's ``RoiAlign`` at opset 13 is MXNet's ``ROIAlign(aligned=False)`` (the same
    bits, checked on ROIs inside, across and outside the map and the -1 rows). With
    several maps (FPN), each level pools only the ROIs assigned to it (``NonZero`` and
    ``Gather``) and ``ScatterND`` puts the results back in the ROIs' order, as the
    Gluon block does.

    Parameters
    ----------
    g : GraphBuilder
    proposals : str
        ``B x P x 4`` corner boxes in input pixels.
    maps : list of str
        The ``B x C x h x w`` maps, finest first.
    size : (int, int)
        Output height and width.
    strides : sequence of int
        Stride of each map.
    sample_ratio : int
    levels : dict, optional
        With several maps, how :func:`~gluondet.nn.roi.fpn_levels` assigns them:
        ``min_level`` (the first map's), ``canonical_size``, ``eps`` and ``bounds``: an
        ROI whose ``v = sqrt(area) / canonical_size + eps`` (inclusive pixels) is at least
        ``bounds[i]`` belongs to level ``min_level + i + 1`` or above.
    output : str
        Name of the ``(B * P) x C x size`` output.
    """
    rois = g.op('Reshape', [proposals, g.ints(-1, 4)])
    shape = g.op('Shape', [proposals])
    images = g.op('Squeeze', [g.op('Slice', [shape, g.ints(0), g.ints(1)]), g.ints(0)])
    per_image = g.op('Range', [g.const(0, np.int64), images, g.const(1, np.int64)])
    batch_index = g.op('Reshape', [g.op('Expand', [g.op('Unsqueeze', [per_image, g.ints(1)]),
                                                   g.op('Slice', [shape, g.ints(0), g.ints(2)])]),
                                   g.ints(-1)])
    if len(maps) == 1:
        return g.op('RoiAlign', [maps[0], rois, batch_index], mode='avg',
                    output_height=size[0], output_width=size[1], sampling_ratio=sample_ratio,
                    spatial_scale=1.0 / strides[0], outputs=[output])
    xmin, ymin, xmax, ymax = g.op('Split', [rois, g.ints(1, 1, 1, 1)], 4, axis=1)
    one = g.scalar(1)
    area = g.op('Mul', [g.op('Add', [g.op('Sub', [xmax, xmin]), one]),
                        g.op('Add', [g.op('Sub', [ymax, ymin]), one])])
    ratio = g.op('Add', [g.op('Div', [g.op('Sqrt', [area]), g.scalar(levels['canonical_size'])]),
                         g.scalar(levels['eps'])])                            # R x 1
    level = g.scalar(levels['min_level'])
    for bound in levels['bounds']:
        above = g.op('Cast', [g.op('GreaterOrEqual', [ratio, g.scalar(bound)])],
                     to=TensorProto.FLOAT)
        level = g.op('Add', [level, above])
    level = g.op('Reshape', [level, g.ints(-1)])
    pooled, order = [], []
    for i, (feature, stride) in enumerate(zip(maps, strides)):
        mine = g.op('Equal', [level, g.scalar(levels['min_level'] + i)])
        mine = g.op('Reshape', [g.op('NonZero', [mine]), g.ints(-1)])         # its ROIs
        pooled.append(g.op('RoiAlign', [feature, g.op('Gather', [rois, mine], axis=0),
                                        g.op('Gather', [batch_index, mine], axis=0)],
                           mode='avg', output_height=size[0], output_width=size[1],
                           sampling_ratio=sample_ratio, spatial_scale=1.0 / stride))
        order.append(mine)
    pooled = g.op('Concat', pooled, axis=0)
    order = g.op('Unsqueeze', [g.op('Concat', order, axis=0), g.ints(1)])
    return g.op('ScatterND', [g.op('ConstantOfShape', [g.op('Shape', [pooled])]), order, pooled],
                outputs=[output])


def add_rcnn_postprocess(g, cls_preds, box_preds, proposals, num_rois, num_classes, stds, clip,
                         score_thresh, nms_thresh, nms_topk, post_nms, force_nms=False,
                         valid_thresh=1e-4, outputs=('ids', 'scores', 'boxes'), nms=True):
    """Append Faster R-CNN's detection: softmax, class-specific decoding, per-class NMS.

    As :class:`gluondet.nn.PerClassNMS` over the class probabilities and the boxes
    :class:`gluondet.nn.BoxCenterDecoder` decodes against the proposals: a region's
    class scores at most ``score_thresh`` are dropped; within each class (``force_nms``:
    over all classes) the ``nms_topk`` best (scoring above ``valid_thresh``) go through
    NMS; the ``post_nms`` best detections of all classes are returned, by score.

    Parameters
    ----------
    g : GraphBuilder
    cls_preds, box_preds : str
        ``(B * P) x (C + 1)`` logits (background first) and ``(B * P) x 4C`` offsets.
    proposals : str
        ``B x P x 4`` proposals (the regions, corner boxes).
    num_rois, num_classes : int
        ``P`` and ``C``.
    stds, clip
        As :class:`~gluondet.nn.BoxCenterDecoder`.
    score_thresh, nms_thresh, nms_topk, post_nms, force_nms
        As :class:`~gluondet.nn.PerClassNMS` (``nms_topk``, ``post_nms`` -1: all).
    valid_thresh : float
        ``box_nms``'s ``valid_thresh`` in PerClassNMS.
    outputs : 3 str
    nms : bool
        False: end before the NMS, with its candidates: each class's ``nms_topk`` best,
        class after class (``force_nms``: the ``nms_topk`` best of all).

    Returns
    -------
    int
        ``K``: ``post_nms``, or ``C * P`` when ``post_nms <= 0`` (without ``nms``: the
        candidates).
    """
    num_candidates = num_classes * num_rois
    probs = g.op('Softmax', [g.op('Reshape', [cls_preds, g.ints(-1, num_rois, num_classes + 1)])],
                 axis=2)
    foreground = g.op('Slice', [probs, g.ints(1), g.ints(num_classes + 1), g.ints(2)])
    scores = g.op('Transpose', [foreground], perm=[0, 2, 1])                  # B x C x P
    scores = g.op('Where', [g.op('Greater', [scores, g.scalar(score_thresh)]), scores,
                            g.scalar(0)])
    deltas = g.op('Reshape', [box_preds, g.ints(-1, num_rois, num_classes, 4)])
    boxes = _decode(g, deltas, g.op('Unsqueeze', [proposals, g.ints(2)]), stds, clip,
                    corner=True)
    boxes = g.op('Transpose', [boxes], perm=[0, 2, 1, 3])                     # B x C x P x 4
    if force_nms:       # one row of C * P candidates per image, class-major
        k = min(nms_topk, num_candidates) if nms_topk > 0 else num_candidates
        top, index = g.op('TopK', [g.op('Reshape', [scores, g.ints(-1, num_candidates)]),
                                   g.ints(k)], 2, axis=1)
        boxes = _take(g, g.op('Reshape', [boxes, g.ints(-1, num_candidates, 4)]), index)
        class_of_slot = g.op('Div', [index, g.const(num_rois, np.int64)])      # B x k
        if not nms:
            return _suppressed_rows(g, top, class_of_slot, boxes, k, None, valid_thresh, 1,
                                    None, outputs, nms)
        kept_rank = _nms(g, top, boxes, k, nms_thresh, valid_thresh)
        slots = k
    else:               # a row of P candidates per image and class
        k = min(nms_topk, num_rois) if nms_topk > 0 else num_rois
        top, index = g.op('TopK', [g.op('Reshape', [scores, g.ints(-1, num_rois)]), g.ints(k)],
                          2, axis=1)
        boxes = _take(g, g.op('Reshape', [boxes, g.ints(-1, num_rois, 4)]), index)
        slots = num_classes * k
        if not nms:     # B x C * k, class after class
            class_id = g.op('Div', [g.const(np.arange(slots).reshape(1, -1), np.int64),
                                    g.const(k, np.int64)])
            class_id = g.op('Expand', [class_id, g.op('Shape', [g.op(
                'Reshape', [top, g.ints(-1, slots)])])])
            return _suppressed_rows(g, g.op('Reshape', [top, g.ints(-1, slots)]), class_id,
                                    g.op('Reshape', [boxes, g.ints(-1, slots, 4)]), slots,
                                    None, valid_thresh, num_classes, None, outputs, nms)
        kept_rank = _nms(g, top, boxes, k, nms_thresh, valid_thresh)          # (B * C) x k
        class_of_slot = None
    detected = g.op('Where', [g.op('Greater', [kept_rank, g.scalar(0)]), top, g.scalar(-1)])
    detected = g.op('Reshape', [detected, g.ints(-1, slots)])
    boxes = g.op('Reshape', [boxes, g.ints(-1, slots, 4)])
    out_rows = post_nms if post_nms > 0 else num_candidates
    out_k = min(out_rows, slots)
    best, order = g.op('TopK', [detected, g.ints(out_k)], 2, axis=1)
    if class_of_slot is None:
        class_id = g.op('Div', [order, g.const(k, np.int64)])
    else:
        class_id = g.op('GatherElements', [class_of_slot, order], axis=1)
    _rows(g, [_column(g, class_id, True), _column(g, best), _take(g, boxes, order)], None,
          g.op('Greater', [best, g.scalar(0)]), out_k, out_rows, outputs)
    return out_rows
