"""Model EMA (``config.ema``): an exponential moving average of the weights, which validation,
the best and saved ``.params`` files, and so export, use; training goes on with the trained
weights.

The rule
--------
After the first step the hook sees, the average is a copy of the weights; after the n-th
(n >= 2) it moves towards them::

    average += (1 - d_n) * (weights - average),    d_n = min(decay, (1 + n) / (10 + n))

TensorFlow's ``ExponentialMovingAverage`` with ``num_updates``: early on the average spans
about the last ninth of the steps so far, and from ``n = (10 decay - 1) / (1 - decay)``
(45,000 steps at the default 0.9998) the last ``1 / (1 - decay)`` steps. A fixed decay
(detectron2's 0.999) keeps ``0.999**n`` of the random start in the average (47% after 750
steps); Ultralytics' ramp ``decay (1 - exp(-n / 2000))`` averages less than 3 steps until
step 2,000, so a run of a few thousand steps would see no EMA at all.

What is averaged
----------------
Every parameter that trains, and BatchNorm's running mean and variance (`context.STATISTICS`)
even where they are frozen, as Ultralytics and timm do: statistics gathered under the
weights of the last steps belong to their average. The other frozen parameters
(``grad_req='null'``, `params.trainable_params`) never change, so the net's own values are
their average: they are not copied. The average is float32 (also of float16 weights), on
the first device. The trained weights are equal on all devices and all synchronous processes;
BatchNorm's statistics are not: the average takes their mean over the devices (as
``save_parameters`` writes them), and its own are averaged over the processes where the net's
are (`TrainLoop.sync_statistics`), which, the average being linear, makes it the average of
the processes' mean statistics: the same on every process.

Its state (the step count and the arrays) is in the checkpoint; a run resumed from a
checkpoint without it (written without ``ema``, or a weights-only ``.params`` resume) starts
the average from the weights after its first step.
"""
import contextlib
import logging

import numpy as np
from mxnet import nd

from .checkpoint import CheckpointError
from .context import average_over_processes, is_statistic
from .hookbase import HookBase

LOG = logging.getLogger('gluondet')


def ema_decay(decay, updates):
    """The decay of the ``updates``-th step of the average (see the module docstring)."""
    return min(decay, (1.0 + updates) / (10.0 + updates))


class EMAHook(HookBase):
    """Keeps the moving average of the weights; `applied` puts it in the net.

    Parameters
    ----------
    decay : float
        The largest decay (``config.ema_decay``), in ``(0, 1)``.

    Runs after the non-finite check (a NaN step stops training before it enters the average)
    and before checkpointing and validation, which read the average of the same step. The
    average is one float32 vector of all the averaged parameters, updated by four operators a
    step (one each parameter would cost YOLOv3's 241 about 0.1 s a step on a CPU).
    """

    def __init__(self, decay):
        self.decay = float(decay)
        self.updates = 0
        self.average = None     # the flat float32 vector, None before the first step
        self._tracked = None    # {structural name: Parameter}, in the vector's order

    def before_train(self):
        LOG.info('Model EMA (decay %g, ramped up as min(decay, (1 + n) / (10 + n)) at step n): '
                 'validation and the saved .params use the averaged weights%s', self.decay,
                 '' if self.average is None else
                 ', resumed at step %d of the average' % self.updates)

    def after_step(self):
        weights = self._flat_weights()
        if self.average is None:
            self.average, self.updates = weights, 1
            return
        self.updates += 1
        self.average += (weights - self.average) * (1.0 - ema_decay(self.decay, self.updates))

    def after_train(self):
        # a run that ended (its epochs, max_iters, early stopping) leaves the average in the
        # net fit returns; a stopped or failed one, whose checkpoint holds the trained weights,
        # does not
        loop = self.loop
        if self.average is not None and (loop.state.epoch >= loop.epochs or loop.done()):
            self._write()

    def averages(self):
        """``{structural name: float32 NDArray}``: views of the average, by parameter."""
        views, offset = {}, 0
        for name, param in self._params().items():
            size = int(np.prod(param.shape))
            views[name] = self.average[offset:offset + size].reshape(param.shape)
            offset += size
        return views

    def average_statistics(self):
        """Average the average's BatchNorm statistics over the processes (every process
        calls it where the net's are averaged, `TrainLoop.sync_statistics`)."""
        if self.average is None:
            return
        views = [v for name, v in self.averages().items() if is_statistic(name)]
        for view, mean in zip(views, average_over_processes(self.loop.runtime, views)):
            if mean is not view:
                view[:] = mean

    @contextlib.contextmanager
    def applied(self):
        """Inside, the net holds the averaged weights; the trained ones come back on exit,
        bit for bit, also on error. Before the first step the weights are their average."""
        if self.average is None:
            yield
            return
        params = self._params()
        trained = {name: [d.copy() for d in p.list_data()] for name, p in params.items()}
        self._write()
        try:
            yield
        finally:
            for name, param in params.items():
                for data, saved in zip(param.list_data(), trained[name]):
                    saved.copyto(data)

    def state_dict(self):
        return {'updates': self.updates}

    def load_state_dict(self, state):
        self.updates = int(state['updates'])

    def state_arrays(self):
        return {} if self.average is None else self.averages()

    def load_state_arrays(self, arrays):
        if not arrays:
            self.average = None
            return
        params = self._params()
        if set(arrays) != set(params):
            parts = [what % (len(names), ', '.join(sorted(names)[:5])) for what, names in (
                ('it lacks the average of %d parameters of this run (%s)',
                 set(params) - set(arrays)),
                ('it averages %d parameters this run does not (%s)', set(arrays) - set(params)))
                if names]
            raise CheckpointError("the checkpoint's model EMA does not fit the net: %s"
                                  % '; '.join(parts))
        self.average = nd.concat(*[arrays[name].reshape((-1,)) for name in params],
                                 dim=0).as_in_context(self.loop.runtime.ctx[0])

    def _params(self):
        """``{structural name: Parameter}`` of what is averaged (a shared one once)."""
        if self._tracked is None:
            self._tracked, seen = {}, set()
            for name, param in self.loop.net._collect_params_with_prefix().items():
                if id(param) not in seen and (param.grad_req != 'null' or is_statistic(name)):
                    self._tracked[name] = param
                    seen.add(id(param))
        return self._tracked

    def _flat_weights(self):
        """The averaged parameters' current values as one float32 vector, on the first device;
        statistics, which each device gathers from its part of the batch, as their mean over
        the devices (as ``save_parameters`` writes them)."""
        first, parts = self.loop.runtime.ctx[0], []
        for name, param in self._params().items():
            data = param.list_data()
            if len(data) > 1 and is_statistic(name):
                value = nd.add_n(*[d.as_in_context(first) for d in data]) / len(data)
            else:
                value = param.data(first)
            parts.append(value.reshape((-1,)).astype('float32', copy=False))
        return nd.concat(*parts, dim=0)

    def _write(self):
        params = self._params()
        for name, average in self.averages().items():
            for data in params[name].list_data():
                data[:] = average.astype(data.dtype, copy=False)
