"""MXNet symbol export of a detector, and the network parts that ONNX export converts."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon.parameter import DeferredInitializationError

__all__ = ['check_float32_process', 'export_symbol', 'ssd_body', 'rcnn_body', 'RCNNBody', 'input_shape']


def input_shape(data_shape, batch_size=1):
    """``(batch_size, 3, height, width)`` from ``data_shape`` (an int or ``(height, width)``)."""
    height, width = (data_shape, data_shape) if isinstance(data_shape, int) else data_shape
    return (int(batch_size), 3, int(height), int(width))


def _context(net):
    for param in net.collect_params().values():
        try:
            return param.list_ctx()[0]
        except RuntimeError:  # not initialized yet
            continue
    return mx.cpu()


def check_float32_process(what):
    """Raise if MXNet's AMP runs in this process: ``what`` (an export) would record its
    low-precision casts in the graph."""
    from mxnet.contrib.amp import amp
    if amp._amp_initialized:
        raise RuntimeError('%s: AMP (%s) converts every operator of this process, so the '
                           'exported graph would not be float32; export from a new process '
                           '(gluondet export ...)'
                           % (what, getattr(amp, '_gluondet_dtype', 'float16 or bfloat16')))


def export_symbol(net, prefix, data_shape, batch_size=1):
    """Write ``{prefix}-symbol.json`` and ``{prefix}-0000.params`` of the inference graph.

    ``net`` is hybridized (default flags) and run once in inference mode on a
    ``batch_size x 3 x H x W`` batch of zeros; ``gluon.SymbolBlock.imports(json,
    ['data'], params)`` then gives the same ``(ids, scores, boxes)`` as ``net``, for
    any batch size (and for a Faster R-CNN, any input size). The post-processing
    (MXNet's ``box_nms``; a Faster R-CNN's proposals and ROI Align too) is part of the graph.

    Parameters
    ----------
    net : HybridBlock
        An initialized detector: :class:`~gluondet.model_zoo.ssd.SSD` or
        :class:`~gluondet.model_zoo.faster_rcnn.FasterRCNN`.
    prefix : str
        Path prefix of the two files.
    data_shape : int or (int, int)
        Input height and width.
    batch_size : int
        Batch of the tracing forward.

    Returns
    -------
    (str, str)
        The symbol and parameter file names.
    """
    check_float32_process('export_symbol')
    net.hybridize()
    with autograd.predict_mode():
        net(mx.nd.zeros(input_shape(data_shape, batch_size), ctx=_context(net)))
    net.export(prefix)
    return prefix + '-symbol.json', prefix + '-0000.params'


def ssd_body(net, data_shape):
    """A single-stage detector (SSD, RetinaNet) up to its post-processing: the symbol of its
    training-mode outputs.

    Parameters
    ----------
    net : :class:`gluondet.model_zoo.single_stage.SingleStageDetector`
        Initialized.
    data_shape : int or (int, int)
        The input height and width the anchors are computed for.

    Returns
    -------
    symbol : Symbol
        Input ``data``, outputs ``cls_preds`` ``B x A x (C + 1)`` (logits, background
        first; RetinaNet ``B x A x C``) and ``box_preds`` ``B x A x 4`` (encoded
        offsets), as in training.
    params : dict of str to NDArray
        The arguments and auxiliary states of ``symbol`` other than ``data``.
    anchors : numpy.ndarray
        ``1 x A x 4`` anchors in center format, constant for this input size.
    level_sizes : list of int
        Anchors of each feature map, in order.
    """
    data = mx.sym.var('data', dtype='float32')
    # Tracing with symbols runs nothing, so the training-mode branch leaves the
    # BatchNorm statistics alone.
    with autograd.train_mode():
        cls_preds, box_preds, anchors = net(data)
    outputs = [mx.sym.identity(cls_preds, name='cls_preds'),
               mx.sym.identity(box_preds, name='box_preds')]
    block = gluon.SymbolBlock(outputs + [anchors], data, params=net.collect_params())
    with autograd.predict_mode():
        anchors = block(mx.nd.zeros(input_shape(data_shape), ctx=_context(net)))[2]
    symbol = mx.sym.Group(outputs)
    names = set(symbol.list_arguments()) | set(symbol.list_auxiliary_states())
    params = {p.name: p.data() for p in net.collect_params().values() if p.name in names}
    _, map_shapes, _ = mx.sym.Group(net.features(data)).infer_shape(
        data=input_shape(data_shape))
    level_sizes = [shape[2] * shape[3] * generator.num_anchors
                   for shape, generator in zip(map_shapes, net.anchor_generators)]
    return symbol, params, anchors.asnumpy(), level_sizes


class RCNNBody:
    """The two parts of a Faster R-CNN that mx2onnx converts, and what lies between them.

    Attributes
    ----------
    rpn : Symbol
        Input ``data`` ``B x 3 x H x W``; outputs ``rpn_scores`` ``B x A x 1`` (objectness
        logits of all levels), ``rpn_offsets`` ``B x A x 4`` and the maps ROI Align pools
        from, ``roi_map0`` ... (C4: one; FPN: P2-P5).
    head : Symbol
        Input ``pooled`` ``R x C x h x w`` (the ROI Align output); outputs ``cls_preds``
        ``R x (classes + 1)`` logits and ``box_preds`` ``R x (4 * classes)`` offsets.
    params : dict of str to NDArray
        The arguments and auxiliary states of both, other than the inputs.
    anchors : numpy.ndarray
        ``1 x A x 4`` corner anchors of all levels, constant for this input size.
    map_shapes : list of tuple
        Shape of each ROI map at batch 1.
    """

    def __init__(self, rpn, head, params, anchors, map_shapes):
        self.rpn, self.head, self.params = rpn, head, params
        self.anchors, self.map_shapes = anchors, map_shapes


def rcnn_body(net, data_shape):
    """A Faster R-CNN cut where ONNX export builds the region stages in standard ops.

    The proposals (decoding, clipping, NMS), ROI Align and the post-processing stay out:
    :func:`gluondet.deploy.onnx.export_onnx` writes them itself.

    Parameters
    ----------
    net : :class:`~gluondet.model_zoo.faster_rcnn.FasterRCNN`
        Initialized.
    data_shape : int or (int, int)
        The input height and width the anchors are computed for.

    Returns
    -------
    RCNNBody
    """
    data, pooled = mx.sym.var('data', dtype='float32'), mx.sym.var('pooled', dtype='float32')
    num_maps = len(net.roi_extractor.strides)
    with autograd.predict_mode():
        maps = net.features(data)
        heads = [net.rpn_head(feature) for feature in maps]
        box_feat = net.box_head(mx.sym, pooled)
        cls_preds, box_preds = net.class_predictor(box_feat), net.box_predictor(box_feat)
    rpn = mx.sym.Group(
        [mx.sym.identity(mx.sym.concat(*[s for s, _ in heads], dim=1), name='rpn_scores'),
         mx.sym.identity(mx.sym.concat(*[o for _, o in heads], dim=1), name='rpn_offsets')]
        + [mx.sym.identity(m, name='roi_map%d' % i) for i, m in enumerate(maps[:num_maps])])
    head = mx.sym.Group([mx.sym.identity(cls_preds, name='cls_preds'),
                         mx.sym.identity(box_preds, name='box_preds')])
    _, map_shapes, _ = mx.sym.Group(maps).infer_shape(data=input_shape(data_shape))
    ctx = _context(net)
    anchors = [generate(mx.nd.zeros(shape, ctx=ctx)).asnumpy()
               for shape, generate in zip(map_shapes, net.anchor_generators)]
    names = set()
    for symbol in (rpn, head):
        names |= set(symbol.list_arguments()) | set(symbol.list_auxiliary_states())
    try:
        params = {p.name: p.data() for p in net.collect_params().values() if p.name in names}
    except DeferredInitializationError:     # initialized, never run: a forward sets the shapes
        with autograd.predict_mode():
            net(mx.nd.zeros(input_shape(data_shape), ctx=ctx))
        params = {p.name: p.data() for p in net.collect_params().values() if p.name in names}
    return RCNNBody(rpn, head, params, np.concatenate(anchors, axis=1),
                    [tuple(shape) for shape in map_shapes[:num_maps]])
