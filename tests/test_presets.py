"""gluondet.data.transforms.presets against GluonCV's presets of the same names, on real
photos: the same signatures, shapes, resized uint8 images (exactly) and network inputs
(within float32 rounding)."""
import inspect
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import gluondet  # noqa: F401  (before mxnet)
import mxnet as mx
from gluondet import data

gcv_presets = pytest.importorskip('gluoncv.data.transforms.presets')

PRESETS = ('ssd', 'rcnn', 'yolo', 'center_net')
# keywords per preset: GluonCV's defaults (SSD and CenterNet need `short`: their tutorials'
# 512), then a short/max_size pair whose max_size binds on both photos (640x480 and 378x504)
CASES = {
    'ssd': [dict(short=512), dict(short=600, max_size=700)],
    'rcnn': [dict(), dict(short=500, max_size=600, mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.25))],
    'yolo': [dict(), dict(short=416, stride=32), dict(short=600, max_size=700, stride=32)],
    'center_net': [dict(short=512), dict(short=300, max_size=350)],
}
CASE_IDS = [(name, i) for name in PRESETS for i in range(len(CASES[name]))]


@pytest.fixture(scope='module')
def photos(bccd_root, cards_root):
    """Two real photos: a landscape microscope image and a portrait phone photo."""
    paths = [os.path.join(bccd_root, 'BCCD', 'JPEGImages', 'BloodImage_00000.jpg'),
             os.path.join(cards_root, 'images', 'test', 'IMG_2383.JPG')]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        pytest.skip('real photos not found: %s' % missing)
    return paths


def assert_same(ours, theirs):
    """``(tensor, image)`` pairs, or pairs of lists, equal to GluonCV's."""
    (x, img), (gx, gimg) = ours, theirs
    if isinstance(gx, list):
        assert isinstance(x, list) and isinstance(img, list)
        assert len(x) == len(gx) and len(img) == len(gimg)
    else:
        x, img, gx, gimg = [x], [img], [gx], [gimg]
    for t, i, gt, gi in zip(x, img, gx, gimg):
        assert isinstance(t, mx.nd.NDArray) and t.dtype == np.float32
        assert isinstance(i, np.ndarray) and i.dtype == np.uint8
        assert t.shape == gt.shape == (1, 3) + i.shape[:2]
        assert i.shape == gi.shape
        np.testing.assert_array_equal(i, gi)
        np.testing.assert_allclose(t.asnumpy(), gt.asnumpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize('name', PRESETS)
def test_signatures_are_gluoncvs(name):
    ours, theirs = getattr(data.transforms.presets, name), getattr(gcv_presets, name)
    for function in ('load_test', 'transform_test'):
        assert (inspect.signature(getattr(ours, function))
                == inspect.signature(getattr(theirs, function)))
        assert getattr(ours, function).__doc__


@pytest.mark.parametrize('name,case', CASE_IDS)
def test_load_test_is_gluoncvs(photos, name, case):
    ours, theirs = getattr(data.transforms.presets, name), getattr(gcv_presets, name)
    kwargs = CASES[name][case]
    for files in (photos[0], photos[1], photos):
        assert_same(ours.load_test(files, **kwargs), theirs.load_test(files, **kwargs))


def test_the_non_default_cases_bind_max_size(photos):
    """The second keywords of each preset do take the max_size branch."""
    for name in PRESETS:
        kwargs = CASES[name][-1]
        for path in photos:
            _, img = getattr(data.transforms.presets, name).load_test(path, **kwargs)
            assert max(img.shape[:2]) <= kwargs['max_size'] < max(img.shape[:2]) + 32
            assert min(img.shape[:2]) < kwargs['short']


def test_yolo_stride_rounds_the_sides(photos):
    for path in photos:
        x, img = data.transforms.presets.yolo.load_test(path, stride=32)
        assert img.shape[0] % 32 == 0 and img.shape[1] % 32 == 0 and x.shape[2:] == img.shape[:2]


@pytest.mark.parametrize('name,case', CASE_IDS)
def test_transform_test_is_gluoncvs(photos, name, case):
    ours, theirs = getattr(data.transforms.presets, name), getattr(gcv_presets, name)
    kwargs = CASES[name][case]
    imgs = [mx.image.imread(p) for p in photos]
    assert_same(ours.transform_test(imgs, **kwargs), theirs.transform_test(imgs, **kwargs))
    assert_same(ours.transform_test(imgs[1], **kwargs), theirs.transform_test(imgs[1], **kwargs))


def test_one_image_in_a_list_gives_one_pair_and_none_gives_empty_lists(photos):
    """As GluonCV: a list of one is returned as a single pair; an empty list as two lists."""
    ssd = data.transforms.presets.ssd
    x, img = ssd.load_test([photos[0]], short=512)
    assert isinstance(x, mx.nd.NDArray) and isinstance(img, np.ndarray)
    assert ssd.transform_test([], short=512) == ([], [])
    assert gcv_presets.ssd.transform_test([], short=512) == ([], [])


def test_numpy_images_paths_and_one_value_mean_std(photos):
    """Beyond GluonCV's NDArrays and str: numpy images and pathlib paths give the same."""
    rcnn = data.transforms.presets.rcnn
    nd = mx.image.imread(photos[1])
    assert_same(rcnn.transform_test(nd.asnumpy()), rcnn.transform_test(nd))
    assert_same(rcnn.load_test(pathlib.Path(photos[1])), rcnn.load_test(photos[1]))
    assert_same(rcnn.transform_test(nd, mean=(0.5,), std=(0.25,)),
                gcv_presets.rcnn.transform_test(nd, mean=(0.5,), std=(0.25,)))


def test_bad_inputs_say_what_is_wrong(tmp_path):
    ssd = data.transforms.presets.ssd
    with pytest.raises(FileNotFoundError, match='no image file'):
        ssd.load_test(str(tmp_path / 'missing.jpg'), short=512)
    with pytest.raises(TypeError, match='expected an image'):
        ssd.transform_test(['street.jpg'], short=512)
    with pytest.raises(ValueError, match='H x W x C'):
        ssd.transform_test(mx.nd.zeros((4, 4), dtype='uint8'), short=512)
    with pytest.raises(ValueError, match='mean needs 1 or 3 values'):
        ssd.transform_test(mx.nd.zeros((4, 4, 3), dtype='uint8'), short=8, mean=(0.5, 0.5))


def test_the_tutorial_import_reaches_the_presets():
    """GluonCV's tutorials' ``from gluoncv import data`` then
    ``data.transforms.presets.ssd.load_test``, in a fresh process."""
    code = ('from gluondet import data\n'
            'for name in ("ssd", "rcnn", "yolo", "center_net"):\n'
            '    preset = getattr(data.transforms.presets, name)\n'
            '    assert callable(preset.load_test) and callable(preset.transform_test)\n'
            'import gluondet.data.transforms as T\n'
            'assert T.presets is data.transforms.presets\n'
            'print(data.transforms.presets.ssd.load_test.__module__)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'gluondet.data.transforms.presets.ssd'
