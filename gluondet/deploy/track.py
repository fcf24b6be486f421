"""Multi-object tracking by detection: ByteTrack (Zhang et al., ECCV 2022).

:class:`ByteTrack` gives each detection of a video frame a track id that stays with its
object across frames. Each track is a Kalman filter over its box (centre x, centre y,
aspect ratio w / h, height, and their velocities: SORT's constant-velocity model, the noise
scaled by the box's height). A frame's detections are matched to the tracks' predicted
boxes by IoU, in ByteTrack's order:

1. detections scoring at least ``track_thresh`` against every confirmed track, those
   tracked in the last frame and those lost within ``track_buffer`` frames (cost
   ``1 - IoU * score``, pairs costing at most ``match_thresh``);
2. detections scoring above ``low_thresh`` but below ``track_thresh`` (an occluded or
   blurred object) against the tracks of the last frame still unmatched (cost ``1 - IoU``,
   at most 0.5); the tracks left are lost;
3. the high-score detections left against the tentative tracks (started in the last
   frame, cost ``1 - IoU * score``, at most 0.7), which then are confirmed and get their
   id; tentative tracks left unmatched are dropped;
4. each high-score detection left, scoring at least ``new_track_thresh``, starts a
   tentative track (on the first frame a confirmed one).

Lost tracks are dropped once unmatched for more than ``track_buffer`` frames at 30 frames
per second (scaled to ``frame_rate``); a track of this frame overlapping a lost track (of
its class, with ``per_class``) by IoU > 0.85 is a duplicate, and the one tracked for the
shorter span (first to last match; the tracked one on a tie) is dropped, as in ByteTrack.
Each assignment is the least-cost one (:func:`scipy.optimize.linear_sum_assignment`), where
leaving a track or a detection unmatched costs half the threshold (what ``lap.lapjv``'s
``cost_limit`` does in ByteTrack and Ultralytics), so a pair costing more than the threshold
never matches.

Ids start at 1 and are never reused; a track gets its id when it is confirmed, so the
ids reported are consecutive. Matching is across classes by default, as in ByteTrack and
Ultralytics (a detector that hesitates between two classes keeps one track);
``per_class=True`` matches only detections and tracks of one class.
"""
import numpy as np
from scipy.optimize import linear_sum_assignment

from ..bbox import bbox_iou

__all__ = ['ByteTrack']

SECOND_MATCH_THRESH = 0.5       # ByteTrack's cost limits of steps 2 and 3
TENTATIVE_MATCH_THRESH = 0.7
DUPLICATE_IOU = 0.85
NEW_TRACK_MARGIN = 0.1          # ByteTrack's det_thresh = track_thresh + 0.1

# Kalman filter noise, relative to the box's height (SORT / DeepSORT's).
_STD_POSITION = 1. / 20
_STD_VELOCITY = 1. / 160
_MOTION = np.eye(8) + np.eye(8, k=4)        # x' = x + v, one frame


def _xyah(box):
    """``xmin, ymin, xmax, ymax`` -> centre x, centre y, aspect ratio w / h, height."""
    width, height = box[2] - box[0], box[3] - box[1]
    return np.array([box[0] + width / 2, box[1] + height / 2, width / max(height, 1e-6),
                     height], np.float64)


def _variances(height, position, aspect, velocity=None):
    """Noise variances of x, y, a, h (and their velocities) from standard deviations
    relative to ``height`` (the aspect ratio's absolute)."""
    std = [position * height, position * height, aspect, position * height]
    if velocity is not None:
        std += [velocity * height, velocity * height, 1e-5, velocity * height]
    return np.square(std)


class _Track:
    """One object's Kalman state, id (0 until confirmed) and status."""

    def __init__(self, box, class_id, frame):
        self.mean = np.concatenate([_xyah(box), np.zeros(4)])
        height = self.mean[3]
        self.cov = np.diag(_variances(height, 2 * _STD_POSITION, 1e-2, 10 * _STD_VELOCITY))
        self.id = 0
        self.lost = False
        self.start = self.last = frame
        self.class_id = class_id
        self.detection = None       # index of this frame's detection

    def predict(self):
        if self.lost:
            self.mean[7] = 0        # a lost box stops growing or shrinking
        height = self.mean[3]
        self.mean = _MOTION @ self.mean
        self.cov = (_MOTION @ self.cov @ _MOTION.T
                    + np.diag(_variances(height, _STD_POSITION, 1e-2, _STD_VELOCITY)))

    def update(self, box, class_id, frame, detection):
        # x, y, a and h never mix (each moves by its own velocity, the noise is diagonal),
        # so the innovation covariance is diagonal: no matrix to invert (LAPACK's solve of
        # a 4 x 4 took milliseconds on a busy machine, OpenBLAS starting its threads)
        innovation = self.cov.diagonal()[:4] + _variances(self.mean[3], _STD_POSITION, 1e-1)
        gain = self.cov[:, :4] / innovation
        self.mean = self.mean + gain @ (_xyah(box) - self.mean[:4])
        self.cov = self.cov - (gain * innovation) @ gain.T
        self.lost = False
        self.last = frame
        self.class_id, self.detection = class_id, detection

    @property
    def box(self):
        """The predicted (or last updated) box, ``xmin, ymin, xmax, ymax``."""
        x, y, aspect, height = self.mean[:4]
        width = aspect * height
        return np.array([x - width / 2, y - height / 2, x + width / 2, y + height / 2])


def _assign(cost, thresh):
    """Pairs ``(row, column)`` of the least total cost, each at most ``thresh``.

    Leaving a row or a column unmatched costs ``thresh / 2``, so a pair is taken
    only where it costs less than leaving both unmatched.
    """
    rows, cols = cost.shape
    if rows == 0 or cols == 0:
        return []
    full = np.zeros((rows + cols, cols + rows))
    full[:rows, :cols] = np.where(cost <= thresh, cost, np.inf)
    full[:rows, cols:] = thresh / 2
    full[rows:, :cols] = thresh / 2
    matched = zip(*linear_sum_assignment(full))
    return [(r, c) for r, c in matched if r < rows and c < cols]


class ByteTrack:
    """Track ids for each frame's detections (see the module docstring).

    The names are ByteTrack's; Ultralytics' ``bytetrack.yaml`` calls ``track_thresh``
    ``track_high_thresh`` and ``low_thresh`` ``track_low_thresh``.

    Parameters
    ----------
    frame_rate : float, default 30
        Frames per second of the video (scales ``track_buffer``).
    track_thresh : float, default 0.5
        Detections scoring at least this are matched first and may start tracks.
    low_thresh : float, default 0.1
        Detections scoring above this but below ``track_thresh`` only continue tracks
        of the last frame; lower ones are ignored.
    match_thresh : float, default 0.8
        Largest cost ``1 - IoU * score`` of a match of the first association.
    track_buffer : int, default 30
        Frames (at 30 per second) a lost track is kept to be found again.
    new_track_thresh : float, optional
        Score a detection needs to start a track; default ``track_thresh + 0.1``
        (ByteTrack's; Ultralytics' default is ``track_thresh``).
    fuse_score : bool, default True
        The first and third associations' cost is ``1 - IoU * score`` (ByteTrack's
        and Ultralytics' default), else ``1 - IoU``.
    per_class : bool, default False
        Match detections only to tracks of their class.
    """

    def __init__(self, frame_rate=30, track_thresh=0.5, low_thresh=0.1, match_thresh=0.8,
                 track_buffer=30, new_track_thresh=None, fuse_score=True, per_class=False):
        if new_track_thresh is None:
            new_track_thresh = min(track_thresh + NEW_TRACK_MARGIN, 1.)
        for name, value in (('track_thresh', track_thresh), ('low_thresh', low_thresh),
                            ('match_thresh', match_thresh),
                            ('new_track_thresh', new_track_thresh)):
            if not 0 <= value <= 1:
                raise ValueError('ByteTrack: %s must be in [0, 1], got %r' % (name, value))
        if low_thresh > track_thresh:
            raise ValueError('ByteTrack: low_thresh (%r) must not exceed track_thresh (%r)'
                             % (low_thresh, track_thresh))
        if not frame_rate > 0:
            raise ValueError('ByteTrack: frame_rate must be positive, got %r' % (frame_rate,))
        if track_buffer < 0:
            raise ValueError('ByteTrack: track_buffer must be >= 0, got %r' % (track_buffer,))
        self.track_thresh, self.low_thresh = track_thresh, low_thresh
        self.match_thresh, self.new_track_thresh = match_thresh, new_track_thresh
        self.fuse_score, self.per_class = fuse_score, per_class
        self.max_lost = int(frame_rate / 30. * track_buffer)
        self.reset()

    def reset(self):
        """Forget every track and start the ids at 1 again (a new video)."""
        self.tracks = []
        self.frame = 0
        self.last_id = 0

    def track(self, detections):
        """One frame's :class:`~gluondet.detections.Detections` with their ``track_ids``
        field (see :meth:`update`)."""
        return detections.replace(track_ids=self.update(detections))

    def update(self, detections):
        """Track one frame's detections.

        Parameters
        ----------
        detections : Detections
            The frame's :class:`~gluondet.detections.Detections` (``ids``,
            ``scores``, ``boxes`` in pixels); a frame without detections too.

        Returns
        -------
        numpy.ndarray
            int64, one per detection: its track's id, or -1 for a detection not
            tracked (scoring below ``low_thresh``, unmatched, or the first frame of a
            tentative track).
        """
        boxes = np.asarray(detections.boxes, np.float64).reshape(-1, 4)
        scores = np.asarray(detections.scores, np.float64).reshape(-1)
        classes = np.asarray(detections.ids).reshape(-1)
        self.frame += 1
        for track in self.tracks:
            track.predict()
            track.detection = None
        high = np.flatnonzero(scores >= self.track_thresh)
        low = np.flatnonzero((scores > self.low_thresh) & (scores < self.track_thresh))
        confirmed = [t for t in self.tracks if t.id]
        tentative = [t for t in self.tracks if not t.id]

        found = boxes, scores, classes
        left, high = self._match(confirmed, high, found, self.match_thresh, self.fuse_score)
        recent = [t for t in left if not t.lost]
        for track in self._match(recent, low, found, SECOND_MATCH_THRESH, False)[0]:
            track.lost = True
        unmatched, high = self._match(tentative, high, found, TENTATIVE_MATCH_THRESH,
                                      self.fuse_score)
        dropped = set(unmatched)
        for track in tentative:
            if track not in dropped:
                self._confirm(track)
        for i in high[scores[high] >= self.new_track_thresh]:
            track = _Track(boxes[i], classes[i], self.frame)
            track.detection = i
            self.tracks.append(track)
            if self.frame == 1:
                self._confirm(track)
        dropped.update(t for t in self.tracks if t.lost and self.frame - t.last > self.max_lost)
        dropped.update(self._duplicates())
        self.tracks = [t for t in self.tracks if t not in dropped]

        track_ids = np.full(len(scores), -1, np.int64)
        for track in self.tracks:
            if track.id and track.detection is not None:
                track_ids[track.detection] = track.id
        return track_ids

    def _confirm(self, track):
        self.last_id += 1
        track.id = self.last_id

    def _match(self, tracks, chosen, found, thresh, fuse):
        """Update ``tracks`` with their matches among the detections ``chosen`` (indices
        into ``found``: boxes, scores, class ids).

        Returns the tracks left unmatched (list) and the detections left (array).
        """
        if not tracks or not len(chosen):
            return tracks, chosen
        boxes, scores, classes = found
        similarity = bbox_iou(np.stack([t.box for t in tracks]), boxes[chosen])
        if fuse:
            similarity = similarity * scores[chosen]
        cost = 1 - similarity
        if self.per_class:
            cost[np.array([t.class_id for t in tracks])[:, None] != classes[chosen]] = np.inf
        pairs = _assign(cost, thresh)
        for row, col in pairs:
            i = chosen[col]
            tracks[row].update(boxes[i], classes[i], self.frame, i)
        rows = {r for r, _ in pairs}
        cols = {c for _, c in pairs}
        return ([t for r, t in enumerate(tracks) if r not in rows],
                np.array([i for c, i in enumerate(chosen) if c not in cols], np.int64))

    def _duplicates(self):
        """Of each tracked and lost pair overlapping by IoU > 0.85 (of one class if
        ``per_class``), the one tracked for the shorter span (first to last match), the
        tracked one on a tie: ByteTrack's rule."""
        tracked = [t for t in self.tracks if not t.lost]
        lost = [t for t in self.tracks if t.lost]
        if not tracked or not lost:
            return []
        overlap = bbox_iou(np.stack([t.box for t in tracked]), np.stack([t.box for t in lost]))
        shorter = []
        for i, j in zip(*np.nonzero(overlap > DUPLICATE_IOU)):
            if not self.per_class or tracked[i].class_id == lost[j].class_id:
                a, b = tracked[i], lost[j]
                shorter.append(b if a.last - a.start > b.last - b.start else a)
        return shorter
