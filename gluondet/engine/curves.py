"""``{save_prefix}_curves.png``: the run's losses, learning rate and validation metric
against the epoch, redrawn from its ``_metrics.jsonl`` after every validation (and at the
end of an epoch that logged something since, so a run without validation has them too).

Drawn by `gluondet.plots.draw_curves` on the first process only, written to a temporary
file and renamed. Each drawing parses only the jsonl lines added since the last one.
Without matplotlib the hook logs one warning and draws nothing; a drawing that fails logs
one warning and training goes on: a picture never stops a run.
"""
import os

from .hookbase import HookBase

__all__ = ['CurvesHook']


class CurvesHook(HookBase):
    """Redraws ``{save_prefix}_curves.png`` (see the module docstring).

    Parameters
    ----------
    reporter : Reporter
        Whose metrics file is drawn (``reporter.jsonl_path``).
    save_prefix : str
    metric : str
        The validation metric drawn (``config.val_metric``).
    """

    def __init__(self, reporter, save_prefix, metric='mAP'):
        self.reporter = reporter
        self.path = save_prefix + '_curves.png'
        self.label = os.path.basename(save_prefix)
        self.metric = metric
        self._log = None
        self._drawn_at = None       # size of the jsonl file at the last drawing
        self._off = False
        self._warned = False

    def after_validation(self, epoch, metrics):
        self.draw()

    def after_epoch(self):
        self.draw()

    def draw(self):
        """Redraw if this is the first process and the jsonl grew since the last drawing."""
        if self._off or not self.loop.runtime.is_main:
            return
        written = self.reporter.jsonl_offset()
        if written is None or written == self._drawn_at:
            return
        try:
            from ..plots import MetricsLog, draw_curves     # matplotlib when drawing
            if self._log is None:
                self._log = MetricsLog(self.reporter.jsonl_path)
            curves = self._log.read().curves(self.loop.state.batches_per_epoch)
            draw_curves([(self.label, curves)], self.path, self.metric)
            self._drawn_at = written
        except ImportError as err:
            self._off = True
            self.reporter.info('warning: %s not drawn: %s' % (self.path, err))
        except Exception as err:    # a picture must never stop training
            if not self._warned:
                self.reporter.info('warning: %s not drawn: %s: %s'
                                   % (self.path, type(err).__name__, err))
            self._warned = True
