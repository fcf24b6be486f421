"""Load GluonCV 0.10 YOLOv3 ``.params`` files into gluondet's :class:`~.yolo3.YOLOV3`, and
GluonCV's ImageNet ``darknet53`` file into :class:`~.backbones.DarkNet`.

GluonCV cuts its backbone's flat ``features`` sequential into three ``stages`` (DarkNet-53:
layers 0-14, 15-23, 24-28; MobileNet: 0-32, 33-68, 69-80, the layers up to the separable
blocks 4, 10 and 12); gluondet keeps the backbone whole and returns the three maps. The
head has GluonCV's structure, so its keys are GluonCV's:

=============================================  ==============================================
GluonCV key                                    gluondet key
=============================================  ==============================================
``stages.{s}.{j}.*`` (DarkNet-53)              ``backbone.features.{start_s + j}.*``
``stages.{s}.{j}.*`` (MobileNet)               the layer ``features.{start_s + j}`` of
                                               GluonCV's ImageNet MobileNet file
                                               (:func:`~.gluoncv_compat.backbone_key_table`)
``yolo_blocks.*``, ``transitions.*``,          the same
``yolo_outputs.{i}.prediction.*``,
``yolo_outputs.{i}.anchors``
``yolo_outputs.{i}.offsets``                   none: gluondet makes the grid of each map's
                                               own size (GluonCV's constant is 128 x 128)
=============================================  ==============================================

Every key must be matched both ways, or loading fails listing what did not match.
"""
from .backbones import DarkNet, MobileNet
from .gluoncv_compat import _describe, backbone_key_table, load_arrays, read_params

__all__ = ['is_gluoncv_yolo', 'yolo_key_table', 'convert_yolo', 'load_gluoncv_darknet']


def is_gluoncv_yolo(arrays):
    """Whether these parameter names are those of a GluonCV YOLOv3 file."""
    return (any(k.startswith('stages.') for k in arrays)
            and any(k.startswith('yolo_outputs.') for k in arrays))


def _stage_of(index, ends):
    """``(stage, index in the stage)`` of the flat layer ``index``, stages ending at ``ends``."""
    start = 0
    for stage, end in enumerate(ends):
        if index <= end:
            return stage, index - start
        start = end + 1
    raise ValueError('layer %d is past the last stage (ends %s)' % (index, ends))


def _flat_backbone_keys(net):
    """``{GluonCV flat key (features.{k}.*): gluondet key}`` of the backbone, and the flat
    indices where GluonCV's stages end."""
    # pylint: disable=protected-access
    backbone = net.backbone
    if isinstance(backbone, DarkNet):
        table = {'features.' + key: 'backbone.features.' + key
                 for key in backbone.features._collect_params_with_prefix()}
        return table, backbone.stage_ends
    if isinstance(backbone, MobileNet):
        # GluonCV's flat MobileNet: a 3-layer stem, then 6 layers per separable block
        ends = tuple(3 + 6 * block + 5 for block in backbone._out_blocks)
        return backbone_key_table(net), ends
    raise TypeError('GluonCV has no YOLOv3 on a %s backbone' % type(backbone).__name__)


def yolo_key_table(net):
    """``{GluonCV key: gluondet key}`` for every parameter of the YOLOv3 ``net``."""
    flat, ends = _flat_backbone_keys(net)
    table = {}
    for key, ours in flat.items():
        _, index, rest = key.split('.', 2)
        stage, local = _stage_of(int(index), ends)
        table['stages.%d.%d.%s' % (stage, local, rest)] = ours
    for key in net._collect_params_with_prefix():  # pylint: disable=protected-access
        if not key.startswith('backbone.'):
            table[key] = key
    return table


def convert_yolo(arrays, net, source):
    """Rename the arrays of a GluonCV YOLOv3 file to ``net``'s names; ValueError on any
    mismatch."""
    table = yolo_key_table(net)
    converted, unknown = {}, []
    for key, value in arrays.items():
        if key.startswith('yolo_outputs.') and key.endswith('.offsets'):
            continue
        if key in table:
            converted[table[key]] = value
        else:
            unknown.append(key)
    missing = sorted(set(table.values()) - set(converted))
    if unknown or missing:
        raise ValueError('%s is a GluonCV YOLOv3 file that does not fit this %s network: %s' % (
            source, type(net.backbone).__name__,
            _describe([('file keys without a match', sorted(unknown)),
                       ('network parameters not in the file', missing)])))
    return converted


def load_gluoncv_darknet(backbone, filename, ctx=None):
    """Load GluonCV's ImageNet ``darknet53`` ``.params`` into a :class:`DarkNet` (its
    ``features`` keys are the same; the classifier ``output.*`` is left out). Any other
    mismatch raises ValueError listing it, and nothing is loaded."""
    arrays = {k: v for k, v in read_params(filename).items() if not k.startswith('output.')}
    load_arrays(backbone, arrays, '%s (for DarkNet)' % filename, ctx=ctx)
