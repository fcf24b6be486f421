"""DemoDetection: deterministic, well-formed, cached safely."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from filelock import FileLock

from gluondet.data import DemoDetection
from gluondet.data.demo import (DEMO_CLASSES, GENERATOR_VERSION, SIDE_RANGE, demo_home,
                                render_demo_image)

SIZE = 128


def demo(root, split='train', num_images=12, seed=0, **kwargs):
    return DemoDetection(split, num_images=num_images, image_size=SIZE, seed=seed, root=str(root),
                         **kwargs)


def items(ds):
    return [(ds[i][0].asnumpy(), ds.label(i)) for i in range(len(ds))]


def test_items_are_rgb_uint8_with_n_by_6_labels(tmp_path):
    ds = demo(tmp_path)
    assert ds.classes == DEMO_CLASSES == ('circle', 'square', 'triangle', 'star', 'cross')
    image, label = ds[3]
    assert image.shape == (SIZE, SIZE, 3) and image.dtype == np.uint8
    assert label.dtype == np.float32 and label.shape[1] == 6
    assert ds.image_size(3) == (SIZE, SIZE)


def test_same_seed_same_data_in_separate_caches(tmp_path):
    first, second = items(demo(tmp_path / 'a')), items(demo(tmp_path / 'b'))
    for (image_a, label_a), (image_b, label_b) in zip(first, second):
        np.testing.assert_array_equal(image_a, image_b)
        np.testing.assert_array_equal(label_a, label_b)


def test_other_seed_and_other_split_differ(tmp_path):
    base = demo(tmp_path)
    for other in (demo(tmp_path, seed=1), demo(tmp_path, split='val')):
        assert not np.array_equal(base[0][0].asnumpy(), other[0][0].asnumpy())
        assert not all(np.array_equal(base.label(i), other.label(i)) for i in range(len(base)))


def test_fewer_images_are_a_prefix_of_more(tmp_path):
    small, large = demo(tmp_path, num_images=4), demo(tmp_path, num_images=9)
    for i in range(4):
        np.testing.assert_array_equal(small.label(i), large.label(i))
    assert small.folder != large.folder


def test_labels_match_the_render_and_the_stated_shapes(tmp_path):
    ds = demo(tmp_path, num_images=60)
    counts = []
    for i in range(len(ds)):
        image, label = render_demo_image(0, 'train', i, SIZE)
        np.testing.assert_array_equal(ds.label(i), label)
        counts.append(len(label))
        assert (label[:, :2] >= 0).all() and (label[:, 2:4] <= SIZE - 1).all()
        sides = np.maximum(label[:, 2] - label[:, 0], label[:, 3] - label[:, 1]) + 1
        assert (sides <= SIDE_RANGE[1] * SIZE).all()
        assert (sides >= 0.6 * SIDE_RANGE[0] * SIZE).all()  # a turned triangle is narrower
        assert set(label[:, 4]) <= set(range(len(DEMO_CLASSES))) and not label[:, 5].any()
    assert min(counts) == 1 and max(counts) == 4


def test_boxes_are_tight(tmp_path):
    """The pixels just outside each box are background, the box edges touch the shape."""
    image, label = render_demo_image(3, 'train', 5, 256)
    for xmin, ymin, xmax, ymax, _, _ in label.astype(int):
        inside = image[ymin:ymax + 1, xmin:xmax + 1].astype(int)
        colour = np.median(inside[inside.shape[0] // 2, :], axis=0)  # the shape's colour

        def covered(pixels, colour=colour):
            return (np.abs(pixels.astype(int) - colour).sum(-1) < 60).mean()

        assert covered(inside[:, 0]) > 0 and covered(inside[0, :]) > 0
        assert covered(inside[:, -1]) > 0 and covered(inside[-1, :]) > 0


def test_cache_is_reused_not_rewritten(tmp_path):
    ds = demo(tmp_path)
    stamps = {name: os.stat(os.path.join(ds.folder, name)).st_mtime_ns
              for name in os.listdir(ds.folder)}
    again = demo(tmp_path)
    assert {name: os.stat(os.path.join(again.folder, name)).st_mtime_ns
            for name in os.listdir(again.folder)} == stamps
    assert not [n for n in os.listdir(ds.folder) if n.startswith('.tmp-')]


@pytest.mark.parametrize('damage', ['labels', 'image', 'garbage'])
def test_incomplete_cache_is_regenerated(tmp_path, damage):
    ds = demo(tmp_path)
    if damage == 'labels':
        os.remove(os.path.join(ds.folder, 'labels.json'))
    elif damage == 'image':
        os.remove(ds.image_path(5))
    else:
        with open(os.path.join(ds.folder, 'labels.json'), 'w') as f:
            f.write('[1, 2')
    again = demo(tmp_path)
    assert len(again) == 12 and again.report.skipped == {}
    np.testing.assert_array_equal(again.label(5), ds.label(5))


def test_default_home_follows_gluondet_home(tmp_path, monkeypatch):
    monkeypatch.setenv('GLUONDET_HOME', str(tmp_path / 'home'))
    assert demo_home() == os.path.join(str(tmp_path / 'home'), 'demo')
    ds = DemoDetection('val', num_images=2, image_size=64)
    assert ds.folder.startswith(os.path.join(str(tmp_path / 'home'), 'demo') + os.sep)


def test_bad_arguments():
    with pytest.raises(ValueError, match='split must be'):
        DemoDetection('test')
    with pytest.raises(ValueError, match='num_images >= 1'):
        DemoDetection(num_images=0)


BUILD = ('import sys; from gluondet.data import DemoDetection; print("ready", flush=True); '
         'ds = DemoDetection("train", num_images=20, image_size=96, root=sys.argv[1]); '
         'print(len(ds), ds.report.boxes)')


def test_builder_waits_for_the_cache_lock(tmp_path):
    """While another process holds the lock, a builder neither reads nor writes the cache."""
    folder = os.path.join(str(tmp_path), 'v%d-seed0-96px' % GENERATOR_VERSION, 'train-20')
    os.makedirs(folder)
    with FileLock(folder + '.lock'):
        proc = subprocess.Popen([sys.executable, '-c', BUILD, str(tmp_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout.readline() == b'ready\n'
        time.sleep(1.0)
        assert proc.poll() is None and os.listdir(folder) == []
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    ds = DemoDetection('train', num_images=20, image_size=96, root=str(tmp_path))
    assert out == b'20 %d\n' % ds.report.boxes
    assert sorted(os.listdir(folder)) == ['%06d.jpg' % i for i in range(20)] + ['labels.json']


@pytest.mark.slow
def test_full_demo_generates_in_well_under_a_minute(tmp_path):
    start = time.time()
    train = DemoDetection('train', root=str(tmp_path))
    val = DemoDetection('val', root=str(tmp_path))
    elapsed = time.time() - start
    assert (len(train), len(val)) == (1000, 200)
    assert elapsed < 45, elapsed
