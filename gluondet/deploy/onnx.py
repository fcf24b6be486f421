"""ONNX export of detectors: the network body through mx2onnx, the rest in standard ops.

The exported model takes ``data`` (``B x 3 x H x W`` float32, normalized as for the
Gluon network) and returns ``ids``, ``scores`` (``B x K x 1``) and ``boxes``
(``B x K x 4``, input pixels), the Gluon inference output, then the network's further
per-detection outputs by their names (its ``output_fields``: a Mask R-CNN's ``masks``
``B x K x M x M``). ``B`` is fixed to the
``batch_size`` of the export unless ``dynamic_batch``. ``H x W``: an SSD takes the one
size its anchors are made for; a Faster R-CNN or RetinaNet, which take any size in Gluon,
take any size up to ``data_shape`` with ``dynamic_size`` (``height`` and ``width``
symbolic: the anchors are the generators' constants cropped in the graph to each feature
map, the proposals are clipped to the input's own shape, and every top-k cut has a
constant ``k``, its candidates padded with invalid ones where the input has fewer, so
the graph is the Gluon network's at every size), else exactly ``data_shape`` (feed it
images resized keeping their ratio to fit and padded at the bottom and right to it).
ONNX Runtime refuses any other input shape ("Got invalid dimensions for input: data"): a
caller with a static model must feed exactly ``batch_size`` images (the metadata key
``batch_size`` says which, null when dynamic).

The boundary: mx2onnx converts the convolutional and dense parts at opset 13 --
SSD's features and predictors; Faster R-CNN's backbone (and FPN) with the RPN head,
and separately its box head and predictors on the pooled regions (and Mask R-CNN's mask
head on its detections' regions, :mod:`gluondet.deploy.onnx_mask_rcnn`) -- with three
corrections: MXNet's ``BatchNorm(fix_gamma=True)`` ignores ``gamma`` but mx2onnx keeps
it; mx2onnx turns ``L2Normalization`` into ``LpNormalization``, which has no ``eps``
(VGG's conv4_3 norm then differs where the channel norm is small); and it lists every
weight as a graph input too, which keeps ONNX Runtime from folding constants (for
example BatchNorm into the convolutions). Everything else is written in
:mod:`gluondet.deploy.onnx_graph`, where mx2onnx is wrong or has nothing: MXNet's
``box_nms`` (mx2onnx's suppresses across classes and cuts ``topk`` after NMS instead of
before), the RPN proposals, the per-level ROI assignment, ROI Align (ONNX's RoiAlign;
mx2onnx's translation is the same node), class-specific decoding and the final top-k.
"""
import collections
import inspect
import json
import re

import mxnet as mx
import numpy as np
import onnx
from mxnet.onnx import get_operator_support
from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
from onnx import TensorProto, helper

from ..data.preprocess import preprocessing_of
from ..files import atomic_write
from ..nn.roi import fpn_levels
from .onnx_graph import (GraphBuilder, add_rcnn_postprocess, add_retinanet_postprocess,
                         add_roi_align, add_rpn_proposals, add_ssd_postprocess)
from .onnx_center_net import (add_center_net_postprocess, center_net_body, deformable_blocks,
                              flip_width)
from .onnx_mask_rcnn import (MASK_LOGITS, MASK_OUTPUT, MASK_POOLED, add_mask_postprocess,
                             mask_head_body)
from .onnx_yolo3 import add_yolo3_postprocess, yolo3_body
from .postprocess import by_kind, postprocess_of
from .symbol import check_float32_process, input_shape, rcnn_body, ssd_body

__all__ = ['export_onnx', 'UnsupportedOperatorError', 'OPSET', 'GRAPHS']

#: {post-processing kind: its builder, ``(net, shape, symbolic, apply_nms) -> (graph, rows,
#: props, fields)``} (:mod:`gluondet.deploy.postprocess`)
GRAPHS = {}

OPSET = 13
OUTPUTS = ('ids', 'scores', 'boxes')


class UnsupportedOperatorError(ValueError):
    """The network uses an MXNet operator (or operator setting) the ONNX export cannot convert."""


@MXNetGraph.register('GroupNorm', OPSET)
def _convert_group_norm(node, **kwargs):
    """MXNet 1.x's ``GroupNorm`` (``gamma`` and ``beta`` one per group) in standard ops:
    mx2onnx has no translation, and ONNX's GroupNormalization comes at opset 18. Means are
    ``GlobalAveragePool`` over ``B x groups x rest x 1`` (mx2onnx checks nodes against the
    newest opset too, where ``ReduceMean`` lost its ``axes`` attribute)."""
    name = node['name']
    lookup = kwargs['outputs_lookup']
    x, gamma, beta = [lookup[i[0]][i[1]].name for i in node['inputs']]
    attrs = node.get('attrs', {})
    if attrs.get('output_mean_var', 'False') == 'True':
        raise UnsupportedOperatorError('ONNX export: GroupNorm %s outputs its mean and '
                                       'variance' % name)
    groups = int(attrs.get('num_groups', 1))

    def const(suffix, value, dtype):
        kwargs['initializer'].append(onnx.numpy_helper.from_array(np.array(value, dtype),
                                                                  name + suffix))
        return name + suffix

    def op(kind, inputs, suffix):
        nodes.append(helper.make_node(kind, inputs, [name + suffix]))
        return name + suffix

    nodes = []
    grouped = op('Reshape', [x, const('/grouped', [0, groups, -1, 1], np.int64)], '/x')
    centred = op('Sub', [grouped, op('GlobalAveragePool', [grouped], '/mean')], '/centred')
    var = op('GlobalAveragePool', [op('Mul', [centred, centred], '/sq')], '/var')
    std = op('Sqrt', [op('Add', [var, const('/eps', float(attrs.get('eps', 1e-5)),
                                            np.float32)], '/var_eps')], '/std')
    per_group = const('/per_group', [1, groups, 1, 1], np.int64)
    scaled = op('Mul', [op('Div', [centred, std], '/normed'),
                        op('Reshape', [gamma, per_group], '/gamma')], '/scaled')
    shifted = op('Add', [scaled, op('Reshape', [beta, per_group], '/beta')], '/shifted')
    nodes.append(helper.make_node('Reshape', [shifted, op('Shape', [x], '/shape')], [name],
                                  name=name))
    return nodes


def export_onnx(net, path, data_shape, batch_size=1, dynamic_batch=False, dynamic_size=False,
                opset=OPSET, metadata=None, nms=True):
    """Write a detector as an ONNX model whose outputs equal the Gluon inference output.

    Parameters
    ----------
    net : DetectionNet (:mod:`gluondet.model_zoo`)
        Initialized, of a ``postprocess_kind`` deploy knows
        (:mod:`gluondet.deploy.postprocess`, whose graph it gets); its ``set_nms`` settings
        are exported (SSD, RetinaNet: ``0 < nms_thresh < 1`` and ``nms_topk > 0`` are
        required; Faster R-CNN: ``nms_thresh >= 0``, ROI Align).
    path : str
        The ``.onnx`` file to write.
    data_shape : int or (int, int)
        Input height and width: fixed in the model, or with ``dynamic_size`` the largest.
    batch_size : int
        The batch the model takes (ignored with ``dynamic_batch``).
    dynamic_batch : bool
        Make the batch dimension symbolic (``batch``).
    dynamic_size : bool
        A kind whose graph takes any size (Faster R-CNN's and RetinaNet's): make the
        height and width symbolic (``height``,
        ``width``), any size up to ``data_shape`` (the anchors are cropped to the feature
        maps in the graph, as the network crops them), so that each image runs at its
        own size, as in Gluon.
    nms : bool
        False: the graph ends before the final NMS: its outputs are the candidates the NMS
        would take (sorted by score, boxes decoded, rows of -1 for invalid ones; a Faster
        R-CNN's class after class), for an NMS on the host (:mod:`gluondet.deploy.nms`).
    opset : int
        ONNX opset; only 13 is supported (mx2onnx's translations stop there).
    metadata : dict or None
        Extra ``{key: value}`` stored in the model's metadata, values JSON-encoded
        (for example the input ``mean`` and ``std``). The model always records
        ``classes``, ``data_shape``, ``batch_size`` (null if dynamic), ``nms`` (the
        settings), ``nms_applied`` (``nms``), ``postprocess_kind`` and ``preprocessing``
        (:func:`~gluondet.data.preprocess.preprocessing_of` the network); a keep-ratio
        network also ``short``, ``max_size`` and ``fixed_input_size`` (false with
        ``dynamic_size``), an ``rcnn`` kind ``rpn`` (its proposal settings), a
        ``mask_rcnn`` kind ``rpn``, ``mask_size`` (``[M, M]``) and ``max_detections``
        (``K``, the rows of every output).

    Returns
    -------
    onnx.ModelProto
        The model written (it passed ``onnx.checker.check_model``).

    Raises
    ------
    UnsupportedOperatorError
        Naming the MXNet operators and nodes of the body that cannot be converted.
    ValueError
        For a network of no known post-processing kind, naming it.
    """
    if opset != OPSET:
        raise ValueError('export_onnx: only opset %d is supported, got %r' % (OPSET, opset))
    post = postprocess_of(net)
    if dynamic_size and not post.any_size:
        raise ValueError('export_onnx: %s takes one input size (its %s graph has the anchors '
                         'of data_shape as constants): no dynamic_size'
                         % (type(net).__name__, post.kind))
    check_float32_process('export_onnx')
    shape = input_shape(data_shape, batch_size)
    symbolic = {0: 'batch'} if dynamic_batch else {}
    if dynamic_size:
        symbolic.update({2: 'height', 3: 'width'})
    graph, rows, props, fields = GRAPHS[post.kind](net, shape, symbolic, nms)
    batch = 'batch' if dynamic_batch else shape[0]
    del graph.output[:]
    outputs = list(zip(OUTPUTS, ([1], [1], [4]))) + list(fields.items())
    graph.output.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                      [batch, rows] + list(dims))
                        for name, dims in outputs)
    for node in graph.node:  # unique names: ONNX Runtime's fusions fail on duplicates
        node.name = node.output[0]
    _canonical_names(graph, net)

    model = helper.make_model(graph, producer_name='gluondet',
                              opset_imports=[helper.make_opsetid('', OPSET)])
    props = dict({'classes': list(net.classes), 'data_shape': list(shape[2:]),
                  'batch_size': None if dynamic_batch else shape[0],
                  'postprocess_kind': post.kind, 'nms_applied': nms}, **props)
    if getattr(net, 'grid_fields', ()):     # outputs that are grids over the boxes (masks)
        props['grid_fields'] = list(net.grid_fields)
    props['preprocessing'] = preprocessing_of(net, shape[2:])
    if props['preprocessing']['resize'] == 'keep_ratio':
        props.update(short=net.short, max_size=net.max_size, fixed_input_size=not dynamic_size)
    props.update(metadata or {})
    helper.set_model_props(model, {k: json.dumps(v) for k, v in props.items()})
    onnx.checker.check_model(model, full_check=True)
    atomic_write(path, model.SerializeToString())
    return model


def _append(graph, builder):
    graph.node.extend(builder.nodes)
    graph.initializer.extend(builder.initializers)


def _nms_props(nms, *keys):
    return {key: getattr(nms, key) for key in ('score_thresh', 'nms_thresh', 'nms_topk',
                                                 'post_nms') + keys}


def _single_stage_body(net, shape, symbolic, anchor_outputs):
    """mx2onnx's graph of a single-stage body (:func:`~gluondet.deploy.symbol.ssd_body`),
    its constant anchors at ``shape`` and the anchors of each level."""
    symbol, params, anchors, level_sizes = ssd_body(net, shape[2:], anchor_outputs)
    return _convert_body(symbol, params, [('data', shape)], symbolic), anchors, level_sizes


@by_kind(GRAPHS, 'softmax_nms')
def softmax_nms_graph(net, shape, symbolic, apply_nms=True):
    """``softmax_nms`` (SSD's): mx2onnx's body, then the post-processing, with the anchors
    as constants (one input size)."""
    graph, anchors, _ = _single_stage_body(net, shape, symbolic, anchor_outputs=False)
    nms = net.postprocess
    post = GraphBuilder('postprocess')
    rows = add_ssd_postprocess(post, 'cls_preds', 'box_preds', anchors, net.num_classes,
                               net.box_decoder.stds, nms.score_thresh, nms.nms_thresh,
                               nms.nms_topk, nms.post_nms, OUTPUTS, apply_nms)
    _append(graph, post)
    return graph, rows, {'nms': _nms_props(nms)}, {}


@by_kind(GRAPHS, 'sigmoid_topk_nms')
def sigmoid_topk_nms_graph(net, shape, symbolic, apply_nms=True):
    """``sigmoid_topk_nms`` (RetinaNet's): mx2onnx's body with each level's anchors (cropped
    to its map: any input size), then the post-processing."""
    graph, _, level_sizes = _single_stage_body(net, shape, symbolic, anchor_outputs=True)
    nms = net.postprocess
    post = GraphBuilder('postprocess')
    rows = add_retinanet_postprocess(
        post, 'cls_preds', 'box_preds', ['anchors%d' % i for i in range(len(level_sizes))],
        level_sizes, net.num_classes, net.box_decoder.stds, net.box_decoder.clip,
        nms.score_thresh, nms.nms_thresh, nms.nms_topk, nms.post_nms, OUTPUTS, apply_nms)
    _append(graph, post)
    return graph, rows, {'nms': _nms_props(nms)}, {}


RCNNGraph = collections.namedtuple('RCNNGraph', ['graph', 'rows', 'props', 'pool', 'channels'])
RCNNGraph.__doc__ = """`rcnn_stages`' graph, its rows and metadata, and for a head on the detections
(Mask R-CNN's masks) how the regions were pooled: ``pool``, the keywords of
:func:`~gluondet.deploy.onnx_graph.add_roi_align` but the boxes and output (the graph's ROI
maps, size, strides, sample ratio, FPN levels), and ``channels``, the maps' channels."""


def rcnn_stages(net, shape, symbolic, apply_nms=True, max_rows=None):
    """Faster R-CNN's graph: mx2onnx's backbone + RPN head, the proposals and ROI Align,
    mx2onnx's box head, then the detection post-processing into the three outputs; with
    ``max_rows``, only the first ``max_rows`` detections (a post-NMS cut of at most that
    many rows). Returns :class:`RCNNGraph`."""
    extractor = net.roi_extractor
    if extractor.mode != 'align':
        raise UnsupportedOperatorError("ONNX export: %s with roi_mode=%r is not exported "
                                       "(only 'align')" % (type(net).__name__, extractor.mode))
    body = rcnn_body(net, shape[2:])
    pre_nms, num_rois = net.proposal.counts(False)
    graph = _convert_body(body.rpn, body.params, [('data', shape)], symbolic)
    regions = GraphBuilder('proposals')
    proposal = net.proposal
    add_rpn_proposals(regions, 'rpn_scores', 'rpn_offsets', 'anchors', 'data', body.num_anchors,
                      proposal.nms_thresh, pre_nms, num_rois, proposal.min_size, proposal.clip)
    num_maps = len(body.map_shapes)
    levels = None
    if num_maps > 1:
        spec = {k: v.default for k, v in inspect.signature(fpn_levels).parameters.items()
                if k in ('canonical_size', 'canonical_level', 'eps')}
        levels = dict(bounds=_fpn_level_bounds(extractor.min_level, num_maps,
                                               spec['canonical_level']),
                      min_level=extractor.min_level, canonical_size=spec['canonical_size'],
                      eps=spec['eps'])
    pool = dict(maps=['roi_map%d' % i for i in range(num_maps)], size=extractor.size,
                strides=extractor.strides, sample_ratio=extractor.sample_ratio, levels=levels)
    add_roi_align(regions, 'proposals', output='pooled', **pool)
    _append(graph, regions)
    channels = body.map_shapes[0][1]
    append_converted(graph, body.head, body.params,
                     ('pooled', (shape[0] * num_rois, channels) + tuple(extractor.size)),
                     symbolic)

    nms = net.postprocess
    post_nms = nms.post_nms
    if max_rows is not None:
        post_nms = min(post_nms if post_nms > 0 else net.num_classes * num_rois, max_rows)
    post = GraphBuilder('postprocess')
    rows = add_rcnn_postprocess(
        post, 'cls_preds', 'box_preds', 'proposals', num_rois, net.num_classes,
        net.box_decoder.stds, net.box_decoder.clip, nms.score_thresh, nms.nms_thresh,
        nms.nms_topk, post_nms, nms.force_nms, nms.valid_thresh, OUTPUTS, apply_nms)
    _append(graph, post)
    props = {'nms': _nms_props(nms, 'force_nms'),
             'rpn': {'nms_thresh': proposal.nms_thresh, 'pre_nms': pre_nms,
                     'post_nms': num_rois, 'min_size': proposal.min_size}}
    return RCNNGraph(graph, rows, props, pool, channels)


@by_kind(GRAPHS, 'rcnn')
def rcnn_graph(net, shape, symbolic, apply_nms=True):
    """``rcnn`` (Faster R-CNN's): :func:`rcnn_stages`."""
    stages = rcnn_stages(net, shape, symbolic, apply_nms)
    return stages.graph, stages.rows, stages.props, {}


@by_kind(GRAPHS, 'mask_rcnn')
def mask_rcnn_graph(net, shape, symbolic, apply_nms=True):
    """``mask_rcnn`` (Mask R-CNN's): :func:`rcnn_stages` with the network's count of
    detections (``rcnn_max_dets``), then their masks (:mod:`gluondet.deploy.onnx_mask_rcnn`):
    ROI Align of their boxes as the regions', mx2onnx's mask head (C4: ``layer4`` before
    it), each detection's class map, sigmoid; the fourth output ``masks``."""
    if not apply_nms:
        raise ValueError('ONNX export: %s computes its masks on the detections after the '
                         'NMS, in the graph: export it with its NMS (no --no-nms)'
                         % type(net).__name__)
    stages = rcnn_stages(net, shape, symbolic, max_rows=net.rcnn_max_dets)
    graph, rows = stages.graph, stages.rows
    rois = GraphBuilder('mask_rois')
    add_roi_align(rois, OUTPUTS[2], output=MASK_POOLED, **stages.pool)
    _append(graph, rois)
    symbol, params = mask_head_body(net, shape[2:])
    append_converted(graph, symbol, params, (MASK_POOLED, (shape[0] * rows, stages.channels)
                                             + tuple(stages.pool['size'])), symbolic)
    masks = GraphBuilder('masks')
    add_mask_postprocess(masks, MASK_LOGITS, OUTPUTS[0], rows, net.num_classes, MASK_OUTPUT)
    _append(graph, masks)
    props = dict(stages.props, mask_size=list(net.mask_size), max_detections=rows)
    return graph, rows, props, {MASK_OUTPUT: list(net.mask_size)}


@by_kind(GRAPHS, 'yolo3')
def yolo3_graph(net, shape, symbolic, apply_nms=True):
    """``yolo3`` (YOLOv3's): mx2onnx's body up to the prediction layers, then the decoding
    (cell grids from each map's shape: any input size) and the post-processing."""
    symbol, params, level_sizes = yolo3_body(net, shape[2:])
    graph = _convert_body(symbol, params, [('data', shape)], symbolic)
    nms = net.postprocess
    post = GraphBuilder('postprocess')
    rows = add_yolo3_postprocess(
        post, ['pred%d' % i for i in range(len(level_sizes))], net.anchors, net.strides,
        level_sizes, net.num_classes, nms.score_thresh, nms.nms_thresh, nms.nms_topk,
        nms.post_nms, OUTPUTS, apply_nms)
    _append(graph, post)
    return graph, rows, {'nms': _nms_props(nms)}, {}


@by_kind(GRAPHS, 'center_net')
def center_net_graph(net, shape, symbolic, apply_nms=True):
    """``center_net`` (CenterNet's): mx2onnx's body up to the heads, then the peak search and
    decoding (from the maps' shapes: any input size). It has no NMS: ``apply_nms`` changes
    nothing, its outputs are the candidates."""
    del apply_nms
    deformable = deformable_blocks(net)
    if deformable:
        raise UnsupportedOperatorError(
            'ONNX export: %s has modulated deformable convolutions (DCNv2: %d, e.g. %s), which '
            'sample the input at learned offsets: mx2onnx cannot convert them, and ONNX has no '
            'such op at opset 13 (GridSample comes at 16, DeformConv at 19); export the '
            'network without _dcnv2' % (type(net).__name__, len(deformable), deformable[0]))
    symbol, params = center_net_body(net, shape[2:])
    inputs = [('data', shape)] + [('data_flip', shape)] * net.flip_test
    graph = _convert_body(symbol, params, inputs, symbolic)
    if net.flip_test:           # the flipped image from the input, before the body
        flip = GraphBuilder('flip')
        flip_width(flip, 'data', ['data_flip'])
        body = list(graph.node)
        del graph.node[:]
        graph.node.extend(flip.nodes + body)
        graph.initializer.extend(flip.initializers)
        graph.input.remove(next(i for i in graph.input if i.name == 'data_flip'))
    post = GraphBuilder('postprocess')
    decoder = net.postprocess
    rows = add_center_net_postprocess(
        post, 'heatmap', 'wh', 'reg', decoder.k, decoder.scale,
        ('heatmap_flip', 'wh_flip') if net.flip_test else None, OUTPUTS)
    _append(graph, post)
    return graph, rows, {'nms': {key: getattr(decoder, key) for key in (
        'topk', 'nms_thresh', 'nms_topk', 'post_nms')}}, {}


def _fpn_level_bounds(min_level, num_levels, canonical_level):
    """For each level above ``min_level``, the least float32 ``v`` (``sqrt(area) /
    canonical_size + eps``) that :func:`~gluondet.nn.roi.fpn_levels` puts at that level
    or above.

    ``fpn_levels`` computes ``floor(canonical_level + log2(v))`` with MXNet's ``log2``;
    comparing ``v`` with these bounds gives its levels exactly (a log in ONNX ops would
    not, near the boundaries: the bound of level 3 is the float below 0.5). Found by
    bisection over float32 values with MXNet itself.
    """
    def level_of(bits):
        v = mx.nd.array(np.int32(bits).view(np.float32).reshape(1))
        return float(mx.nd.floor(canonical_level + mx.nd.log2(v)).asscalar())

    bounds = []
    for level in range(min_level + 1, min_level + num_levels):
        low, high = np.float32(0).view(np.int32), np.float32(1e6).view(np.int32)
        while high - low > 1:      # positive floats are ordered as their bit patterns
            mid = (int(low) + int(high)) // 2
            low, high = (low, mid) if level_of(mid) >= level else (mid, high)
        bounds.append(float(np.int32(high).view(np.float32)))
    return bounds


def append_converted(graph, symbol, params, source, symbolic):
    """Append mx2onnx's graph of a head ``symbol`` to ``graph``: ``source`` is ``(name,
    shape)`` of its one input, a tensor of ``graph``, whose first axis is symbolic if the
    batch is (``0`` in ``symbolic``). Weights the two share (C4 Mask R-CNN's ``layer4``)
    are kept once; any other name they share is an error."""
    head = _convert_body(symbol, params, [source], {0: 'batch'} if 0 in symbolic else {},
                         keep_inputs=False)
    weights = {t.name: t for t in graph.initializer}
    clash = ({o for n in head.node for o in n.output}
             & ({o for n in graph.node for o in n.output} | set(weights)))
    clash |= {t.name for t in head.initializer
              if t.name in weights and t.SerializeToString() != weights[t.name].SerializeToString()}
    if clash:
        raise AssertionError('ONNX export: the mx2onnx graphs share names %s' % sorted(clash))
    graph.node.extend(head.node)
    graph.initializer.extend(t for t in head.initializer if t.name not in weights)


def _convert_body(symbol, params, inputs, symbolic, keep_inputs=True):
    """mx2onnx's graph of ``symbol`` at opset 13, corrected (see the module docstring).

    ``inputs``: ``(name, shape)`` of the symbol's inputs, in the order they appear in it;
    ``symbolic``: ``{axis: name}`` of their dimensions left symbolic (``shape`` holds a
    size to trace with). The graph lists them as its inputs if ``keep_inputs`` (else nodes
    added to it are to produce them).
    """
    nodes = json.loads(symbol.tojson())['nodes']
    supported = set(get_operator_support(OPSET))
    missing = {}
    for node in nodes:
        if node['op'] != 'null' and node['op'] not in supported:
            missing.setdefault(node['op'], []).append(node['name'])
    if missing:
        raise UnsupportedOperatorError(
            'ONNX export: mx2onnx (opset %d) cannot convert the MXNet operator(s) %s'
            % (OPSET, '; '.join('%s (nodes %s)' % (op, ', '.join(names))
                                for op, names in sorted(missing.items()))))

    params = dict(params)
    l2_eps = {}
    for node in nodes:
        attrs = node.get('attrs', {})
        if node['op'] == 'BatchNorm' and attrs.get('fix_gamma', 'True') == 'True':
            gamma = nodes[node['inputs'][1][0]]['name']
            params[gamma] = mx.nd.ones_like(params[gamma])
        elif node['op'] == 'L2Normalization':
            l2_eps[node['name']] = float(attrs.get('eps', 1e-10))

    shapes = [tuple(shape) for _, shape in inputs]
    dynamic_shapes = [tuple(None if axis in symbolic else size for axis, size in enumerate(shape))
                      for shape in shapes]
    try:
        graph = MXNetGraph().create_onnx_graph_proto(
            symbol, params, shapes, [TensorProto.FLOAT] * len(shapes), opset_version=OPSET,
            dynamic=bool(symbolic), dynamic_input_shapes=dynamic_shapes if symbolic else None)
    except (AttributeError, NotImplementedError) as err:
        raise UnsupportedOperatorError('ONNX export: mx2onnx failed on the network body: %s'
                                       % err) from err
    names = [name for name, _ in inputs]
    kept = [i for i in graph.input if keep_inputs and i.name in names]
    del graph.input[:]
    graph.input.extend(kept)
    for value in graph.input:
        for axis, name in symbolic.items():
            value.type.tensor_type.shape.dim[axis].dim_param = name
    _exact_l2_normalization(graph, l2_eps)
    return graph


def _exact_l2_normalization(graph, l2_eps):
    """Replace mx2onnx's ``LpNormalization`` nodes by MXNet's
    ``x / sqrt(sum(x^2 over channels) + eps)``."""
    nodes = list(graph.node)
    del graph.node[:]
    for node in nodes:
        if node.op_type != 'LpNormalization' or node.name not in l2_eps:
            graph.node.append(node)
            continue
        x, name = node.input[0], node.name
        eps = name + '/eps'
        graph.initializer.append(onnx.numpy_helper.from_array(
            np.array(l2_eps[name], np.float32), eps))
        graph.node.extend([
            helper.make_node('ReduceSumSquare', [x], [name + '/sumsq'], axes=[1], keepdims=1),
            helper.make_node('Add', [name + '/sumsq', eps], [name + '/sumsq_eps']),
            helper.make_node('Sqrt', [name + '/sumsq_eps'], [name + '/norm']),
            helper.make_node('Div', [x, name + '/norm'], list(node.output)),
        ])


def _canonical_names(graph, net):
    """Renumber the top-level Gluon prefixes in the graph's names (``ssd3_``, ``mobilenet7_``:
    counters global to the Python process; after mx2onnx's ``idx_<node>_`` of a block run
    more than once, as the RPN head on each FPN level) from 0 per kind, in order: exporting
    the same network gives the same names in any process, which int8 calibration caches key
    on."""
    prefixes = {name.split('_', 1)[0] for name in net.collect_params().keys()}
    # and blocks without parameters made outside the network (an FPN box head's ReLUs)
    net.apply(lambda block: prefixes.add(block.prefix.split('_', 1)[0]))
    mapping, counts = {}, {}
    for prefix in sorted(prefixes, key=lambda p: (re.sub(r'\d+$', '', p), len(p), p)):
        kind = re.sub(r'\d+$', '', prefix)
        mapping[prefix] = '%s%d' % (kind, counts.setdefault(kind, 0))
        counts[kind] += 1

    def rename(name):
        lead, name = re.match(r'(idx_\d+_)?(.*)', name).groups()    # mx2onnx's repeated nodes
        head, sep, rest = name.partition('_')
        return (lead or '') + (mapping[head] + sep + rest if sep and head in mapping else name)

    for node in graph.node:
        node.name = rename(node.name)
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
    for tensor in graph.initializer:
        tensor.name = rename(tensor.name)
    for info in list(graph.input) + list(graph.output) + list(graph.value_info):
        info.name = rename(info.name)
