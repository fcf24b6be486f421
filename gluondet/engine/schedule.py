"""Learning rate as a pure function of the global iteration, so a resume is exact."""
import math


class LRSchedule:
    """Step, cosine or soft-start annealing schedule with an optional linear warmup.

    Parameters
    ----------
    base_lr : float
    iters_per_epoch : int
        Optimizer steps in one epoch.
    epochs : int
        Total epochs (the cosine schedule ends at ``epochs * iters_per_epoch``).
    mode : {'step', 'cosine', 'soft_start_annealing'}
    decay : float
        Step mode: factor applied at the start of each epoch in ``decay_epochs``.
    decay_epochs : sequence of int
    total_iters : int, optional
        The schedule's length in steps (default ``epochs * iters_per_epoch``).
    decay_iters : sequence of int, optional
        Step mode: the steps to decay at, instead of ``decay_epochs``.
    warmup_epochs : float
        Warmup length; the first ``round(warmup_epochs * iters_per_epoch)``
        steps scale the schedule linearly from ``warmup_factor`` to 1.
    warmup_factor : float
    lr_min : float
        Cosine: the last learning rate. Soft-start annealing (NVIDIA TAO's): with
        ``p`` the fraction of ``total_iters`` done,
        ``lr_min * (base_lr / lr_min) ** (p / soft_start)`` below ``soft_start``,
        ``base_lr`` until ``annealing``, then ``base_lr * (lr_min / base_lr) ** ((p -
        annealing) / (1 - annealing))``.
    soft_start, annealing : float
    warmup_iters : int
        Warmup length in steps; when > 0 it replaces ``warmup_epochs``. Step
        ``i < warmup_iters`` has ``lr * (warmup_factor * (1 - a) + a)`` with
        ``a = i / warmup_iters``, as GluonCV's Faster R-CNN ``--lr-warmup``
        (which, unlike this, stops warming up at the end of epoch 0).
    """

    def __init__(self, base_lr, iters_per_epoch, epochs, mode='step', decay=0.1,
                 decay_epochs=(), warmup_epochs=0.0, warmup_factor=1.0 / 3, warmup_iters=0,
                 lr_min=0.0, soft_start=0.1, annealing=0.3, total_iters=None, decay_iters=()):
        if mode not in ('step', 'cosine', 'soft_start_annealing'):
            raise ValueError("lr mode must be 'step', 'cosine' or 'soft_start_annealing', "
                             "got %r" % mode)
        if mode == 'soft_start_annealing' and not 0 < lr_min < base_lr:
            raise ValueError('soft_start_annealing needs 0 < lr_min < base_lr, got %r'
                             % (lr_min,))
        if iters_per_epoch < 1:
            raise ValueError('iters_per_epoch must be >= 1, got %r' % iters_per_epoch)
        self.base_lr = base_lr
        self.iters_per_epoch = iters_per_epoch
        self.total_iters = total_iters or epochs * iters_per_epoch
        self.mode = mode
        self.decay = decay
        self.decay_iters = sorted(decay_iters or [e * iters_per_epoch for e in decay_epochs])
        self.warmup_iters = int(warmup_iters) or int(round(warmup_epochs * iters_per_epoch))
        self.warmup_factor = warmup_factor
        self.lr_min, self.soft_start, self.annealing = lr_min, soft_start, annealing

    @classmethod
    def from_config(cls, config, iters_per_epoch):
        """The schedule a `TrainConfig` describes."""
        return cls(config.lr, iters_per_epoch, config.epochs, config.lr_mode, config.lr_decay,
                   config.lr_decay_epoch, config.warmup_epochs, config.warmup_factor,
                   config.warmup_iters, config.lr_min, config.soft_start, config.annealing,
                   config.max_iters or None, config.lr_decay_iters)

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
        if self.mode == 'soft_start_annealing':
            progress = min(iteration / max(1, self.total_iters), 1.0)
            if progress < self.soft_start:
                return self.lr_min * (self.base_lr / self.lr_min) ** (progress / self.soft_start)
            if progress < self.annealing or self.annealing >= 1:
                return self.base_lr
            return self.base_lr * (self.lr_min / self.base_lr) ** (
                (progress - self.annealing) / (1 - self.annealing))
        span = max(1, self.total_iters - self.warmup_iters)
        progress = min(max(iteration - self.warmup_iters, 0), span) / span
        return self.lr_min + (self.base_lr - self.lr_min) * 0.5 * (1 + math.cos(math.pi * progress))
