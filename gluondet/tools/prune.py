"""``gluondet prune``: remove the weakest filters of a trained detector (NVIDIA TAO's prune).

The criteria are TAO's (its ``magnet_prune`` and ``PruneMinWeight``, read for the facts):

- Each output filter of a convolution or dense layer is scored by the L2 norm of its weights
  (biases ignored); a layer's scores are normalized (``normalizer``): ``'max'`` divides them
  by their maximum, ``'L2'`` by their L2 norm and multiplies by their number.
- Layers whose outputs are added (a ResNet block's body and shortcut or downsample, an FPN's
  lateral and top-down maps), or fed to one layer shared by several maps (RetinaNet's heads,
  the RPN over the pyramid), must keep the same channels: they form one *group*, whose
  scores are merged per channel (``equalization``): ``'union'`` the maximum,
  ``'intersection'`` the minimum, ``'arithmetic_mean'``, ``'geometric_mean'``. A depthwise
  convolution joins the group of its input, with its own per-channel scores (as TAO).
- A group keeps the channels scoring above ``threshold``, at least ``min_filters`` (or all
  it has), rounded up to a multiple of ``granularity`` (at most all), the best-scoring ones.
- Kept whole: the layers named in ``excluded`` and their group, and every channel whose
  tensor reaches anything but per-channel or elementwise operations, so the prediction
  layers (class and box convolutions, RPN outputs, R-CNN dense predictors) keep theirs.

The structure is read from the network's own graph, not listed per model: the inference
symbol (``net(mx.sym.var('data'))``) with its shapes says which layer feeds which. A tensor's
channels come from a convolution or dense layer (the *producer*) and pass unchanged through
norm layers, depthwise convolutions, activations, pooling, resizing, ROI Align, slicing of
other axes and reshapes that keep axes 0 and 1; elementwise operations join their inputs'
groups; any other consumer (concatenation, transpose, reshape, GroupNorm, a graph output)
keeps its input's group whole. Then each layer is sliced: producers' outputs, norm layers
and depthwise convolutions to their group's channels, and every convolution or dense layer
reading a pruned tensor to its kept input channels (a dense layer over ``C x h x w`` keeps
the ``h x w`` block of each kept channel).

The pruned model is a gluondet model: ``OUT.params`` and ``OUT.json`` beside it, the source's
json with ``meta.pruned = {"channels": table}`` (the channel table of
:mod:`gluondet.model_zoo.pruned`, merged with the source's if it was pruned already) and a
``prune`` record (source, settings, parameter counts). ``Predictor.from_model``, ``gluondet
export`` and the training scripts' ``--pruned-model`` rebuild it from these two files.
"""
import difflib
import json
import os

import mxnet as mx
import numpy as np
from mxnet.gluon import nn

from ..deploy.networks import load_network
from ..files import atomic_save, atomic_write, save_ndarrays
from ..model_zoo.pruned import is_norm, named_blocks

__all__ = ['NORMALIZERS', 'EQUALIZATIONS', 'prune_model', 'prune_net', 'trace_channels',
           'count_params', 'count_macs', 'filter_scores', 'kept_count']

NORMALIZERS = ('max', 'L2')
EQUALIZATIONS = ('union', 'intersection', 'arithmetic_mean', 'geometric_mean')

AGNOSTIC = '<agnostic>'     # a tensor constant along its channels (broadcast), fits any group

# Operators that keep their first input's channels, one for one (inference graph).
_KEEP_CHANNELS = frozenset((
    'Activation', 'relu', 'sigmoid', 'tanh', 'softrelu', 'softsign', 'LeakyReLU', 'Pooling',
    'Dropout', 'clip', 'Cast', 'amp_cast', '_copy', 'identity', 'BlockGrad', 'stop_gradient',
    'zeros_like', 'ones_like', '_contrib_AdaptiveAvgPooling2D', '_contrib_BilinearResize2D',
    '_contrib_ROIAlign', 'ROIAlign', 'ROIPooling', 'negative', 'abs', 'exp', 'log', 'sqrt',
    'square', '_mul_scalar', '_div_scalar', '_plus_scalar', '_minus_scalar', '_rminus_scalar',
    '_rdiv_scalar', '_power_scalar', '_maximum_scalar', '_minimum_scalar'))
# Elementwise operators: their inputs' channels are the same channels.
_ELEMENTWISE = frozenset((
    'elemwise_add', '_plus', '_Plus', 'broadcast_add', 'elemwise_sub', '_minus', '_Minus',
    'broadcast_sub', 'elemwise_mul', '_mul', '_Mul', 'broadcast_mul', 'elemwise_div', '_div',
    'broadcast_div', '_maximum', '_minimum', 'broadcast_maximum', 'broadcast_minimum', 'add_n',
    'ElementWiseSum', 'where', '_grad_add'))
# Reshapes: channel-preserving when axes 0 and 1 keep their sizes.
_RESHAPES = frozenset(('Reshape', 'reshape_like', 'Flatten', 'flatten', 'expand_dims',
                       'squeeze'))
# Operators that read only their inputs' shapes (YOLOv3's cell grid: arange_like).
_SHAPE_ONLY = frozenset(('shape_array', 'size_array', '_contrib_arange_like'))


class _Groups:
    """Union-find over group keys (the producing layers' paths), with frozen groups."""

    def __init__(self):
        self.parent, self.frozen = {}, set()

    def add(self, key):
        self.parent.setdefault(key, key)
        return key

    def find(self, key):
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def union(self, keys):
        """Join ``keys`` (groups, None or AGNOSTIC); returns the group, or None if a None was
        among them (the groups are then frozen), or AGNOSTIC if all were."""
        groups = [k for k in keys if k not in (None, AGNOSTIC)]
        if not groups:
            return None if None in keys else AGNOSTIC
        root = self.find(groups[0])
        for key in groups[1:]:
            other = self.find(key)
            if other != root:
                self.parent[other] = root
        if None in keys:
            self.freeze(root)
            return None
        return root

    def freeze(self, key):
        if key not in (None, AGNOSTIC):
            self.frozen.add(key)

    def is_frozen(self, key):
        root = self.find(key)
        return any(self.find(k) == root for k in self.frozen)


class ChannelGraph:
    """What :func:`trace_channels` finds: groups and how each layer relates to them.

    Attributes
    ----------
    groups : _Groups
    producers : dict
        ``{path: block}`` of the convolutions and dense layers whose outputs start a group
        (keyed by the path).
    followers : dict
        ``{path: [input group, ...]}`` of norm layers and depthwise convolutions.
    consumers : dict
        ``{path: [(input group, h x w per channel), ...]}`` of convolutions and dense layers.
    blocks : dict
        ``{path: block}`` of the network.
    shapes : dict
        ``{(node, output): shape}`` of the traced symbol, ``nodes`` its json nodes.
    """

    def __init__(self, blocks):
        self.blocks = blocks
        self.groups = _Groups()
        self.producers, self.followers, self.consumers = {}, {}, {}
        self.shapes, self.nodes = {}, []

    def group_of_output(self, path):
        """The root group of a layer's output channels, or None."""
        if path in self.producers:
            return self.groups.find(path)
        inputs = [g for g in self.followers.get(path, ()) if g not in (None, AGNOSTIC)]
        return self.groups.find(inputs[0]) if inputs else None


def _symbol(net):
    out = net(mx.sym.var('data', dtype='float32'))
    return mx.sym.Group(list(out)) if isinstance(out, (list, tuple)) else out


def _shapes(sym, nodes, data_shape):
    internals = sym.get_internals()
    _, shapes, _ = internals.infer_shape(data=(1, 3) + tuple(data_shape))
    by_name = dict(zip(internals.list_outputs(), shapes))
    found = {}
    for i, node in enumerate(nodes):
        if node['op'] == 'null':
            found[(i, 0)] = by_name.get(node['name'])
            continue
        for k in range(8):
            shape = by_name.get('%s_output%s' % (node['name'], k if k else ''),
                                by_name.get('%s_output%d' % (node['name'], k)))
            if shape is None:
                break
            found[(i, k)] = shape
    return found


def _axes(text):
    return tuple(int(v) for v in text.strip('()[] ').split(',') if v.strip()) if text else ()


def trace_channels(net, data_shape):
    """The channel groups of ``net`` (initialized, weights loaded) at input ``data_shape``.

    Returns
    -------
    ChannelGraph
    """
    blocks = named_blocks(net)
    owner = {}
    for path, block in blocks.items():
        for param in block._reg_params.values():    # pylint: disable=protected-access
            owner.setdefault(param.name, path)
    sym = _symbol(net)
    graph = json.loads(sym.tojson())
    result = ChannelGraph(blocks)
    nodes = result.nodes = graph['nodes']
    shapes = result.shapes = _shapes(sym, nodes, data_shape)
    groups = result.groups
    src = {}

    def shape(entry):
        return shapes.get(entry) or ()

    def channels_of(entry):
        s = shape(entry)
        return s[1] if len(s) >= 2 else None

    for i, node in enumerate(nodes):
        op = node['op']
        if op == 'null':
            src[(i, 0)] = None
            continue
        attrs = node.get('attrs', {})
        entries = [(e[0], e[1]) for e in node['inputs']]
        params = [owner[nodes[j]['name']] for j, _ in entries
                  if nodes[j]['op'] == 'null' and nodes[j]['name'] in owner]
        out_entry = (i, 0)
        if params and _is_layer(result.blocks[params[0]]):
            data = [e for e in entries if not (nodes[e[0]]['op'] == 'null'
                                               and nodes[e[0]]['name'] in owner)]
            src[out_entry] = _layer(result, params[0], data, [src.get(e) for e in data],
                                    shape, channels_of, out_entry)
            continue
        data, ins = entries, [src.get(e) for e in entries]   # parameters: no group (None)
        if params and op not in _LAYOUT_OPS:    # another layer with weights (GroupNorm, PReLU)
            op = '<layer %s>' % params[0]
        first = ins[0] if ins else None
        if op in _KEEP_CHANNELS or (op == 'UpSampling' and attrs.get('num_args', '1') == '1'):
            out = first
        elif op == 'slice_like':
            axes = _axes(attrs.get('axes'))
            ndim = len(shape(data[0]))
            out = first if axes and 1 not in [a % ndim for a in axes] else _stop(groups, first)
        elif op == 'slice_axis':
            ndim = len(shape(data[0]))
            out = first if int(attrs.get('axis', 0)) % max(ndim, 1) != 1 else _stop(groups, first)
        elif op == 'broadcast_like':
            lhs, rhs = channels_of(data[0]), channels_of(out_entry)
            out = (first if lhs == rhs and 'lhs_axes' not in attrs else
                   AGNOSTIC if lhs == 1 else _stop(groups, first))
        elif op in _RESHAPES:
            before, after = shape(data[0]), shape(out_entry)
            keeps = len(before) >= 2 and len(after) >= 2 and tuple(before[:2]) == tuple(after[:2])
            out = first if keeps else _stop(groups, first)
        elif op == 'transpose' and _axes(attrs.get('axes'))[:2] == (0, 1):
            out = first
        elif op in _ELEMENTWISE:
            out = _join(groups, data, ins, shape, out_entry)
        elif op in _SHAPE_ONLY:
            out = None
        else:
            for value in ins:
                groups.freeze(value)
            out = None
        src[out_entry] = out
    for head in graph['heads']:
        groups.freeze(src.get((head[0], head[1])))
    _settle(result)
    return result


_LAYOUT_OPS = _RESHAPES | _SHAPE_ONLY | {'slice_like', 'slice_axis', 'broadcast_like'}


def _is_layer(block):
    return isinstance(block, (nn.Conv2D, nn.Dense)) or is_norm(block)


def _stop(groups, value):
    """A consumer that mixes channels: ``value``'s group keeps all of them."""
    groups.freeze(value)
    return None


def _join(groups, data, ins, shape, out_entry):
    """An elementwise operation: inputs with the output's channels are one group."""
    out_shape = shape(out_entry)
    joined = []
    for entry, value in zip(data, ins):
        s = shape(entry)
        if len(s) == len(out_shape) and len(s) >= 2 and s[1] == out_shape[1] and s[1] > 1:
            joined.append(value)
        elif len(s) == len(out_shape) and len(s) >= 2 and s[1] == 1:
            continue        # broadcast along the channels
        else:
            groups.freeze(value)
            joined.append(None)
    return groups.union(joined) if joined else None


def _layer(result, path, data, ins, shape, channels_of, out_entry):
    """A node with parameters (of the layer at ``path``); returns its output's group."""
    block, groups = result.blocks[path], result.groups
    first = ins[0] if ins else None
    if isinstance(block, nn.Conv2D):
        kwargs = block._kwargs      # pylint: disable=protected-access
        in_channels = channels_of(data[0])
        if kwargs['num_group'] == 1:
            result.consumers.setdefault(path, []).append((first, 1))
        elif kwargs['num_group'] == in_channels == kwargs['num_filter']:   # depthwise
            result.followers.setdefault(path, []).append(first)
            return first
        else:
            groups.freeze(first)
        result.producers[path] = block
        groups.add(path)
        if kwargs['num_group'] != 1 or kwargs.get('layout', 'NCHW') != 'NCHW':
            groups.freeze(path)
        return path
    if isinstance(block, nn.Dense):
        s = shape(data[0])
        if len(s) == 2:
            result.consumers.setdefault(path, []).append((first, 1))
        elif block._flatten and len(s) > 2:     # pylint: disable=protected-access
            result.consumers.setdefault(path, []).append((first, int(np.prod(s[2:]))))
        else:
            groups.freeze(first)
        result.producers[path] = block
        groups.add(path)
        if len(shape(out_entry)) != 2:
            groups.freeze(path)
        return path
    if block._kwargs.get('axis', 1) == 1:   # pylint: disable=protected-access
        result.followers.setdefault(path, []).append(first)
        return first
    for value in ins:
        groups.freeze(value)
    return None


def _settle(result):
    """A layer applied to several tensors joins their groups (one slicing fits all)."""
    groups = result.groups
    for table in (result.followers, result.consumers):
        for uses in table.values():
            values = [u[0] if isinstance(u, tuple) else u for u in uses]
            if len(set(values)) > 1:
                groups.union(values)


# ---------------------------------------------------------------- criteria

def filter_scores(weight, normalizer):
    """Per output filter of a ``O x ...`` weight: its L2 norm, normalized over the layer."""
    flat = np.asarray(weight, np.float64).reshape(weight.shape[0], -1)
    norms = np.sqrt((flat ** 2).sum(axis=1))
    if normalizer == 'max':
        top = norms.max()
        return norms / top if top > 0 else norms
    if normalizer == 'L2':
        total = np.sqrt((norms ** 2).sum())
        return norms / total * len(norms) if total > 0 else norms
    raise ValueError('normalizer must be one of %s, got %r' % (', '.join(NORMALIZERS),
                                                                normalizer))


def _merge(scores, equalization):
    stacked = np.stack(scores)
    if equalization == 'union':
        return stacked.max(axis=0)
    if equalization == 'intersection':
        return stacked.min(axis=0)
    if equalization == 'arithmetic_mean':
        return stacked.mean(axis=0)
    with np.errstate(divide='ignore'):
        return np.exp(np.log(stacked).mean(axis=0))


def kept_count(scores, threshold, min_filters, granularity):
    """How many of ``len(scores)`` channels stay: those above ``threshold``, at least
    ``min_filters`` (or all), rounded up to a multiple of ``granularity`` (at most all)."""
    total = len(scores)
    count = max(int((np.asarray(scores) > threshold).sum()), min(min_filters, total))
    if count % granularity:
        count += granularity - count % granularity
    return min(count, total)


def _kept(scores, threshold, min_filters, granularity):
    count = kept_count(scores, threshold, min_filters, granularity)
    order = np.argsort(-np.asarray(scores), kind='stable')
    return np.sort(order[:count])


# ---------------------------------------------------------------- pruning a network

def _weight(block):
    return block.weight.data().asnumpy()


def _decide(graph, normalizer, equalization, threshold, min_filters, granularity, excluded):
    """``{root group: kept channel indices}`` of the groups that lose channels."""
    groups = graph.groups
    for path in excluded:
        if path in graph.producers:
            groups.freeze(path)
        for value in graph.followers.get(path, ()):
            groups.freeze(value)
    members = {}
    for path in graph.producers:
        members.setdefault(groups.find(path), []).append(path)
    for path, uses in graph.followers.items():
        block = graph.blocks[path]
        group = next((u for u in uses if u not in (None, AGNOSTIC)), None)
        if group is not None and isinstance(block, nn.Conv2D):     # depthwise: scored too
            members.setdefault(groups.find(group), []).append(path)
    kept = {}
    for root, paths in members.items():
        if groups.is_frozen(root):
            continue
        weights = [_weight(graph.blocks[p]) for p in paths]
        sizes = {w.shape[0] for w in weights}
        if len(sizes) != 1:
            raise ValueError('layers %s are added together but have %s channels'
                             % (', '.join(paths), sorted(sizes)))
        scores = _merge([filter_scores(w, normalizer) for w in weights], equalization)
        keep = _kept(scores, threshold, min_filters, granularity)
        if len(keep) < len(scores):
            kept[root] = keep
    return kept


def _sliced(graph, kept):
    """``({path: (out kept or None, in kept or None, h x w)}, {path: counts})`` of the layers
    that change."""
    groups = graph.groups

    def keep_of(value):
        if value in (None, AGNOSTIC):
            return None
        return kept.get(groups.find(value))

    changes = {}
    for path in set(graph.producers) | set(graph.followers) | set(graph.consumers):
        out_keep = None
        if path in graph.producers:
            out_keep = keep_of(path)
        elif path in graph.followers:
            out_keep = next((keep_of(v) for v in graph.followers[path]
                             if v not in (None, AGNOSTIC)), None)
        uses = graph.consumers.get(path, [])
        in_keep, spatial = (keep_of(uses[0][0]), uses[0][1]) if uses else (None, 1)
        if out_keep is not None or in_keep is not None:
            changes[path] = (out_keep, in_keep, spatial)
    return changes


def _slice_params(block, out_keep, in_keep, spatial):
    """``({param attribute: new array}, counts)`` of one layer."""
    # pylint: disable=protected-access
    arrays = {name: p.data().asnumpy() for name, p in block._reg_params.items()}
    if is_norm(block):
        arrays = {name: a[out_keep] for name, a in arrays.items()}
        return arrays, {'channels': len(out_keep)}
    weight = arrays['weight']
    depthwise = isinstance(block, nn.Conv2D) and block._kwargs['num_group'] > 1
    if in_keep is not None:
        if spatial > 1:
            units = weight.shape[0]
            weight = weight.reshape(units, -1, spatial)[:, in_keep].reshape(units, -1)
        else:
            weight = weight[:, in_keep]
    if out_keep is not None:
        weight = weight[out_keep]
        if 'bias' in arrays:
            arrays['bias'] = arrays['bias'][out_keep]
    arrays['weight'] = weight
    if isinstance(block, nn.Dense):
        return arrays, {'channels': weight.shape[0], 'in_channels': weight.shape[1]}
    if depthwise:
        n = weight.shape[0]
        return arrays, {'channels': n, 'in_channels': n, 'groups': n}
    return arrays, {'channels': weight.shape[0], 'in_channels': weight.shape[1], 'groups': 1}


def _check_excluded(graph, excluded):
    """``excluded`` (layer paths), checked; ValueError naming an unknown one. (Block names
    are not taken: they number blocks in the order a process builds them.)"""
    layers = set(graph.producers) | set(graph.followers) | set(graph.consumers)
    for name in excluded or ():
        if name not in layers:
            close = difflib.get_close_matches(name, sorted(layers), 3)
            raise ValueError('excluded layer %r is not a convolution, dense or norm layer of '
                             'this network%s' % (name, '; did you mean %s?' % ', '.join(close)
                                                 if close else ''))
    return list(excluded or ())


def _check_settings(normalizer, equalization, min_filters, granularity):
    if normalizer not in NORMALIZERS:
        raise ValueError('normalizer (-n) must be one of %s, got %r'
                         % (', '.join(NORMALIZERS), normalizer))
    if equalization not in EQUALIZATIONS:
        raise ValueError('equalization criterion (-eq) must be one of %s, got %r'
                         % (', '.join(EQUALIZATIONS), equalization))
    if not min_filters >= 1 or not granularity >= 1:
        raise ValueError('min_filters (-nf) and granularity (-pg) must be at least 1, got %s '
                         'and %s' % (min_filters, granularity))


def prune_net(net, data_shape, normalizer='max', equalization='union', threshold=0.1,
              min_filters=16, granularity=8, excluded=()):
    """Decide what to prune in ``net`` and return the pruned weights and channel table.

    Parameters
    ----------
    net : HybridBlock
        A detector with its weights.
    data_shape : (int, int)
        An input size it takes (for the graph's shapes).
    normalizer, equalization, threshold, min_filters, granularity, excluded
        See the module docstring; ``excluded`` holds layer paths (``features.backbone.
        layer1.0.conv1``: the parameter names in the ``.params`` file less ``.weight``).

    Returns
    -------
    arrays : dict
        ``{structural parameter name: numpy array}`` of the pruned network, every parameter.
    channels : dict
        ``{path: counts}`` of the layers that changed (the channel table).
    """
    _check_settings(normalizer, equalization, min_filters, granularity)
    graph = trace_channels(net, data_shape)
    excluded = _check_excluded(graph, excluded)
    kept = _decide(graph, normalizer, equalization, threshold, min_filters, granularity,
                   excluded)
    changed, channels = {}, {}
    for path, (out_keep, in_keep, spatial) in _sliced(graph, kept).items():
        changed[path], channels[path] = _slice_params(graph.blocks[path], out_keep, in_keep,
                                                      spatial)
    arrays = {}
    for name, param in net._collect_params_with_prefix().items():  # pylint: disable=W0212
        path, _, attr = name.rpartition('.')
        if path in changed and attr in changed[path]:
            arrays[name] = changed[path][attr]
        else:
            arrays[name] = param.data().asnumpy()
    return arrays, channels


def count_params(net):
    """Parameters of the convolution, dense and norm layers of ``net`` (weights loaded or
    shapes known)."""
    total = 0
    for block in named_blocks(net).values():
        if isinstance(block, (nn.Conv2D, nn.Dense)) or is_norm(block):
            total += sum(int(np.prod(p.shape)) for p in block._reg_params.values())  # noqa
    return total


def count_macs(net, data_shape):
    """Multiply-adds of one image through the convolutions and dense layers of ``net``'s
    inference graph at ``data_shape`` (a dense layer over R regions counts R times)."""
    graph = trace_channels(net, data_shape)
    owner = {}
    for block in graph.blocks.values():
        if isinstance(block, (nn.Conv2D, nn.Dense)):
            owner[block.weight.name] = block
    total = 0
    for i, node in enumerate(graph.nodes):
        if node['op'] not in ('Convolution', 'FullyConnected'):
            continue
        weight = next((graph.nodes[j]['name'] for j, _, _ in node['inputs']
                       if graph.nodes[j]['name'] in owner), None)
        if weight is None:
            continue
        out = graph.shapes.get((i, 0))
        per_output = int(np.prod(owner[weight].weight.shape[1:]))
        total += int(np.prod(out)) * per_output
    return total


def _output_paths(output):
    stem = output[:-len('.params')] if output.lower().endswith('.params') else output
    return stem + '.params', stem + '.json'


def prune_model(model, output, normalizer='max', equalization='union', threshold=0.1,
                min_filters=16, granularity=8, excluded=(), log=print):
    """Prune a trained gluondet model and write the pruned one (``gluondet prune``).

    Parameters
    ----------
    model : str
        A training output ``PREFIX_best.params`` (any ``.params`` the engine or this command
        wrote), its ``.json`` beside it.
    output : str
        ``OUT.params`` or ``OUT``: writes ``OUT.params`` and ``OUT.json``.
    normalizer, equalization, threshold, min_filters, granularity, excluded
        See :func:`prune_net`.
    log : callable
        Where the summary line goes.

    Returns
    -------
    dict
        ``params``, ``json`` (the files), ``params_before``, ``params_after``, ``channels``.
    """
    if not str(model).lower().endswith('.params'):
        raise ValueError('the model to prune must be a gluondet .params file with its .json '
                         'beside it (a training output), got %s' % model)
    _check_settings(normalizer, equalization, min_filters, granularity)
    source_json = os.path.splitext(model)[0] + '.json'
    if os.path.isfile(model) and not os.path.isfile(source_json):
        raise ValueError('%s has no json beside it (%s): prune takes a gluondet training output '
                         'or pruned model, described by its json' % (model, source_json))
    net, info = load_network(model)
    with open(source_json, encoding='utf-8') as f:
        described = json.load(f)
    arrays, channels = prune_net(net, info['data_shape'], normalizer, equalization, threshold,
                                 min_filters, granularity, excluded)
    params_path, json_path = _output_paths(output)
    if os.path.abspath(params_path) == os.path.abspath(model):
        raise ValueError('the output %s would overwrite the model' % params_path)
    before = count_params(net)
    after = sum(int(np.prod(a.shape)) for name, a in arrays.items()
                if name.rpartition('.')[0] in _layer_paths(net))
    meta = dict(described['meta'])
    table = dict((meta.get('pruned') or {}).get('channels') or {}, **channels)
    meta['pruned'] = {'channels': table}
    from ..engine.checkpoint import provenance  # the version and commit of every model file
    description = {k: v for k, v in described.items()
                   if k not in ('meta', 'metrics', 'epoch', 'iteration')}
    description.update(provenance(), meta=meta, prune={
        'source': os.path.abspath(model), 'normalizer': normalizer,
        'equalization_criterion': equalization, 'pruning_threshold': threshold,
        'min_num_filters': min_filters, 'pruning_granularity': granularity,
        'excluded_layers': list(excluded or ()), 'params_before': before,
        'params_after': after, 'layers_changed': len(channels)})
    os.makedirs(os.path.dirname(os.path.abspath(params_path)), exist_ok=True)
    atomic_save(lambda tmp: save_ndarrays(tmp, {k: mx.nd.array(v, dtype=v.dtype)
                                                for k, v in arrays.items()}), params_path)
    atomic_write(json_path, json.dumps(description, indent=1))
    log('pruned %s: %d layers changed, parameters %d -> %d (pruning ratio, pruned / original: '
        '%.4f); written to %s and %s' % (model, len(channels), before, after,
                                         after / max(before, 1), params_path, json_path))
    return {'params': params_path, 'json': json_path, 'params_before': before,
            'params_after': after, 'channels': channels}


def _layer_paths(net):
    return {path for path, block in named_blocks(net).items()
            if isinstance(block, (nn.Conv2D, nn.Dense)) or is_norm(block)}
