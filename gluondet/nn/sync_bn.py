"""BatchNorm whose batch statistics span every process of a distributed training.

MXNet's ``gluon.contrib.nn.SyncBatchNorm`` synchronizes the GPUs of one process (and hangs on
CPU contexts); horovod.mxnet has none. `SyncBatchNorm` is a custom operator around the
active runtime's ``allreduce`` (`gluondet.collectives`: Horovod's, or the parameter server's
sums): the forward sums each channel's values, then squared deviations, over all the
processes' samples (two passes, and the element count too, so processes may hold different
batch sizes); the backward sums the two per-channel gradient terms the same way. With one
process it is BatchNorm. It keeps BatchNorm's parameters (``gamma``, ``beta``,
``running_mean``, ``running_var``), so weights move between the two freely, and it
hybridizes, with ``static_alloc`` (`SyncBatchNorm.needs_static_alloc`).
"""
import mxnet as mx
from mxnet import gluon, nd

from ..collectives import active_runtime, allreduce

__all__ = ['SyncBatchNorm', 'sync_norm_layer']


class _SyncBatchNorm(mx.operator.CustomOp):
    def __init__(self, key, momentum, eps):
        self.key, self.momentum, self.eps = key, momentum, eps
        self._saved = None

    def forward(self, is_train, req, in_data, out_data, aux):
        x, gamma, beta = in_data
        mean_aux, var_aux = aux
        shape = (1, -1) + (1,) * (x.ndim - 2)
        axes = (0,) + tuple(range(2, x.ndim))
        if is_train:
            count = nd.array([x.size // x.shape[1]], ctx=x.context, dtype=x.dtype)
            total, count = allreduce([x.sum(axis=axes), count], self.key + '.sum')
            mean = total / count
            centered = x - mean.reshape(shape)
            var = allreduce([nd.square(centered).sum(axis=axes)], self.key + '.var')[0] / count
            inv = 1 / nd.sqrt(var + self.eps)
            xhat = centered * inv.reshape(shape)
            self._saved = (xhat, inv, count)
            m = self.momentum
            self.assign(mean_aux, 'write', m * mean_aux + (1 - m) * mean)
            self.assign(var_aux, 'write', m * var_aux + (1 - m) * var)
        else:
            inv = 1 / nd.sqrt(var_aux + self.eps)
            xhat = (x - mean_aux.reshape(shape)) * inv.reshape(shape)
        self.assign(out_data[0], req[0], xhat * gamma.reshape(shape) + beta.reshape(shape))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        dy, gamma = out_grad[0], in_data[1]
        xhat, inv, count = self._saved
        self._saved = None
        shape = (1, -1) + (1,) * (dy.ndim - 2)
        axes = (0,) + tuple(range(2, dy.ndim))
        dbeta, dgamma = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
        # the input's gradient needs both sums over every process's samples
        total_dbeta, total_dgamma = allreduce([dbeta.copy(), dgamma.copy()], self.key + '.grad')
        dx = (dy - (total_dbeta / count).reshape(shape)
              - xhat * (total_dgamma / count).reshape(shape)) * (gamma * inv).reshape(shape)
        self.assign(in_grad[0], req[0], dx)
        self.assign(in_grad[1], req[1], dgamma)
        self.assign(in_grad[2], req[2], dbeta)


@mx.operator.register('gluondet_sync_batch_norm')
class _SyncBatchNormProp(mx.operator.CustomOpProp):
    def __init__(self, key, momentum, eps):
        super().__init__(need_top_grad=True)
        self.key, self.momentum, self.eps = key, float(momentum), float(eps)

    def list_arguments(self):
        return ['data', 'gamma', 'beta']

    def list_auxiliary_states(self):
        return ['running_mean', 'running_var']

    def infer_shape(self, in_shape):
        channels = (in_shape[0][1],)
        return [in_shape[0], channels, channels], [in_shape[0]], [channels, channels]

    def create_operator(self, ctx, shapes, dtypes):
        return _SyncBatchNorm(self.key, self.momentum, self.eps)


class SyncBatchNorm(gluon.nn.BatchNorm):
    """BatchNorm over the samples of every process (see the module docstring).

    Takes `gluon.nn.BatchNorm`'s arguments (``axis`` must be 1); ``use_global_stats``
    freezes it into plain BatchNorm. A ``num_devices`` argument (GluonCV's SyncBatchNorm)
    is accepted and ignored: the processes are the runtime's.
    """

    def __init__(self, momentum=0.9, epsilon=1e-5, num_devices=None, **kwargs):
        if kwargs.get('axis', 1) != 1:
            raise ValueError('SyncBatchNorm normalizes axis 1 (channels), got axis=%r'
                             % kwargs['axis'])
        super().__init__(momentum=momentum, epsilon=epsilon, **kwargs)

    @property
    def needs_static_alloc(self):
        """True unless frozen (``use_global_stats``): MXNet 1.9 hands its custom operator
        freed gradient buffers in a graph hybridized without ``static_alloc`` (garbage
        gradients in most runs of the Mask R-CNN script's SyncBatchNorm network, 1 to 1e25);
        `gluondet.engine.TrainConfig.hybridize_net` reads this."""
        return not self._kwargs.get('use_global_stats')

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        if self._kwargs.get('use_global_stats'):
            return super().hybrid_forward(F, x, gamma, beta, running_mean, running_var)
        # N x C x (the rest): the reshape also hands the operator a plain array (MXNet 1.9
        # passes a convolution's MKLDNN-blocked output to a custom operator unconverted)
        out = F.Custom(F.reshape(x, shape=(0, 0, -1)), gamma, beta, running_mean, running_var,
                       op_type='gluondet_sync_batch_norm', key=self.prefix.rstrip('_'),
                       momentum=self._kwargs['momentum'], eps=self._kwargs['eps'])
        return F.reshape_like(out, x)


def sync_norm_layer(ctx_list):
    """``(norm_layer, norm_kwargs)`` whose statistics span the training's batch on
    ``ctx_list``: `SyncBatchNorm` across processes (one device each) or in one process on one
    device, MXNet's ``gluon.contrib.nn.SyncBatchNorm`` across the GPUs of one process.

    Raises
    ------
    ValueError
        Several CPU contexts in one process (MXNet's SyncBatchNorm hangs on them), several
        devices in each of several processes, or parameter-server processes (their sums are
        made for one thread: a layer's operator runs on MXNet's custom-operator threads).
    """
    runtime = active_runtime()
    several = runtime is not None and runtime.world_size > 1
    if several and runtime.kind != 'horovod':
        raise ValueError('synchronized BatchNorm across processes runs on Horovod '
                         '(horovodrun ... --horovod), not on the parameter server (%s)'
                         % runtime.kv_store)
    if len(ctx_list) > 1 and several:
        raise ValueError('synchronized BatchNorm with several processes needs one device per '
                         'process, got %d' % len(ctx_list))
    if len(ctx_list) > 1 and all(c.device_type == 'gpu' for c in ctx_list):
        return gluon.contrib.nn.SyncBatchNorm, {'num_devices': len(ctx_list)}
    if len(ctx_list) > 1:
        raise ValueError("synchronized BatchNorm over %d CPU contexts: MXNet's SyncBatchNorm "
                         'hangs on CPU contexts; use one context, or several processes '
                         '(horovodrun, gluondet launch)' % len(ctx_list))
    return SyncBatchNorm, {}
