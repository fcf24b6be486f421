"""Load GluonCV 0.10 ``.params`` files into gluondet networks.

GluonCV's parameter names follow its implementation: its MobileNet and ResNet
SSDs wrap the backbone in a SymbolBlock, so their keys are the flat symbol
names (``features.mobilenet0_conv3_weight``), its extra layers are raw
symbols (``features.expand_trans_bn0_moving_mean``) and its ImageNet
backbones are plain sequentials (``features.4.0.body.3.weight``). gluondet
names parameters by structure instead, and this module holds the explicit
tables between the two:

=====================================  =============================================
GluonCV key (prefix ``features.``)     gluondet key (prefix ``features.``)
=====================================  =============================================
``mobilenetN_conv{k}_weight``          ``backbone.stem.conv.weight`` (k = 0),
                                       ``backbone.blocks.{i}.depthwise.conv.weight`` (k = 2i + 1),
                                       ``backbone.blocks.{i}.pointwise.conv.weight`` (k = 2i + 2)
``mobilenetN_batchnorm{k}_*``          the same layers' ``.bn.*``
``resnetv1N_conv0_weight``             ``backbone.conv1.weight`` (``batchnorm0`` -> ``bn1``)
``resnetv1N_stage{s}_conv{k}_*``       ``backbone.stages.{s-1}.{b}.conv1|conv2|conv3|proj_conv.*``
                                       (block 0 uses k = 0-3 with 3 the projection,
                                       block b > 0 uses k = 3b + 1 .. 3b + 3)
``expand_trans_conv{i}`` / ``_bn{i}``  ``extras.{i}.conv1`` / ``bn1``
``expand_conv{i}`` / ``expand_bn{i}``  ``extras.{i}.conv2`` / ``bn2``
``stages.{s}.{2j}.*`` (VGG, s < 5)     ``backbone.stage{s+1}.{j}.*``
``stages.5.0.*`` / ``stages.5.2.*``    ``backbone.fc6.*`` / ``backbone.fc7.*``
``norm4.scale`` / ``init_scale``       ``backbone.conv4_3_norm.scale`` / ``backbone.init_scale``
``extras.{i}.0.*`` / ``extras.{i}.2.*``  ``extras.{i}.conv1.*`` / ``extras.{i}.conv2.*`` (VGG)
=====================================  =============================================

Outside ``features``: ``class_predictors.{i}.predictor.*`` ->
``class_predictors.{i}.*`` (and ``box_predictors``); anchors keep their key.
Symbol batch norms store ``moving_mean``/``moving_var``, gluondet
``running_mean``/``running_var``. Every key must be matched both ways, or
loading fails listing what did not match.

GluonCV's ImageNet ``resnet*_v1b`` and ``resnet101_v1d`` files need no table:
:class:`ResNetV1b` has GluonCV's structure, so their keys (``conv1.weight``,
``layer2.0.downsample.1.gamma``; v1d ``conv1.3.weight``, ``layer2.0.downsample.2.gamma``)
are its own; :func:`load_gluoncv_v1b` only leaves out the classifier ``fc.*``.
:func:`load_gluoncv_base` loads those or a MobileNet file (``features.{3k}.weight``,
``features.{3k+1}.*``: the k-th convolution and norm layer in the order above) into a
bare backbone, as the R-CNN networks hold theirs.
"""
import re

import mxnet as mx

from .backbones import MobileNet, ResNetV1, ResNetV1b, VGGAtrous
from ..metadata import training_meta

__all__ = ['load_arrays', 'read_params', 'is_gluoncv_ssd', 'ssd_key_table', 'convert_ssd',
           'backbone_key_table', 'load_gluoncv_backbone', 'load_gluoncv_v1b', 'load_gluoncv_base']

_BN = ('gamma', 'beta', 'running_mean', 'running_var')
_SYM_BN = {'gamma': 'gamma', 'beta': 'beta', 'moving_mean': 'running_mean',
           'moving_var': 'running_var'}
_SYMBOL_PREFIX = re.compile(r'^features\.\w*?(mobilenet|resnetv1)\d+_')
_LISTED = 12


def read_params(filename):
    """The ``{name: NDArray}`` dict saved in ``filename``; ValueError if it is not one."""
    try:
        arrays = mx.nd.load(filename)
    except mx.base.MXNetError as err:
        raise ValueError('%s: not an MXNet parameter file (%s)'
                         % (filename, str(err).strip().splitlines()[0])) from None
    if not isinstance(arrays, dict):
        raise ValueError('%s: holds a list of arrays, not named parameters' % filename)
    return arrays


def _whose(source):
    """``a trained NETWORK`` when the json the engine writes beside ``source`` names it."""
    try:
        meta = training_meta(source) if str(source).endswith('.params') else None
    except ValueError:
        meta = None
    return 'a trained %s' % meta['network'] if meta else 'another network'


def load_arrays(block, arrays, source, ctx=None, allow_missing=False, ignore_extra=False,
                cast_dtype=False, dtype_source='current'):
    """Load ``{structural name: NDArray}`` into ``block``, checking names and shapes first.

    Like ``Block.load_parameters`` but all mismatches are reported at once,
    naming ``source``.
    """
    params = block._collect_params_with_prefix()  # pylint: disable=protected-access
    # a file sharing less than half the parameters is another network's (another detector's
    # checkpoint): its groups say so better than hundreds of names
    theirs, ours = ({name.split('.')[0] for name in names} for names in (arrays, params))
    if not (allow_missing or ignore_extra) and 2 * len(set(arrays) & set(params)) < len(params):
        raise ValueError('%s holds the weights of %s, not of this %s: its parameter groups '
                         'are %s, this network\'s %s' % (
                             source, _whose(source), type(block).__name__,
                             ', '.join(sorted(theirs)), ', '.join(sorted(ours))))
    missing = [] if allow_missing else sorted(set(params) - set(arrays))
    extra = [] if ignore_extra else sorted(set(arrays) - set(params))
    wrong = ['%s (file %s, network %s)' % (name, arrays[name].shape, params[name].shape)
             for name in sorted(set(arrays) & set(params))
             if not _shape_fits(params[name].shape, arrays[name].shape)]
    if missing or extra or wrong:
        raise ValueError('%s does not match the network: %s' % (source, _describe(
            [('missing from the file', missing), ('not in the network', extra),
             ('wrong shape', wrong)])))
    for name, value in arrays.items():
        if name in params:
            params[name]._load_init(  # pylint: disable=protected-access
                value, ctx, cast_dtype=cast_dtype, dtype_source=dtype_source)


def is_gluoncv_ssd(arrays):
    """Whether these parameter names are those of a GluonCV SSD."""
    return any(k.startswith(('class_predictors.', 'box_predictors.')) and '.predictor.' in k
               for k in arrays)


def ssd_key_table(net):
    """``{GluonCV key: gluondet key}`` for every parameter of the SSD ``net``.

    GluonCV keys of symbol backbones are given without their instance prefix
    (``features.mobilenet_conv0_weight`` for ``features.mobilenet0_conv0_weight``).
    """
    table = {}
    backbone = net.features.backbone
    if isinstance(backbone, VGGAtrous):
        for gluoncv, ours in _vgg_pairs(len(net.features.extras)):
            table['features.' + gluoncv] = 'features.' + ours
    else:
        pairs = _mobilenet_symbol_pairs() if isinstance(backbone, MobileNet) \
            else _resnet_symbol_pairs(backbone)
        for gluoncv, ours in pairs + _expander_pairs(len(net.features.extras)):
            table['features.' + gluoncv] = 'features.' + ours
    for i in range(len(net.class_predictors)):
        for head in ('class_predictors', 'box_predictors'):
            for kind in ('weight', 'bias'):
                table['%s.%d.predictor.%s' % (head, i, kind)] = '%s.%d.%s' % (head, i, kind)
        table['anchor_generators.%d.anchors' % i] = 'anchor_generators.%d.anchors' % i
    return table


def convert_ssd(arrays, net, source):
    """Rename the arrays of a GluonCV SSD file to ``net``'s names; ValueError on any mismatch."""
    table = ssd_key_table(net)
    converted, unknown = {}, []
    for key, value in arrays.items():
        ours = table.get(_SYMBOL_PREFIX.sub(r'features.\1_', key))
        if ours is None:
            unknown.append(key)
        else:
            converted[ours] = value
    missing = sorted(set(table.values()) - set(converted))
    if unknown or missing:
        raise ValueError('%s is a GluonCV SSD file that does not fit this %s network: %s' % (
            source, type(net.features.backbone).__name__,
            _describe([('file keys without a match', sorted(unknown)),
                       ('network parameters not in the file', missing)])))
    return converted


def backbone_key_table(features):
    """``{GluonCV ImageNet-file key: key in the SSD features block}`` of its backbone."""
    backbone = features.backbone
    if isinstance(backbone, VGGAtrous):
        pairs = _vgg_pairs(len(features.extras))
    elif isinstance(backbone, MobileNet):
        pairs = [(g, 'backbone.' + o) for g, o in _mobilenet_imagenet_pairs()]
    elif isinstance(backbone, ResNetV1):
        pairs = [(g, 'backbone.' + o) for g, o in _resnet_imagenet_pairs(backbone)]
    else:
        raise TypeError('no GluonCV weights for backbone %s' % type(backbone).__name__)
    return dict(pairs)


def load_gluoncv_backbone(features, filename, ctx=None):
    """Load a GluonCV ImageNet ``.params`` file into the backbone of an SSD features block.

    The classifier (``output.*``) and the layers of a backbone cut short (a MobileNet
    returning an earlier block) are skipped; the extra SSD layers (and VGG's
    L2-norm scale and input scale, which GluonCV's file may lack) keep their
    initialization. Any other mismatch raises ValueError listing it.
    """
    arrays = read_params(filename)
    table = backbone_key_table(features)
    built = set(features._collect_params_with_prefix())
    cut = {k for k, ours in table.items() if ours not in built}   # layers past the last output
    arrays = {k: v for k, v in arrays.items() if k not in cut}
    table = {k: ours for k, ours in table.items() if k not in cut}
    optional = {ours for ours in table.values()
                if ours.startswith('extras.') or ours.endswith(('.conv4_3_norm.scale',
                                                                '.init_scale'))}
    unknown = sorted(k for k in arrays if k not in table and not k.startswith('output.'))
    converted = {table[k]: v for k, v in arrays.items() if k in table}
    missing = sorted(set(table.values()) - set(converted) - optional)
    if unknown or missing:
        raise ValueError('%s does not fit backbone %s: %s' % (
            filename, type(features.backbone).__name__,
            _describe([('file keys without a match', unknown),
                       ('backbone parameters not in the file', missing)])))
    load_arrays(features, converted, filename, ctx=ctx, allow_missing=True)


def load_gluoncv_v1b(backbone, filename, ctx=None):
    """Load a GluonCV ImageNet ``resnet*_v1b`` ``.params`` file into a :class:`ResNetV1b`.

    Every key but the classifier's (``fc.*``) must be a parameter of ``backbone``
    with the same shape, and every parameter must be in the file; otherwise
    ValueError lists all that did not match and nothing is loaded.
    """
    if not isinstance(backbone, ResNetV1b):
        raise TypeError('load_gluoncv_v1b loads ResNetV1b backbones, not %s'
                        % type(backbone).__name__)
    arrays = {k: v for k, v in read_params(filename).items() if not k.startswith('fc.')}
    variant = [name for name, used in (('deep stem', backbone.deep_stem),
                                       ('avg_down', backbone.avg_down)) if used]
    load_arrays(backbone, arrays, '%s (for ResNetV1b-%d%s)' % (
        filename, backbone.num_layers, ' with ' + ' and '.join(variant) if variant else ''),
        ctx=ctx)


def load_gluoncv_base(backbone, filename, ctx=None):
    """Load a GluonCV ImageNet ``.params`` file into a bare backbone (not inside a network).

    A :class:`ResNetV1b` (``resnet*_v1b``, ``resnet101_v1d``) loads as in
    :func:`load_gluoncv_v1b`; a :class:`MobileNet` (``mobilenet1.0`` ...) through the
    table above, less the classifier ``output.*`` and the layers of blocks it does not
    build. Any other mismatch raises ValueError listing it, and nothing is loaded.
    """
    if isinstance(backbone, ResNetV1b):
        load_gluoncv_v1b(backbone, filename, ctx)
        return
    if not isinstance(backbone, MobileNet):
        raise TypeError('no GluonCV ImageNet file loads into a bare %s'
                        % type(backbone).__name__)
    arrays = read_params(filename)
    built = set(backbone._collect_params_with_prefix())  # pylint: disable=protected-access
    pairs = _mobilenet_imagenet_pairs()
    table = {k: ours for k, ours in pairs if ours in built}
    cut = {k for k, ours in pairs if ours not in built}
    unknown = sorted(k for k in arrays
                     if k not in table and k not in cut and not k.startswith('output.'))
    missing = sorted(ours for k, ours in table.items() if k not in arrays)
    if unknown or missing:
        raise ValueError('%s does not fit backbone MobileNet: %s' % (filename, _describe(
            [('file keys without a match', unknown),
             ('backbone parameters not in the file', missing)])))
    load_arrays(backbone, {ours: arrays[k] for k, ours in table.items()}, filename, ctx=ctx)


def _mobilenet_layers():
    """Our ConvBNReLU layers of MobileNet in GluonCV's numbering order."""
    layers = ['stem']
    for i in range(13):
        layers += ['blocks.%d.depthwise' % i, 'blocks.%d.pointwise' % i]
    return layers


def _mobilenet_imagenet_pairs():
    """(GluonCV ImageNet key, our key in the backbone) of every MobileNet parameter."""
    pairs = []
    for k, layer in enumerate(_mobilenet_layers()):
        pairs.append(('features.%d.weight' % (3 * k), layer + '.conv.weight'))
        pairs += [('features.%d.%s' % (3 * k + 1, name), '%s.bn.%s' % (layer, name))
                  for name in _BN]
    return pairs


def _mobilenet_symbol_pairs():
    pairs = []
    for k, layer in enumerate(_mobilenet_layers()):
        pairs.append(('mobilenet_conv%d_weight' % k, 'backbone.%s.conv.weight' % layer))
        pairs += [('mobilenet_batchnorm%d_%s' % (k, name), 'backbone.%s.bn.%s' % (layer, name))
                  for name in _BN]
    return pairs


def _resnet_block_layers(backbone):
    """(stage, block, GluonCV index in the stage, our conv, our bn, has bias) per convolution."""
    rows = []
    for s, stage in enumerate(backbone.stages, start=1):
        for b in range(len(stage)):
            names = [('conv1', 'bn1', True), ('conv2', 'bn2', False), ('conv3', 'bn3', True)]
            first = 0 if b == 0 else 3 * b + 1
            if b == 0:
                names.append(('proj_conv', 'proj_bn', False))
            rows += [(s, b, first + j, conv, bn, bias) for j, (conv, bn, bias) in enumerate(names)]
    return rows


def _resnet_symbol_pairs(backbone):
    pairs = [('resnetv1_conv0_weight', 'backbone.conv1.weight')]
    pairs += [('resnetv1_batchnorm0_%s' % n, 'backbone.bn1.%s' % n) for n in _BN]
    for s, b, k, conv, bn, bias in _resnet_block_layers(backbone):
        ours = 'backbone.stages.%d.%d.' % (s - 1, b)
        gluoncv = 'resnetv1_stage%d_' % s
        pairs.append((gluoncv + 'conv%d_weight' % k, ours + conv + '.weight'))
        if bias:
            pairs.append((gluoncv + 'conv%d_bias' % k, ours + conv + '.bias'))
        pairs += [(gluoncv + 'batchnorm%d_%s' % (k, n), ours + bn + '.' + n) for n in _BN]
    return pairs


def _resnet_imagenet_pairs(backbone):
    body = {'conv1': 0, 'bn1': 1, 'conv2': 3, 'bn2': 4, 'conv3': 6, 'bn3': 7}
    pairs = [('features.0.weight', 'conv1.weight')]
    pairs += [('features.1.%s' % n, 'bn1.%s' % n) for n in _BN]
    for s, b, _, conv, bn, bias in _resnet_block_layers(backbone):
        ours = 'stages.%d.%d.' % (s - 1, b)
        block = 'features.%d.%d.' % (s + 3, b)
        conv_key = block + ('downsample.0' if conv == 'proj_conv' else 'body.%d' % body[conv])
        bn_key = block + ('downsample.1' if bn == 'proj_bn' else 'body.%d' % body[bn])
        pairs.append((conv_key + '.weight', ours + conv + '.weight'))
        if bias:
            pairs.append((conv_key + '.bias', ours + conv + '.bias'))
        pairs += [('%s.%s' % (bn_key, n), '%s%s.%s' % (ours, bn, n)) for n in _BN]
    return pairs


def _expander_pairs(num_extras):
    pairs = []
    for i in range(num_extras):
        for gluoncv, conv, bn in (('expand_trans_', 'conv1', 'bn1'), ('expand_', 'conv2', 'bn2')):
            pairs.append(('%sconv%d_weight' % (gluoncv, i), 'extras.%d.%s.weight' % (i, conv)))
            pairs += [('%sbn%d_%s' % (gluoncv, i, sym), 'extras.%d.%s.%s' % (i, bn, ours))
                      for sym, ours in _SYM_BN.items()]
    return pairs


def _vgg_pairs(num_extras):
    pairs = [('init_scale', 'backbone.init_scale'),
             ('norm4.scale', 'backbone.conv4_3_norm.scale')]
    for s, convs in enumerate((2, 2, 3, 3, 3)):
        for j in range(convs):
            pairs += [('stages.%d.%d.%s' % (s, 2 * j, p), 'backbone.stage%d.%d.%s' % (s + 1, j, p))
                      for p in ('weight', 'bias')]
    for index, name in ((0, 'fc6'), (2, 'fc7')):
        pairs += [('stages.5.%d.%s' % (index, p), 'backbone.%s.%s' % (name, p))
                  for p in ('weight', 'bias')]
    for i in range(num_extras):
        for index, conv in ((0, 'conv1'), (2, 'conv2')):
            pairs += [('extras.%d.%d.%s' % (i, index, p), 'extras.%d.%s.%s' % (i, conv, p))
                      for p in ('weight', 'bias')]
    return pairs


def _shape_fits(expected, saved):
    return len(expected) == len(saved) and all(e in (0, s) for e, s in zip(expected, saved))


def _describe(groups):
    parts = []
    for title, names in groups:
        if names:
            shown = ', '.join(names[:_LISTED])
            more = ' and %d more' % (len(names) - _LISTED) if len(names) > _LISTED else ''
            parts.append('%s (%d): %s%s' % (title, len(names), shown, more))
    return '; '.join(parts)
