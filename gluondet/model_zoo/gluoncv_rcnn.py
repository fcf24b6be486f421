"""Load GluonCV 0.10 Faster R-CNN ``.params`` files into gluondet's :class:`FasterRCNN`.

GluonCV's C4 networks keep the backbone as plain sequentials (``features.0`` =
conv1, ``features.1`` = bn1, ``features.4..6`` = layer1..3, ``top_features.0`` =
layer4); its FPN networks wrap backbone and pyramid in one SymbolBlock, whose keys
are flat symbol names. The table, gluondet key (all under the network) on the right:

=============================================  ==============================================
GluonCV key                                    gluondet key
=============================================  ==============================================
``features.0.*`` / ``features.1.*``            ``backbone.conv1.*`` / ``backbone.bn1.*`` (C4)
``features.{4,5,6}.*``, ``top_features.0.*``   ``backbone.layer{1,2,3}.*``, ``backbone.layer4.*``
``features.resnetv1b_conv0_weight``            ``backbone.conv1.weight`` (FPN; ``batchnorm0``
                                               -> ``bn1``)
``features.resnetv1b_layers{s}_conv{k}_*``     ``backbone.layer{s}.{b}.conv{j+1}.*`` with
                                               ``k = b * convs_per_block + j`` (``batchnorm``
                                               -> ``bn``)
``features.resnetv1b_down{s}_conv0_*``         ``backbone.layer{s}.0.downsample.0.*``
                                               (``batchnorm0`` -> ``downsample.1``)
``features.P{i}_conv_lat_*`` / ``P{i}_conv1_*``  ``fpn.laterals.{i-2}.*`` / ``fpn.outputs.{i-2}.*``
``features.P6_conv1_*``                        ``fpn.p6.*``
``features.P5_lat_bn_*``                       ``fpn.lateral_norms.3.*`` (``fpn_syncbn``, as the
                                               next three; ``moving_*`` -> ``running_*``)
``features.P{i}_conv1_bn_*`` (i < 5)           ``fpn.lateral_norms.{i-2}.*``
``features.P{i}_bn_*``                         ``fpn.output_norms.{i-2}.*``
``features.P6_pre_bn_*``                       ``fpn.p6_norm.*``
``features.resnetv1b_*syncbatchnorm*``         read as ``batchnorm`` (``fpn_syncbn`` backbones)
``rpn.conv1.0``, ``rpn.score``, ``rpn.loc``     ``rpn_head.*`` (FPN: ``rpn.rpn_head.*``)
``rpn.anchor_generator[.{l}].anchors``         ``anchor_generators.{l}.anchors``
``box_features.*``, ``class_predictor.*``,     the same
``box_predictor.*``
=============================================  ==============================================

Every key must be matched both ways, or loading fails listing what did not match. The
``fpn_syncbn`` FPN's norm layers are ``mx.sym.contrib.SyncBatchNorm`` at its defaults, whose
``fix_gamma`` ignores the stored gamma: it is loaded as ones (gluondet's gamma starts at 1
and trains).
"""
import re

from .gluoncv_compat import _describe

__all__ = ['is_gluoncv_rcnn', 'rcnn_key_table', 'convert_faster_rcnn']

_C4_STAGES = {'conv1': 'features.0', 'bn1': 'features.1', 'layer1': 'features.4',
              'layer2': 'features.5', 'layer3': 'features.6', 'layer4': 'top_features.0'}


def is_gluoncv_rcnn(arrays):
    """Whether these parameter names are those of a GluonCV R-CNN file."""
    return (any(k.startswith('rpn.') for k in arrays)
            and any(k.startswith(('features.', 'top_features.')) for k in arrays))


def _symbol_backbone_key(key, convs_per_block):
    """GluonCV's symbol name of a backbone parameter (FPN networks)."""
    parts = key.split('.')
    if parts[0] in ('conv1', 'bn1'):
        kind = 'conv' if parts[0] == 'conv1' else 'batchnorm'
        return 'resnetv1b_%s0_%s' % (kind, parts[1])
    stage, block = int(parts[0][len('layer'):]), int(parts[1])
    if parts[2] == 'downsample':
        kind = 'conv' if parts[3] == '0' else 'batchnorm'
        return 'resnetv1b_down%d_%s0_%s' % (stage, kind, parts[4])
    match = re.fullmatch(r'(conv|bn)(\d)', parts[2])
    kind = 'conv' if match.group(1) == 'conv' else 'batchnorm'
    index = block * convs_per_block + int(match.group(2)) - 1
    return 'resnetv1b_layers%d_%s%d_%s' % (stage, kind, index, parts[3])


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


def _gluoncv_key(ours, fpn, convs_per_block, levels=4):
    head, _, rest = ours.partition('.')
    if head == 'backbone':
        if fpn:
            return 'features.' + _symbol_backbone_key(rest, convs_per_block)
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
    """``{GluonCV key: gluondet key}`` for every parameter of the :class:`FasterRCNN` ``net``."""
    fpn = net.fpn is not None
    convs = 3 if hasattr(net.backbone.layer1[0], 'conv3') else 2
    levels = len(net.fpn.laterals) if fpn else 0
    return {_gluoncv_key(ours, fpn, convs, levels): ours
            for ours in net._collect_params_with_prefix()}


def convert_faster_rcnn(arrays, net, source):
    """Rename a GluonCV Faster R-CNN file's arrays to ``net``'s; ValueError on any mismatch."""
    table = rcnn_key_table(net)
    # GluonCV's syncbn backbones name their (gluon) norm layers syncbatchnorm{k}
    arrays = {re.sub(r'^(features\.resnetv1b_(?:\w+_)?)syncbatchnorm', r'\1batchnorm', k): v
              for k, v in arrays.items()}
    unknown = sorted(k for k in arrays if k not in table)
    missing = sorted(ours for theirs, ours in table.items() if theirs not in arrays)
    if unknown or missing:
        raise ValueError('%s is a GluonCV R-CNN file that does not fit this %s network: %s' % (
            source, 'FPN' if net.fpn is not None else 'C4',
            _describe([('file keys without a match', unknown),
                       ('network parameters not in the file', missing)])))
    converted = {table[k]: v for k, v in arrays.items()}
    if net.fpn is not None and net.fpn.output_norms is not None:
        # GluonCV's FPN norms fix gamma at 1 (fix_gamma) whatever its file holds; ours too
        for key in converted:
            if key.startswith('fpn.') and key.endswith('.gamma'):
                converted[key] = converted[key].ones_like()
    return converted
