"""The training configuration: one frozen dataclass, built once, checked once."""
import dataclasses
import difflib
import math
from typing import Tuple

LR_MODES = ('step', 'cosine', 'soft_start_annealing')
KV_STORES = ('device', 'local', 'nccl', 'dist_sync', 'dist_device_sync', 'dist_async')


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything `gluondet.engine.fit` needs besides the task.

    Defaults follow GluonCV's ``train_ssd.py``. The object is frozen: derive a
    changed copy with ``dataclasses.replace(config, lr=0.01)``.

    Parameters
    ----------
    gpus : str
        GPU ids such as ``'0,1'``; ``''`` trains on the CPU.
    cpus : int
        Number of CPU contexts when ``gpus`` is empty (more than one splits each
        batch over ``cpu(0) .. cpu(n-1)``, which is how multi-device code is
        tested without a GPU).
    batch_size : int
        Samples per optimizer step over all devices and processes. With several processes
        each takes ``batch_size // processes`` (a remainder is dropped and said in the log,
        as GluonCV's SSD and ODTK do); 0: ``batch_per_device`` on every device.
    batch_per_device : int
        With ``batch_size`` 0, the samples of each device (GPU, or CPU) of each process
        (GluonCV's Faster R-CNN trains one image per device, ODTK two).
    num_workers : int
        DataLoader worker processes (0 loads in the training process).
    epochs, start_epoch : int
        Train epochs ``start_epoch .. epochs - 1`` (0-based, as GluonCV).
        A resumed checkpoint overrides ``start_epoch``.
    resume : str
        ``''`` (fresh start), ``'auto'`` (``{save_prefix}_last.json`` if it
        exists), a checkpoint ``.json``, or a ``.params`` file (weights only,
        as GluonCV's ``--resume``).
    lr, wd, momentum : float
        Base learning rate, weight decay, momentum (momentum only for
        optimizers that take one).
    optimizer : str
        An MXNet optimizer name (``'sgd'``, ``'nag'``, ``'adam'``, ...).
    lr_mode : {'step', 'cosine', 'soft_start_annealing'}
        ``step``: multiply by ``lr_decay`` at the start of each epoch in
        ``lr_decay_epoch``; ``cosine``: from ``lr`` to ``lr_min`` between the end of
        warmup and the last iteration; ``soft_start_annealing`` (NVIDIA TAO's):
        from ``lr_min`` up to ``lr`` exponentially until ``soft_start`` of the
        training, ``lr`` until ``annealing``, then down to ``lr_min`` exponentially.
    lr_decay : float
    lr_decay_epoch : tuple of int
        Epochs (0-based) at whose start the step decay applies; a comma
        string such as ``'160,200'`` is accepted.
    max_iters : int
        Train this many optimizer steps in all, instead of ``epochs`` epochs (ODTK's
        iteration schedule): the last epoch stops partway; 0: ``epochs`` decides.
    lr_decay_iters : tuple of int
        Step schedule: global steps at which the decay applies (ODTK's
        ``--milestones``), instead of ``lr_decay_epoch``.
    lr_min : float
        The lowest learning rate of the cosine and soft-start annealing schedules
        (TAO's ``min_learning_rate``; ``lr`` is its ``max_learning_rate``).
    soft_start, annealing : float
        Soft-start annealing: the fractions of training where the ramp up ends and
        the decay begins (TAO's defaults 0.1 and 0.3).
    warmup_epochs : float
        Linear warmup length in epochs (fractions allowed).
    warmup_iters : int
        Linear warmup length in optimizer steps (GluonCV's Faster R-CNN
        ``--lr-warmup``, whose ``-1`` is 0 here); 0: ``warmup_epochs`` decides.
        At most one of the two is set.
    warmup_factor : float
        Warmup starts at ``lr * warmup_factor``.
    no_wd : bool
        No weight decay on biases and BatchNorm's gamma and beta: parameters
        whose names match GluonCV's ``'.*beta|.*gamma|.*bias'`` get
        ``wd_mult = 0`` (GluonCV's ``--no-wd``).
    clip_gradient : float
        Clip each gradient element to ``[-clip_gradient, clip_gradient]``
        (after rescaling, before weight decay), as the optimizer's
        ``clip_gradient`` parameter (GluonCV's ``--clip-gradient``);
        ``-1`` (or any value <= 0): no clipping.
    mixup : bool
        Mix pairs of training images (GluonCV's ``--mixup``); the task must
        support it (``supports_mixup``, see the task contract).
    no_mixup_epochs : int
        With ``mixup``, the last this many epochs train without it (counted
        from ``epochs``, as GluonCV: resuming with other ``epochs`` moves them).
    log_interval : int
        Steps between log lines, metrics.jsonl records and progress-bar updates.
    save_prefix : str
        Path prefix of every file written: ``{save_prefix}_train.log``,
        ``_metrics.jsonl``, ``_last.json``, ``_best.params``, ...
    save_interval : int
        Save ``{save_prefix}_{epoch:04d}_{metric:.4f}.params`` after every
        ``save_interval``-th epoch (0: never).
    val_interval : int
        Validate after every ``val_interval``-th epoch and after the last one
        (0: only when saving params). An epoch whose params are saved is
        validated too (the file name holds the metric).
    val_iters : int
        Also validate every this many steps (ODTK's ``--val-iters``; 0: by epochs only).
    val_metric : str
        Key of ``task.validate()``'s result that selects the best model
        (higher is better).
    checkpoint_interval : int
        Also write the resumable checkpoint every this many steps (0: only at
        the end of each epoch and on SIGINT/SIGTERM).
    seed : int
        Seeds initialization, the sampler, the per-sample augmentation and
        the per-step RNGs.
    logdir : str
        TensorBoard directory (``''``: no TensorBoard).
    hybridize : bool
        Hybridize the net.
    static_alloc : bool
        Hybridize with ``static_alloc`` and ``static_shape``: every buffer of the graph kept
        allocated (faster; Mask R-CNN: twice the memory). False: MXNet's dynamic allocation
        (GluonCV's default). ``static_alloc`` without ``static_shape`` diverges (MXNet 1.9).
        A net with a training `gluondet.nn.SyncBatchNorm` always gets both (`hybridize_net`).
    stop_on_nonfinite : bool
        Stop with an error at the first NaN or infinite loss.
    horovod : bool
        This process is one of a ``horovodrun`` job (`distributed.HorovodRuntime`).
    kv_store : str
        How gradients are summed (GluonCV's ``--kv-store``): over the GPUs of one process
        ``'device'``, ``'local'`` or ``'nccl'`` (CPU contexts always ``'device'``); over
        the workers of MXNet's parameter server, started by ``gluondet launch``,
        ``'dist_sync'``, ``'dist_device_sync'`` or ``'dist_async'``
        (`distributed.KVStoreRuntime`).
    hang_timeout : float
        With several processes, a process that makes no progress for this many seconds
        ends the job (`watchdog.Watchdog`); 0: never.
    amp : bool
        Automatic mixed precision (`precision`): float16 on GPUs (with multi-precision
        optimizer updates and dynamic loss scaling), bfloat16 on CPUs. MXNet's AMP
        converts the operators of the whole process and cannot be undone.
    dali : bool
        Read and augment the training data with NVIDIA DALI (`gluondet.data.dali`): on
        the GPU when training on GPUs, on the CPU otherwise. The task must support it.
    early_stop_monitor : str
        Early stopping (TAO's ``early_stopping.monitor``; `early_stopping`): ``'loss'`` (the
        sum of the losses) or a loss name (``'loss_cls'``, any name starting with ``loss``),
        whose epoch mean must fall, checked each epoch; or a validation metric (``'mAP'``),
        which must rise, checked at each validation. ``''``: no early stopping.
    early_stop_min_delta : float
        The least change that counts as an improvement (TAO's ``min_delta``).
    early_stop_patience : int
        Training stops at this many checks in a row without improvement (TAO's
        ``patience``; 0 and 1 stop at the first, as Keras).
    tb_images : int
        Show this many images of a training batch with their ground-truth boxes in
        TensorBoard (TAO's ``visualizer.num_images``; `batch_images`); needs ``logdir`` and a
        task with ``batch_images``. 0: none.
    tb_images_interval : int
        Steps between the batches shown; 0: the first batch of every epoch (TAO's).
    ema : bool
        Keep an exponential moving average of the weights (`ema`; TAO's ``model_ema``):
        validation, the best and saved ``.params`` files use it; training goes on with the
        trained weights. Its state is in the checkpoint.
    ema_decay : float
        The model EMA's decay, in (0, 1), reached after a ramp ``(1 + n) / (10 + n)`` over the
        steps ``n``: the average spans about the last ``1 / (1 - ema_decay)`` steps.
    """

    gpus: str = ''
    cpus: int = 1
    batch_size: int = 32
    batch_per_device: int = 0
    num_workers: int = 4
    epochs: int = 240
    start_epoch: int = 0
    resume: str = ''
    lr: float = 0.001
    wd: float = 0.0005
    momentum: float = 0.9
    optimizer: str = 'sgd'
    lr_mode: str = 'step'
    lr_decay: float = 0.1
    lr_decay_epoch: Tuple[int, ...] = (160, 200)
    max_iters: int = 0
    lr_decay_iters: Tuple[int, ...] = ()
    lr_min: float = 0.0
    soft_start: float = 0.1
    annealing: float = 0.3
    warmup_epochs: float = 0.0
    warmup_iters: int = 0
    warmup_factor: float = 1.0 / 3
    no_wd: bool = False
    clip_gradient: float = -1.0
    mixup: bool = False
    no_mixup_epochs: int = 20
    log_interval: int = 100
    save_prefix: str = 'model'
    save_interval: int = 10
    val_interval: int = 1
    val_iters: int = 0
    val_metric: str = 'mAP'
    checkpoint_interval: int = 0
    seed: int = 233
    logdir: str = ''
    hybridize: bool = True
    static_alloc: bool = True
    stop_on_nonfinite: bool = True
    horovod: bool = False
    kv_store: str = 'device'
    hang_timeout: float = 600.0
    amp: bool = False
    dali: bool = False
    early_stop_monitor: str = ''
    early_stop_min_delta: float = 0.0
    early_stop_patience: int = 5
    tb_images: int = 0
    tb_images_interval: int = 0
    ema: bool = False
    ema_decay: float = 0.9998

    def __post_init__(self):
        object.__setattr__(self, 'lr_decay_epoch', _epoch_list(self.lr_decay_epoch))
        object.__setattr__(self, 'lr_decay_iters', _epoch_list(self.lr_decay_iters,
                                                               'lr_decay_iters'))
        for field in dataclasses.fields(self):
            _check_type(field.name, getattr(self, field.name), field.type)
            if field.type is float:
                object.__setattr__(self, field.name, float(getattr(self, field.name)))
        _check_values(self)

    @classmethod
    def from_dict(cls, values, source='config'):
        """Build a config from a mapping, rejecting unknown keys.

        Parameters
        ----------
        values : dict
            Field names to values; missing fields keep their defaults.
        source : str
            What the values came from (a file name, 'flags'), for error messages.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = ', did you mean %r?' % close[0] if close else ''
                raise ValueError('unknown key %r in %s%s' % (key, source, hint))
        try:
            return cls(**values)
        except (TypeError, ValueError) as err:
            raise ValueError('%s: %s' % (source, err)) from None

    def to_dict(self):
        """The fields as a JSON-ready dict (tuples become lists)."""
        out = dataclasses.asdict(self)
        out['lr_decay_epoch'] = list(self.lr_decay_epoch)
        out['lr_decay_iters'] = list(self.lr_decay_iters)
        return out

    def hybridize_net(self, net):
        """Hybridize ``net`` for training as ``hybridize`` and ``static_alloc`` say, with
        ``static_alloc`` whatever it says if a block of ``net`` has a true
        ``needs_static_alloc`` (`gluondet.nn.SyncBatchNorm` across processes)."""
        needs = []
        net.apply(lambda block: needs.append(getattr(block, 'needs_static_alloc', False)))
        static = self.static_alloc or any(needs)
        if self.hybridize:
            net.hybridize(static_alloc=static, static_shape=static)

    @property
    def mixup_epochs(self):
        """Epochs ``0 .. mixup_epochs - 1`` train with mixup (0 without ``mixup``)."""
        return max(0, self.epochs - self.no_mixup_epochs) if self.mixup else 0


def _epoch_list(value, name='lr_decay_epoch'):
    if isinstance(value, str):
        try:
            return tuple(int(v) for v in value.split(',') if v.strip())
        except ValueError:
            raise ValueError('%s must be comma-separated integers, got %r'
                             % (name, value)) from None
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


def _check_type(name, value, kind):
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is Tuple[int, ...]:
        ok = isinstance(value, tuple) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise TypeError('%s must be %s, got %r' % (name, getattr(kind, '__name__', kind), value))


def _check_values(cfg):
    from mxnet import optimizer
    # a loss name (early_stopping.monitors_loss) is checked each epoch, a metric when validated
    metric_monitor = cfg.early_stop_monitor and not cfg.early_stop_monitor.startswith('loss')
    checks = [
        (cfg.cpus >= 1, 'cpus must be >= 1', cfg.cpus),
        (cfg.batch_size >= 1 or (cfg.batch_size == 0 and cfg.batch_per_device >= 1),
         'batch_size must be >= 1', cfg.batch_size),
        (cfg.batch_per_device >= 0, 'batch_per_device must be >= 0', cfg.batch_per_device),
        (cfg.num_workers >= 0, 'num_workers must be >= 0', cfg.num_workers),
        (0 <= cfg.start_epoch <= cfg.epochs, 'need 0 <= start_epoch <= epochs',
         (cfg.start_epoch, cfg.epochs)),
        (cfg.lr > 0, 'lr must be > 0', cfg.lr),
        (cfg.wd >= 0, 'wd must be >= 0', cfg.wd),
        (cfg.momentum >= 0, 'momentum must be >= 0', cfg.momentum),
        (cfg.optimizer.lower() in optimizer.Optimizer.opt_registry,
         'optimizer must be an MXNet optimizer name', cfg.optimizer),
        (cfg.lr_mode in LR_MODES, 'lr_mode must be one of %s' % (LR_MODES,), cfg.lr_mode),
        (cfg.lr_decay > 0, 'lr_decay must be > 0', cfg.lr_decay),
        (cfg.max_iters >= 0, 'max_iters must be >= 0 (0: by epochs)', cfg.max_iters),
        (all(i >= 0 for i in cfg.lr_decay_iters), 'lr_decay_iters must be >= 0',
         cfg.lr_decay_iters),
        (cfg.val_iters >= 0, 'val_iters must be >= 0', cfg.val_iters),
        (all(e >= 0 for e in cfg.lr_decay_epoch), 'lr_decay_epoch must be >= 0',
         cfg.lr_decay_epoch),
        (0 <= cfg.lr_min < cfg.lr, 'need 0 <= lr_min < lr', (cfg.lr_min, cfg.lr)),
        (cfg.lr_mode != 'soft_start_annealing' or cfg.lr_min > 0,
         'soft_start_annealing needs lr_min > 0 (it ramps exponentially from it)', cfg.lr_min),
        (0 <= cfg.soft_start <= cfg.annealing <= 1,
         'need 0 <= soft_start <= annealing <= 1', (cfg.soft_start, cfg.annealing)),
        (cfg.warmup_epochs >= 0, 'warmup_epochs must be >= 0', cfg.warmup_epochs),
        (cfg.warmup_iters >= 0, 'warmup_iters must be >= 0 (0: no warmup)', cfg.warmup_iters),
        (not (cfg.warmup_iters and cfg.warmup_epochs),
         'set warmup_iters or warmup_epochs, not both', (cfg.warmup_iters, cfg.warmup_epochs)),
        (0 <= cfg.warmup_factor <= 1, 'warmup_factor must be in [0, 1]', cfg.warmup_factor),
        (math.isfinite(cfg.clip_gradient), 'clip_gradient must be finite (-1: off)',
         cfg.clip_gradient),
        (cfg.no_mixup_epochs >= 0, 'no_mixup_epochs must be >= 0', cfg.no_mixup_epochs),
        (cfg.log_interval >= 1, 'log_interval must be >= 1', cfg.log_interval),
        (cfg.save_prefix != '', 'save_prefix must not be empty', cfg.save_prefix),
        (cfg.save_interval >= 0, 'save_interval must be >= 0', cfg.save_interval),
        (cfg.val_interval >= 0, 'val_interval must be >= 0', cfg.val_interval),
        (cfg.checkpoint_interval >= 0, 'checkpoint_interval must be >= 0',
         cfg.checkpoint_interval),
        (cfg.seed >= 0, 'seed must be >= 0', cfg.seed),
        (cfg.kv_store in KV_STORES, 'kv_store must be one of %s' % (KV_STORES,), cfg.kv_store),
        (not (cfg.horovod and cfg.kv_store.startswith('dist')),
         'horovod and a dist kv_store are two ways of running several processes: choose one',
         cfg.kv_store),
        (cfg.hang_timeout >= 0, 'hang_timeout must be >= 0 (0: no watchdog)', cfg.hang_timeout),
        (cfg.early_stop_monitor not in ('val_loss', 'validation_loss'),
         "early_stop_monitor: gluondet validates by its metrics, not a loss: monitor a "
         "validation metric ('mAP') or the training 'loss'", cfg.early_stop_monitor),
        (not metric_monitor or cfg.val_interval or cfg.val_iters or cfg.save_interval,
         'early_stop_monitor %r is a validation metric, but nothing validates (val_interval, '
         'val_iters and save_interval are 0)' % cfg.early_stop_monitor, cfg.val_interval),
        (not metric_monitor or cfg.kv_store != 'dist_async',
         'early stopping on a validation metric: with dist_async only the first worker '
         "validates; monitor the training 'loss'", cfg.kv_store),
        (cfg.early_stop_min_delta >= 0 and math.isfinite(cfg.early_stop_min_delta),
         'early_stop_min_delta must be finite and >= 0', cfg.early_stop_min_delta),
        (cfg.early_stop_patience >= 0, 'early_stop_patience must be >= 0',
         cfg.early_stop_patience),
        (cfg.tb_images >= 0, 'tb_images must be >= 0 (0: none)', cfg.tb_images),
        (cfg.tb_images_interval >= 0, 'tb_images_interval must be >= 0 (0: every epoch)',
         cfg.tb_images_interval),
        (not cfg.tb_images or cfg.logdir, 'tb_images needs a TensorBoard logdir', cfg.logdir),
        (0 < cfg.ema_decay < 1, 'ema_decay must be in (0, 1)', cfg.ema_decay),
    ]
    for ok, message, value in checks:
        if not ok:
            raise ValueError('%s, got %r' % (message, value))
