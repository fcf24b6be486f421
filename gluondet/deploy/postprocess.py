"""The post-processing kinds deploy knows: the one table export, comparison and the deployed
model's checks read.

A zoo network names what its inference does after the network body in its class attribute
``postprocess_kind`` (data, as its preprocessing is: :mod:`gluondet.data.preprocess`), and
an exported model records it in its metadata (``postprocess_kind``). Deploy looks the kind
up here, never at the network's class: a new network that ends as an existing kind exports
with no edit of deploy, and a kind not in :data:`KINDS` is refused with its name.

Each row holds what deploy needs of a kind, as data; the functions of a kind are registered
by kind in the modules that hold them (they import onnx, or this table, so it cannot import
them): its ONNX builder, ``(net, shape, symbolic, apply_nms) -> (graph, rows, props,
fields)``, in :data:`gluondet.deploy.onnx.GRAPHS` (the ONNX graph of the body and
post-processing, its rows ``K``, its metadata, and ``{name: shape after B x K}`` of its
outputs after ``ids``, ``scores`` and ``boxes``; without ``apply_nms``, up to the final NMS:
its candidates), and in
:data:`gluondet.deploy.compare.DETECTING` a function ``(net, x, class_std, max_gap)`` that
scales the predictors of a randomly initialized network so that it detects many overlapping
boxes (:func:`~gluondet.deploy.compare.detecting_random_weights`, which ``gluondet
benchmark`` uses for a zoo name without weights). The row:

- ``description``: what the graph computes after the body, for messages and configs;
- ``any_size``: whether its ONNX graph takes inputs of any height and width (the anchors
  cropped in the graph to each feature map) or only the size it was exported at;
- ``topk_settings``: ``{node name prefix: the setting behind its TopK}`` of the graph, which
  TensorRT's check names when a cut is over TensorRT's limit
  (:func:`~gluondet.deploy.tensorrt.check_tensorrt_limits`);
- ``has_nms``: whether it ends with an NMS (default true). False: its outputs are already the
  candidates of any NMS (CenterNet's heatmap peaks), ``--no-nms`` exports the same graph,
  and the NMS options run on the host over its outputs (:mod:`gluondet.deploy.nms`).
"""
import collections

__all__ = ['KINDS', 'Postprocess', 'postprocess_of', 'postprocess_from_metadata', 'by_kind']

Postprocess = collections.namedtuple('Postprocess', [
    'kind', 'description', 'any_size', 'topk_settings', 'has_nms'], defaults=[True])

_DETECTION_NMS = 'the detection NMS (set_nms: nms_topk, post_nms; -1 keeps every candidate'
_RCNN_TOPK = {
    'proposals': "the RPN's pre-NMS top-k (rpn_test_pre_nms, capped by the anchors of the input "
                 "size) or its post-NMS count (rpn_test_post_nms)",
    'postprocess': _DETECTION_NMS + ', classes x regions)'}

KINDS = {row.kind: row for row in [
    Postprocess(
        'softmax_nms',
        'softmax class scores (background first) at every anchor, boxes decoded from the '
        'anchors, NMS within each class over all anchors',
        any_size=False,     # the anchors are constants of the export's input size
        topk_settings={'postprocess': _DETECTION_NMS + ')'}),
    Postprocess(
        'sigmoid_topk_nms',
        'sigmoid class scores, the nms_topk best candidates of each pyramid level, boxes '
        'decoded from the anchors, NMS within each class',
        any_size=True,
        topk_settings={'postprocess': _DETECTION_NMS + '; the levels x nms_topk candidates '
                                      'are sorted together: set_nms(nms_topk=768) for its five '
                                      'levels)'}),
    Postprocess(
        'rcnn',
        'region proposals (decoded RPN anchors, NMS), ROI Align, the box head\'s softmax '
        'scores and class-specific boxes, NMS within each class',
        any_size=True,
        topk_settings=_RCNN_TOPK),
    Postprocess(
        'mask_rcnn',
        'the rcnn kind\'s detections, cut to the network\'s rcnn_max_dets; ROI Align of their '
        'boxes, the mask head, each detection\'s own class map, sigmoid: masks (B x K x M x '
        'M, M the metadata\'s mask_size) over each box',
        any_size=True,
        topk_settings=dict(_RCNN_TOPK, postprocess=_DETECTION_NMS + ', classes x regions; '
                           'at most rcnn_max_dets)')),
    Postprocess(
        'yolo3',
        'boxes decoded from each cell and anchor, scores sigmoid(objectness) x sigmoid(class), '
        'the best candidates of each output, NMS within each class (GluonCV\'s YOLOv3)',
        any_size=True,      # the cell grids are made from each map's shape in the graph
        topk_settings={'postprocess': _DETECTION_NMS + '; each output keeps max(nms_topk, '
                                      'post_nms) candidates)'}),
    Postprocess(
        'center_net',
        'sigmoid heatmap, its peaks (places equal to the 3x3 max pool of their neighbourhood: '
        'CenterNet\'s NMS), the topk best of classes x places, boxes from the size and offset '
        'maps at each peak (GluonCV\'s CenterNet)',
        any_size=True,      # everything from the maps' shapes in the graph
        topk_settings={'postprocess': 'topk (the zoo name\'s 40 VOC, 100 COCO and custom; '
                                      'capped by set_nms: nms_topk, post_nms)'},
        has_nms=False),
]}


def by_kind(table, kind):
    """A decorator putting a function of post-processing kind ``kind`` in ``table``."""
    def register(function):
        table[kind] = function
        return function
    return register


def _lookup(kind, source):
    if kind not in KINDS:
        raise ValueError('%s: post-processing kind %r is not one deploy knows (%s)'
                         % (source, kind, ', '.join(sorted(KINDS))))
    return KINDS[kind]


def postprocess_of(net):
    """The :class:`Postprocess` row of a network's ``postprocess_kind``.

    Raises
    ------
    ValueError
        Naming the network's class and its kind (or its lack of one) and the known kinds.
    """
    name = type(net).__name__
    kind = getattr(net, 'postprocess_kind', None)
    if kind is None:
        raise ValueError('%s declares no postprocess_kind: deploy needs one of %s (a class '
                         'attribute naming what its inference does after the network body)'
                         % (name, ', '.join(sorted(KINDS))))
    return _lookup(kind, name)


def postprocess_from_metadata(meta, source):
    """The :class:`Postprocess` row an exported model's metadata names, or None for a model
    exported before it was recorded; ValueError naming ``source`` for an unknown kind."""
    kind = meta.get('postprocess_kind')
    return None if kind is None else _lookup(kind, source)
