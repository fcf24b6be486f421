"""Load GluonCV 0.10 Faster R-CNN ``.params`` files into gluondet's :class:`FasterRCNN`.

GluonCV's C4 networks keep the backbone as plain sequentials (``features.0`` =
conv1, ``features.1`` = bn1, ``features.4..6`` = layer1..3, ``top_features.0`` =
layer4); its FPN networks wrap backbone and pyramid in one SymbolBlock, whose keys
are flat symbol names, ``{net}`` being ``resnetv1b``, ``resnetv1d`` (the deep stem and
average-pool downsampling of ``resnet101_v1d``) or ``mobilenet{n}`` (``n`` any instance
number). The table, gluondet key (all under the network) on the right:

=============================================  ==============================================
GluonCV key                                    gluondet key
=============================================  ==============================================
``features.0.*`` / ``features.1.*``            ``backbone.conv1.*`` / ``backbone.bn1.*`` (C4;
                                               v1d: ``features.0.{0,1,3,4,6}.*`` ->
                                               ``backbone.conv1.{0,1,3,4,6}.*``)
``features.{4,5,6}.*``, ``top_features.0.*``   ``backbone.layer{1,2,3}.*``, ``backbone.layer4.*``
``features.resnetv1b_conv0_weight``            ``backbone.conv1.weight`` (FPN; ``batchnorm0``
                                               -> ``bn1``)
``features.resnetv1d_conv{k}_weight``          ``backbone.conv1.{3k}.weight``, k = 0-2
``features.resnetv1d_batchnorm{k}_*``          ``backbone.conv1.{3k+1}.*`` (k = 0, 1),
                                               ``backbone.bn1.*`` (k = 2)
``features.{net}_layers{s}_conv{k}_*``         ``backbone.layer{s}.{b}.conv{j+1}.*`` with
                                               ``k = b * convs_per_block + j`` (``batchnorm``
                                               -> ``bn``)
``features.{net}_down{s}_conv0_*``             the 1x1 convolution of
                                               ``backbone.layer{s}.0.downsample`` (index 0,
                                               v1d 1; ``batchnorm0``: its norm, 1 or 2)
``features.mobilenet{n}_conv{k}_weight``       ``backbone.stem.conv.weight`` (k = 0),
                                               ``backbone.blocks.{i}.depthwise.conv.weight``
                                               (k = 2i + 1), ``....pointwise.conv.weight``
                                               (k = 2i + 2); ``batchnorm{k}``: their ``bn``
``features.P{i}_conv_lat_*`` / ``P{i}_conv1_*``  ``fpn.laterals.{i-2}.*`` / ``fpn.outputs.{i-2}.*``
``features.P6_conv1_*``                        ``fpn.p6.*``
``features.P5_lat_bn_*``                       ``fpn.lateral_norms.3.*`` (``fpn_syncbn``, as the
                                               next three; ``moving_*`` -> ``running_*``)
``features.P{i}_conv1_bn_*`` (i < 5)           ``fpn.lateral_norms.{i-2}.*``
``features.P{i}_bn_*``                         ``fpn.output_norms.{i-2}.*``
``features.P6_pre_bn_*``                       ``fpn.p6_norm.*``
``features.{net}_*syncbatchnorm*``             read as ``batchnorm`` (``fpn_syncbn`` backbones)
``rpn.conv1.0``, ``rpn.score``, ``rpn.loc``     ``rpn_head.*`` (FPN: ``rpn.rpn_head.*``)
``rpn.anchor_generator[.{l}].anchors``         ``anchor_generators.{l}.anchors``
``box_features.*``, ``class_predictor.*``,     the same
``box_predictor.*``
=============================================  ==============================================

In a ResNet every convolution is bias-free, so a symbol key names a convolution exactly
when it ends in ``_weight``. Every key must be matched both ways, or loading fails listing
what did not match. The ``fpn_syncbn`` FPN's norm layers (and those of
``mask_rcnn_fpn_syncbn_mobilenet1_0_coco``'s FPN, whose convolutions keep their bias) are
``mx.sym.contrib.SyncBatchNorm`` at its defaults, whose ``fix_gamma`` ignores the stored
gamma: it is loaded as ones (gluondet's gamma starts at 1 and trains).
"""
import re

from .backbones import MobileNet, ResNetV1b
from .gluoncv_compat import _describe, _mobilenet_symbol_pairs

__all__ = ['is_gluoncv_rcnn', 'rcnn_key_table', 'convert_faster_rcnn']

_C4_STAGES = {'conv1': 'features.0', 'bn1': 'features.1', 'layer1': 'features.4',
              'layer2': 'features.5', 'layer3': 'features.6', 'layer4': 'top_features.0'}
# (deep stem, average-pool downsampling) -> GluonCV's symbol prefix
_RESNET_SYMBOLS = {(False, False): 'resnetv1b', (True, True): 'resnetv1d'}
_INSTANCE = re.compile(r'^features\.mobilenet\d+_')
_SYNC_NORM = re.compile(r'^(features\.(?:resnetv1[bd]|mobilenet)_(?:\w+_)?)syncbatchnorm')


def is_gluoncv_rcnn(arrays):
    """Whether these parameter names are those of a GluonCV R-CNN file."""
    return (any(k.startswith('rpn.') for k in arrays)
            and any(k.startswith(('features.', 'top_features.')) for k in arrays))


def _resnet_symbol_key(key, backbone):
    """GluonCV's symbol name of a ResNet backbone parameter (FPN networks)."""
    net = _RESNET_SYMBOLS.get((backbone.deep_stem, backbone.avg_down))
    if net is None:
        raise ValueError('GluonCV has no FPN R-CNN on a ResNetV1b with deep_stem=%s, avg_down=%s'
                         % (backbone.deep_stem, backbone.avg_down))
    parts = key.split('.')
    param = parts[-1]
    kind = 'conv' if param == 'weight' else 'batchnorm'
    if parts[0] in ('conv1', 'bn1'):
        if len(parts) == 3:               # the deep stem's layers 0, 1, 3, 4, 6
            index = int(parts[1]) // 3
        else:
            index = 2 if backbone.deep_stem and parts[0] == 'bn1' else 0
        return '%s_%s%d_%s' % (net, kind, index, param)
    stage, block = int(parts[0][len('layer'):]), int(parts[1])
    if parts[2] == 'downsample':
        return '%s_down%d_%s0_%s' % (net, stage, kind, param)
    convs = 3 if hasattr(backbone.layer1[0], 'conv3') else 2
    index = block * convs + int(parts[2][-1]) - 1
    return '%s_layers%d_%s%d_%s' % (net, stage, kind, index, param)


def _symbol_backbone_keys(backbone):
    """``{our key in the backbone: GluonCV's symbol name}`` (FPN networks; MobileNet's without
    its instance number)."""
    ours = backbone._collect_params_with_prefix()  # pylint: disable=protected-access
    if isinstance(backbone, MobileNet):
        table = {o[len('backbone.'):]: g for g, o in _mobilenet_symbol_pairs()}
        return {key: table[key] for key in ours}
    if isinstance(backbone, ResNetV1b):
        return {key: _resnet_symbol_key(key, backbone) for key in ours}
    raise TypeError('GluonCV has no FPN R-CNN on a %s backbone' % type(backbone).__name__)


def _symbol_norm_key(name, param):
    """A symbol norm layer's key (aux states ``moving_*``, gluon's ``running_*``)."""
    return 'features.%s_%s' % (name, param.replace('running_', 'moving_'))


def _fpn_key(group, tail, levels):
    if group == 'p6':
        return 'features.P6_conv1_' + tail
    if group == 'p6_norm':
        return _symbol_norm_key('P6_pre_bn', tail)
    level, _, name = tail.partition('.')
    level = int(level)
    if group == 'lateral_norms':   # GluonCV names the top lateral's norm apart
        return _symbol_norm_key('P%d_lat_bn' % (level + 2) if level == levels - 1
                                else 'P%d_conv1_bn' % (level + 2), name)
    if group == 'output_norms':
        return _symbol_norm_key('P%d_bn' % (level + 2), name)
    kind = 'conv_lat' if group == 'laterals' else 'conv1'
    return 'features.P%d_%s_%s' % (level + 2, kind, name)


def _gluoncv_key(ours, fpn, levels, backbone_keys):
    head, _, rest = ours.partition('.')
    if head == 'backbone':
        if fpn:
            return 'features.' + backbone_keys[rest]
        stage, _, tail = rest.partition('.')
        return '%s.%s' % (_C4_STAGES[stage], tail)
    if head == 'fpn':
        group, _, tail = rest.partition('.')
        return _fpn_key(group, tail, levels)
    if head == 'rpn_head':
        return ('rpn.rpn_head.' if fpn else 'rpn.') + rest
    if head == 'anchor_generators':
        level, _, name = rest.partition('.')
        return 'rpn.anchor_generator.%s%s' % ('%s.' % level if fpn else '', name)
    return ours


def rcnn_key_table(net):
    """``{GluonCV key: gluondet key}`` for every parameter of the :class:`FasterRCNN` ``net``
    (MobileNet's symbol names without their instance number: ``features.mobilenet_conv0_weight``
    for ``features.mobilenet0_conv0_weight``)."""
    fpn = net.fpn is not None
    if fpn:
        backbone_keys = _symbol_backbone_keys(net.backbone)
        levels = len(net.fpn.laterals)
    elif isinstance(net.backbone, ResNetV1b):
        backbone_keys, levels = None, 0
    else:
        raise TypeError('GluonCV has no C4 R-CNN on a %s backbone' % type(net.backbone).__name__)
    return {_gluoncv_key(ours, fpn, levels, backbone_keys): ours
            for ours in net._collect_params_with_prefix()}


def _normalized(key):
    """A file key as the table names it: no MobileNet instance number, ``batchnorm`` for the
    ``syncbatchnorm`` of GluonCV's syncbn backbones."""
    return _SYNC_NORM.sub(r'\1batchnorm', _INSTANCE.sub('features.mobilenet_', key))


def convert_faster_rcnn(arrays, net, source):
    """Rename a GluonCV Faster R-CNN file's arrays to ``net``'s; ValueError on any mismatch."""
    table = rcnn_key_table(net)
    named = {_normalized(k): k for k in arrays}
    unknown = sorted(k for n, k in named.items() if n not in table)
    missing = sorted(ours for theirs, ours in table.items() if theirs not in named)
    if unknown or missing or len(named) < len(arrays):
        raise ValueError('%s is a GluonCV R-CNN file that does not fit this %s network: %s' % (
            source, 'FPN' if net.fpn is not None else 'C4',
            _describe([('file keys without a match', unknown),
                       ('network parameters not in the file', missing),
                       ('file keys read as the same name',
                        sorted(set(arrays) - set(named.values())))])))
    converted = {table[n]: arrays[k] for n, k in named.items()}
    if net.fpn is not None and net.fpn.output_norms is not None:
        # GluonCV's FPN norms fix gamma at 1 (fix_gamma) whatever its file holds; ours too
        for key in converted:
            if key.startswith('fpn.') and key.endswith('.gamma'):
                converted[key] = converted[key].ones_like()
    return converted
