"""Detection AutoAugment: boxes stay on their objects, box-level operations stay in their boxes,
draws are seeded like the rest of the augmentation."""
import numpy as np
import pytest

from gluondet.data.autoaugment import POLICIES, DetectionAutoAugment, apply_operation

COLORS = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]


def _scene():
    """A grey 200 x 240 image with three solid rectangles of unique colours, and their boxes."""
    img = np.full((200, 240, 3), 128, np.uint8)
    boxes = [(20, 30, 80, 90), (120, 40, 200, 100), (60, 120, 150, 180)]
    for (x1, y1, x2, y2), color in zip(boxes, COLORS):
        img[y1:y2 + 1, x1:x2 + 1] = color
    label = np.array([b + (k, 0) for k, b in enumerate(boxes)], np.float32)
    return img, label


def _object_bounds(img, color):
    """Bounds of the pixels close to ``color`` (None if it left the image)."""
    mask = (np.abs(img.astype(int) - color).sum(axis=2) < 60)
    if mask.sum() < 20:
        return None
    ys, xs = np.nonzero(mask)
    return xs.min(), ys.min(), xs.max(), ys.max()


@pytest.mark.parametrize('name', ['Rotate_BBox', 'ShearX_BBox', 'ShearY_BBox',
                                  'TranslateX_BBox', 'TranslateY_BBox', 'Zoom'])
@pytest.mark.parametrize('level', [2, 6, 10])
def test_geometric_operations_keep_each_box_on_its_object(name, level):
    img, label = _scene()
    for seed in range(4):
        out, moved = apply_operation(img, label, name, 1.0, level, np.random.RandomState(seed))
        assert out.shape == img.shape
        kept = {int(row[4]): row[:4] for row in moved}
        for k, color in enumerate(COLORS):
            bounds = _object_bounds(out, color)
            if k not in kept:           # moved out: nothing (or a sliver) of it is left
                assert bounds is None or (bounds[2] - bounds[0]) * (bounds[3] - bounds[1]) < 400
                continue
            x1, y1, x2, y2 = kept[k]
            assert bounds is not None
            bx1, by1, bx2, by2 = bounds
            # the object lies inside its box ...
            assert bx1 >= x1 - 1.5 and by1 >= y1 - 1.5 and bx2 <= x2 + 1.5 and by2 <= y2 + 1.5
            # ... and fills it: the box is at most the bounds of the object's rotated corners
            area = (bx2 - bx1 + 1) * (by2 - by1 + 1)
            assert (x2 - x1 + 1) * (y2 - y1 + 1) <= 2.2 * area + 50


@pytest.mark.parametrize('name', ['Equalize_Only_BBoxes', 'Flip_Only_BBoxes',
                                  'Cutout_Only_BBoxes', 'Rotate_Only_BBoxes',
                                  'TranslateY_Only_BBoxes', 'Color_Only_BBoxes'])
@pytest.mark.parametrize('attenuate', [False, True])
def test_box_level_operations_change_only_pixels_inside_boxes(name, attenuate):
    img, label = _scene()
    noise = np.random.RandomState(0).randint(-40, 40, img.shape)
    img = np.clip(img + noise, 0, 255).astype(np.uint8)   # texture: every operation changes it
    out, same = apply_operation(img, label, name, 1.0, 8, np.random.RandomState(1), attenuate)
    np.testing.assert_array_equal(same, label)
    inside = np.zeros(img.shape[:2], bool)
    for x1, y1, x2, y2 in label[:, :4].astype(int):
        inside[y1:y2 + 1, x1:x2 + 1] = True
    np.testing.assert_array_equal(out[~inside], img[~inside])
    assert (out[inside] != img[inside]).any()


def test_color_operations_keep_the_boxes_and_change_the_image():
    img, label = _scene()
    img = img // 2 + 40                 # not the full range: AutoContrast has work to do
    for name in ('Equalize', 'AutoContrast', 'Posterize', 'Solarize', 'Color', 'Contrast',
                 'Brightness', 'Sharpness', 'Cutout'):
        level = 3 if name == 'Solarize' else 8     # (Color and the like are identity at 5)
        out, same = apply_operation(img, label, name, 1.0, level, np.random.RandomState(0))
        assert out.dtype == np.uint8 and out.shape == img.shape
        np.testing.assert_array_equal(same, label)
        if name != 'Sharpness':       # flat regions do not sharpen
            assert (out != img).any(), name


@pytest.mark.parametrize('policy', sorted(POLICIES))
def test_policies_are_seeded_like_the_rest(policy):
    img, label = _scene()
    augment = DetectionAutoAugment(policy)

    def run(seed):
        np.random.seed(seed)
        return [augment(img, label) for _ in range(6)]

    first, again, other = run(3), run(3), run(4)
    for (a, la), (b, lb) in zip(first, again):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)
    assert any(not np.array_equal(a, b) for (a, _), (b, _) in zip(first, other))


def test_bad_policies_are_refused_when_made():
    with pytest.raises(ValueError, match='unknown auto-augment policy'):
        DetectionAutoAugment('v9')
    with pytest.raises(ValueError, match="unknown augmentation 'Twist'"):
        DetectionAutoAugment([[('Twist', 0.0, 3)]])
    with pytest.raises(ValueError, match='level 11 must be in'):
        DetectionAutoAugment([[('Rotate_BBox', 0.5, 11)]])


def test_a_task_trains_with_it():
    from gluondet.data import DemoDetection
    from gluondet.tasks import RetinaNetTask
    train = DemoDetection('train', num_images=3, image_size=96)
    task = RetinaNetTask('retinanet_resnet18_v1b_custom', train, train, short=96, max_size=128,
                         auto_augment='scale_aware', pretrained_base=False)
    np.random.seed(0)
    image, label = task.train_dataset()[0]
    assert image.shape[0] == 3 and label.shape[1] >= 5
