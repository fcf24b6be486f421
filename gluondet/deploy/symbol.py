"""MXNet symbol export of a detector, and the network body that ONNX export converts."""
import mxnet as mx
from mxnet import autograd, gluon

__all__ = ['export_symbol', 'ssd_body', 'input_shape']


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


def export_symbol(net, prefix, data_shape, batch_size=1):
    """Write ``{prefix}-symbol.json`` and ``{prefix}-0000.params`` of the inference graph.

    ``net`` is hybridized (default flags) and run once in inference mode on a
    ``batch_size x 3 x H x W`` batch of zeros; ``gluon.SymbolBlock.imports(json,
    ['data'], params)`` then gives the same ``(ids, scores, boxes)`` as ``net``, for
    any batch size. The post-processing (MXNet's ``box_nms``) is part of the graph.

    Parameters
    ----------
    net : HybridBlock
        An initialized detector, for example :class:`gluondet.model_zoo.ssd.SSD`.
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
    net.hybridize()
    with autograd.predict_mode():
        net(mx.nd.zeros(input_shape(data_shape, batch_size), ctx=_context(net)))
    net.export(prefix)
    return prefix + '-symbol.json', prefix + '-0000.params'


def ssd_body(net, data_shape):
    """An SSD up to its post-processing: the symbol of its training-mode outputs.

    Parameters
    ----------
    net : :class:`gluondet.model_zoo.ssd.SSD`
        An initialized SSD.
    data_shape : int or (int, int)
        The input height and width the anchors are computed for.

    Returns
    -------
    symbol : Symbol
        Input ``data``, outputs ``cls_preds`` ``B x A x (C + 1)`` (logits, background
        first) and ``box_preds`` ``B x A x 4`` (encoded offsets), as in training.
    params : dict of str to NDArray
        The arguments and auxiliary states of ``symbol`` other than ``data``.
    anchors : numpy.ndarray
        ``1 x A x 4`` anchors in center format, constant for this input size.
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
    return symbol, params, anchors.asnumpy()
