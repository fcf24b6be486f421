"""Learning rate as a pure function of the global iteration, so a resume is exact."""
import math


class LRSchedule:
    """Step or cosine schedule with an optional linear warmup.

    Parameters
    ----------
    base_lr : float
    iters_per_epoch : int
        Optimizer steps in one epoch.
    epochs : int
        Total epochs (the cosine schedule ends at ``epochs * iters_per_epoch``).
    mode : {'step', 'cosine'}
    decay : float
        Step mode: factor applied at the start of each epoch in ``decay_epochs``.
    decay_epochs : sequence of int
    warmup_epochs : float
        Warmup length; the first ``round(warmup_epochs * iters_per_epoch)``
        steps scale the schedule linearly from ``warmup_factor`` to 1.
    warmup_factor : float
    warmup_iters : int
        Warmup length in steps; when > 0 it replaces ``warmup_epochs``. Step
        ``i < warmup_iters`` has ``lr * (warmup_factor * (1 - a) + a)`` with
        ``a = i / warmup_iters``, as GluonCV's Faster R-CNN ``--lr-warmup``
        (which, unlike this, stops warming up at the end of epoch 0).
    """

    def __init__(self, base_lr, iters_per_epoch, epochs, mode='step', decay=0.1,
                 decay_epochs=(), warmup_epochs=0.0, warmup_factor=1.0 / 3, warmup_iters=0):
        if mode not in ('step', 'cosine'):
            raise ValueError("lr mode must be 'step' or 'cosine', got %r" % mode)
        if iters_per_epoch < 1:
            raise ValueError('iters_per_epoch must be >= 1, got %r' % iters_per_epoch)
        self.base_lr = base_lr
        self.iters_per_epoch = iters_per_epoch
        self.total_iters = epochs * iters_per_epoch
        self.mode = mode
        self.decay = decay
        self.decay_iters = sorted(e * iters_per_epoch for e in decay_epochs)
        self.warmup_iters = int(warmup_iters) or int(round(warmup_epochs * iters_per_epoch))
        self.warmup_factor = warmup_factor

    @classmethod
    def from_config(cls, config, iters_per_epoch):
        """The schedule a `TrainConfig` describes."""
        return cls(config.lr, iters_per_epoch, config.epochs, config.lr_mode, config.lr_decay,
                   config.lr_decay_epoch, config.warmup_epochs, config.warmup_factor,
                   config.warmup_iters)

    def __call__(self, iteration):
        """Learning rate of the step with 0-based global index ``iteration``."""
        lr = self._main(iteration)
        if iteration < self.warmup_iters:
            progress = iteration / self.warmup_iters
            lr *= self.warmup_factor + (1 - self.warmup_factor) * progress
        return lr

    def _main(self, iteration):
        if self.mode == 'step':
            passed = sum(1 for it in self.decay_iters if iteration >= it)
            return self.base_lr * self.decay ** passed
        span = max(1, self.total_iters - self.warmup_iters)
        progress = min(max(iteration - self.warmup_iters, 0), span) / span
        return self.base_lr * 0.5 * (1 + math.cos(math.pi * progress))
