"""ONNX export of SSD: the network body through mx2onnx, the post-processing in standard ops.

The exported model takes ``data`` (``B x 3 x H x W`` float32, normalized as for the
Gluon network) and returns ``ids``, ``scores`` (``B x K x 1``) and ``boxes``
(``B x K x 4``, input pixels), the Gluon inference output. ``B`` is fixed to the
``batch_size`` of the export unless ``dynamic_batch``; ``H x W`` is always fixed
(the anchors are constants of the graph). ONNX Runtime refuses any other input shape
("Got invalid dimensions for input: data"): a caller with a static model must feed
exactly ``batch_size`` images (the metadata key ``batch_size`` says which, null when
dynamic).

mx2onnx converts the body (features, predictors) at opset 13, with three corrections:
MXNet's ``BatchNorm(fix_gamma=True)`` ignores ``gamma`` but mx2onnx keeps it;
mx2onnx turns ``L2Normalization`` into ``LpNormalization``, which has no ``eps``
(VGG's conv4_3 norm then differs where the channel norm is small); and it lists every
weight as a graph input too, which keeps ONNX Runtime from folding constants (for
example BatchNorm into the convolutions). It never sees the post-processing: MXNet's
``box_nms`` is rebuilt in :mod:`gluondet.deploy.onnx_graph`.
"""
import json
import re

import mxnet as mx
import numpy as np
import onnx
from mxnet.onnx import get_operator_support
from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
from onnx import TensorProto, helper

from .onnx_graph import GraphBuilder, add_ssd_postprocess
from .symbol import input_shape, ssd_body

__all__ = ['export_onnx', 'UnsupportedOperatorError', 'OPSET']

OPSET = 13


class UnsupportedOperatorError(ValueError):
    """The network uses an MXNet operator (or operator setting) the ONNX export cannot convert."""


def export_onnx(net, path, data_shape, batch_size=1, dynamic_batch=False, opset=OPSET,
                metadata=None):
    """Write an SSD as an ONNX model whose outputs equal the Gluon inference output.

    Parameters
    ----------
    net : :class:`gluondet.model_zoo.ssd.SSD`
        An initialized SSD; its :meth:`~gluondet.model_zoo.ssd.SSD.set_nms` settings
        are exported (``0 < nms_thresh < 1`` and ``nms_topk > 0`` are required).
    path : str
        The ``.onnx`` file to write.
    data_shape : int or (int, int)
        Input height and width, fixed in the model.
    batch_size : int
        The batch the model takes (ignored with ``dynamic_batch``).
    dynamic_batch : bool
        Make the batch dimension symbolic (``batch``).
    opset : int
        ONNX opset; only 13 is supported (mx2onnx's translations stop there).
    metadata : dict or None
        Extra ``{key: value}`` stored in the model's metadata, values JSON-encoded
        (for example the input ``mean`` and ``std``). The model always records
        ``classes``, ``data_shape``, ``batch_size`` (null if dynamic) and ``nms``.

    Returns
    -------
    onnx.ModelProto
        The model written (it passed ``onnx.checker.check_model``).

    Raises
    ------
    UnsupportedOperatorError
        Naming the MXNet operators and nodes of the body that cannot be converted.
    """
    if opset != OPSET:
        raise ValueError('export_onnx: only opset %d is supported, got %r' % (OPSET, opset))
    shape = input_shape(data_shape, batch_size)
    symbol, params, anchors = ssd_body(net, data_shape)
    graph = _convert_body(symbol, params, shape, dynamic_batch)

    nms = net.postprocess
    post = GraphBuilder('postprocess')
    rows = add_ssd_postprocess(post, 'cls_preds', 'box_preds', anchors, net.num_classes,
                               net.box_decoder.stds, nms.score_thresh, nms.nms_thresh,
                               nms.nms_topk, nms.post_nms)
    graph.node.extend(post.nodes)
    graph.initializer.extend(post.initializers)
    batch = 'batch' if dynamic_batch else shape[0]
    del graph.output[:]
    graph.output.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, rows, n])
                        for name, n in (('ids', 1), ('scores', 1), ('boxes', 4)))
    for node in graph.node:  # unique names: ONNX Runtime's fusions fail on duplicates
        node.name = node.output[0]
    _canonical_names(graph, net)

    model = helper.make_model(graph, producer_name='gluondet',
                              opset_imports=[helper.make_opsetid('', OPSET)])
    props = {'classes': list(net.classes), 'data_shape': list(shape[2:]),
             'batch_size': None if dynamic_batch else shape[0],
             'nms': {'score_thresh': nms.score_thresh, 'nms_thresh': nms.nms_thresh,
                     'nms_topk': nms.nms_topk, 'post_nms': nms.post_nms}}
    props.update(metadata or {})
    helper.set_model_props(model, {k: json.dumps(v) for k, v in props.items()})
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return model


def _convert_body(symbol, params, shape, dynamic_batch):
    """mx2onnx's graph of ``symbol`` at opset 13, corrected (see the module docstring)."""
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

    dynamic_shapes = [(None,) + tuple(shape[1:])] if dynamic_batch else None
    try:
        graph = MXNetGraph().create_onnx_graph_proto(
            symbol, params, [shape], [TensorProto.FLOAT], opset_version=OPSET,
            dynamic=dynamic_batch, dynamic_input_shapes=dynamic_shapes)
    except (AttributeError, NotImplementedError) as err:
        raise UnsupportedOperatorError('ONNX export: mx2onnx failed on the network body: %s'
                                       % err) from err
    inputs = [i for i in graph.input if i.name == 'data']
    del graph.input[:]
    graph.input.extend(inputs)
    if dynamic_batch:
        graph.input[0].type.tensor_type.shape.dim[0].dim_param = 'batch'
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
    counters global to the Python process) from 0 per kind, in order: exporting the same
    network gives the same names in any process, which int8 calibration caches key on."""
    prefixes = {name.split('_', 1)[0] for name in net.collect_params().keys()}
    prefixes.add(net.prefix.rstrip('_'))
    mapping, counts = {}, {}
    for prefix in sorted(prefixes, key=lambda p: (re.sub(r'\d+$', '', p), len(p), p)):
        kind = re.sub(r'\d+$', '', prefix)
        mapping[prefix] = '%s%d' % (kind, counts.setdefault(kind, 0))
        counts[kind] += 1

    def rename(name):
        head, sep, rest = name.partition('_')
        return mapping[head] + sep + rest if sep and head in mapping else name

    for node in graph.node:
        node.name = rename(node.name)
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
    for tensor in graph.initializer:
        tensor.name = rename(tensor.name)
    for info in list(graph.input) + list(graph.output) + list(graph.value_info):
        info.name = rename(info.name)
