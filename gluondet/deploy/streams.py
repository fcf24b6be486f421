"""Where inference reads its images from: image files, a video file, a camera or a stream.

:func:`open_source` takes what ``gluondet infer --source`` takes:

- an image file, a folder of images (sorted by name, no subfolders) or a glob
  (``'photos/*.jpg'``, sorted; only image files are taken);
- a video file (anything OpenCV decodes: mp4, avi, mkv, mov, ...);
- a camera: its index (``0``) or its device (``/dev/video0``);
- a stream URL: ``rtsp://``, ``rtmp://``, ``http(s)://`` (MJPEG over HTTP, HLS, a video
  file served over HTTP), ``udp://``, ``tcp://``, ``srt://``, read by OpenCV's FFmpeg.

Iterating a source gives :class:`Frame` s, RGB uint8 numpy images with their index and
time; ``stride`` keeps the frames whose index is a multiple of it.

Bad input does not stop the reading: an image file that cannot be decoded, or a video
frame that cannot (OpenCV's read fails, then succeeds again), is a warning, counted in
:attr:`Source.problems`. A video file of known length is read to its end, past corrupt
stretches; one of unknown length ends after three failed reads in a row; a live source (a
camera, or a stream of unknown length) is then opened again, up to ``reconnect`` times in a
row, ``retry_delay`` seconds apart, doubling up to :data:`MAX_RETRY_DELAY`, before it
counts as ended (each drop is a counted warning; a frame read resets the count). A
stream's reads and its opening time out after :data:`READ_TIMEOUT` and
:data:`OPEN_TIMEOUT` seconds. A source that does not exist or cannot be opened at all is
one ``FileNotFoundError`` or ``ValueError`` naming it.
"""
import collections
import glob
import logging
import os
import re
import stat
import time

import cv2
import numpy as np

from ..data.base import IMAGE_EXTENSIONS, DatasetError, read_image

__all__ = ['Frame', 'Source', 'ImageFiles', 'VideoSource', 'open_source', 'STREAM_SCHEMES',
           'as_image', 'image_paths']

logger = logging.getLogger('gluondet.deploy')

STREAM_SCHEMES = ('rtsp', 'rtsps', 'rtmp', 'http', 'https', 'udp', 'tcp', 'srt')
OPEN_TIMEOUT = 10       # seconds to open a stream
READ_TIMEOUT = 5        # seconds a stream's read waits for a frame
FAILED_READS = 3        # failed reads in a row that end a video or drop a live source
MAX_RETRY_DELAY = 30    # seconds: the longest wait before opening a dropped source again

Frame = collections.namedtuple('Frame', ['index', 'name', 'time', 'image'])
Frame.__doc__ = """One image of a source.

index : int, the frame's number in its video (its timestamp times the frame rate, so
    frames that could not be decoded keep their numbers), counted from 0 from the start of
    a camera or live stream, or the image file's position in the sorted list.
name : str, the image file, or the video's or stream's name; None for an array given.
time : float, the frame's timestamp in a video (seconds from its start), or seconds since
    the camera or live stream was opened; None for image files.
image : ``H x W x 3`` uint8 RGB numpy array.
"""

_URL = re.compile(r'^([a-zA-Z][a-zA-Z0-9+.-]*)://')


class Source:
    """What every source has.

    Attributes
    ----------
    kind : {'images', 'video', 'camera', 'stream'}
    name : str
        As given.
    stem : str
        A file name stem for per-frame outputs (``{stem}_{index:06d}.txt``).
    fps : float or None
        Frames per second of a video, camera or stream (None if unknown, and for images).
    size : (int, int) or None
        ``(width, height)`` of a video's frames (None for images: each its own).
    length : int or None
        Frames the iteration gives, if known (after the stride).
    live : bool
        A camera or a stream of unknown length: reopened when it drops.
    stride : int
    problems : collections.Counter
        Warnings so far by kind (``'unreadable image'``, ``'unreadable frame'``,
        ``'stream drop'``).
    skipped : list of (str, str)
        Image files that could not be read: ``(path, problem)``.
    """

    live = False
    fps = size = length = None

    def __init__(self, kind, name, stem, stride):
        if not isinstance(stride, int) or stride < 1:
            raise ValueError('vid_stride must be a positive integer, got %r' % (stride,))
        self.kind, self.name, self.stem, self.stride = kind, name, stem, stride
        self.problems = collections.Counter()
        self.skipped = []

    def _warn(self, problem, message, *args, count=1):
        self.problems[problem] += count
        logger.warning(message, *args)

    def close(self):
        """Release the capture (nothing for image files)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ImageFiles(Source):
    """Image files (or ``H x W x 3`` uint8 RGB arrays, in a list given from Python), read in
    order; a file that cannot be read is skipped and counted, an array that is no image is
    a ValueError naming its place."""

    def __init__(self, paths, name, stride=1):
        super().__init__('images', name, _stem(name), stride)
        self.paths = paths
        self.length = len(range(0, len(paths), stride))

    def __iter__(self):
        for index in range(0, len(self.paths), self.stride):
            item = self.paths[index]
            if not isinstance(item, (str, os.PathLike)):
                yield Frame(index, None, None, as_image(item, 'input %d' % index))
                continue
            path = os.fspath(item)
            try:
                image = read_image(path).asnumpy()
            except DatasetError as err:
                self.skipped.append((path, err.problem))
                self._warn('unreadable image', 'image skipped: %s', err)
                continue
            yield Frame(index, path, None, image)


def as_image(image, where):
    """An ``H x W x 3`` uint8 numpy image, or ValueError naming ``where``."""
    array = image.asnumpy() if hasattr(image, 'asnumpy') else np.asarray(image)
    if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8 or 0 in array.shape:
        raise ValueError('%s: expected an H x W x 3 uint8 RGB image, got %s %s'
                         % (where, array.dtype, array.shape))
    return array


def image_paths(folder):
    """The image files of ``folder`` (by extension, no subfolders), sorted by name."""
    return _image_files(os.path.join(folder, name) for name in os.listdir(folder))


def _image_files(paths):
    """Those of ``paths`` that are image files (by extension), sorted."""
    return sorted(p for p in paths if p.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(p))


class VideoSource(Source):
    """A video file, camera or stream read with OpenCV (see the module docstring)."""

    def __init__(self, kind, name, target, stride=1, reconnect=3, retry_delay=1.0,
                 stopped=None):
        super().__init__(kind, name, _stem(name) if kind == 'video' else _stream_stem(target),
                         stride)
        self.target, self.reconnect, self.retry_delay = target, reconnect, retry_delay
        self.stopped = stopped or (lambda: False)
        self._capture = self._open()
        if self._capture is None:
            raise ValueError('cannot open %s %s%s' % (
                kind, name, '' if kind != 'camera' else ' (no such camera, or it is busy)'))
        fps = self._capture.get(cv2.CAP_PROP_FPS)
        self.fps = fps if 0 < fps < 1000 else None
        self.size = (int(self._capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
                     int(self._capture.get(cv2.CAP_PROP_FRAME_HEIGHT)))
        count = self._capture.get(cv2.CAP_PROP_FRAME_COUNT)
        finite = 0 < count < 2 ** 53
        self.live = kind == 'camera' or (kind == 'stream' and not finite)
        self._frames = int(count) if finite else None
        self.length = -(-self._frames // stride) if finite else None
        self._opened_at = time.monotonic()
        self._read = 0      # frames read since first opened

    def _open(self):
        """A capture of the target, or None if OpenCV cannot open it (its own messages
        silenced meanwhile: the caller says what failed; FFmpeg's, which say why, stay)."""
        level = cv2.getLogLevel()
        cv2.setLogLevel(0)
        try:
            if self.kind == 'stream':
                capture = cv2.VideoCapture(self.target, cv2.CAP_FFMPEG, [
                    cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, OPEN_TIMEOUT * 1000,
                    cv2.CAP_PROP_READ_TIMEOUT_MSEC, READ_TIMEOUT * 1000])
            else:
                capture = cv2.VideoCapture(self.target)
        finally:
            cv2.setLogLevel(level)
        if capture.isOpened():
            return capture
        capture.release()
        return None

    def __iter__(self):
        failed = drops = 0      # failed reads in a row; openings again in a row
        last = -1               # index of the last frame read
        lost = 0                # frames whose read failed, counted
        while self._capture is not None and not self.stopped():
            if not self._capture.grab():
                failed += 1
                if failed < self._patience(last):
                    continue
                failed = 0
                if not self.live:
                    self._count_unread(lost)
                    return
                self._warn('stream drop', '%s: no frame in %d reads after frame %d (the '
                           'stream dropped or ended)', self.name, FAILED_READS, last)
                if not self._reopen(drops):
                    return
                drops += 1
                continue
            if failed:
                self._warn('unreadable frame', '%s: %d frame%s could not be read after frame %d',
                           self.name, failed, 's' * (failed > 1), last, count=failed)
                lost += failed
            failed = drops = 0
            last, seconds = self._position()
            self._read += 1
            if last % self.stride:
                continue
            ok, bgr = self._capture.retrieve()
            if not ok or bgr is None or bgr.ndim != 3:
                self._warn('unreadable frame', '%s: frame %d could not be decoded', self.name,
                           last)
                continue
            yield Frame(last, self.name, seconds, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))

    def _patience(self, last):
        """Failed reads in a row that end the source after frame ``last``: a video of known
        length goes on to its end (a corrupt stretch fails one read a frame, and decoding
        resumes after it), anything else stops (or reconnects) after `FAILED_READS`."""
        if self.live or self._frames is None:
            return FAILED_READS
        return max(FAILED_READS, self._frames - 1 - last)

    def _count_unread(self, lost):
        """At a video's end: warn of the frames its length has that no read gave nor a
        failed read counted (a stretch the decoder skipped over, a cut-off end)."""
        missing = (self._frames or 0) - self._read - lost
        if missing > 0:
            self._warn('unreadable frame', '%s: ended after %d of its %d frames: %d could not '
                       'be read', self.name, self._read, self._frames, missing, count=missing)

    def _position(self):
        """``(index, time)`` of the frame just read: a video's from its timestamp (so a
        frame lost keeps its number: OpenCV's frame position counts the frames decoded), a
        live source's counted since first opened, and the seconds since then."""
        if self.live:
            return self._read, time.monotonic() - self._opened_at
        seconds = self._capture.get(cv2.CAP_PROP_POS_MSEC) / 1000
        return (round(seconds * self.fps) if self.fps else self._read), seconds

    def _reopen(self, drops):
        """Open a dropped live source again; False once ``reconnect`` attempts in a row
        failed."""
        self._capture.release()
        self._capture = None
        for attempt in range(drops, self.reconnect):
            delay = min(self.retry_delay * 2 ** attempt, MAX_RETRY_DELAY)
            logger.warning('%s: opening it again in %gs (attempt %d of %d)', self.name, delay,
                           attempt + 1, self.reconnect)
            end = time.monotonic() + delay
            while time.monotonic() < end and not self.stopped():
                time.sleep(0.1)
            if self.stopped():
                return False
            self._capture = self._open()
            if self._capture is not None:
                return True
        logger.warning('%s: ended%s', self.name, ' (not back after %d attempts)'
                       % self.reconnect if self.reconnect else '')
        return False

    def close(self):
        if self._capture is not None:
            self._capture.release()
            self._capture = None


def _stem(path):
    return os.path.splitext(os.path.basename(os.path.normpath(path)))[0] or 'frames'


def _stream_stem(target):
    """``camera0``, or a stream URL's last path part (else its host), made a safe file name."""
    if isinstance(target, int):
        return 'camera%d' % target
    parts = [p for p in re.split(r'[/?#]', _URL.sub('', target)) if p]
    text = _stem(parts[-1]) if len(parts) > 1 else parts[0] if parts else 'stream'
    return re.sub(r'[^A-Za-z0-9_.-]+', '_', text).strip('._') or 'stream'


def _kind(source):
    """``(kind, target)`` of a source text, or the error naming what is wrong with it."""
    match = _URL.match(source)
    if match:
        if match.group(1).lower() not in STREAM_SCHEMES:
            raise ValueError('%s: a stream URL must start with %s://' % (
                source, '://, '.join(STREAM_SCHEMES)))
        return 'stream', source
    if source.isdigit():
        return 'camera', int(source)
    if os.path.isdir(source):
        return 'folder', source
    if os.path.isfile(source):
        return 'image' if source.lower().endswith(IMAGE_EXTENSIONS) else 'video', source
    if os.path.exists(source) and stat.S_ISCHR(os.stat(source).st_mode):
        return 'camera', source                 # /dev/video0
    if glob.has_magic(source):
        return 'glob', source
    raise FileNotFoundError('no such image, video, folder or camera: %s' % source)


def open_source(source, stride=1, reconnect=3, retry_delay=1.0, stopped=None):
    """Open a source of frames (see the module docstring).

    Parameters
    ----------
    source : str or int
        An image file, a folder, a glob, a video file, a camera index or device, a stream URL.
    stride : int
        Keep the frames (images) whose index is a multiple of it (``--vid-stride``).
    reconnect : int
        Attempts in a row to open a dropped live source again (0: it ends at its first drop).
    retry_delay : float
        Seconds before the first attempt; each next one waits twice as long (at most
        :data:`MAX_RETRY_DELAY`).
    stopped : callable, optional
        ``stopped() -> bool``: True ends the reading of a video, camera or stream before
        the next frame, and its waiting to open again (a stop signal).

    Returns
    -------
    ImageFiles or VideoSource
        Iterate it for :class:`Frame` s; close it (or use it in a ``with``) when done.

    Raises
    ------
    FileNotFoundError
        A path that does not exist, or a glob that matches no image file.
    ValueError
        A folder without images, a file OpenCV cannot open as a video, a camera or stream
        that cannot be opened, a bad stride.
    """
    source = str(source)
    kind, target = _kind(source)
    if kind == 'image':
        return ImageFiles([source], source, stride)
    if kind in ('folder', 'glob'):
        paths = image_paths(source) if kind == 'folder' else _image_files(glob.glob(source))
        if not paths:
            error = ValueError if kind == 'folder' else FileNotFoundError
            raise error('no image files (%s) %s %s' % (' '.join(IMAGE_EXTENSIONS), 'in' if kind
                        == 'folder' else 'match', source))
        return ImageFiles(paths, source, stride)
    if isinstance(reconnect, bool) or not isinstance(reconnect, int) or reconnect < 0:
        raise ValueError('reconnect must be a non-negative integer, got %r' % (reconnect,))
    return VideoSource(kind, source, target, stride, reconnect, retry_delay, stopped)
