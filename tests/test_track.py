"""ByteTrack (gluondet.deploy.track): objects moving on known paths keep their ids.

Each test makes the detections of objects on straight paths (seeded noise in position and
score, frames where an object is missed, hidden or seen with a low score), shuffled in
each frame, runs the tracker and checks the id every object gets in every frame, exactly.
The end-to-end check with a trained detector on a video is in test_demo_learning.py.
"""
import collections
import re

import numpy as np
import pytest

from gluondet.detections import Detections
from gluondet.deploy.track import ByteTrack, _assign

Thing = collections.namedtuple('Thing', ['box', 'velocity', 'frames', 'score', 'class_id'])
Thing.__new__.__defaults__ = (0.9, 0)
Thing.__doc__ = """An object: its box at frame 0 (xmin, ymin, xmax, ymax), moving by
``velocity`` (dx, dy) a frame, detected in ``frames``, with ``score`` (a number or a function
of the frame) and ``class_id``."""


def box_at(thing, frame):
    dx, dy = thing.velocity
    return np.asarray(thing.box, np.float64) + frame * np.array([dx, dy, dx, dy])


def track(things, num_frames, tracker=None, noise=0., seed=0, extra=()):
    """Run ``tracker`` (default ByteTrack()) over the frames; ``{name: {frame: id}}``.

    ``noise``: standard deviation in pixels of each coordinate; the scores get +- 0.05.
    ``extra``: ``(frame, box, score)`` detections of no object (false positives).
    """
    tracker = ByteTrack() if tracker is None else tracker
    rng = np.random.default_rng(seed)
    found = {name: {} for name in things}
    for frame in range(num_frames):
        rows = [(None, box, score, 0) for at, box, score in extra if at == frame]
        for name, thing in things.items():
            if frame in thing.frames:
                score = thing.score(frame) if callable(thing.score) else thing.score
                if noise:
                    score = float(np.clip(score + rng.uniform(-0.05, 0.05), 0, 1))
                box = box_at(thing, frame) + rng.normal(0, noise, 4)
                rows.append((name, box, score, thing.class_id))
        rows = [rows[i] for i in rng.permutation(len(rows))]
        detections = Detections(np.array([r[3] for r in rows], np.int64),
                                np.array([r[2] for r in rows], np.float32),
                                np.array([r[1] for r in rows], np.float32).reshape(-1, 4))
        ids = tracker.update(detections)
        assert ids.dtype == np.int64 and ids.shape == (len(rows),)
        for (name, _, _, _), track_id in zip(rows, ids):
            if name is not None:
                found[name][frame] = int(track_id)
            else:
                found.setdefault('extra', {})[frame] = int(track_id)
    return found


def ids(track_id, frames, first=None):
    """``{frame: track_id}``, with -1 at ``first`` (a tentative track's first frame)."""
    return {f: (-1 if f == first else track_id) for f in frames}


def test_objects_on_straight_lines_keep_their_ids_from_the_first_frame():
    things = {'a': Thing((10, 10, 50, 50), (4, 0), range(40)),
              'b': Thing((10, 200, 70, 240), (3, -2), range(40)),
              'c': Thing((400, 300, 430, 380), (-5, -3), range(40))}
    found = track(things, 40)
    assert {found[name][0] for name in things} == {1, 2, 3}   # confirmed on the first frame
    for name in things:
        assert found[name] == ids(found[name][0], range(40))


def test_two_objects_crossing_keep_their_ids():
    """Boxes of the same size cross head on (IoU up to 0.78 at the crossing)."""
    things = {'right': Thing((0, 100, 40, 140), (6, 0), range(60)),
              'left': Thing((360, 105, 400, 145), (-6, 0), range(60))}
    found = track(things, 60, noise=1.0)
    assert {found['right'][0], found['left'][0]} == {1, 2}
    for name in things:
        assert found[name] == ids(found[name][0], range(60))


def test_a_hidden_object_gets_its_id_back_within_the_buffer_and_a_new_one_after():
    gap = set(range(15, 27))                      # 12 frames hidden, moving on
    things = {'a': Thing((10, 10, 60, 60), (5, 2), set(range(60)) - gap),
              'b': Thing((300, 300, 360, 340), (-2, -1), range(60))}
    found = track(things, 60, noise=1.0)
    assert found['a'] == ids(found['a'][0], set(range(60)) - gap)
    assert found['b'] == ids(3 - found['a'][0], range(60))
    # at 15 frames a second, a 30-frame buffer keeps a track 15 frames: 12 is within
    assert track(things, 60, ByteTrack(frame_rate=15), noise=1.0) == found
    # at 10, 10 frames: the object comes back as a new track (id 3, never a reused one)
    found = track(things, 60, ByteTrack(frame_rate=10), noise=1.0)
    before, after = range(15), range(27, 60)
    assert {f: found['a'][f] for f in before} == ids(found['a'][0], before)
    assert {f: found['a'][f] for f in after} == ids(3, after, first=27)


def test_a_new_object_gets_the_next_id_from_its_second_frame():
    things = {'a': Thing((10, 10, 60, 60), (3, 3), range(50)),
              'new': Thing((500, 20, 540, 80), (-4, 2), range(20, 50))}
    found = track(things, 50, noise=1.0)
    assert found['a'] == ids(1, range(50))
    assert found['new'] == ids(2, range(20, 50), first=20)


def test_noise_missed_detections_and_false_positives_leave_ids_with_their_objects():
    rng = np.random.default_rng(1)
    frames = range(80)
    seen = {name: {f for f in frames if rng.random() > 0.15} | {0} for name in 'abcd'}
    things = {'a': Thing((20, 20, 80, 80), (4, 1), seen['a'], lambda f: 0.7 + 0.2 * (f % 2)),
              'b': Thing((20, 300, 70, 380), (5, -2), seen['b'], 0.8),
              'c': Thing((600, 40, 660, 90), (-3, 3), seen['c'], 0.75),
              'd': Thing((600, 400, 640, 440), (-6, -2), seen['d'], 0.95)}
    clutter = [(f, np.tile(rng.uniform(0, 600, 2), 2) + [0, 0, 30, 30], 0.7)
               for f in range(5, 80, 7)]
    found = track(things, 80, noise=2.0, seed=3, extra=clutter)
    assert {found[n][0] for n in things} == {1, 2, 3, 4}
    for name in things:
        assert found[name] == ids(found[name][0], seen[name]), name
    # a false positive of one frame stays a tentative track: untracked, it takes no id
    assert set(found['extra'].values()) == {-1}


def test_low_score_detections_continue_a_track_through_an_occlusion():
    """Frames 20-34 score 0.3: only the second association (0.1 < score < 0.5) keeps them."""
    def occluded(frame):
        return 0.3 if 20 <= frame < 35 else 0.85
    things = {'a': Thing((10, 10, 60, 60), (4, 2), range(50), occluded),
              'b': Thing((400, 50, 450, 100), (-3, 4), range(50))}
    found = track(things, 50, noise=1.0)
    assert found['a'] == ids(found['a'][0], range(50))
    assert found['b'] == ids(3 - found['a'][0], range(50))
    # without it (low_thresh above 0.3) the occluded frames are untracked; the lost track
    # takes the object back when its score recovers
    found = track(things, 50, ByteTrack(low_thresh=0.4), noise=1.0)
    first = found['a'][0]
    assert found['a'] == {f: (-1 if 20 <= f < 35 else first) for f in range(50)}


@pytest.mark.parametrize('score, tracker, tracked', [
    (0.4, ByteTrack(), False),                        # below track_thresh: never starts one
    (0.55, ByteTrack(), False),                       # below new_track_thresh, 0.5 + 0.1
    (0.55, ByteTrack(new_track_thresh=0.5), True)])
def test_a_track_starts_at_new_track_thresh(score, tracker, tracked):
    found = track({'a': Thing((10, 10, 60, 60), (2, 2), range(20), score)}, 20, tracker)['a']
    assert found == (ids(1, range(20)) if tracked else ids(-1, range(20)))


def test_a_double_detection_leaves_no_second_track_on_the_object():
    """For 4 frames a second box (IoU 0.89) covers the object: it makes track 2. When it
    ends, one of the two tracks is lost on top of the other, and ByteTrack drops the
    younger: the object never carries id 2 (on one frame it is untracked)."""
    things = {'a': Thing((10, 10, 60, 60), (4, 2), range(40), 0.9),
              'twin': Thing((12, 11, 62, 61), (4, 2), range(10, 14), 0.7)}
    found = track(things, 40)
    assert found['twin'] == ids(2, range(10, 14), first=10)
    assert found['a'] == ids(1, range(40), first=14)


def test_a_duplicate_drops_the_track_of_the_shorter_span_not_the_later_start():
    """A lost track (seen 4 frames) that a longer-tracked, later-started one drives over:
    ByteTrack drops the lost one, so the moving object keeps its id (dropping the later
    start would drop the live track and give the object the lost one's id)."""
    things = {'gone': Thing((200, 10, 250, 60), (0, 0), range(4), 0.9),
              'comer': Thing((130, 13, 180, 63), (5, 0), range(2, 30), 0.9)}
    found = track(things, 30)
    assert found['gone'] == ids(1, range(4))
    assert found['comer'] == ids(2, range(2, 30), first=2)


def test_matching_is_across_classes_unless_per_class():
    """A detector that calls the same object a circle, then a square, keeps one track."""
    things = {'a': Thing((10, 10, 60, 60), (4, 2), range(20), 0.9, 0),
              'b': Thing((10, 10, 60, 60), (4, 2), range(20, 40), 0.9, 1)}
    found = track(things, 40)
    assert found['b'] == ids(1, range(20, 40))                   # 'a' seen as class 1 now
    found = track(things, 40, ByteTrack(per_class=True))
    assert found['b'] == ids(2, range(20, 40), first=20)


def test_reset_starts_over():
    tracker = ByteTrack()
    things = {'a': Thing((10, 10, 60, 60), (4, 2), range(10))}
    assert track(things, 10, tracker) == {'a': ids(1, range(10))}
    tracker.reset()
    assert track({'a': Thing((300, 10, 360, 60), (0, 2), range(10))}, 10, tracker) == \
        {'a': ids(1, range(10))}


def test_empty_frames():
    tracker = ByteTrack()
    empty = Detections(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros((0, 4), np.float32))
    assert tracker.update(empty).shape == (0,)
    assert track({'a': Thing((10, 10, 60, 60), (4, 2), range(2, 10))}, 10, tracker) == \
        {'a': ids(1, range(2, 10), first=2)}


def test_assignment_leaves_a_pair_above_the_threshold_unmatched():
    cost = np.array([[0.1, 0.5], [0.2, 0.9]])
    assert sorted(_assign(cost, 0.8)) == [(0, 1), (1, 0)]    # 0.7 beats 0.1 + two unmatched
    assert sorted(_assign(cost, 0.4)) == [(0, 0)]            # (1, 1) costs more than 0.4
    assert _assign(np.zeros((0, 3)), 0.8) == []


@pytest.mark.parametrize('settings, message', [
    (dict(track_thresh=1.5), 'track_thresh must be in [0, 1]'),
    (dict(low_thresh=0.6), 'low_thresh (0.6) must not exceed track_thresh (0.5)'),
    (dict(frame_rate=0), 'frame_rate must be positive'),
    (dict(track_buffer=-1), 'track_buffer must be >= 0')])
def test_bad_settings_are_named(settings, message):
    with pytest.raises(ValueError, match=re.escape('ByteTrack: ' + message)):
        ByteTrack(**settings)
