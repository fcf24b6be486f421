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
    and before checkpointing and validation, which read the average of the same step.
    """

    def __init__(self, decay):
        self.decay = float(decay)
        self.updates = 0
        self.averages = None    # {structural parameter name: float32 NDArray}, None before a step
        self._tracked = None

    def before_train(self):
        LOG.info('Model EMA (decay %g, ramped up as min(decay, (1 + n) / (10 + n)) at step n): '
                 'validation and the saved .params use the averaged weights%s', self.decay,
                 '' if self.averages is None else
                 ', resumed at step %d of the average' % self.updates)

    def after_step(self):
        params = self._params()
        if self.averages is None:
            self.averages = {name: self._weights(name, p).astype('float32')
                             for name, p in params.items()}
            self.updates = 1
            return
        self.updates += 1
        rate = 1.0 - ema_decay(self.decay, self.updates)
        for name, param in params.items():
            average = self.averages[name]
            average += (self._weights(name, param).astype('float32', copy=False) - average) * rate

    def after_train(self):
        # a run that ended (its epochs, max_iters, early stopping) leaves the average in the
        # net fit returns; a stopped or failed one, whose checkpoint holds the trained weights,
        # does not
        loop = self.loop
        if self.averages is not None and (loop.state.epoch >= loop.epochs or loop.done()):
            self._write(self._params())

    def average_statistics(self):
        """Average the average's BatchNorm statistics over the processes (every process
        calls it where the net's are averaged, `TrainLoop.sync_statistics`)."""
        if self.averages is None:
            return
        names = sorted(name for name in self.averages if is_statistic(name))
        means = average_over_processes(self.loop.runtime, [self.averages[n] for n in names])
        self.averages.update(zip(names, means))

    @contextlib.contextmanager
    def applied(self):
        """Inside, the net holds the averaged weights; the trained ones come back on exit,
        bit for bit, also on error. Before the first step the weights are their average."""
        if self.averages is None:
            yield
            return
        params = self._params()
        trained = {name: [d.copy() for d in p.list_data()] for name, p in params.items()}
        self._write(params)
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
        return dict(self.averages or {})

    def load_state_arrays(self, arrays):
        expected = set(self._params())
        if arrays and set(arrays) != expected:
            parts = [what % (len(names), ', '.join(sorted(names)[:5])) for what, names in (
                ('it lacks the average of %d parameters of this run (%s)', expected - set(arrays)),
                ('it averages %d parameters this run does not (%s)', set(arrays) - expected))
                if names]
            raise CheckpointError("the checkpoint's model EMA does not fit the net: %s"
                                  % '; '.join(parts))
        ctx = self.loop.runtime.ctx[0]
        self.averages = {name: array.as_in_context(ctx) for name, array in arrays.items()} or None

    def _params(self):
        """``{structural name: Parameter}`` of what is averaged (a shared one once)."""
        if self._tracked is None:
            self._tracked, seen = {}, set()
            for name, param in self.loop.net._collect_params_with_prefix().items():
                if id(param) not in seen and (param.grad_req != 'null' or is_statistic(name)):
                    self._tracked[name] = param
                    seen.add(id(param))
        return self._tracked

    def _weights(self, name, param):
        """``param`` on the first device; statistics, which each device gathers from its part
        of the batch, as their mean over the devices (as ``save_parameters`` writes them)."""
        data = param.list_data()
        first = self.loop.runtime.ctx[0]
        if len(data) == 1 or not is_statistic(name):
            return param.data(first)
        return nd.add_n(*[d.as_in_context(first) for d in data]) / len(data)

    def _write(self, params):
        for name, param in params.items():
            for data in param.list_data():
                data[:] = self.averages[name].astype(data.dtype, copy=False)
