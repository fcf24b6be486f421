"""Pruned networks: a zoo network with some layers narrowed, described by a channel table.

``gluondet prune`` (:mod:`gluondet.tools.prune`) removes output channels of convolutions
and dense layers. What it removed is recorded as a *channel table*, ``{path: counts}``, one
entry per layer whose parameters changed shape, keyed by the layer's structural path (the
names of its parameters in a ``.params`` file, less ``.weight``)::

    {"features.backbone.stem.conv": {"channels": 24, "in_channels": 3, "groups": 1},
     "features.backbone.stem.bn": {"channels": 24},
     "class_head.convs.0": {"channels": 200, "in_channels": 176, "groups": 1}}

Convolutions and dense layers (``Conv2D``, ``Dense``) give ``channels`` (outputs),
``in_channels`` (all their inputs, as Gluon counts them) and, convolutions, ``groups``
(a depthwise convolution keeps one group per channel); norm layers (BatchNorm and its
synchronized kinds) give ``channels``. :func:`apply_channels` rebuilds such a network from
the zoo's: it replaces each listed layer by one of the new size, the same otherwise (kernel,
stride, activation, initializers, name prefix, so parameter names and exports are
unchanged; frozen parameters stay frozen). The weights are then loaded as usual.
"""
from mxnet import gluon
from mxnet.gluon import nn

__all__ = ['apply_channels', 'named_blocks', 'check_channels', 'is_norm', 'pruned_channels']

_NORM_PARAMS = ('gamma', 'beta', 'running_mean', 'running_var')


def named_blocks(net):
    """``{path: block}`` of every block under ``net`` (``net`` itself is ``''``), by the
    structural paths of its parameter names; a block reached twice keeps its first path."""
    found, seen = {}, set()

    def walk(block, path):
        if id(block) in seen:
            return
        seen.add(id(block))
        found[path] = block
        for key, child in block._children.items():     # pylint: disable=protected-access
            walk(child, path + '.' + key if path else key)
    walk(net, '')
    return found


def is_norm(block):
    """A BatchNorm-like block: per-channel gamma, beta and running statistics."""
    return isinstance(block, gluon.HybridBlock) and all(
        name in block._reg_params for name in _NORM_PARAMS)   # pylint: disable=protected-access


def check_channels(channels, where='channel table'):
    """Raise ValueError unless ``channels`` is ``{path: {'channels': n, ...}}`` of positive
    ints."""
    if not isinstance(channels, dict):
        raise ValueError('%s: expected an object {layer path: counts}, got %s'
                         % (where, type(channels).__name__))
    for path, counts in channels.items():
        ok = isinstance(counts, dict) and 'channels' in counts and set(counts) <= {
            'channels', 'in_channels', 'groups'} and all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0
                for v in counts.values())
        if not ok:
            raise ValueError('%s: layer %r: expected {"channels": n[, "in_channels": n, '
                             '"groups": n]} of positive ints, got %r' % (where, path, counts))


def apply_channels(net, channels):
    """Narrow the layers of ``net`` (built, not yet loaded) to the counts of a channel table.

    Parameters
    ----------
    net : HybridBlock
        A zoo network as ``get_model`` builds it.
    channels : dict
        The channel table (see the module docstring).

    Returns
    -------
    HybridBlock
        ``net``, changed in place; load its weights next.

    Raises
    ------
    ValueError
        A path names no layer of ``net``, or a layer that is not a convolution, dense or
        norm layer.
    """
    check_channels(channels)
    blocks = named_blocks(net)
    for path, counts in sorted(channels.items()):
        old = blocks.get(path)
        if old is None or not path:
            raise ValueError('the channel table names %r, which is not a layer of %s'
                             % (path, type(net).__name__))
        parent_path, _, key = path.rpartition('.')
        _replace(blocks[parent_path], key, _resized(old, path, counts))
    if hasattr(net, '_clear_cached_op'):
        net._clear_cached_op()      # pylint: disable=protected-access
    return net


def _replace(parent, key, new):
    """Put ``new`` in place of ``parent``'s child ``key`` (an attribute or a container slot)."""
    parent._children[key] = new     # pylint: disable=protected-access
    if getattr(parent, key, None) is not None and not key.isdigit():
        object.__setattr__(parent, key, new)


def _init(param):
    return param.init if param is not None else 'zeros'


def _resized(old, path, counts):
    """A block like ``old`` with the sizes ``counts``."""
    # pylint: disable=protected-access
    if isinstance(old, nn.Conv2D):
        kwargs = old._kwargs
        groups = counts.get('groups', kwargs['num_group'])
        new = nn.Conv2D(counts['channels'], kwargs['kernel'], groups=groups,
                        use_bias=not kwargs['no_bias'],
                        activation=old.act._act_type if old.act is not None else None,
                        weight_initializer=old.weight.init, bias_initializer=_init(old.bias),
                        in_channels=counts.get('in_channels', 0), prefix=old.prefix)
        new._kwargs = dict(kwargs, num_filter=counts['channels'], num_group=groups)
    elif isinstance(old, nn.Dense):
        new = nn.Dense(counts['channels'], use_bias=old.bias is not None, flatten=old._flatten,
                       activation=old.act._act_type if old.act is not None else None,
                       dtype=old.weight.dtype, weight_initializer=old.weight.init,
                       bias_initializer=_init(old.bias),
                       in_units=counts.get('in_channels', 0), prefix=old.prefix)
    elif is_norm(old) and set(counts) == {'channels'}:
        new = _norm_like(old, counts['channels'])
    else:
        raise ValueError('the channel table resizes %r, a %s: only convolutions, dense and '
                         'norm layers can be' % (path, type(old).__name__))
    for name, param in old._reg_params.items():
        twin = new._reg_params.get(name)
        if twin is not None:
            twin.grad_req, twin.lr_mult, twin.wd_mult = (param.grad_req, param.lr_mult,
                                                         param.wd_mult)
    return new


def _norm_like(old, channels):
    """A norm layer of ``old``'s class and settings over ``channels`` channels."""
    # pylint: disable=protected-access
    kwargs = old._kwargs
    options = dict(axis=kwargs.get('axis', 1), momentum=kwargs['momentum'],
                   epsilon=kwargs['eps'], center=True, scale=not kwargs.get('fix_gamma', False),
                   use_global_stats=kwargs.get('use_global_stats', False),
                   beta_initializer=old.beta.init, gamma_initializer=old.gamma.init,
                   running_mean_initializer=old.running_mean.init,
                   running_variance_initializer=old.running_var.init,
                   in_channels=channels, prefix=old.prefix)
    if 'ndev' in kwargs:            # MXNet's contrib SyncBatchNorm
        options.pop('axis')
        options['num_devices'] = kwargs['ndev']
    new = type(old)(**options)
    new._kwargs = dict(kwargs)
    return new


def pruned_channels(meta, source):
    """The channel table of a model description's ``meta`` (``meta.pruned.channels``), or None
    if the model is not pruned; ValueError naming ``source`` if it is malformed."""
    pruned = meta.get('pruned')
    if pruned is None:
        return None
    if not isinstance(pruned, dict) or 'channels' not in pruned:
        raise ValueError('%s: meta.pruned must be {"channels": {layer path: counts}}' % source)
    check_channels(pruned['channels'], '%s: meta.pruned.channels' % source)
    return pruned['channels']
