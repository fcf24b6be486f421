"""``export_block``: GluonCV's ``gluoncv.utils.export_block``, the files a GluonCV user gets.

``export_block(path, net)`` writes ``path-symbol.json`` and ``path-0000.params``, which
``mx.gluon.SymbolBlock.imports(path + '-symbol.json', ['data'], path + '-0000.params')``
loads. With ``preprocess=True`` (the default) the graph starts with GluonCV's default
preprocessing: its input ``data`` is a batch of RGB images ``B x H x W x 3`` valued
``0 ... 255``, from which the graph subtracts the ImageNet mean
``[123.675, 116.28, 103.53]``, divides by the std ``[58.395, 57.12, 57.375]`` and transposes
to ``B x 3 x H x W``. The preprocessing block is named as GluonCV names its own
(``_defaultpreprocess0``, parameters ``..._init_mean`` and ``..._init_scale``) and its
operators are GluonCV's, so the two files are those GluonCV's ``export_block`` writes for
the same network.

The files are written by Python through temporary files renamed into place, both or
neither (:func:`gluondet.files.atomic_save_all`; MXNet's own writer loses the end of a file
on a full disk without an error).
"""
import contextlib
import copy

import mxnet as mx
from mxnet.base import MXNetError
from mxnet.gluon import HybridBlock, nn

from ..files import atomic_save_all, save_ndarrays, writer

__all__ = ['export_block', 'IMAGENET_MEAN_255', 'IMAGENET_STD_255']

#: GluonCV's default preprocessing, per RGB channel, on images valued 0 ... 255.
IMAGENET_MEAN_255 = (123.675, 116.28, 103.53)
IMAGENET_STD_255 = (58.395, 57.12, 57.375)
LAYOUTS = ('HWC', 'CHW', 'THWC', 'CTHW')
_TRIED_SIZES = (224, 256, 299, 300, 320, 416, 512, 600)     # without data_shape, as GluonCV


class _DefaultPreprocess(HybridBlock):
    """``(x - mean) / std`` of a ``B x H x W x 3`` batch (``layout='HWC'``, then transposed
    to ``B x 3 x H x W``) or a ``B x 3 x H x W`` one (``'CHW'``, left so), with the ImageNet
    mean and std in 0 ... 255 as constant parameters ``init_mean`` and ``init_scale``. The
    class keeps GluonCV's name: the parameters and operators are named after it."""

    def __init__(self, layout='HWC', **kwargs):
        super().__init__(**kwargs)
        shape = (1, 1, 1, 3) if layout == 'HWC' else (1, 3, 1, 1)
        self._channels_last = layout == 'HWC'
        with self.name_scope():
            self.init_mean = self.params.get_constant(
                'init_mean', mx.nd.array(IMAGENET_MEAN_255).reshape(shape))
            self.init_scale = self.params.get_constant(
                'init_scale', mx.nd.array(IMAGENET_STD_255).reshape(shape))

    def hybrid_forward(self, F, x, init_mean, init_scale):
        x = F.broadcast_div(F.broadcast_minus(x, init_mean), init_scale)
        return F.transpose(x, axes=(0, 3, 1, 2)) if self._channels_last else x


@contextlib.contextmanager
def _without_box_encode():
    """``mx.sym.contrib.box_encode`` hidden while the graph is traced, as GluonCV hides it:
    GluonCV's box encoders then build the graph of plain operators, which runs outside
    MXNet too. GluonCV leaves it hidden for good; it is put back here."""
    table = mx.sym.contrib.__dict__
    hidden = table.pop('box_encode', None)
    try:
        yield
    finally:
        if hidden is not None:
            table.setdefault('box_encode', hidden)


def _shapes(data_shape, layout):
    if data_shape is not None:
        shape = tuple(int(v) for v in data_shape)
        if len(shape) != len(layout):
            raise ValueError('data_shape %r does not match layout %s (%d numbers, %s)'
                             % (tuple(data_shape), layout, len(layout), ', '.join(layout)))
        return [shape]
    if layout == 'HWC':
        return [(s, s, 3) for s in _TRIED_SIZES]
    if layout == 'CHW':
        return [(3, s, s) for s in _TRIED_SIZES]
    raise ValueError('Unable to predict data_shape for layout %s, please specify it' % layout)


def _file_writers(block, path, epoch):
    """``[(write, file)]`` of ``block.export(path, epoch)``'s two files (the traced graph; the
    parameters in it as ``arg:NAME`` and ``aux:NAME``, in MXNet's order)."""
    symbol = block._cached_graph[1]
    args, auxs = set(symbol.list_arguments()), set(symbol.list_auxiliary_states())
    arrays = {}
    for is_input, param in block._cached_op_args:
        if is_input:
            continue
        if param.name in args:
            arrays['arg:' + param.name] = param._reduce()
        elif param.name in auxs:
            arrays['aux:' + param.name] = param._reduce()
    files = path + '-symbol.json', '%s-%04d.params' % (path, epoch)
    return list(zip((writer(symbol.tojson()), lambda name: save_ndarrays(name, arrays)), files))


def export_block(path, block, data_shape=None, epoch=0, preprocess=True, layout='HWC',
                 ctx=mx.cpu()):
    """Write a HybridBlock as ``path-symbol.json`` and ``path-%04d.params`` (the epoch), for
    ``gluon.SymbolBlock.imports``, ``mx.mod.Module`` or MXNet's C++ API; the input is named
    ``data``.

    Parameters
    ----------
    path : str
        The files' prefix.
    block : mxnet.gluon.HybridBlock
        The network (hybridized here, its parameters moved to ``ctx``). A child named
        ``_target_generator`` (GluonCV's training targets) is left out of a copy.
    data_shape : tuple of int, optional
        One input's shape in ``layout`` (``(H, W, 3)`` for ``'HWC'``) for the tracing run.
        Default: squares of 224, 256, 299, 300, 320, 416, 512 and 600 in turn, until one
        runs (``'HWC'`` and ``'CHW'`` only).
    epoch : int, default 0
        The number in the parameter file's name.
    preprocess : bool or mxnet.gluon.HybridBlock, default True
        A block the input goes through first (initialized here). True: GluonCV's default,
        ImageNet normalization of 0 ... 255 RGB input in the graph, transposed to channels
        first for ``'HWC'`` (``'CHW'`` input, which GluonCV refuses here, is normalized and
        left as it is). False or None: the input goes to ``block`` as it is.
    layout : {'HWC', 'CHW', 'THWC', 'CTHW'}, default 'HWC'
        The input's layout (after the batch axis). Without preprocessing, ``'CHW'`` (or
        ``'CTHW'``), the network's own.
    ctx : mxnet.Context, default mx.cpu()

    Returns
    -------
    (str, str)
        The symbol and parameter files (GluonCV's returns None).

    Raises
    ------
    ValueError
        For a layout the preprocessing does not take, or a data_shape not in the layout.
    RuntimeError
        When no data_shape tried runs (the first line of MXNet's last error).
    """
    layout = str(layout).upper()
    if layout not in LAYOUTS:
        raise ValueError('Input layout %s is not supported (one of %s)'
                         % (layout, ', '.join(LAYOUTS)))
    shapes = _shapes(data_shape, layout)
    net = block
    if '_target_generator' in block._children:
        net = copy.deepcopy(block)
        net._children.pop('_target_generator')
    if preprocess is True:
        if layout not in ('HWC', 'CHW'):
            raise ValueError('The default preprocessing takes HWC (or CHW) images, not %s: '
                             'give a preprocess block' % layout)
        preprocess = _DefaultPreprocess(layout)
    elif preprocess and not isinstance(preprocess, HybridBlock):
        raise TypeError('preprocess must be True, False, None or a HybridBlock, got %s'
                        % type(preprocess).__name__)
    if preprocess:
        wrapper = nn.HybridSequential()
        preprocess.initialize(ctx=ctx)
        wrapper.add(preprocess)
        wrapper.add(net)
    else:
        if layout not in ('CHW', 'CTHW'):
            raise ValueError('Without preprocessing the input goes to the network as it is: '
                             'layout must be CHW (CTHW for 3D models), not %s' % layout)
        wrapper = net
    wrapper.collect_params().reset_ctx(ctx)
    failure = None
    with _without_box_encode():
        for shape in shapes:
            wrapper.hybridize()
            try:
                wrapper(mx.nd.zeros((1,) + shape, ctx=ctx))
            except MXNetError as err:
                failure = err
                continue
            files = _file_writers(wrapper, path, epoch)
            atomic_save_all(files)
            return tuple(name for _, name in files)
    raise RuntimeError(str(failure).splitlines()[0])
