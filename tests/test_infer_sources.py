"""gluondet infer on what cameras and scanners produce (issue 27 item 1): a video file the test
writes with OpenCV, an MJPEG stream from an HTTP server on 127.0.0.1 (a corrupt frame, a drop
and a reconnect, an end), folders and globs; SIGINT and SIGTERM to the process group close
the outputs whole; a bad source is one line.

The detector is an untrained ``ssd_160_mobilenet0.5_custom`` at 128 px with random weights
that detect many boxes (:func:`~gluondet.deploy.compare.detecting_random_weights`): these
are checks of the plumbing, not of accuracy.
"""
import glob
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import cv2
import mxnet as mx
import numpy as np
import pytest

from gluondet.cli import main
from gluondet.data.demo import DEMO_CLASSES, render_demo_image
from gluondet.data.kitti import parse_kitti_label
from gluondet.deploy import detecting_random_weights
from gluondet.deploy.infer import infer
from gluondet.deploy.predictor import Predictor
from gluondet.deploy.streams import open_source
from gluondet.deploy.timings import STAGES
from gluondet.deploy.views import Slicing, ViewPredictor
from gluondet.model_zoo import get_model
from gluondet.visualize import draw_boxes

NETWORK = 'ssd_160_mobilenet0.5_custom'
WIDTH, HEIGHT, FPS = 192, 144, 10


@pytest.fixture(scope='module')
def model(tmp_path_factory):
    """The model flags of infer."""
    path = str(tmp_path_factory.mktemp('model') / 'ssd.params')
    net = get_model(NETWORK, classes=DEMO_CLASSES, pretrained_base=False)
    detecting_random_weights(net, mx.nd.random.normal(shape=(1, 3, 128, 128)))
    net.save_parameters(path)
    return ['--model', NETWORK, '--params', path, '--classes', ','.join(DEMO_CLASSES),
            '--data-shape', '128']


def frames(count):
    """``count`` RGB frames of demo shapes sliding right, 3 pixels a frame."""
    base = render_demo_image(0, 'val', 0, 256)[0]
    return [np.ascontiguousarray(np.roll(base, 3 * i, axis=1)[:HEIGHT, :WIDTH])
            for i in range(count)]


def write_video(path, count, fps=FPS):
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*'mp4v'), fps, (WIDTH, HEIGHT))
    for frame in frames(count):
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def read_video(path):
    """``(frames read, fps, (width, height))`` of a video, reopened with OpenCV."""
    capture = cv2.VideoCapture(path)
    assert capture.isOpened(), path
    count = 0
    while capture.read()[0]:
        count += 1
    result = count, capture.get(cv2.CAP_PROP_FPS), (int(capture.get(3)), int(capture.get(4)))
    capture.release()
    return result


def read_lines(path):
    with open(path) as f:
        text = f.read()
    assert text.endswith('\n')
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope='module')
def video(tmp_path_factory):
    return write_video(str(tmp_path_factory.mktemp('video') / 'moving.mp4'), 40)


def test_video_file_gives_lines_kitti_and_a_video_at_its_size_and_rate(model, video, tmp_path,
                                                                        capsys):
    out = tmp_path / 'out'
    assert main(['infer', *model, '--source', video, '--output', str(out / 'det.jsonl'),
                 '--save-video', str(out / 'drawn.mp4'), '--kitti-labels', str(out / 'kitti'),
                 '--visualize', str(out / 'frames'), '--vid-stride', '2', '--batch-size', '4']) == 0
    printed = capsys.readouterr().out
    assert '20 frames in' in printed and 'frames/s' in printed
    assert re.search(r'^per frame: read [\d.]+, preprocess [\d.]+, network [\d.]+, '
                     r'postprocess [\d.]+, write [\d.]+ ms$', printed, re.M), printed
    lines = read_lines(str(out / 'det.jsonl'))
    assert [line['frame'] for line in lines] == list(range(0, 40, 2))
    assert [line['time'] for line in lines] == pytest.approx([i / FPS for i in range(0, 40, 2)])
    assert {(line['source'], line['width'], line['height']) for line in lines} == {
        (video, WIDTH, HEIGHT)}
    # the detections are the predictor's on the decoded frame, in its pixels
    with open_source(video) as source:
        first = next(iter(source))
    predictor = Predictor.from_model(NETWORK, params=model[3], classes=DEMO_CLASSES,
                                     data_shape=128)
    expected = predictor.detect([first.image])[0]
    found = lines[0]['detections']
    assert len(found) == len(expected.ids) > 10
    np.testing.assert_allclose([d['bbox'] for d in found], expected.boxes, atol=0.006)
    np.testing.assert_allclose([d['score'] for d in found], expected.scores, atol=1e-5)
    assert [d['class'] for d in found] == [DEMO_CLASSES[i] for i in expected.ids]
    assert [d['class_id'] for d in found] == expected.ids.tolist()
    assert all('track_id' not in d for d in found)

    assert read_video(str(out / 'drawn.mp4')) == (20, FPS / 2, (WIDTH, HEIGHT))
    names = sorted(os.listdir(str(out / 'kitti')))
    assert names == ['moving_%06d.txt' % i for i in range(0, 40, 2)]
    objects = parse_kitti_label(str(out / 'kitti' / names[0]))
    assert [kind for _, kind, _ in objects] == [d['class'] for d in found]
    assert sorted(os.listdir(str(out / 'frames'))) == [n[:-4] + '.jpg' for n in names]
    assert cv2.imread(str(out / 'frames' / 'moving_000000.jpg')).shape == (HEIGHT, WIDTH, 3)
    assert sorted(os.listdir(str(out))) == ['det.jsonl', 'drawn.mp4', 'frames', 'kitti']


def test_a_corrupt_frame_of_a_video_file_is_a_counted_warning(model, tmp_path, caplog):
    path = str(tmp_path / 'motion.avi')
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*'MJPG'), FPS, (WIDTH, HEIGHT))
    for frame in frames(12):
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    with open(path, 'rb') as f:
        data = bytearray(f.read())
    starts = [i for i in range(len(data)) if data[i:i + 3] == b'\xff\xd8\xff']  # JPEG SOI
    assert len(starts) == 12
    data[starts[7]:starts[8] - 16] = b'x' * (starts[8] - 16 - starts[7])   # frame 7: garbage
    with open(path, 'wb') as f:
        f.write(data)
    result = infer(NETWORK, path, str(tmp_path / 'det.jsonl'), params=model[3],
                   classes=DEMO_CLASSES, data_shape=128, progress=False,
                   save_video=str(tmp_path / 'drawn.mp4'))
    assert (result['frames'], result['problems']) == (11, {'unreadable frame': 1})
    assert 'motion.avi: 1 frame could not be read after frame 6' in caplog.text
    lines = read_lines(str(tmp_path / 'det.jsonl'))
    assert [line['frame'] for line in lines] == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
    assert lines[7]['time'] == pytest.approx(0.8)       # its own time, not the lost frame's
    assert read_video(str(tmp_path / 'drawn.mp4'))[0] == 11


def _garble(path, start=0.4, end=0.55):
    """Overwrite the bytes of ``path`` from fraction ``start`` to ``end`` of its length."""
    with open(path, 'rb') as f:
        data = bytearray(f.read())
    first, last = int(len(data) * start), int(len(data) * end)
    data[first:last] = b'x' * (last - first)
    with open(path, 'wb') as f:
        f.write(data)


def test_a_corrupt_stretch_of_a_video_is_skipped_and_counted_to_its_end(tmp_path, caplog):
    path = str(tmp_path / 'stretch.mp4')
    write_video(path, 40)
    _garble(path)                                    # several frames in a row: garbage
    with open_source(path) as source:
        read = [frame.index for frame in source]
        problems = dict(source.problems)
    lost = sorted(set(range(40)) - set(read))
    assert read[-1] == 39 and len(lost) >= 3         # three failed reads no longer end it
    assert lost == list(range(lost[0], lost[-1] + 1))
    assert problems == {'unreadable frame': len(lost)}
    assert 'stretch.mp4: %d frames could not be read after frame %d' % (
        len(lost), lost[0] - 1) in caplog.text

    # in an AVI the decoder skips over such a stretch: the frames missing from its length
    path = str(tmp_path / 'stretch.avi')
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*'MJPG'), FPS, (WIDTH, HEIGHT))
    for frame in frames(40):
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    _garble(path)
    with open_source(path) as source:
        read = list(source)
        problems = dict(source.problems)
    assert 30 < len(read) < 40 and problems == {'unreadable frame': 40 - len(read)}


def test_track_ids_are_written_and_drawn(model, video, tmp_path):
    result = infer(NETWORK, video, str(tmp_path / 'det.jsonl'), params=model[3],
                   classes=DEMO_CLASSES, data_shape=128, track=True, progress=False,
                   save_video=str(tmp_path / 'drawn.avi'), min_score=0.5)
    assert result['frames'] == 40 and result['stopped'] is None
    stages = result['stages']       # disjoint stages within the run's time
    assert list(stages) == list(STAGES) and stages['track'] > 0 and stages['merge'] == 0
    assert sum(stages.values()) <= result['seconds']
    lines = read_lines(str(tmp_path / 'det.jsonl'))
    ids = [d['track_id'] for line in lines for d in line['detections']]
    assert ids and all(d['score'] >= 0.5 for line in lines for d in line['detections'])
    assert all(isinstance(i, int) and (i == -1 or i >= 1) for i in ids)
    assert max(ids) >= 1
    assert read_video(str(tmp_path / 'drawn.avi'))[0] == 40

    image = frames(1)[0]
    box = [[20, 40, 90, 100]]
    plain = draw_boxes(image, box, [0], [0.9], DEMO_CLASSES)
    labelled = draw_boxes(image, box, [0], [0.9], DEMO_CLASSES, labels=['#12'])
    assert (plain != labelled).any()
    assert (draw_boxes(image, box, [0], [0.9], DEMO_CLASSES, labels=['']) == plain).all()


def test_the_tracker_settings_are_flags_and_keywords(model, video, tmp_path, capsys):
    lines = str(tmp_path / 'default.jsonl')
    assert main(['infer', *model, '--source', video, '--output', lines, '--track']) == 0
    assert max(d['track_id'] for line in read_lines(lines) for d in line['detections']) >= 1
    # a new track needs a score of at least 1, which no detection has: none is tracked
    lines = str(tmp_path / 'strict.jsonl')
    assert main(['infer', *model, '--source', video, '--output', lines, '--track',
                 '--new-track-thresh', '1', '--track-buffer', '5']) == 0
    ids = [d['track_id'] for line in read_lines(lines) for d in line['detections']]
    assert ids and set(ids) == {-1}
    result = infer(NETWORK, video, str(tmp_path / 'same.jsonl'), params=model[3],
                   classes=DEMO_CLASSES, data_shape=128, progress=False,
                   track={'new_track_thresh': 1.0, 'track_buffer': 5})
    assert result['frames'] == 40
    assert read_lines(str(tmp_path / 'same.jsonl')) == read_lines(lines)
    with pytest.raises(ValueError, match="no ByteTrack setting 'thresh' \\(settings: "
                                         "track_thresh, low_thresh"):
        infer(NETWORK, video, str(tmp_path / 'x.jsonl'), params=model[3], data_shape=128,
              classes=DEMO_CLASSES, track={'thresh': 0.3})
    capsys.readouterr()
    assert main(['infer', *model, '--source', video, '--output', lines,
                 '--track-thresh', '0.3']) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        'gluondet infer: error: --track-thresh needs --track')
    with pytest.raises(SystemExit) as usage:
        main(['infer', *model, '--source', video, '--track', '--track-buffer', '-1'])
    assert usage.value.code == 2
    assert "--track-buffer: expected a number of frames >= 0, got '-1'" in capsys.readouterr().err


# ---------------------------------------------------------------- MJPEG over HTTP

class MJPEGServer:
    """An MJPEG (multipart/x-mixed-replace) server on 127.0.0.1: connection k sends the JPEG
    parts ``plans[k]`` (bytes each) and closes; connections past the plans get 404."""

    def __init__(self, plans):
        self.plans, self.connections = plans, 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                k, server.connections = server.connections, server.connections + 1
                if k >= len(server.plans):
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header('Content-Type', 'multipart/x-mixed-replace; boundary=frame')
                self.end_headers()
                for part in server.plans[k]:
                    self.wfile.write(b'--frame\r\nContent-Type: image/jpeg\r\nContent-Length: '
                                     b'%d\r\n\r\n%s\r\n' % (len(part), part))
                    time.sleep(0.01)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d/camera/live.mjpg' % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def jpegs(images):
    return [cv2.imencode('.jpg', cv2.cvtColor(im, cv2.COLOR_RGB2BGR))[1].tobytes()
            for im in images]


def test_mjpeg_stream_with_a_corrupt_frame_a_drop_and_an_end(model, tmp_path, capsys, caplog):
    parts = jpegs(frames(20))
    parts[5] = b'not a jpeg ' * 40                      # a corrupt frame
    server = MJPEGServer([parts[:12], parts[12:]])      # drops after 12 parts, then ends
    try:
        assert main(['infer', *model, '--source', server.url, '--output',
                     str(tmp_path / 'det.jsonl'), '--save-video', str(tmp_path / 'drawn.mp4'),
                     '--kitti-labels', str(tmp_path / 'kitti'), '--reconnect', '1']) == 0
    finally:
        server.close()
    assert server.connections == 3      # the stream, once again after the drop, the 404
    printed = capsys.readouterr().out
    assert ('19 frames in' in printed
            and 'warnings: stream drop: 2, unreadable frame: 1' in printed), printed
    assert 'live.mjpg: 1 frame could not be read after frame 4' in caplog.text
    lines = read_lines(str(tmp_path / 'det.jsonl'))
    assert [line['frame'] for line in lines] == list(range(19))
    times = [line['time'] for line in lines]
    assert times == sorted(times) and times[-1] > 1.0       # the reconnect waited 1 s
    assert {line['source'] for line in lines} == {server.url}
    count, fps, size = read_video(str(tmp_path / 'drawn.mp4'))
    assert (count, size) == (19, (WIDTH, HEIGHT)) and fps > 0
    assert sorted(os.listdir(str(tmp_path / 'kitti')))[-1] == 'live_000018.txt'


def test_mjpeg_stream_without_reconnect_ends_at_its_first_drop(model, tmp_path):
    server = MJPEGServer([jpegs(frames(6)), jpegs(frames(6))])
    try:
        result = infer(NETWORK, server.url, str(tmp_path / 'det.jsonl'), params=model[3],
                       classes=DEMO_CLASSES, data_shape=128, reconnect=0, progress=False)
    finally:
        server.close()
    assert server.connections == 1
    assert (result['frames'], result['problems']) == (6, {'stream drop': 1})
    assert len(read_lines(str(tmp_path / 'det.jsonl'))) == 6


# ---------------------------------------------------------------- stopping

def _backgrounded():
    """SIGINT as a job started with ``&`` from a script inherits it: ignored (POSIX shells
    without job control); infer still stops on it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def interrupt(argv, lines, signum, least, settle=0.0):
    """Run ``gluondet infer ARGV`` in a process group of its own, send ``signum`` to the group
    ``settle`` seconds after ``least`` JSON lines are written; ``(exit status, stdout, stderr,
    seconds from the signal to the exit)``."""
    proc = subprocess.Popen([sys.executable, '-m', 'gluondet', 'infer', *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_backgrounded)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            partial = glob.glob(lines + '.tmp*')
            if partial and open(partial[0]).read().count('\n') >= least:
                break
            time.sleep(0.1)
        time.sleep(settle)
        sent = time.monotonic()
        os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_process_group_closes_the_outputs(model, tmp_path, signum):
    long_video = write_video(str(tmp_path / 'long.mp4'), 600, fps=25)
    lines, drawn = str(tmp_path / 'det.jsonl'), str(tmp_path / 'drawn.mp4')
    code, out, err, _ = interrupt([*model, '--source', long_video, '--output', lines,
                                   '--save-video', drawn, '--batch-size', '2'], lines, signum, 4)
    assert code == 128 + signum, err
    assert 'Traceback' not in err
    assert 'stopped by %s' % signal.Signals(signum).name in out
    found = read_lines(lines)
    assert 4 <= len(found) < 600
    assert [line['frame'] for line in found] == list(range(len(found)))
    assert read_video(drawn)[0] == len(found)
    assert sorted(os.listdir(str(tmp_path))) == ['det.jsonl', 'drawn.mp4', 'long.mp4']


def test_ctrl_c_ends_the_wait_for_a_dropped_stream(model, tmp_path):
    server = MJPEGServer([jpegs(frames(6))])    # then 404: reconnecting waits 1 + 2 + 4 s
    lines = str(tmp_path / 'det.jsonl')
    try:
        code, out, err, seconds = interrupt(
            [*model, '--source', server.url, '--output', lines], lines, signal.SIGINT, 6, 0.5)
    finally:
        server.close()
    assert code == 130 and 'Traceback' not in err, err
    assert 'opening it again in 1s (attempt 1 of 3)' in err
    assert seconds < 4 and 'stopped by SIGINT' in out
    assert len(read_lines(lines)) == 6


def test_an_image_of_many_tiles_is_warned_of_and_one_ctrl_c_stops_it(model, tmp_path):
    folder = tmp_path / 'images'
    folder.mkdir()
    cv2.imwrite(str(folder / 'a_small.jpg'), cv2.resize(frames(1)[0], (20, 20)))   # 9 tiles
    cv2.imwrite(str(folder / 'b_large.jpg'), cv2.resize(frames(1)[0], (1000, 1000)))
    lines, err_path = str(tmp_path / 'det.jsonl'), str(tmp_path / 'err.txt')
    with open(err_path, 'w') as err:
        proc = subprocess.Popen(
            [sys.executable, '-m', 'gluondet', 'infer', *model, '--source', str(folder),
             '--output', lines, '--slice', '16', '--slice-overlap', '0.9', '--batch-size', '1'],
            stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while 'views' not in open(err_path).read() and time.monotonic() < deadline:
            assert proc.poll() is None, open(err_path).read()
            time.sleep(0.1)
        time.sleep(1)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = open(err_path).read()
    assert proc.returncode == 130 and 'Traceback' not in err, err
    assert time.monotonic() - sent < 10
    # 1000 px in 16 px tiles 2 px apart (0.9 overlap): 493 x 493 tiles
    assert 'a 1000x1000 image makes 243049 views (243049 tiles), as many runs' in err
    assert 'stopped by SIGINT' in out
    assert [os.path.basename(line['source']) for line in read_lines(lines)] == ['a_small.jpg']


# ---------------------------------------------------------------- images, errors

def test_folder_and_glob_sources(model, tmp_path, capsys, caplog):
    folder = tmp_path / 'images'
    folder.mkdir()
    for i, image in enumerate(frames(4)):
        cv2.imwrite(str(folder / ('im%d.%s' % (i, 'png' if i % 2 else 'jpg'))),
                    cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    (folder / 'im4.jpg').write_bytes(b'\xff\xd8 not a jpeg')
    (folder / 'notes.txt').write_text('not an image')
    assert main(['infer', *model, '--images', str(folder), '--output',
                 str(tmp_path / 'all.jsonl'), '--vid-stride', '2']) == 0
    assert [(line['frame'], os.path.basename(line['source']), line['time'])
            for line in read_lines(str(tmp_path / 'all.jsonl'))] == [
        (0, 'im0.jpg', None), (2, 'im2.jpg', None)]
    printed = capsys.readouterr().out
    assert 'unreadable images skipped: 1' in printed and 'im4.jpg' in caplog.text

    pattern = str(folder / '*.png')
    assert main(['infer', *model, '--source', pattern, '--output',
                 str(tmp_path / 'png.json'), '--visualize', str(tmp_path / 'drawn')]) == 0
    with open(str(tmp_path / 'png_images.json')) as f:
        index = json.load(f)
    assert [(e['id'], e['file_name']) for e in index['images']] == [(1, 'im1.png'),
                                                                   (2, 'im3.png')]
    assert sorted(os.listdir(str(tmp_path / 'drawn'))) == ['im1.png', 'im3.png']


@pytest.mark.parametrize('source, message', [
    ('missing.mp4', 'no such image, video, folder or camera: {tmp}/missing.mp4'),
    ('nothing/*.jpg', 'no image files (.jpg .jpeg .png .bmp .tif .tiff .webp .ppm) match '
                      '{tmp}/nothing/*.jpg'),
    ('*.gif', 'no image files (.jpg .jpeg .png .bmp .tif .tiff .webp .ppm) match {tmp}/*.gif'),
    ('text.mp4', 'cannot open video {tmp}/text.mp4'),
    ('http://127.0.0.1:9/none.mjpg', 'cannot open stream http://127.0.0.1:9/none.mjpg'),
    ('ftp://host/video.mp4', 'ftp://host/video.mp4: a stream URL must start with rtsp://'),
    ('63', 'cannot open camera 63 (no such camera, or it is busy)'),
])
def test_a_bad_source_is_one_line_naming_it(model, tmp_path, capsys, source, message):
    (tmp_path / 'text.mp4').write_text('not a video')
    (tmp_path / 'a.gif').write_bytes(b'GIF89a')
    if '://' not in source and not source.isdigit():
        source = str(tmp_path / source)
    assert main(['infer', *model, '--source', source, '--output',
                 str(tmp_path / 'det.jsonl')]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith('gluondet infer: error: ' + message.format(tmp=tmp_path)), err
    assert not os.path.exists(str(tmp_path / 'det.jsonl'))


def test_outputs_that_do_not_fit_the_source_are_refused(model, video, tmp_path, capsys):
    image = str(tmp_path / 'one.jpg')
    cv2.imwrite(image, frames(1)[0])
    for argv, message in [
            (['--source', video, '--output', 'det.json'],
             '--output: a video gives JSON lines: name a .jsonl file, not det.json'),
            (['--source', image, '--save-video', 'a.mp4'], '--save-video is for a video'),
            (['--source', video, '--save-video', str(tmp_path / 'a.mkv')],
             '--save-video: a .mp4 or .avi file')]:
        assert main(['infer', *model, *argv]) == 1
        assert 'gluondet infer: error: ' + message in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(['infer', *model, '--source', video, '--vid-stride', '0'])
    assert stop.value.code == 2
    assert "--vid-stride: expected an integer >= 1, got '0'" in capsys.readouterr().err


def test_sliced_inference_on_a_video(model, video, tmp_path):
    assert main(['infer', *model, '--source', video, '--output', str(tmp_path / 'det.jsonl'),
                 '--vid-stride', '10', '--slice', '96', '--slice-full']) == 0
    lines = read_lines(str(tmp_path / 'det.jsonl'))
    assert [line['frame'] for line in lines] == [0, 10, 20, 30]
    with open_source(video) as source:
        first = next(iter(source))
    predictor = Predictor.from_model(NETWORK, params=model[3], classes=DEMO_CLASSES,
                                     data_shape=128)
    expected = ViewPredictor(predictor, Slicing(96, full=True)).detect([first.image])[0]
    assert len(expected.ids) != len(predictor.detect([first.image])[0].ids)
    np.testing.assert_allclose([d['bbox'] for d in lines[0]['detections']], expected.boxes,
                               atol=0.006)


def test_nms_options_on_a_video(model, video, tmp_path):
    assert main(['infer', *model, '--source', video, '--output', str(tmp_path / 'det.jsonl'),
                 '--vid-stride', '10', '--conf', '0.9', '--max-det', '5', '--agnostic-nms']) == 0
    found = [line['detections'] for line in read_lines(str(tmp_path / 'det.jsonl'))]
    assert len(found) == 4 and all(0 < len(f) <= 5 for f in found)
    assert all(d['score'] > 0.9 for f in found for d in f)


def test_a_stream_back_at_another_size_keeps_the_video_size(model, tmp_path):
    small = [cv2.resize(image, (WIDTH // 2, HEIGHT // 2)) for image in frames(4)]
    server = MJPEGServer([jpegs(frames(4)), jpegs(small)])
    try:
        result = infer(NETWORK, server.url, str(tmp_path / 'det.jsonl'), params=model[3],
                       classes=DEMO_CLASSES, data_shape=128, reconnect=1, progress=False,
                       save_video=str(tmp_path / 'drawn.mp4'))
    finally:
        server.close()
    assert result['frames'] == 8
    sizes = [(line['width'], line['height']) for line in read_lines(str(tmp_path / 'det.jsonl'))]
    assert sizes == [(WIDTH, HEIGHT)] * 4 + [(WIDTH // 2, HEIGHT // 2)] * 4
    assert read_video(str(tmp_path / 'drawn.mp4'))[0::2] == (8, (WIDTH, HEIGHT))
