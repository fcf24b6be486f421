"""Where training reports go: console (tqdm), ``_train.log``, ``_metrics.jsonl``, TensorBoard.

``{save_prefix}_train.log`` has GluonCV's lines (the logging module, message
only): ``[Epoch 0][Batch 99], Speed: 41.209 samples/sec, loss_cls=2.113,
loss_box=0.964, lr=0.001000``, ``[Epoch 0] Training cost: 251.327, ...`` and
``[Epoch 0] Validation: `` followed by ``name=value`` lines.

``{save_prefix}_metrics.jsonl`` has one object per line: ``{"type": "train",
"epoch", "batch", "iteration", "lr", "samples_per_sec", "losses": {...},
"time"}`` per log interval and ``{"type": "val", "epoch", "iteration",
"metrics": {...}, "time"}`` per validation. ``batch`` is the 0-based index
of the interval's last batch in its epoch (as in the text log),
``iteration`` the optimizer steps done in total, ``losses`` the interval's
mean of each loss. A non-finite number is written as null. ``{save_prefix}_curves.png``
is drawn from it (`curves.CurvesHook`).

TensorBoard (``logdir``): ``train/<loss>``, ``train/lr``,
``train/samples_per_sec`` and ``val/<metric>`` against the iteration; with
``config.tb_images``, ``train/images/<k>``: training images with their boxes
(`batch_images.BatchImagesHook`).

The console shows a tqdm bar per epoch (samples/s, losses and lr refreshed
every log interval) when stderr is a terminal, and the log lines always.
"""
import json
import logging
import math
import os
import sys
import time

import tqdm

from ..optional import require

LOGGER_NAME = 'gluondet'


class _TqdmHandler(logging.Handler):
    """Console lines that do not break a running progress bar: through the bar in this
    process; on a line of their own from a data loader's process (forked, it does not know
    where the bar is: its warnings about skipped images were written into the bar's line)."""

    def __init__(self):
        super().__init__()
        self._pid = os.getpid()

    def emit(self, record):
        if os.getpid() == self._pid:
            tqdm.tqdm.write(self.format(record), file=sys.stderr)
        else:
            sys.stderr.write('\n%s\n' % self.format(record))
            sys.stderr.flush()


class Reporter:
    """Owns the console bar and the log files of one training run.

    Parameters
    ----------
    save_prefix : str
    logdir : str
        TensorBoard directory; ``''`` for none.
    enabled : bool
        False on processes other than rank 0: nothing is written.
    """

    def __init__(self, save_prefix, logdir='', enabled=True):
        self.log_path = save_prefix + '_train.log'
        self.jsonl_path = save_prefix + '_metrics.jsonl'
        self.logdir = logdir
        self.enabled = enabled
        self.logger = logging.getLogger(LOGGER_NAME)
        self._handlers = []
        self._saved_logger = None
        self._jsonl = None
        self._tb = None
        self._bar = None

    def __enter__(self):
        """Route the ``gluondet`` logger to the console and ``_train.log`` until exit."""
        if self.enabled:
            os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
            self._handlers = [logging.FileHandler(self.log_path), _TqdmHandler()]
            self._saved_logger = (self.logger.level, self.logger.propagate)
            self.logger.setLevel(logging.INFO)
            self.logger.propagate = False
            for handler in self._handlers:
                handler.setFormatter(logging.Formatter('%(message)s'))
                self.logger.addHandler(handler)
        return self

    def __exit__(self, *exc):
        self.end_epoch()
        if self._jsonl:
            self._jsonl.close()
        if self._tb:
            self._tb.close()
        self._jsonl = self._tb = None
        for handler in self._handlers:
            self.logger.removeHandler(handler)
            handler.close()
        if self._saved_logger:
            self.logger.setLevel(self._saved_logger[0])
            self.logger.propagate = self._saved_logger[1]
        self._handlers, self._saved_logger = [], None

    def start_metrics(self, jsonl_offset=None, purge_step=None):
        """Open the jsonl file and TensorBoard writer.

        Parameters
        ----------
        jsonl_offset : int, optional
            Resuming: cut the jsonl file to this size (what the checkpoint had
            seen) and append. None starts a new file.
        purge_step : int, optional
            Resuming: TensorBoard hides this run's older events from this step on.
        """
        if not self.enabled:
            return
        if jsonl_offset is None:
            self._jsonl = open(self.jsonl_path, 'w')
        else:
            if os.path.exists(self.jsonl_path):
                os.truncate(self.jsonl_path, min(jsonl_offset, os.path.getsize(self.jsonl_path)))
            self._jsonl = open(self.jsonl_path, 'a')
        if self.logdir:
            tensorboard = require('tensorboardX', 'TensorBoard logging (--logdir)')
            self._tb = tensorboard.SummaryWriter(self.logdir, purge_step=purge_step)

    def jsonl_offset(self):
        """Bytes written to the jsonl file so far (None before it is open)."""
        return self._jsonl.tell() if self._jsonl else None

    def info(self, message):
        if self.enabled:
            self.logger.info(message)

    def train(self, record):
        """One log interval: text line, jsonl record, TensorBoard scalars, bar postfix."""
        losses = ', '.join('%s=%.3f' % kv for kv in record['losses'].items())
        self.info('[Epoch %d][Batch %d], Speed: %.3f samples/sec, %s, lr=%.6f' % (
            record['epoch'], record['batch'], record['samples_per_sec'], losses, record['lr']))
        self._write(dict(type='train', **record))
        scalars = {'train/' + k: v for k, v in record['losses'].items()}
        scalars.update({'train/lr': record['lr'], 'train/samples_per_sec':
                        record['samples_per_sec']})
        self._scalars(scalars, record['iteration'])
        if self._bar is not None:
            self._bar.set_postfix_str('%.1f samples/s, %s, lr=%.2e' % (
                record['samples_per_sec'], losses, record['lr']), refresh=False)

    def epoch_summary(self, epoch, seconds, losses):
        """GluonCV's end-of-epoch line."""
        text = ''.join(', %s=%.3f' % kv for kv in losses.items())
        self.info('[Epoch %d] Training cost: %.3f%s' % (epoch, seconds, text))

    def validation(self, epoch, iteration, metrics):
        """One validation: text lines, jsonl record, TensorBoard scalars."""
        lines = '\n'.join('%s=%s' % kv for kv in metrics.items())
        self.info('[Epoch %d] Validation: \n%s' % (epoch, lines))
        self._write({'type': 'val', 'epoch': epoch, 'iteration': iteration, 'metrics': metrics})
        self._scalars({'val/' + k: v for k, v in metrics.items()}, iteration)

    def start_epoch(self, epoch, total, initial):
        """Show a progress bar for ``total`` steps, ``initial`` of them done."""
        if self.enabled:
            self._bar = tqdm.tqdm(total=total, initial=initial, desc='Epoch %d' % epoch,
                                  unit='step', file=sys.stderr, disable=None, dynamic_ncols=True)

    def advance(self):
        """One step done."""
        if self._bar is not None:
            self._bar.update(1)

    def end_epoch(self):
        """Close the progress bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def has_tensorboard(self):
        """Whether TensorBoard events are written (the first process, with a ``logdir``)."""
        return self._tb is not None

    def images(self, tag, images, step):
        """``(image, boxes, names)`` triples (``H x W x 3`` uint8 RGB, ``N x 4`` pixel boxes,
        N class names) as TensorBoard images ``tag/0``, ``tag/1``, ... with the boxes drawn."""
        if not self._tb:
            return
        import numpy as np
        for k, (image, boxes, names) in enumerate(images):
            boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
            self._tb.add_image_with_boxes('%s/%d' % (tag, k), np.asarray(image), boxes, step,
                                          dataformats='HWC', labels=list(names) or None)
        self._tb.flush()

    def _write(self, record):
        if self._jsonl:
            record = dict(record, time=round(time.time(), 3))
            self._jsonl.write(json.dumps(_finite(record), allow_nan=False) + '\n')
            self._jsonl.flush()

    def _scalars(self, scalars, step):
        if self._tb:
            for tag, value in scalars.items():
                if isinstance(value, (int, float)):
                    self._tb.add_scalar(tag, value, step)
            self._tb.flush()


def _finite(value):
    """``value`` with NaN and infinities replaced by None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value
