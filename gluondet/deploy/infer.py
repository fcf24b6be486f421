"""What ``gluondet infer`` does: detect objects in images, videos, cameras and streams.

Sources are those of :func:`gluondet.deploy.streams.open_source`: an image file, a folder, a
glob, a video file, a camera, a stream URL. Outputs:

- ``--output``, for image files, ``detections.json`` by default: COCO results, ``[{image_id,
  category_id, bbox: [x, y, w, h], score}]``, what ``pycocotools``' ``COCO.loadRes`` and
  :func:`gluondet.metrics.coco_evaluate` read. ``image_id`` is the image's 1-based position
  in the sorted input list (an int, as COCO tools expect; an unreadable image leaves its
  number unused, so ids do not depend on which files could be read). ``category_id`` is the
  1-based index into the model's classes. ``bbox`` is written with
  :func:`gluondet.data.coco.xyxy_to_coco` (``[xmin, ymin, xmax - xmin + 1, ymax - ymin +
  1]``, as GluonCV writes detections), the inverse of how gluondet and GluonCV read COCO
  boxes, so reading the results back gives the detected boxes. A model with masks (Mask
  R-CNN) adds ``segmentation``: the mask pasted in the image (:func:`gluondet.masks.paste`,
  above 0.5) as a compressed RLE ``{size: [height, width], counts: str}``. Beside it,
  ``detections_images.json``: a COCO dataset file (``images`` with id, file name relative to
  the images' folder, width and height; ``categories``; no annotations) naming those ids, so
  that ``COCO('detections_images.json').loadRes('detections.json')`` works.
- ``--output`` ending in ``.jsonl``, the only kind (and ``detections.jsonl`` the default) for
  a video, camera or stream: JSON lines, one object per frame (image) in the order read,
  ``{"frame": index, "time": seconds or null, "source": video or image file, "width",
  "height", "detections": [{"bbox": [xmin, ymin, xmax, ymax], "score", "class_id",
  "class", "track_id"}]}``: boxes in the frame's pixels (0.01 px), ``class_id`` the 0-based
  index into the model's classes, ``track_id`` with ``track`` only (-1: not tracked),
  ``segmentation`` for a model with masks (the COCO results' RLE), then any other field of
  the model's.
  ``frame`` and ``time`` are those of :class:`~gluondet.deploy.streams.Frame`.
- ``--kitti-labels DIR``: a file per image, ``{image stem}.txt``, or per frame,
  ``{video stem}_{frame:06d}.txt`` (empty if nothing was found), a line per detection,
  ``Class 0 0 0 x1 y1 x2 y2 0 0 0 0 0 0 0 score``, boxes in 0-based pixels as KITTI's,
  clipped to the image, spaces in class names as ``_``.
- ``--visualize DIR``: each image under its own file name, or each frame as
  ``{stem}_{frame:06d}.jpg``, with the boxes scoring at least ``--threshold``, class
  names, track ids and scores drawn, and their masks filled in their boxes' colours.
- ``--save-video FILE`` (``.mp4``, or ``.avi`` for Motion JPEG), for a video, camera or
  stream: the frames drawn so, at the source's size and frame rate (divided by the stride).

The json, JSON lines and KITTI outputs hold every detection the model returns (its own
score threshold is 0.01, or ``min_score``); only the drawing applies ``--threshold``.
Every file is written to a temporary name and renamed when complete: a KITTI label or
drawn image at once, the JSON lines and the video when the source ends, when SIGINT
(Ctrl-C) or SIGTERM stops the reading (the frames read so far are finished first; a second
Ctrl-C stops at once, still closing the files), or on an error.
"""
import contextlib
import json
import os
import signal
import threading
import time

import cv2
from tqdm import tqdm

from ..data.kitti import check_unique_stems
from ..files import atomic_write, naming, remove_if_exists
from ..inference_flags import TRACK_SETTINGS
from ..visualize import draw_detections, save_image
from .predictor import Predictor
from .streams import open_source
from .loop import detect_frames
from .views import wrap

__all__ = ['infer', 'frame_setup', 'detect_frames', 'json_line',
           'Stop', 'stop_signals', 'VIDEO_FOURCC']

VIDEO_FOURCC = {'.mp4': 'mp4v', '.avi': 'MJPG'}
DEFAULT_FPS = 30.0      # of a saved video, and the tracker's, when the source does not say


def write_json(path, data):
    """``data`` as a json file, written atomically (its folder made)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, json.dumps(data))


def json_line(frame, detections, classes):
    """The JSON lines object of one :class:`~gluondet.deploy.streams.Frame` (see the module
    docstring); each detection carries every field of ``detections``
    (:meth:`~gluondet.detections.Detections.json_objects`: masks as RLEs)."""
    height, width = frame.image.shape[:2]
    return {'frame': frame.index, 'time': None if frame.time is None else round(frame.time, 4),
            'source': frame.name, 'width': width, 'height': height,
            'detections': detections.json_objects(classes, (width, height))}


# ---------------------------------------------------------------- stopping

class Stop:
    """The stop signal received (``signum``: None until one arrives)."""

    signum = None

    def __call__(self):
        """Whether a stop signal arrived."""
        return self.signum is not None

    def handle(self, signum, frame):
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt     # a second Ctrl-C: at once
        self.signum = self.signum or signum


@contextlib.contextmanager
def stop_signals(stop):
    """Inside, SIGINT and SIGTERM set ``stop.signum`` (a :class:`Stop`) instead of ending
    the process, so that a reading loop stops and closes its files; a second SIGINT raises
    KeyboardInterrupt. Handlers go in the main thread only, also over a SIGINT inherited
    ignored (a job started with ``&`` from a script gets it so), as `gluondet train`'s."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, stop.handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# ---------------------------------------------------------------- outputs

class _LinesFile:
    """JSON lines written to ``{path}.tmp{pid}``, flushed a line at a time, renamed to
    ``path`` when closed."""

    def __init__(self, path):
        self.path, self.tmp = path, '%s.tmp%d' % (path, os.getpid())
        try:
            self.file = open(self.tmp, 'w')
        except OSError as err:
            raise naming(err, self.tmp, path) from None

    def write(self, obj):
        self.file.write(json.dumps(obj) + '\n')
        self.file.flush()

    def close(self):
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.path)


class _VideoFile:
    """A video written with OpenCV to a temporary name beside ``path``, renamed when closed.

    Opened on the first frame, at ``size`` (``(width, height)``, default the first frame's);
    frames of another size are resized to it."""

    def __init__(self, path, fps, size):
        self.path, self.fps, self.size = path, fps, size
        stem, ext = os.path.splitext(path)
        self.tmp = '%s.tmp%d%s' % (stem, os.getpid(), ext)
        self.writer = None

    def write(self, rgb):
        if self.writer is None:
            self.size = self.size or rgb.shape[1::-1]
            fourcc = cv2.VideoWriter_fourcc(*VIDEO_FOURCC[os.path.splitext(self.path)[1].lower()])
            self.writer = cv2.VideoWriter(self.tmp, fourcc, self.fps, tuple(self.size))
            if not self.writer.isOpened():
                raise OSError('--save-video: OpenCV cannot write %s' % self.path)
        if rgb.shape[1::-1] != tuple(self.size):
            rgb = cv2.resize(rgb, tuple(self.size))
        self.writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))

    def close(self):
        if self.writer is not None:
            self.writer.release()
            os.replace(self.tmp, self.path)


class _Outputs:
    """The files of one infer run (see the module docstring); ``close`` completes them."""

    def __init__(self, frames, classes, output, kitti_labels, visualize, save_video, threshold):
        self.frames, self.classes, self.threshold = frames, classes, threshold
        self.kitti_labels, self.visualize = kitti_labels, visualize
        self.count = self.detections = 0
        self.coco = None if output.lower().endswith('.jsonl') else ([], [])
        for path in (output, save_video):
            if path:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        for folder in (kitti_labels, visualize):
            if folder:
                os.makedirs(folder, exist_ok=True)
        self.output = output
        self.lines = None if self.coco is not None else _LinesFile(output)
        fps = (frames.fps or DEFAULT_FPS) / frames.stride
        self.video = save_video and _VideoFile(save_video, fps, frames.size)

    def _name(self, frame, ext):
        """A frame's output file name: an image's own stem, a video's stem and frame."""
        if self.frames.kind == 'images':
            return os.path.splitext(os.path.basename(frame.name))[0] + ext
        return '%s_%06d%s' % (self.frames.stem, frame.index, ext)

    def write(self, frame, found):
        """Write one frame's detections to every output."""
        self.count += 1
        self.detections += len(found)
        track_ids = found.get('track_ids')
        if self.lines is not None:
            self.lines.write(json_line(frame, found, self.classes))
        else:
            height, width = frame.image.shape[:2]
            self.coco[0].append({'id': frame.index + 1, 'file_name': frame.name,
                                 'width': width, 'height': height})
            self.coco[1].extend(found.coco_results(frame.index + 1, (width, height)))
        if self.kitti_labels:
            lines = found.kitti_lines(self.classes, frame.image.shape[1::-1])
            atomic_write(os.path.join(self.kitti_labels, self._name(frame, '.txt')),
                         ''.join(line + '\n' for line in lines))
        if self.visualize or self.video:
            labels = None if track_ids is None else ['#%d' % t if t >= 0 else ''
                                                     for t in track_ids]
            drawn = draw_detections(frame.image, found, self.classes, self.threshold, labels)
            if self.visualize:
                name = (os.path.basename(frame.name) if self.frames.kind == 'images'
                        else self._name(frame, '.jpg'))
                save_image(os.path.join(self.visualize, name), drawn)
            if self.video:
                self.video.write(drawn)

    def close(self):
        """Complete the files; the written ones (or None if no frame was read)."""
        if self.video:
            self.video.close()
        if self.lines is not None:
            if not self.count:
                self.lines.file.close()
                remove_if_exists(self.lines.tmp)
                return None
            self.lines.close()
            return [self.output] + ([self.video.path] if self.video else [])
        if not self.count:
            return None
        entries, results = self.coco
        root = os.path.commonpath([os.path.dirname(os.path.abspath(e['file_name']))
                                   for e in entries])
        for entry in entries:
            entry['file_name'] = os.path.relpath(entry['file_name'], root)
        index = os.path.splitext(self.output)[0] + '_images.json'
        write_json(index, {'images': entries, 'annotations': [],
                           'categories': [{'id': i + 1, 'name': name}
                                          for i, name in enumerate(self.classes)]})
        write_json(self.output, results)
        return [self.output, index]


def _check_outputs(frames, output, save_video):
    """The detections file (its default for the source) after checking the outputs fit it."""
    images = frames.kind == 'images'
    output = output or ('detections.json' if images else 'detections.jsonl')
    if not images and not output.lower().endswith('.jsonl'):
        raise ValueError('--output: a %s gives JSON lines: name a .jsonl file, not %s'
                         % (frames.kind, output))
    if save_video:
        if images:
            raise ValueError('--save-video is for a video, camera or stream; images are drawn '
                             'with --visualize')
        if os.path.splitext(save_video)[1].lower() not in VIDEO_FOURCC:
            raise ValueError('--save-video: a %s file, not %s'
                             % (' or '.join(VIDEO_FOURCC), save_video))
    return output


# ---------------------------------------------------------------- infer

def infer(model, source=None, output=None, batch_size=None, kitti_labels=None, visualize=None,
          threshold=0.3, progress=True, min_score=None, save_video=None, vid_stride=1,
          track=False, reconnect=3, images=None, views=None, nms=None, **model_source):
    """Detect objects in images, a video, a camera or a stream and write them (see the
    module docstring for the sources and formats).

    Parameters
    ----------
    model, **model_source
        A :class:`~gluondet.deploy.sources.ModelSource`, or its ``model`` and its other
        fields by keyword (``backend``, ``params``, ``pretrained``, ``data_shape``,
        ``classes``).
    source : str or int
        See :func:`~gluondet.deploy.streams.open_source`.
    output : str, optional
        The detections file: COCO results ``.json`` (images only; ``{stem}_images.json``
        is written beside it) or JSON lines ``.jsonl``. Default ``detections.json`` for
        images, ``detections.jsonl`` else.
    batch_size : int, optional
        See :meth:`~gluondet.deploy.predictor.Predictor.batch_size`; a live source's
        default is the least batch the model takes (1 mostly: no frame waits for others).
    kitti_labels, visualize : str, optional
        Folders for KITTI label files and drawn images (frames).
    threshold : float
        Least score of a drawn box.
    progress : bool
        Show a progress bar (with frames per second).
    min_score : float, optional
        Leave detections scoring under it out of every output (TAO's ``inference -t``);
        default: keep all.
    save_video : str, optional
        A video, camera or stream drawn into this ``.mp4`` (or ``.avi``) file.
    vid_stride : int
        Keep every ``vid_stride``-th frame (image).
    track : bool or dict
        Give each detection a track id across frames (:class:`~gluondet.deploy.track.
        ByteTrack`, at the source's frame rate divided by the stride); a dict: True, with
        these ByteTrack settings (:data:`gluondet.inference_flags.TRACK_SETTINGS`).
    reconnect : int
        Attempts in a row to open a dropped camera or stream again.
    images : str, optional
        The ``source``, as this argument was named when it took image files only.
    views : ViewOptions, optional
        Sliced inference and test-time augmentation (:mod:`gluondet.deploy.views`).
    nms : NMSOptions, optional
        The final NMS's options (:mod:`gluondet.deploy.nms`); default the model's.

    Returns
    -------
    dict
        ``frames`` (read and detected), ``images`` (for image files: their number),
        ``skipped`` (unreadable image files, as ``(path, problem)``), ``problems`` (warnings
        by kind), ``detections`` (count), ``files`` (written), ``seconds``, ``fps``,
        ``stopped`` (the name of the signal that stopped the reading, or None) and
        ``stages`` (seconds in each of :data:`~gluondet.deploy.timings.STAGES`, also
        printed per frame).
    """
    if (source is None) == (images is None):
        raise ValueError('give the source (or images), once')
    source = images if source is None else source
    predictor = Predictor.from_model(model, nms=nms, **model_source)
    stop = Stop()
    with open_source(source, vid_stride, reconnect, stopped=stop) as frames:
        output = _check_outputs(frames, output, save_video)
        if kitti_labels and frames.kind == 'images':
            check_unique_stems(frames.paths)
        viewed, size, tracker = frame_setup(predictor, frames, views, batch_size, track, stop)
        outputs = _Outputs(frames, predictor.classes, output, kitti_labels, visualize,
                           save_video, threshold)
        start = time.monotonic()
        try:
            with stop_signals(stop):
                _detect(viewed, frames, size, stop, tracker, min_score,
                        outputs, progress)
        finally:
            files = outputs.close()
        seconds = time.monotonic() - start
    return _report(frames, predictor, outputs, files, seconds, stop.signum)


def frame_setup(predictor, frames, views=None, batch_size=None, track=False, stop=None):
    """What reading ``frames`` with ``predictor`` takes: ``(predictor on the views, batch,
    tracker or None)``.

    A live source's default batch is the least the model takes (no frame waits for others);
    the tracker (:class:`~gluondet.deploy.track.ByteTrack`, with ``track``) runs at the
    source's frame rate divided by its stride; a ``stop`` (:class:`Stop`) signal also ends
    the views of an image (a frame of millions of tiles is not waited for).
    """
    size = predictor.batch_size(batch_size or (predictor.batch_range[0] if frames.live
                                               else None))
    tracker = None
    settings = track_keywords(track)
    if settings is not None:
        from .track import ByteTrack
        tracker = ByteTrack(frame_rate=(frames.fps or DEFAULT_FPS) / frames.stride, **settings)
    return wrap(predictor, views, size, stop), size, tracker


def track_keywords(track):
    """The ByteTrack keywords of ``track`` (False, True or a dict of `TRACK_SETTINGS`, empty
    for the defaults), or None for no tracking; a ValueError names a key that is no
    setting."""
    if track is None or track is False:
        return None
    settings = {} if track is True else dict(track)
    unknown = sorted(set(settings) - set(TRACK_SETTINGS))
    if unknown:
        raise ValueError('track: no ByteTrack setting %s (settings: %s)'
                         % (', '.join(map(repr, unknown)), ', '.join(TRACK_SETTINGS)))
    return settings


def _detect(predictor, frames, size, stop, tracker, min_score, outputs, progress):
    """Detect in batches of ``size`` frames until the source ends or ``stop``; track; write."""
    skipped = 0
    with tqdm(total=frames.length, disable=not progress, desc='detect (%s)' % predictor.backend,
              unit='image' if frames.kind == 'images' else 'frame') as bar:
        for frame, detections in detect_frames(predictor, frames, size, stop, tracker,
                                               min_score):
            with predictor.timings('write'):
                outputs.write(frame, detections)
            bar.update(1 + len(frames.skipped) - skipped)
            skipped = len(frames.skipped)


def _report(frames, predictor, outputs, files, seconds, signum):
    """Print what was done; the result of :func:`infer`."""
    images = frames.kind == 'images'
    if not files and not signum:
        raise ValueError('none of the %d images in %s could be read' % (len(frames.paths),
                                                                        frames.name)
                         if images else 'no frame could be read from %s' % frames.name)
    unit = 'image' if images else 'frame'
    fps = outputs.count / seconds if seconds > 0 else 0.0
    where = ('nothing (stopped before the first %s was done)' % unit if not files else
             '%s (image ids in %s)' % tuple(files) if outputs.coco is not None
             else ', '.join(files))
    files = files or []
    problems = ', '.join('%s: %d' % item for item in sorted(frames.problems.items()))
    print('%s: %d detections in %d %ss written to %s%s'
          % (predictor.backend, outputs.detections, outputs.count, unit, where,
             '; unreadable images skipped: %d' % len(frames.skipped) if frames.skipped else ''))
    print('%d %ss in %.1f s: %.1f %ss/s%s%s' % (
        outputs.count, unit, seconds, fps, unit, '; warnings: ' + problems if problems else '',
        '; stopped by %s' % signal.Signals(signum).name if signum else ''))
    if outputs.count:
        print('per %s: %s' % (unit, predictor.timings.per_item(outputs.count)))
    return {'frames': outputs.count, 'images': len(frames.paths) if images else None,
            'skipped': list(frames.skipped), 'problems': dict(frames.problems),
            'detections': outputs.detections, 'files': files, 'seconds': seconds, 'fps': fps,
            'stopped': signal.Signals(signum).name if signum else None,
            'stages': dict(predictor.timings.seconds)}
