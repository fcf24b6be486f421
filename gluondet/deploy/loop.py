"""The frame loop: a source's frames in batches through a predictor, in order.

Every reading of images runs it: ``gluondet infer`` and ``Detector.predict`` on a video,
camera, stream, folder or list of files and arrays, and :meth:`Predictor.predict
<gluondet.deploy.predictor.Predictor.predict>` (a list of :class:`~gluondet.deploy.streams.
ImageFiles`). Each batch's detections come from the predictor's ``detect`` (a
:class:`~gluondet.deploy.predictor.Predictor`, or a :class:`~gluondet.deploy.views.
ViewPredictor` around one), then the tracker and the ``min_score`` cut.
"""

__all__ = ['Abandoned', 'detect_frames']


class Abandoned(Exception):
    """The ``stopped`` callable of a :class:`~gluondet.deploy.views.ViewPredictor` turned
    true within a call: its views' detections are not given."""


def detect_frames(predictor, frames, size, stop=None, tracker=None, min_score=None):
    """The detections of a source's frames, run in batches of ``size``, in order.

    Parameters
    ----------
    predictor : Predictor or ViewPredictor
    frames : Source
        Of :func:`~gluondet.deploy.streams.open_source`.
    size : int
        The batch.
    stop : Stop, optional
        A stop signal ends the reading after the frames read so far (those of a batch
        whose views it abandoned, :class:`Abandoned`, are left out).
    tracker : ByteTrack, optional
        Gives each detection its ``track_ids`` field (before ``min_score``, which the
        tracker's second association needs).
    min_score : float, optional
        Leave detections scoring under it out.

    Yields
    ------
    (Frame, Detections)
    """
    timings = predictor.timings
    for batch in _batches(frames, size, stop, timings):
        try:
            found = predictor.detect([frame.image for frame in batch], size)
        except Abandoned:
            return
        for frame, detections in zip(batch, found):
            if tracker is not None:
                with timings('track'):
                    detections = tracker.track(detections)
            if min_score is not None:
                detections = detections.above(min_score)
            yield frame, detections


def _batches(frames, size, stop, timings):
    """Lists of up to ``size`` frames, ending early (with the frames read) on a stop signal;
    the time of reading them counts to ``timings``' ``read``."""
    batch = []
    frames = iter(frames)
    while True:
        with timings('read'):
            frame = next(frames, None)
        if frame is None:
            break
        batch.append(frame)
        stopped = stop is not None and stop.signum
        if len(batch) == size or stopped:
            yield batch
            batch = []
            if stopped:
                return
    if batch:
        yield batch
