"""NVIDIA ODTK (retinanet-examples) RetinaNet checkpoints as gluondet networks, without torch.

ODTK's ``Model.save`` writes ``torch.save({'backbone': [name], 'classes': count,
'state_dict': ..., 'ratios': ..., 'scales': ..., 'iteration', 'optimizer', 'scheduler'})``.
:func:`load_odtk` reads it with :func:`~gluondet.model_zoo.torch_file.load_torch_file` and
builds the same network: ODTK's ``ResNet{18,34,50,101,152}FPN`` is torchvision's ResNet
(gluondet's :class:`ResNetV1b`) under the pyramid RetinaNet uses (P6 from C5), and its
heads are RetinaNet's. The keys, by rule:

=============================================  ==========================================
ODTK key                                       gluondet key
=============================================  ==========================================
``backbones.B.features.<layer>``                ``features.backbone.<layer>`` (batch norms'
                                               ``weight``/``bias``: ``gamma``/``beta``)
``backbones.B.lateral{3,4,5}``                  ``features.fpn.laterals.{0,1,2}``
``backbones.B.smooth{3,4,5}``                   ``features.fpn.outputs.{0,1,2}``
``backbones.B.pyramid{6,7}``                    ``features.fpn.p{6,7}``
``cls_head.{0,2,4,6}`` / ``cls_head.8``         ``class_head.convs.{0-3}`` / ``class_predictors.0``
``box_head.{0,2,4,6}`` / ``box_head.8``         ``box_head.convs.{0-3}`` / ``box_predictors.0``
=============================================  ==========================================

The classifier (``features.fc``) and ``num_batches_tracked`` are left out; anything else
must match both ways. ODTK's inference is kept as its CUDA kernels compute it: anchors
``x * stride + generate_anchors(stride, ratios, scales)`` in its pixel convention (a box's
width is ``x2 - x1 + 1``), offsets decoded without a size limit, each box clamped to the
padded input (``x1, y1 >= 0``, ``x2, y2`` within ``map size * stride``), the 1000 best
scores above 0.05 of each level, per-class NMS at 0.5, the 100 best. Boxes come out as
ODTK writes them to COCO json: ``(x1, y1, x2 + 1, y2 + 1)`` of its inclusive corners,
whose overlaps (gluondet's, without the + 1) are the ones ODTK's NMS computes. Inputs are
prepared as ODTK's: RGB / 255, ImageNet mean and std, shorter side 800 (longer at most
1333), padded to a multiple of 128.
"""
import re

import numpy as np
import mxnet as mx

from ..nn import FPN, grid_anchors
from .backbones import ResNetV1b
from .gluoncv_compat import load_arrays
from .registry import COCO_CLASSES
from .retinanet import RetinaNet, RetinaNetFeatures
from .torch_file import load_torch_file

__all__ = ['ODTK_BACKBONES', 'ODTKRetinaNet', 'odtk_anchors', 'odtk_key_table', 'load_odtk']

ODTK_BACKBONES = {'ResNet18FPN': 18, 'ResNet34FPN': 34, 'ResNet50FPN': 50,
                  'ResNet101FPN': 101, 'ResNet152FPN': 152}

_RULES = [(re.compile(pattern), replacement) for pattern, replacement in (
    (r'^backbones\.\w+\.features\.((?:.*\.)?(?:bn\d|downsample\.1))\.weight$',
     r'features.backbone.\1.gamma'),
    (r'^backbones\.\w+\.features\.((?:.*\.)?(?:bn\d|downsample\.1))\.bias$',
     r'features.backbone.\1.beta'),
    (r'^backbones\.\w+\.features\.', 'features.backbone.'),
    (r'^backbones\.\w+\.lateral([345])\.', lambda m: 'features.fpn.laterals.%d.' % (int(m[1]) - 3)),
    (r'^backbones\.\w+\.smooth([345])\.', lambda m: 'features.fpn.outputs.%d.' % (int(m[1]) - 3)),
    (r'^backbones\.\w+\.pyramid([67])\.', r'features.fpn.p\1.'),
    (r'^(cls|box)_head\.8\.', lambda m: '%s_predictors.0.' % ('class' if m[1] == 'cls' else 'box')),
    (r'^(cls|box)_head\.([0246])\.', lambda m: '%s_head.convs.%d.' % (
        'class' if m[1] == 'cls' else 'box', int(m[2]) // 2)))]
_SKIPPED = re.compile(r'(\.num_batches_tracked$|^backbones\.\w+\.features\.fc\.)')


class ODTKRetinaNet(RetinaNet):
    """:class:`RetinaNet` decoding as ODTK does: each level's boxes are clamped to the padded
    input before NMS (ODTK's ``decode``); otherwise the same network and outputs.

    ODTK's clamp has no counterpart in the exported graphs, so deploy refuses this network
    (``postprocess_kind`` None) rather than export other detections.
    """

    postprocess_kind = None

    def detect(self, F, cls_preds, box_preds, anchors):
        boxes = []
        for box_pred, anchor, stride in zip(box_preds, anchors, self.strides):
            x1, y1, x2, y2 = F.split(self.box_decoder(box_pred, anchor), axis=-1,
                                     num_outputs=4)
            # the map's size x stride, from its last anchor centre (ODTK's: stride/2 + 0.5 in)
            centres = F.slice_axis(anchor, axis=-1, begin=0, end=2).reshape((-1, 2))
            far = (F.max(centres, axis=0) + (stride / 2. - 0.5)).reshape((1, 1, 2))
            x2 = F.broadcast_minimum(x2, F.slice_axis(far, axis=-1, begin=0, end=1))
            y2 = F.broadcast_minimum(y2, F.slice_axis(far, axis=-1, begin=1, end=2))
            boxes.append(F.concat(F.relu(x1), F.relu(y1), x2, y2, dim=-1))
        return self.postprocess(*([F.sigmoid(c) for c in cls_preds] + boxes))


def odtk_anchors(stride, ratios, scales, height, width):
    """ODTK's anchors of a ``height x width`` map in gluondet's centre format.

    ODTK places ``generate_anchors``' corners ``0.5 * (stride -+ size)`` (sizes
    ``stride * scale / sqrt(ratio)`` by ``stride * scale * sqrt(ratio)``, scales slowest) at
    ``x * stride`` and decodes from the centre ``x1 + 0.5 * w`` and size ``w = x2 - x1 + 1``;
    these are those centres and sizes (float32 as ODTK's), as :func:`grid_anchors` lays out.
    """
    ratio = np.tile(np.asarray(ratios, np.float32), len(scales))
    scale = np.repeat(np.asarray(scales, np.float32), len(ratios))
    base_w = np.sqrt(np.float32(stride) * np.float32(stride) / ratio)
    sizes = np.stack([base_w, base_w * ratio], axis=1) * scale[:, None]
    lo = np.float32(0.5) * (np.float32(stride) - sizes)
    hi = np.float32(0.5) * (np.float32(stride) + sizes)
    wh = hi - lo + 1
    centre = lo + np.float32(0.5) * wh                 # the same for every anchor of a cell
    offsets = centre[0, ::-1] / stride                  # (y, x) in cells
    return grid_anchors([tuple(s) for s in wh], stride, height, width, offsets)


def odtk_key_table(keys):
    """``{ODTK key: gluondet key}`` of ODTK's state-dict ``keys`` (skipped keys left out)."""
    table = {}
    for key in keys:
        if _SKIPPED.search(key):
            continue
        for pattern, replacement in _RULES:
            if pattern.search(key):
                table[key] = pattern.sub(replacement, key, count=1)
                break
        else:
            table[key] = key        # reported by load_arrays as not in the network
    return table


def _field(checkpoint, name, path):
    if name not in checkpoint:
        raise ValueError('%s: no %r in the checkpoint (not an ODTK RetinaNet model)'
                         % (path, name))
    return checkpoint[name]


def load_odtk(path, classes=None, ctx=mx.cpu()):
    """Build the network of the ODTK checkpoint ``path`` (``.pth``) with its weights.

    Parameters
    ----------
    path : str
        A file ODTK's ``Model.save`` wrote (``odtk train`` and its published models).
    classes : sequence of str or None
        Names of its classes, in ODTK's order (the sorted category ids of its COCO
        json); None: COCO's names for 80 classes, ``class0, class1, ...`` otherwise.
    ctx : Context

    Returns
    -------
    ODTKRetinaNet
        With ``short=800, max_size=1333`` as ODTK's ``infer``; any half-precision
        weights are loaded as float32. ValueError names the file and what does not fit:
        another backbone (MobileNetV2FPN, ResNeXt, rotated boxes), keys or shapes.
    """
    checkpoint = load_torch_file(path)
    if not isinstance(checkpoint, dict) or 'state_dict' not in checkpoint:
        raise ValueError('%s: no state_dict in the file (not an ODTK model checkpoint)' % path)
    backbones = _field(checkpoint, 'backbone', path)
    backbones = backbones if isinstance(backbones, list) else [backbones]
    if len(backbones) != 1 or backbones[0] not in ODTK_BACKBONES:
        raise ValueError('%s: backbone %s; gluondet reads ODTK checkpoints of %s'
                         % (path, '+'.join(map(str, backbones)), ', '.join(ODTK_BACKBONES)))
    if 'angles' in checkpoint:
        raise ValueError('%s: a rotated-box ODTK model; gluondet reads axis-aligned ones'
                         % path)
    count = int(_field(checkpoint, 'classes', path))
    if classes is None:
        classes = COCO_CLASSES if count == len(COCO_CLASSES) else \
            ['class%d' % i for i in range(count)]
    if len(classes) != count:
        raise ValueError('%s: a model of %d classes, %d names given' % (path, count, len(classes)))
    ratios = [float(r) for r in checkpoint.get('ratios', (1.0, 2.0, 0.5))]
    scales = [float(s) for s in checkpoint.get('scales', [4 * 2 ** (i / 3) for i in range(3)])]
    backbone = ResNetV1b(ODTK_BACKBONES[backbones[0]], out_stages=(2, 3, 4),
                         norm_kwargs={'use_global_stats': True})
    features = RetinaNetFeatures(backbone, FPN(256, num_inputs=3, p6='c5', p7=True))
    net = ODTKRetinaNet(features, classes, ratios=ratios, scales=scales, anchor_base=1,
                        short=800, max_size=1333)
    net.box_decoder.clip = None          # ODTK's exp() of the size offsets has no limit
    arrays = {}
    for key, ours in odtk_key_table(checkpoint['state_dict']).items():
        arrays[ours] = mx.nd.array(checkpoint['state_dict'][key], dtype='float32')
    for i, generator in enumerate(net.anchor_generators):
        height, width = generator.anchors.shape[2:4]
        arrays['anchor_generators.%d.anchors' % i] = mx.nd.array(
            odtk_anchors(generator.step, ratios, scales, height, width)[None, None])
    load_arrays(net, arrays, '%s (ODTK %s)' % (path, backbones[0]), ctx=ctx)
    return net
