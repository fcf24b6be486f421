"""MXNet symbol export of a detector, and the network parts that ONNX export converts."""
import contextlib

import mxnet as mx
import numpy as np
from mxnet import autograd
from mxnet.gluon.parameter import DeferredInitializationError

from ..files import atomic_save_all, save_ndarrays, writer

__all__ = ['check_float32_process', 'export_symbol', 'ssd_body', 'rcnn_body', 'RCNNBody',
           'input_shape']


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


def export_symbol(net, prefix, data_shape, batch_size=1, with_files=()):
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
    with_files : sequence of (callable, str)
        More files, ``(write, path)``, written with the two, all or none (see
        :func:`~gluondet.files.atomic_save_all`).

    Returns
    -------
    (str, str)
        The symbol and parameter file names.
    """
    check_float32_process('export_symbol')
    net.hybridize()
    with autograd.predict_mode():
        net(mx.nd.zeros(input_shape(data_shape, batch_size), ctx=_context(net)))
    files = prefix + '-symbol.json', prefix + '-0000.params'
    atomic_save_all(list(zip(_export_writers(net), files)) + list(with_files))
    return files


def _export_writers(net):
    """Writers of the two files of ``net.export`` (symbol, ``arg:``/``aux:`` parameters), in
    Python (see :mod:`gluondet.files`)."""
    symbol = net._cached_graph[1]
    kinds = dict.fromkeys(symbol.list_arguments(), 'arg')
    kinds.update(dict.fromkeys(symbol.list_auxiliary_states(), 'aux'))
    arrays = {'%s:%s' % (kinds[name], name): param._reduce()
              for name, param in net.collect_params().items() if name in kinds}
    return writer(symbol.tojson()), lambda path: save_ndarrays(path, arrays)


def _map_shapes(net, data_shape):
    """Shapes of the network's feature maps (one per anchor generator) at ``data_shape``."""
    _, shapes, _ = mx.sym.Group(net.features(mx.sym.var('data', dtype='float32'))).infer_shape(
        data=input_shape(data_shape))
    return [tuple(shape) for shape in shapes]


def _map_anchors(net, map_shapes):
    """Each anchor generator's output (numpy) on a map of its shape."""
    ctx = _context(net)
    return [generate(mx.nd.zeros(shape, ctx=ctx)).asnumpy()
            for shape, generate in zip(map_shapes, net.anchor_generators)]


def _params(net, symbols, data_shape, map_shapes=None):
    """The arguments and auxiliary states of ``symbols`` other than their inputs (a forward
    at ``data_shape`` first if the network was initialized but never run); with
    ``map_shapes``, each anchor generator's constant cropped to its map at that size (the
    graph crops it to the map of its input, as the generator does: inputs larger than
    ``data_shape`` have no anchors)."""
    names = set()
    for symbol in symbols:
        names |= set(symbol.list_arguments()) | set(symbol.list_auxiliary_states())
    try:
        params = {p.name: p.data() for p in net.collect_params().values() if p.name in names}
    except DeferredInitializationError:     # a forward sets the deferred shapes
        with autograd.predict_mode():
            net(mx.nd.zeros(input_shape(data_shape), ctx=_context(net)))
        params = {p.name: p.data() for p in net.collect_params().values() if p.name in names}
    for generate, shape in zip(net.anchor_generators, map_shapes or ()):
        anchors = generate.anchors.data()
        params[generate.anchors.name] = anchors[:, :, :shape[2], :shape[3]].copy()
    return params


@contextlib.contextmanager
def _anchor_symbols(net):
    """A list filled with each anchor generator's output while symbols are traced."""
    found = []
    hooks = [generate.register_forward_hook(lambda block, inputs, output: found.append(output))
             for generate in net.anchor_generators]
    try:
        yield found
    finally:
        for hook in hooks:
            hook.detach()


def ssd_body(net, data_shape, anchor_outputs=False):
    """A single-stage detector (SSD, RetinaNet) up to its post-processing: the symbol of its
    training-mode outputs.

    Parameters
    ----------
    net : :class:`gluondet.model_zoo.single_stage.SingleStageDetector`
        Initialized.
    data_shape : int or (int, int)
        The input height and width the anchors are computed for (with
        ``anchor_outputs``, the largest input the symbol takes).
    anchor_outputs : bool
        Also output each map's anchors, ``anchors0``, ``anchors1``, ... ``1 x A_l x 4``
        (center format), cropped in the graph to the map, as the network crops them: the
        symbol then takes any input size up to ``data_shape``.

    Returns
    -------
    symbol : Symbol
        Input ``data``, outputs ``cls_preds`` ``B x A x (C + 1)`` (logits, background
        first; RetinaNet ``B x A x C``) and ``box_preds`` ``B x A x 4`` (encoded
        offsets), as in training (then the anchors, if asked).
    params : dict of str to NDArray
        The arguments and auxiliary states of ``symbol`` other than ``data``.
    anchors : numpy.ndarray
        ``1 x A x 4`` anchors in center format at ``data_shape``.
    level_sizes : list of int
        Anchors of each feature map at ``data_shape``, in order.
    """
    data = mx.sym.var('data', dtype='float32')
    # Tracing with symbols runs nothing, so the training-mode branch leaves the
    # BatchNorm statistics alone.
    with autograd.train_mode(), _anchor_symbols(net) as level_anchors:
        cls_preds, box_preds, _ = net(data)
    outputs = [mx.sym.identity(cls_preds, name='cls_preds'),
               mx.sym.identity(box_preds, name='box_preds')]
    if anchor_outputs:
        outputs += [mx.sym.identity(a, name='anchors%d' % i) for i, a in enumerate(level_anchors)]
    symbol = mx.sym.Group(outputs)
    map_shapes = _map_shapes(net, data_shape)
    anchors = _map_anchors(net, map_shapes)
    params = _params(net, [symbol], data_shape, map_shapes if anchor_outputs else None)
    return symbol, params, np.concatenate(anchors, axis=1), [a.shape[1] for a in anchors]


class RCNNBody:
    """The two parts of a Faster R-CNN that mx2onnx converts, and what lies between them.

    Attributes
    ----------
    rpn : Symbol
        Input ``data`` ``B x 3 x H x W``; outputs ``rpn_scores`` ``B x A x 1`` (objectness
        logits of all levels), ``rpn_offsets`` ``B x A x 4``, ``anchors`` ``1 x A x 4``
        (corner; the generators' constants cropped to the maps, as in the network) and the
        maps ROI Align pools from, ``roi_map0`` ... (C4: one; FPN: P2-P5).
    head : Symbol
        Input ``pooled`` ``R x C x h x w`` (the ROI Align output); outputs ``cls_preds``
        ``R x (classes + 1)`` logits and ``box_preds`` ``R x (4 * classes)`` offsets.
    params : dict of str to NDArray
        The arguments and auxiliary states of both, other than the inputs.
    num_anchors : int
        ``A`` at the ``data_shape`` of :func:`rcnn_body`, the largest input.
    map_shapes : list of tuple
        Shape of each ROI map at batch 1.
    """

    def __init__(self, rpn, head, params, num_anchors, map_shapes):
        self.rpn, self.head, self.params = rpn, head, params
        self.num_anchors, self.map_shapes = num_anchors, map_shapes


def rcnn_body(net, data_shape):
    """A Faster R-CNN cut where ONNX export builds the region stages in standard ops.

    The proposals (decoding, clipping, NMS), ROI Align and the post-processing stay out:
    :func:`gluondet.deploy.onnx.export_onnx` writes them itself.

    Parameters
    ----------
    net : :class:`~gluondet.model_zoo.faster_rcnn.FasterRCNN`
        Initialized.
    data_shape : int or (int, int)
        The largest input height and width the parts take (the anchors go that far).

    Returns
    -------
    RCNNBody
    """
    data, pooled = mx.sym.var('data', dtype='float32'), mx.sym.var('pooled', dtype='float32')
    num_maps = len(net.roi_extractor.strides)
    # in the network's name scope, as its own forward: operators outside its blocks (the
    # concatenations, C4's pooling and reshape) are named after it, not by the process's
    # counters, so the ONNX names are the same in every process (onnx._canonical_names)
    with autograd.predict_mode(), net.name_scope():
        maps = net.features(data)
        heads = [net.rpn_head(feature) for feature in maps]
        anchors = [generate(feature) for feature, generate in zip(maps, net.anchor_generators)]
        box_feat = net.box_head(mx.sym, pooled)
        cls_preds, box_preds = net.class_predictor(box_feat), net.box_predictor(box_feat)
        joined = [mx.sym.concat(*[s for s, _ in heads], dim=1),
                  mx.sym.concat(*[o for _, o in heads], dim=1), mx.sym.concat(*anchors, dim=1)]
    rpn = mx.sym.Group(
        [mx.sym.identity(value, name=name)
         for value, name in zip(joined, ('rpn_scores', 'rpn_offsets', 'anchors'))]
        + [mx.sym.identity(m, name='roi_map%d' % i) for i, m in enumerate(maps[:num_maps])])
    head = mx.sym.Group([mx.sym.identity(cls_preds, name='cls_preds'),
                         mx.sym.identity(box_preds, name='box_preds')])
    map_shapes = _map_shapes(net, data_shape)
    params = _params(net, [rpn, head], data_shape, map_shapes)
    num_anchors = sum(shape[2] * shape[3] * generate.num_anchors
                      for shape, generate in zip(map_shapes, net.anchor_generators))
    return RCNNBody(rpn, head, params, num_anchors, map_shapes[:num_maps])
