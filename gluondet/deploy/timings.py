"""Where inference's time goes: seconds per stage, summed over a run.

A :class:`Timings` is shared by the stages of one pipeline (``gluondet infer``, its
:class:`~gluondet.deploy.predictor.Predictor` and, when slicing or TTA, its
:class:`~gluondet.deploy.views.ViewPredictor`); each stage adds the time it spends, and
the stages do not nest, so their sum is the time of the run they cover. ``infer`` prints
them per frame at the end.
"""
import contextlib
import time

__all__ = ['STAGES', 'Timings']

#: The stages, in a frame's order: decoding the frame; the network's input (resizing,
#: normalizing, a view's crop); the network (the backend's run); scaling the boxes back,
#: host NMS, per-image detections; merging the views; the tracker; the outputs.
STAGES = ('read', 'preprocess', 'network', 'postprocess', 'merge', 'track', 'write')


class Timings:
    """Seconds spent in each of `STAGES` so far."""

    def __init__(self):
        self.seconds = dict.fromkeys(STAGES, 0.0)

    @contextlib.contextmanager
    def __call__(self, stage):
        """Inside, the time counts to ``stage``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start

    def per_item(self, count):
        """``'read 2.1, preprocess 0.8, ... ms'``: the milliseconds of each stage that took
        any time, per one of ``count`` items (frames, images)."""
        if not count:
            return ''
        return ', '.join('%s %.1f' % (stage, 1000 * seconds / count)
                         for stage, seconds in self.seconds.items() if seconds) + ' ms'
