"""``gluondet.utils.viz`` draws what ``gluoncv.utils.viz`` draws: the same masks and images
(exactly), the same matplotlib rectangles and texts, on synthetic inputs and a real photo."""
import inspect
import os
import random
import subprocess
import sys
import xml.etree.ElementTree as ET

import cv2
import numpy as np
import pytest

matplotlib = pytest.importorskip('matplotlib')
matplotlib.use('Agg')
from matplotlib import pyplot as plt  # noqa: E402
import mxnet as mx  # noqa: E402

from filetools import BCCD_CLASSES  # noqa: E402
from gluondet import utils  # noqa: E402
from gluondet.utils import viz  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ['person', 'dog', 'car', 'cat']
VIZ_FUNCTIONS = ['plot_image', 'plot_bbox', 'cv_plot_image', 'cv_plot_bbox', 'expand_mask',
                 'plot_mask']


@pytest.fixture
def gcv():
    """GluonCV's ``gluoncv.utils.viz``."""
    return pytest.importorskip('gluoncv.utils.viz')


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close('all')


def _image(height=120, width=160, seed=0):
    return np.random.RandomState(seed).randint(0, 256, (height, width, 3)).astype(np.uint8)


def _detections(n=8, width=160, height=120, seed=0):
    """Boxes (float32), scores and labels as a detector gives them: ``N x 1`` scores and
    ids, some under 0.5, some padding (-1)."""
    rng = np.random.RandomState(seed)
    x1, y1 = rng.uniform(-10, width - 20, n), rng.uniform(-10, height - 20, n)
    boxes = np.stack([x1, y1, x1 + rng.uniform(3, 80, n), y1 + rng.uniform(3, 60, n)], 1)
    scores = rng.uniform(0.2, 1, (n, 1))
    ids = rng.randint(0, len(NAMES), (n, 1)).astype(np.float32)
    ids[-1], scores[-1] = -1, -1
    return boxes.astype(np.float32), scores.astype(np.float32), ids


def _drawn(ax):
    """What an axes shows: its images, rectangles and texts, as comparable values."""
    rects = [(tuple(p.get_xy()), p.get_width(), p.get_height(), tuple(p.get_edgecolor()),
              p.get_linewidth(), p.get_fill()) for p in ax.patches]
    texts = [(t.get_position(), t.get_text(), t.get_fontsize(), t.get_color(),
              tuple(t.get_bbox_patch().get_facecolor())) for t in ax.texts]
    return [im.get_array().tolist() for im in ax.images], rects, texts


# ---------------------------------------------------------------- the package


def test_import_is_cheap_and_gives_gluoncv_names():
    code = ('import sys\n'
            'from gluondet import utils\n'
            'heavy = [m for m in ("mxnet", "matplotlib", "cv2") if m in sys.modules]\n'
            'assert not heavy, heavy\n'
            'assert callable(utils.download) and callable(utils.check_sha1)\n'
            'assert all(callable(getattr(utils.viz, n)) for n in %r)\n'
            'from gluondet.utils import export_block\n'
            'assert export_block is utils.export_block\n' % (VIZ_FUNCTIONS,))
    run = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_signatures_are_gluoncv_s(gcv):
    assert utils.viz is viz
    for name in VIZ_FUNCTIONS:
        assert inspect.signature(getattr(viz, name)) == inspect.signature(getattr(gcv, name))


def test_missing_matplotlib_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, 'matplotlib', None)
    with pytest.raises(ImportError, match=r"drawing needs matplotlib.*pip install"):
        viz.plot_bbox(_image(), np.zeros((0, 4)))


# ---------------------------------------------------------------- matplotlib


@pytest.mark.parametrize('case', ['names', 'random_colors', 'relative', 'ndarray', 'no_scores',
                                  'no_labels', 'reverse_rgb', 'colors_given', 'empty'])
def test_plot_bbox_draws_gluoncv_s_boxes_and_labels(gcv, case):
    img = _image()
    boxes, scores, ids = _detections()
    kwargs = dict(class_names=NAMES)
    if case == 'random_colors':
        kwargs = dict(thresh=0.3)
    elif case == 'relative':
        boxes = (boxes / [160, 120, 160, 120]).astype(np.float64)
        kwargs['absolute_coordinates'] = False
    elif case == 'ndarray':
        img, boxes, scores, ids = (mx.nd.array(a, dtype=a.dtype) for a in (img, boxes, scores,
                                                                          ids))
    elif case == 'no_scores':
        scores = None
    elif case == 'no_labels':
        ids = None
    elif case == 'reverse_rgb':
        kwargs.update(reverse_rgb=True, linewidth=1, fontsize=7, thresh=0.7)
    elif case == 'colors_given':
        kwargs['colors'] = {0: (1, 0, 0), 2: (0, 0.5, 0)}
    elif case == 'empty':
        boxes, scores, ids = boxes[:0], scores[:0], ids[:0]
    given = boxes.copy()
    drawn = []
    for plot_bbox in (gcv.plot_bbox, viz.plot_bbox):
        random.seed(3)
        args = [img, boxes, scores, ids]
        if plot_bbox is gcv.plot_bbox:          # GluonCV scales relative boxes in place
            args = [a.copy() if a is not None else None for a in args]
        fill = dict(kwargs, colors=dict(kwargs['colors'])) if 'colors' in kwargs else kwargs
        ax = plot_bbox(*args, **fill)
        assert isinstance(ax, matplotlib.axes.Axes)
        drawn.append((_drawn(ax), fill.get('colors')))
    assert drawn[0] == drawn[1]
    images, rects, texts = drawn[1][0]
    assert len(images) == 1
    if case != 'empty':
        assert rects and len(texts) == len(rects)
    np.testing.assert_array_equal(boxes.asnumpy() if case == 'ndarray' else boxes,
                                  given.asnumpy() if case == 'ndarray' else given)


def test_plot_bbox_fills_the_colors_dict_and_reuses_an_axes(gcv):
    img = _image()
    boxes, scores, ids = _detections()
    ax = plt.figure().add_subplot(1, 1, 1)
    colors = {}
    assert viz.plot_bbox(img, boxes, scores, ids, class_names=NAMES, colors=colors, ax=ax) is ax
    cmap = matplotlib.colormaps['hsv']
    shown = {int(i) for i, s in zip(ids.ravel(), scores.ravel()) if s >= 0.5 and i >= 0}
    assert colors == {c: cmap(c / len(NAMES)) for c in shown}
    labelled = [t.get_text() for t in ax.texts]
    assert labelled == ['%s %.3f' % (NAMES[int(i)], s) for i, s in zip(ids.ravel(),
                                                                       scores.ravel())
                        if s >= 0.5 and i >= 0]


def test_plot_bbox_checks_lengths():
    with pytest.raises(ValueError, match='labels and bboxes mismatch, 2 vs 3'):
        viz.plot_bbox(_image(), np.zeros((3, 4)), labels=np.zeros(2))
    with pytest.raises(ValueError, match='scores and bboxes mismatch, 1 vs 3'):
        viz.plot_bbox(_image(), np.zeros((3, 4)), scores=np.zeros(1))


def test_plot_image_is_gluoncv_s(gcv):
    img = _image(30, 40)
    for reverse in (False, True):
        a, b = (f(mx.nd.array(img), reverse_rgb=reverse) for f in (gcv.plot_image,
                                                                   viz.plot_image))
        assert _drawn(a) == _drawn(b)
    assert viz.plot_image(img, reverse_rgb=True).images[0].get_array()[0, 0, 0] == img[0, 0, 2]


# ---------------------------------------------------------------- OpenCV


@pytest.mark.parametrize('case', ['names', 'random_colors', 'scale', 'relative', 'ndarray',
                                  'no_scores', 'filled', 'colors_given', 'empty'])
def test_cv_plot_bbox_image_is_gluoncv_s(gcv, case):
    img = _image()
    boxes, scores, ids = _detections(seed=1)
    kwargs = dict(class_names=NAMES)
    if case == 'random_colors':
        kwargs = dict(thresh=0.3)
    elif case == 'scale':
        kwargs.update(scale=2.5, linewidth=3)
    elif case == 'relative':
        boxes = boxes / np.float32([160, 120, 160, 120])
        kwargs.update(absolute_coordinates=False, scale=3.0)
    elif case == 'ndarray':
        img, boxes, scores, ids = (mx.nd.array(a, dtype=a.dtype) for a in (img, boxes, scores,
                                                                          ids))
    elif case == 'no_scores':
        scores = None
    elif case == 'filled':
        kwargs['linewidth'] = -1
    elif case == 'colors_given':
        kwargs['colors'] = {1: (0.2, 0.4, 1.0)}
    elif case == 'empty':
        boxes, scores, ids = boxes[:0], scores[:0], ids[:0]
    out = []
    for plot in (gcv.cv_plot_bbox, viz.cv_plot_bbox):
        random.seed(5)
        args = [a.copy() if a is not None else None for a in (img, boxes, scores, ids)]
        fill = dict(kwargs, colors=dict(kwargs['colors'])) if 'colors' in kwargs else kwargs
        out.append((plot(*args, **fill), fill.get('colors')))
    (theirs, their_colors), (ours, our_colors) = out
    assert isinstance(ours, np.ndarray) and ours.dtype == np.uint8
    np.testing.assert_array_equal(ours, theirs)
    assert our_colors == their_colors
    if case != 'empty':
        assert (ours != (img.asnumpy() if case == 'ndarray' else img)).any()


def test_cv_plot_bbox_draws_on_a_numpy_image_and_leaves_the_boxes():
    img = _image()
    boxes, scores, ids = _detections()
    given = boxes.copy()
    assert viz.cv_plot_bbox(img, boxes, scores, ids, scale=2.0) is img
    np.testing.assert_array_equal(boxes, given)
    flipped = _image()[:, ::-1]                 # not contiguous: drawn on a copy
    before = flipped.copy()
    out = viz.cv_plot_bbox(flipped, boxes, scores, ids, class_names=NAMES)
    assert (out != before).any()
    np.testing.assert_array_equal(flipped, before)


def test_cv_plot_image_shows_gluoncv_s_canvas(gcv, monkeypatch):
    shown = []
    monkeypatch.setattr(cv2, 'imshow', lambda name, canvas: shown.append((name, canvas)))
    img = _image(240, 320)
    kwargs = dict(upperleft_txt='FPS 30', left_txt_list=['a', 'bb', 'ccc'],
                  title_txt_list=['one', 'two'], title_txt_corner=(40, 30), canvas_name='w')
    for plot in (gcv.cv_plot_image, viz.cv_plot_image):
        assert plot(mx.nd.array(img, dtype=np.uint8), scale=0.75, **kwargs) is None
        plot(img.copy())
    assert [name for name, _ in shown] == ['w', 'demo'] * 2
    for (_, theirs), (_, ours) in zip(shown[:2], shown[2:]):
        np.testing.assert_array_equal(ours, theirs)
    assert shown[2][1].shape == (180, 240, 3)
    np.testing.assert_array_equal(shown[3][1], img[:, :, ::-1])


# ---------------------------------------------------------------- masks


def _mask_probabilities(rng, n, size=28):
    """Mask R-CNN-like sigmoid blobs, a noisy one every fourth."""
    yy, xx = np.mgrid[0:size, 0:size]
    out = []
    for i in range(n):
        if i % 4 == 3:
            out.append(1 / (1 + np.exp(-rng.normal(0, 3, (size, size)))))
            continue
        cy, cx = rng.uniform(4, size - 4, 2)
        logit = (size / 3 - np.hypot(xx - cx, yy - cy)) * rng.uniform(0.3, 3)
        out.append(1 / (1 + np.exp(-logit)))
    return np.array(out, np.float32)


@pytest.mark.parametrize('sortby', [None, 'area', 'xmin', 'ymin', 'xmax', 'ymax'])
@pytest.mark.parametrize('kind', ['numpy64', 'ndarray32'])
def test_expand_mask_is_gluoncv_s(gcv, sortby, kind):
    rng = np.random.RandomState(7)
    width, height = 150, 110
    n = 9
    masks = _mask_probabilities(rng, n)
    x1, y1 = rng.uniform(0, width - 30, n), rng.uniform(0, height - 30, n)
    boxes = np.stack([x1, y1, x1 + rng.uniform(2, 60, n), y1 + rng.uniform(2, 50, n)], 1)
    scores = rng.uniform(0, 1, (n, 1))
    for scale in (1.0, 0.6):
        args = [masks, boxes, scores]
        if kind == 'ndarray32':
            args = [mx.nd.array(a, dtype=np.float32) for a in args]
        m, b, s = (a.copy() for a in args)
        theirs = gcv.expand_mask(m, b, (width, height), s, thresh=0.4, scale=scale,
                                 sortby=sortby)
        given = [a.copy() for a in args]
        m, b, s = args
        ours = viz.expand_mask(m, b, (width, height), s, thresh=0.4, scale=scale, sortby=sortby)
        assert ours[0].dtype == np.uint8 and ours[0].shape == (int((scores >= .4).sum()),
                                                               height, width)
        np.testing.assert_array_equal(ours[0], theirs[0])
        np.testing.assert_array_equal(ours[1], theirs[1])
        assert ours[0].any()
        for a, b in zip(args, given):       # nothing scaled in place
            np.testing.assert_array_equal(a.asnumpy() if hasattr(a, 'asnumpy') else a,
                                          b.asnumpy() if hasattr(b, 'asnumpy') else b)


def test_expand_mask_without_scores_and_errors():
    rng = np.random.RandomState(1)
    masks = _mask_probabilities(rng, 2)
    boxes = np.array([[5, 5, 40, 30], [20, 10, 60, 50]], np.float32)
    full, order = viz.expand_mask(masks, boxes, (64, 56))
    assert full.shape == (2, 56, 64) and order.tolist() == [0, 1]
    with pytest.raises(ValueError, match='bboxes and masks mismatch, 1 vs 2'):
        viz.expand_mask(masks, boxes[:1], (64, 56))
    with pytest.raises(ValueError, match='scores and masks mismatch'):
        viz.expand_mask(masks, boxes, (64, 56), scores=np.ones(3))
    with pytest.raises(ValueError, match='sortby cannot take value width'):
        viz.expand_mask(masks, boxes, (64, 56), sortby='width')


@pytest.mark.parametrize('alpha', [0.5, 0.3])
def test_plot_mask_is_gluoncv_s(gcv, alpha):
    rng = np.random.RandomState(2)
    img = _image(50, 70)
    masks = (rng.uniform(0, 1, (4, 50, 70)) > 0.6).astype(np.uint8)
    out = []
    for plot in (gcv.plot_mask, viz.plot_mask):
        for inputs in ((img, masks), (mx.nd.array(img), mx.nd.array(masks)), (img, masks[:0])):
            np.random.seed(11)
            out.append(plot(*inputs, alpha=alpha))
    for theirs, ours in zip(out[:3], out[3:]):
        assert ours.dtype == np.uint8
        np.testing.assert_array_equal(ours, theirs)
    assert (out[3] != img).any()
    np.testing.assert_array_equal(out[5], img)


# ---------------------------------------------------------------- a real photo


@pytest.fixture(scope='module')
def blood_photo():
    """BCCD's ``BloodImage_00000.jpg`` (RGB), its boxes and class ids."""
    root = os.path.join(os.environ.get('GLUONDET_SHARED_DATASETS',
                                       os.path.join(os.path.dirname(ROOT), 'shared',
                                                    'datasets')), 'bccd', 'BCCD')
    image = os.path.join(root, 'JPEGImages', 'BloodImage_00000.jpg')
    if not os.path.isfile(image):
        pytest.skip('real photo not found: %s (set GLUONDET_SHARED_DATASETS)' % image)
    boxes, ids = [], []
    for obj in ET.parse(os.path.join(root, 'Annotations', 'BloodImage_00000.xml')).iter('object'):
        box = obj.find('bndbox')
        boxes.append([float(box.find(k).text) - 1 for k in ('xmin', 'ymin', 'xmax', 'ymax')])
        ids.append(BCCD_CLASSES.index(obj.find('name').text))
    return (cv2.imread(image)[:, :, ::-1].copy(), np.array(boxes, np.float32),
            np.array(ids, np.float32))


def test_real_photo_drawn_as_gluoncv_draws_it(gcv, blood_photo):
    img, boxes, ids = blood_photo
    scores = np.linspace(0.3, 1, len(boxes)).astype(np.float32)[:, None]
    args = (boxes, scores, ids[:, None])
    axes = [f(img, *[a.copy() for a in args], class_names=BCCD_CLASSES)
            for f in (gcv.plot_bbox, viz.plot_bbox)]
    assert _drawn(axes[0]) == _drawn(axes[1]) and axes[1].patches
    pictures = [f(img.copy(), *[a.copy() for a in args], class_names=BCCD_CLASSES, scale=1.5)
                for f in (gcv.cv_plot_bbox, viz.cv_plot_bbox)]
    np.testing.assert_array_equal(pictures[1], pictures[0])

    height, width = img.shape[:2]
    masks = _mask_probabilities(np.random.RandomState(4), len(boxes))
    theirs, _ = gcv.expand_mask(masks, boxes.copy(), (width, height), scores, sortby='area')
    ours, _ = viz.expand_mask(masks, boxes, (width, height), scores, sortby='area')
    np.testing.assert_array_equal(ours, theirs)
    blended = []
    for f in (gcv.plot_mask, viz.plot_mask):
        np.random.seed(0)
        blended.append(f(img, ours))
    np.testing.assert_array_equal(blended[1], blended[0])
    assert ours.any() and (blended[1] != img).any()
