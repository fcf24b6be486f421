"""Automatic mixed precision on MXNet's AMP: float16 on GPUs, bfloat16 on CPUs.

`init_amp` calls ``amp.init`` before the net is built: from then on the
operators MXNet lists (convolutions, dense layers, ...) run in the low
precision on float32 weights, for the rest of the process. `AMPHook` attaches
a loss scaler to the trainer (``amp.init_trainer``) and keeps its state in the
checkpoint, so a resumed run scales its losses as the uninterrupted one.
`scaled` multiplies the losses by the scale inside ``autograd.record`` and sets
the trainer to divide it out of the gradients.

float16 needs loss scaling: the scale starts at 2**16, halves (skipping that
step) when a gradient overflows and doubles after 2000 good steps (MXNet's
``LossScaler``). bfloat16 has float32's exponent range: its scale stays 1, and
a non-finite gradient stops training with an error instead of skipping steps
silently. Under bfloat16, BatchNorm and the convolutions a model marks with
`gluondet.float32.keep_float32` stay float32.
"""
import logging

import numpy as np
from mxnet.contrib import amp
from mxnet.contrib.amp import amp as amp_state
from mxnet.contrib.amp.loss_scaler import LossScaler

from ..float32 import float32_conditions
from .hookbase import HookBase
from .hooks import NonFiniteLossError

LOG = logging.getLogger('gluondet')


def amp_dtype(ctx_list):
    """``'float16'`` when training on GPUs, ``'bfloat16'`` on CPUs."""
    return 'float16' if all(c.device_type == 'gpu' for c in ctx_list) else 'bfloat16'


def amp_active():
    """The dtype ``amp.init`` was called with in this process, or None."""
    return getattr(amp_state, '_gluondet_dtype', None) if amp_state._amp_initialized else None


def init_amp(ctx_list):
    """Turn on MXNet's AMP for training on ``ctx_list`` (once per process); returns the dtype.

    Raises ValueError when the devices need another dtype than the one AMP already runs with,
    and on CPUs that lack bfloat16 support in MXNet's oneDNN build."""
    dtype = amp_dtype(ctx_list)
    current = amp_active()
    if current is not None:
        if current != dtype:
            raise ValueError('AMP already runs with %s in this process; training on %s needs %s '
                             '(MXNet cannot undo amp.init: use a new process)'
                             % (current, ', '.join(map(str, ctx_list)), dtype))
        return dtype
    if amp_state._amp_initialized:
        raise ValueError('amp.init was called in this process by someone else; gluondet needs '
                         'to call it (with %s) itself' % dtype)
    if dtype == 'bfloat16':
        _check_bfloat16()
        # BatchNorm float32 as with float16 (MXNet would run it in bfloat16), and the
        # layers the models keep float32 (`gluondet.float32`)
        amp.init(target_dtype=dtype,
                 fp32_ops=amp.list_fp32_ops(amp_state.bfloat16) + ['BatchNorm'],
                 conditional_fp32_ops=(amp.list_conditional_fp32_ops(amp_state.bfloat16)
                                       + float32_conditions()))
    else:
        amp.init(target_dtype=dtype)
    amp_state._gluondet_dtype = dtype
    return dtype


def _check_bfloat16():
    """MXNet's CPU bfloat16 convolution needs oneDNN (MKLDNN) and a CPU it supports."""
    import mxnet as mx
    if not mx.runtime.Features().is_enabled('MKLDNN'):
        raise ValueError('--amp on CPUs runs bfloat16 through oneDNN, which this MXNet build '
                         'lacks (pip install mxnet==1.9.1)')


def scaled(totals, trainer):
    """The per-context loss totals multiplied by the trainer's loss scale (call inside
    ``autograd.record``); the trainer divides the scale out of the gradients. Without a
    loss scaler (no AMP) ``totals`` come back unchanged."""
    if getattr(trainer, '_amp_loss_scaler', None) is None:
        return totals
    with amp.scale_loss(totals, trainer) as out:
        return out


class GradientScaler(LossScaler):
    """MXNet's dynamic loss scaler with its state in checkpoints; ``fixed`` (bfloat16) keeps
    the scale at 1 and raises on a non-finite gradient instead of skipping the step."""

    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed
        if fixed:
            self._loss_scale = self._next_loss_scale = self._max_loss_scale = 1.0
        self.skipped = 0

    def has_overflow(self, params):
        overflow = super().has_overflow(params)
        if overflow and self.fixed:
            bad = [p.name for p in params if p._grad is not None
                   and not np.isfinite(p._grad[0].asnumpy()).all()]
            raise NonFiniteLossError('AMP (bfloat16): non-finite gradients of %s; training '
                                     'stopped (float32 training: run without --amp)'
                                     % ', '.join(bad[:5]))
        if overflow:
            self.skipped += 1
            LOG.info('AMP: gradient overflow, step skipped; loss scale now %g',
                     self._next_loss_scale)
        return overflow

    def state_dict(self):
        return {'loss_scale': self._loss_scale, 'next_loss_scale': self._next_loss_scale,
                'unskipped': self._unskipped, 'skipped': self.skipped}

    def load_state_dict(self, state):
        self._loss_scale = float(state['loss_scale'])
        self._next_loss_scale = float(state['next_loss_scale'])
        self._unskipped = int(state['unskipped'])
        self.skipped = int(state['skipped'])


class AMPHook(HookBase):
    """Attaches a `GradientScaler` to the trainer; its state goes into the checkpoint.

    Parameters
    ----------
    trainer : gluon.Trainer
        Updates in its own updaters (``update_on_kvstore=False``), where MXNet checks the
        gradients for overflow.
    dtype : {'float16', 'bfloat16'}
    """

    def __init__(self, trainer, dtype):
        if trainer._update_on_kvstore:
            raise ValueError('AMP checks gradients before the update, which this trainer makes '
                             'on the parameter servers (dist_async): use dist_sync')
        amp.init_trainer(trainer)      # records the trainer's gradient scale
        self.scaler = trainer._amp_loss_scaler = GradientScaler(fixed=dtype == 'bfloat16')
        self.dtype = dtype

    def before_train(self):
        LOG.info('AMP: %s operators on %s, loss scale %g', self.dtype,
                 ', '.join(map(str, self.loop.runtime.ctx)), self.scaler.loss_scale)

    def state_dict(self):
        return dict(self.scaler.state_dict(), dtype=self.dtype)

    def load_state_dict(self, state):
        if state.get('dtype', self.dtype) != self.dtype:
            LOG.warning('the checkpoint trained with AMP in %s, this run uses %s: the loss '
                        'scale starts anew', state['dtype'], self.dtype)
            return
        self.scaler.load_state_dict(state)

