"""Video inference, the pipeline of now against the one before issue 36, in one run.

``gluondet infer`` on one video (BCCD photos as frames, 640x480, 10 fps) with the MXNet
backend, run by each tree in turn: this checkout's and a baseline revision's (default
``8cf41cd^``, the tree before the one detections type and the one frame loop), extracted
from git into a temporary folder. Both load the same weights (``--network`` with random
weights made to detect many boxes, ``detecting_random_weights``, saved once), with each
``--flags`` set: plain, tracked, and the issue's ``--slice 320 --tta --track``. The figure is
the frames per second ``infer`` reports (its own reading, detection, tracking and writing,
not the process start or the model load), the best of ``--rounds``, the two trees taken in
turn; the ratio is now / baseline. A check: both trees write the same detections (class,
score within 1e-4, box within 0.01 px as written, track id) for every frame; track ids are
counted apart, not checked, for a baseline before a8fb1cd (which made the tracker's
duplicate rule ByteTrack's).

    .venv/bin/python benchmarks/bench_video.py [--baseline REV] [--frames 100]
        [--network ssd_300_mobilenet0.25_voc] [--rounds 3] [--sets plain,tracked,sliced]
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.common import Checks  # noqa: E402

BCCD = os.path.join(ROOT, '..', 'shared', 'datasets', 'bccd', 'BCCD', 'JPEGImages')
FLAGS = {'plain': [], 'tracked': ['--track'],
         'sliced': ['--slice', '320', '--tta', '--track']}
TRACKER_RULE = 'a8fb1cd'    # the commit that made the duplicate-track rule ByteTrack's
REPORT = re.compile(r'(\d+) frames in [\d.]+ s: ([\d.]+) frames/s')


def extract(revision, folder):
    """``folder``, made, with the ``gluondet`` package of ``revision`` in it."""
    os.makedirs(folder)
    archive = subprocess.run(['git', '-C', ROOT, 'archive', revision, 'gluondet'],
                             check=True, capture_output=True).stdout
    subprocess.run(['tar', '-x', '-C', folder], input=archive, check=True)
    return folder


def make_video(path, frames):
    import cv2
    photos = sorted(glob.glob(os.path.join(BCCD, '*.jpg')))[:frames]
    if len(photos) < frames:
        sys.exit('bench_video: needs %d BCCD photos in %s' % (frames, BCCD))
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*'mp4v'), 10, (640, 480))
    for photo in photos:
        writer.write(cv2.resize(cv2.imread(photo), (640, 480)))
    writer.release()


def make_weights(network, path):
    import mxnet as mx
    from gluondet.deploy.compare import detecting_random_weights
    from gluondet.model_zoo import get_model
    net = get_model(network, pretrained=False, pretrained_base=False)
    size = int(network.split('_')[1])
    detecting_random_weights(net, mx.nd.random.normal(shape=(1, 3, size, size)))
    net.save_parameters(path)


def run(tree, network, params, video, output, flags):
    """The frames per second ``gluondet infer`` reports, run from ``tree``."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, '-m', 'gluondet', 'infer', '--model', network,
                          '--params', params, '--source', video, '--output', output] + flags,
                         env=env, capture_output=True, text=True, cwd=tree)
    found = REPORT.search(out.stdout)
    if out.returncode or not found:
        sys.exit('bench_video: infer from %s failed:\n%s%s' % (tree, out.stdout, out.stderr))
    return float(found.group(2))


def first_difference(a, b, tracks=True):
    """Where two JSON lines files' detections first differ (None: nowhere); track ids too
    if ``tracks``, else the count of detections whose track id differs, as a second value."""
    with open(a) as fa, open(b) as fb:
        lines_a, lines_b = [json.loads(line) for line in fa], [json.loads(line) for line in fb]
    if len(lines_a) != len(lines_b):
        return '%d and %d frames' % (len(lines_a), len(lines_b)), 0
    other_tracks = 0
    for x, y in zip(lines_a, lines_b):
        if x['frame'] != y['frame'] or len(x['detections']) != len(y['detections']):
            return 'frame %d: %d and %d detections' % (x['frame'], len(x['detections']),
                                                       len(y['detections'])), other_tracks
        for k, (p, q) in enumerate(zip(x['detections'], y['detections'])):
            other_tracks += p.get('track_id') != q.get('track_id')
            if (p['class'] != q['class'] or (tracks and p.get('track_id') != q.get('track_id'))
                    or abs(p['score'] - q['score']) > 1e-4
                    or max(abs(u - v) for u, v in zip(p['bbox'], q['bbox'])) > 0.011):
                return 'frame %d, detection %d: %s and %s' % (x['frame'], k, p, q), other_tracks
    return None, other_tracks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--baseline', default='8cf41cd^')
    parser.add_argument('--frames', type=int, default=100)
    parser.add_argument('--network', default='ssd_300_mobilenet0.25_voc')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--sets', default=','.join(FLAGS),
                        help='the flag sets to time (default all: %s)' % ','.join(FLAGS))
    args = parser.parse_args()
    checks = Checks()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {'baseline': extract(args.baseline, os.path.join(tmp, 'baseline')),
                 'now': ROOT}
        video, params = os.path.join(tmp, 'bccd.mp4'), os.path.join(tmp, 'weights.params')
        # the baseline's tracker drops another duplicate track: compare track ids only if
        # it has the rule
        same_tracker = subprocess.run(['git', '-C', ROOT, 'merge-base', '--is-ancestor',
                                       TRACKER_RULE, args.baseline]).returncode == 0
        make_video(video, args.frames)
        make_weights(args.network, params)
        print('%s, %d frames 640x480, MXNet backend; baseline %s (%s)' % (
            args.network, args.frames, args.baseline, subprocess.run(
                ['git', '-C', ROOT, 'rev-parse', '--short', args.baseline],
                capture_output=True, text=True).stdout.strip()))
        print('| flags | baseline frames/s | now frames/s | now / baseline |')
        print('|---|---|---|---|')
        for label in args.sets.split(','):
            flags = FLAGS[label]
            best = {}
            outputs = {name: os.path.join(tmp, '%s.jsonl' % name) for name in trees}
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    fps = run(tree, args.network, params, video, outputs[name], flags)
                    best[name] = max(best.get(name, 0.0), fps)
            differ, other_tracks = first_difference(outputs['baseline'], outputs['now'],
                                                    same_tracker)
            checks.check(differ is None, '%s: the two trees wrote different detections (%s)'
                         % (label, differ))
            if other_tracks:
                print('%s: %d detections with another track id (%s, ByteTrack\'s duplicate '
                      'rule, is not in the baseline)' % (label, other_tracks, TRACKER_RULE))
            print('| %s | %.1f | %.1f | %.2fx |' % (
                ' '.join(flags) or 'none', best['baseline'], best['now'],
                best['now'] / best['baseline']), flush=True)
    checks.exit()


if __name__ == '__main__':
    main()
