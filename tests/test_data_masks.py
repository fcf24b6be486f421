"""Instance masks: InstanceMasks, masks through the box transforms, COCO / demo / record
readers with masks, the Mask R-CNN train transform and mask batchify."""
import json
import os
import re

import cv2
import mxnet as mx
import numpy as np
import pycocotools.mask as cocomask
import pytest

from gluondet.data import COCODetection, DatasetError, DemoDetection, RecordDetection
from gluondet.data import transforms as T
from gluondet.data.batchify import Pad, PadImages, PadMasks, Tuple
from gluondet.data.coco import coco_to_xyxy, xyxy_to_coco
from gluondet.data.demo import render_demo_image
from gluondet.data.instance_masks import InstanceMasks, polygons_empty, rle_counts
from gluondet.data.rcnn_transforms import (MaskRCNNTrainTransform, RCNNTrainTransform,
                                           RCNNValTransform)
from gluondet.data.record import RecordWriter, decode_masks, encode_label

W, H = 64, 48


# ---------------------------------------------------------------- helpers

def star(rng, cx, cy, radius, points=7):
    """A flat COCO polygon around ``(cx, cy)`` (star-shaped, not convex)."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, points))
    radii = radius * rng.uniform(0.5, 1, points)
    return np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], 1).ravel().tolist()


def ellipse(rng, cx, cy, radius, points=24):
    """A flat COCO polygon of an ellipse (blunt, so its pixels reach its bounds)."""
    angles = np.linspace(0, 2 * np.pi, points, endpoint=False) + rng.uniform(0, 1)
    rx, ry = radius * rng.uniform(0.6, 1, 2)
    return np.stack([cx + rx * np.cos(angles), cy + ry * np.sin(angles)], 1).ravel().tolist()


def reference(polygons, height, width):
    """pycocotools' bitmap of one instance's polygons."""
    return cocomask.decode(cocomask.merge(cocomask.frPyObjects(polygons, height, width)))


def to_text(rle):
    return {'size': list(rle['size']), 'counts': rle['counts'].decode()}


def tight(bitmaps):
    """``N x 4`` inclusive pixel boxes of masks (NaN for an empty one)."""
    out = np.full((len(bitmaps), 4), np.nan)
    for i, mask in enumerate(bitmaps):
        ys, xs = np.nonzero(mask)
        if len(xs):
            out[i] = xs.min(), ys.min(), xs.max(), ys.max()
    return out


def iou(a, b):
    return np.logical_and(a, b).sum() / max(np.logical_or(a, b).sum(), 1)


def box_iou(a, b):
    """IoU of two inclusive pixel boxes."""
    w = min(a[2], b[2]) - max(a[0], b[0]) + 1
    h = min(a[3], b[3]) - max(a[1], b[1]) + 1
    inter = max(w, 0) * max(h, 0)
    area = (a[2] - a[0] + 1) * (a[3] - a[1] + 1) + (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    return inter / (area - inter)


def scene(seed=0, count=4):
    """Polygon instances inside a W x H image and their COCO-read boxes (distinct class ids)."""
    rng = np.random.default_rng(seed)
    polygons = [[ellipse(rng, rng.uniform(12, W - 12), rng.uniform(12, H - 12),
                         rng.uniform(5, 11))] for _ in range(count)]
    label = []
    for i, (poly,) in enumerate(polygons):
        xy = np.reshape(poly, (-1, 2))
        x0, y0 = xy.min(axis=0)
        x1, y1 = xy.max(axis=0)
        label.append(coco_to_xyxy([x0, y0, x1 - x0, y1 - y0]) + (i, 0))
    image = rng.integers(0, 255, (H, W, 3), dtype=np.uint8)
    return image, np.array(label, np.float32), polygons


# ---------------------------------------------------------------- InstanceMasks

def test_polygons_and_rle_rasterize_as_pycocotools():
    rng = np.random.default_rng(1)
    two_parts = [star(rng, 15, 15, 9), star(rng, 45, 30, 8)]
    bowtie = [[5, 5, 30, 30, 30, 5, 5, 30]]              # self-intersecting: kept
    bitmap = reference([star(rng, 30, 20, 12)], H, W)
    compressed = to_text(cocomask.encode(np.asfortranarray(bitmap)))
    uncompressed = {'size': [H, W], 'counts': rle_counts(bitmap).tolist()}
    masks = InstanceMasks([two_parts, bowtie, bitmap, compressed, uncompressed])
    assert masks.kinds == ('polygons', 'polygons', 'bitmap', 'bitmap', 'bitmap')
    out = masks.bitmaps(H, W)
    assert out.shape == (5, H, W) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[0], reference(two_parts, H, W))
    np.testing.assert_array_equal(out[1], reference(bowtie, H, W))
    assert out[1].sum() == 312
    for i in (2, 3, 4):
        np.testing.assert_array_equal(out[i], bitmap)
    # a canvas of another size crops or pads a bitmap at the bottom right
    np.testing.assert_array_equal(masks[2].bitmaps(H + 5, W - 4)[0, :H], bitmap[:, :W - 4])
    assert not masks[2].bitmaps(H + 5, W - 4)[0, H:].any()


def test_rle_counts_are_cocos_uncompressed_rle():
    rng = np.random.default_rng(2)
    for _ in range(20):
        bitmap = (rng.random((7, 9)) < 0.4).astype(np.uint8)
        counts = rle_counts(bitmap)
        assert counts.sum() == 63 and (counts[1:] > 0).all()
        rle = cocomask.frPyObjects({'size': [7, 9], 'counts': counts.tolist()}, 7, 9)
        np.testing.assert_array_equal(cocomask.decode(rle), bitmap)
    assert rle_counts(np.ones((2, 2))).tolist() == [0, 4]
    assert rle_counts(np.zeros((2, 3))).tolist() == [6]


def test_empty_polygons_are_found_as_pycocotools_rasterizes_them():
    rng = np.random.default_rng(4)
    instances = []
    for _ in range(600):          # tiny, thin, crossing the border, self-intersecting
        centre, spread = rng.uniform(-3, 23, 2), rng.choice([0.3, 0.8, 2, 6])
        instances.append(tuple(np.round(centre + rng.normal(0, spread, (rng.integers(3, 9), 2))
                                        * rng.uniform(0.05, 1, 2), 1)
                               for _ in range(rng.integers(1, 3))))
    expected = [cocomask.area(cocomask.merge(cocomask.frPyObjects(
        [p.ravel().tolist() for p in parts], 20, 20))) == 0 for parts in instances]
    assert 150 < sum(expected) < 450
    np.testing.assert_array_equal(polygons_empty(instances, 20, 20), expected)
    assert polygons_empty([], 20, 20).shape == (0,)


def test_indexing_selects_in_order():
    bitmaps = np.zeros((4, 5, 6), np.uint8)
    for i in range(4):
        bitmaps[i, i, i] = 1
    masks = InstanceMasks(bitmaps)
    assert len(masks) == 4 and repr(masks) == 'InstanceMasks(4: 0 polygons, 4 bitmaps)'
    for index, rows in (([2, 0], [2, 0]), (np.array([True, False, False, True]), [0, 3]),
                        (slice(1, 3), [1, 2]), (3, [3]), (np.array([], int), [])):
        np.testing.assert_array_equal(masks[index].bitmaps(5, 6), bitmaps[rows])
    with pytest.raises(IndexError):
        masks[[4]]
    with pytest.raises(ValueError, match='instance 0: a polygon needs at least 3 points'):
        InstanceMasks([[[0, 0, 5, 5]]])


# ---------------------------------------------------------------- masks through transforms

def _moved(name, image, label, masks):
    """``(image, label, masks)`` after transform ``name``, run with masks, after checking that
    the same transform without masks gives the same image and label."""
    rng_seed = 5
    runs = {
        'resize': lambda m: T.resize(image, label, (80, 60), masks=m),
        'resize_short_within': lambda m: T.resize_short_within(image, label, 36, 80, masks=m),
        'flip': lambda m: T.random_flip(image, label, px=1, masks=m),
        'expand': lambda m: T.random_expand(image, label, rng=np.random.RandomState(rng_seed),
                                            masks=m),
        'bbox_crop': lambda m: ((image[9:39, 11:53],)
                                + _pair(T.bbox_crop(label, (11, 9, 42, 30), False, masks=m))),
        'random_crop': lambda m: T.random_crop_with_constraints(
            image, label, rng=np.random.RandomState(rng_seed), masks=m),
        'fixed_size_augment': lambda m: _seeded(T.fixed_size_augment, image, label, (80, 60),
                                                masks=m),
    }
    plain, moved = runs[name](None), runs[name](masks)
    assert len(moved) == len(plain) + 1 and isinstance(moved[-1], InstanceMasks)
    np.testing.assert_array_equal(moved[0], plain[0])
    np.testing.assert_array_equal(moved[1], plain[1])
    out = moved[0]
    if out.shape[0] == 3:                      # fixed_size_augment: normalized CHW
        out = out.transpose(1, 2, 0)
    return out, moved[1], moved[-1]


def _pair(result):
    return result if isinstance(result, tuple) else (result,)


def _seeded(fn, *args, **kwargs):
    np.random.seed(3)
    return fn(*args, **kwargs)


# How far a polygon mask's tight box may be from its moved box: 1 px, but 1.5 px after a
# flip. A COCO box is read from the polygon's bounds as GluonCV reads it (``x + w - 1``),
# within half a pixel of its pixels, and GluonCV's box geometry adds its own offsets:
# scaling an inclusive box by ``s`` moves its far side ``|1 - s|`` px (here ``s`` is 1.25
# or 0.75), a crop clips a box to the window's far edge (one past its last pixel), and a
# flip maps the box to ``width - x``, one pixel off the image's own mirror, which the masks
# follow (measured over 40 scenes: 0.75, 0.82, 1.0 and 1.5 px).
TOLERANCE = {'resize': 1.0, 'resize_short_within': 1.0, 'flip': 1.5, 'expand': 1.0,
             'bbox_crop': 1.0, 'random_crop': 1.0, 'fixed_size_augment': None}


@pytest.mark.parametrize('name', list(TOLERANCE))
def test_masks_follow_the_boxes_through_each_transform(name):
    checked = dropped = 0
    for seed in range(6):
        image, label, polygons = scene(seed)
        as_bitmaps = InstanceMasks(InstanceMasks(polygons).bitmaps(H, W))
        out, moved_label, moved = _moved(name, image, label, InstanceMasks(polygons))
        _, _, moved_bitmaps = _moved(name, image, label, as_bitmaps)
        height, width = out.shape[:2]
        assert len(moved) == len(moved_bitmaps) == len(moved_label)
        assert moved.kinds == ('polygons',) * len(moved)
        assert moved_bitmaps.kinds == ('bitmap',) * len(moved)
        from_polygons = moved.bitmaps(height, width)
        from_bitmaps = moved_bitmaps.bitmaps(height, width)
        # each mask's tight box is its own row's box (the class column is the row's
        # original index, so a misaligned or reordered mask would fail here)
        if TOLERANCE[name] is None:        # a random crop and scale: the boxes overlap well
            assert all(box_iou(a, b) > 0.7 for a, b in zip(tight(from_polygons), moved_label))
        else:
            np.testing.assert_allclose(tight(from_polygons), moved_label[:, :4],
                                       atol=TOLERANCE[name] + 1e-3)
        # a bitmap instance moves as the polygon instance does
        np.testing.assert_allclose(tight(from_bitmaps), tight(from_polygons), atol=1)
        for a, b in zip(from_polygons, from_bitmaps):
            assert iou(a, b) > 0.85
        checked += len(moved_label)
        dropped += len(label) - len(moved_label)
    assert checked >= 6
    if name == 'random_crop':
        assert dropped == 6           # rows 2, 0, 1 and 1-3 of the six scenes


def test_bitmaps_move_exactly_as_the_image_pixels():
    image, label, polygons = scene(0)
    bitmaps = InstanceMasks(polygons).bitmaps(H, W)
    masks = InstanceMasks(bitmaps)
    flipped = T.random_flip(image, label, px=1, masks=masks)
    np.testing.assert_array_equal(flipped[0], image[:, ::-1])
    np.testing.assert_array_equal(flipped[-1].bitmaps(H, W), bitmaps[:, :, ::-1])
    np.testing.assert_array_equal(masks.flip((W, H), flip_y=True).bitmaps(H, W),
                                  bitmaps[:, ::-1])
    canvas, _, (x, y, cw, ch), expanded = T.random_expand(
        image, label, rng=np.random.RandomState(0), masks=masks)
    padded = np.zeros((len(bitmaps), ch, cw), np.uint8)
    padded[:, y:y + H, x:x + W] = bitmaps
    np.testing.assert_array_equal(expanded.bitmaps(ch, cw), padded)
    np.testing.assert_array_equal(canvas[y:y + H, x:x + W], image)
    cropped = masks.crop((5, 7, 30, 20)).bitmaps(20, 30)
    np.testing.assert_array_equal(cropped, bitmaps[:, 7:27, 5:35])


def test_a_crop_drops_the_masks_of_the_boxes_it_drops():
    label = np.array([[2, 2, 12, 12, 0, 0], [40, 30, 60, 45, 1, 0], [20, 5, 34, 20, 2, 0]],
                     np.float32)
    polygons = [[[2, 2, 13, 2, 13, 13, 2, 13]], [[40, 30, 61, 30, 61, 46, 40, 46]],
                [[20, 5, 35, 5, 35, 21, 20, 21]]]
    kept, masks = T.bbox_crop(label, (0, 0, 36, 24), allow_outside_center=False,
                              masks=InstanceMasks(polygons))
    assert kept[:, 4].tolist() == [0, 2] and len(masks) == 2
    np.testing.assert_array_equal(tight(masks.bitmaps(24, 36)), [[2, 2, 12, 12], [20, 5, 34, 20]])
    clipped, masks = T.bbox_crop(label, (25, 10, 30, 30), masks=InstanceMasks(polygons))
    assert clipped[:, 4].tolist() == [1, 2]
    np.testing.assert_array_equal(tight(masks.bitmaps(30, 30)), [[15, 20, 29, 29], [0, 0, 9, 10]])


def test_masks_must_match_the_label_rows():
    image, label, polygons = scene(0)
    with pytest.raises(ValueError, match='one instance per label row: 3 masks, 4 rows'):
        T.resize(image, label, 32, masks=InstanceMasks(polygons[:3]))
    with pytest.raises(ValueError, match='masks need the label'):
        T.random_crop_with_constraints(image, None, masks=InstanceMasks(polygons))


# ---------------------------------------------------------------- COCO

def write_coco(folder, annotations, images=((1, 'a.png'),)):
    """PNG images of W x H and a json of them; return its path."""
    os.makedirs(os.path.join(folder, 'images'), exist_ok=True)
    rng = np.random.default_rng(0)
    entries = []
    for image_id, name in images:
        cv2.imwrite(os.path.join(folder, 'images', name),
                    rng.integers(0, 255, (H, W, 3), dtype=np.uint8))
        entries.append({'id': image_id, 'file_name': name, 'width': W, 'height': H})
    path = os.path.join(folder, 'ann.json')
    with open(path, 'w') as f:
        json.dump({'images': entries, 'annotations': annotations,
                   'categories': [{'id': 4, 'name': 'cat'}, {'id': 9, 'name': 'dog'}]}, f)
    return path


def coco(folder, **kwargs):
    return COCODetection(annotation_file=os.path.join(folder, 'ann.json'),
                         image_root=os.path.join(folder, 'images'), **kwargs)


def annotation(ann_id, segmentation, bbox=(10, 8, 30, 20), image_id=1, **extra):
    out = {'id': ann_id, 'image_id': image_id, 'category_id': 9, 'bbox': list(bbox),
           'area': 100, 'iscrowd': 0, 'segmentation': segmentation}
    out.update(extra)
    return out


def test_coco_reads_polygons_and_rle_crowd_or_not(tmp_path):
    from pycocotools.coco import COCO
    rng = np.random.default_rng(3)
    polygon = [star(rng, 20, 20, 10), star(rng, 40, 15, 6)]
    blob = reference([star(rng, 40, 30, 12)], H, W)
    compressed = to_text(cocomask.encode(np.asfortranarray(blob)))
    crowd = {'size': [H, W], 'counts': rle_counts(np.roll(blob, 9, axis=1)).tolist()}
    anns = [annotation(11, polygon, bbox=(10, 10, 36, 20)),
            annotation(12, compressed, bbox=(28, 18, 24, 24)),
            annotation(13, crowd, bbox=(37, 18, 24, 24), iscrowd=1),
            annotation(14, polygon, image_id=2, category_id=4, bbox=(10, 10, 36, 20))]
    path = write_coco(str(tmp_path), anns, images=((1, 'a.png'), (2, 'b.png')))
    plain = coco(str(tmp_path))
    ds = coco(str(tmp_path), masks=True)
    assert ds.with_masks and not plain.with_masks
    assert ds.report.dropped == {'crowd': 1} and ds.report.boxes == 3
    reference_coco = COCO(path)
    for i, kept in ((0, [11, 12]), (1, [14])):
        image, label, masks = ds[i]
        np.testing.assert_array_equal(label, plain.label(i))
        assert image.shape == (H, W, 3) and len(masks) == len(label) == len(kept)
        np.testing.assert_array_equal(masks.bitmaps(H, W), [
            reference_coco.annToMask(reference_coco.anns[k]) for k in kept])
    assert ds.masks(0).kinds == ('polygons', 'bitmap')
    with_crowd = coco(str(tmp_path), masks=True, use_crowd=True)
    np.testing.assert_array_equal(with_crowd.masks(0).bitmaps(H, W)[2],
                                  reference_coco.annToMask(reference_coco.anns[13]))
    # a transform gets the masks too
    moved = coco(str(tmp_path), masks=True, transform=lambda im, lab, m: (lab, m.flip((W, H),
                                                                                   True)))
    np.testing.assert_array_equal(moved[0][1].bitmaps(H, W), ds.masks(0).bitmaps(H, W)[:, :, ::-1])
    with pytest.raises(ValueError, match='built without masks'):
        plain.masks(0)


BAD_MASKS = [
    ('tiny polygon', [[20, 20, 20.3, 20, 20.3, 20.3]], 'empty_mask',
     'empty mask: the polygons cover no pixel'),
    ('outside', [[70, 5, 90, 5, 90, 30]], 'empty_mask', 'wholly outside the 64x48 image'),
    ('wrong RLE size', {'size': [H + 1, W], 'counts': [H * W + W]}, 'bad_mask',
     r'RLE of size \[49, 64\], but the image is \[48, 64\]'),
    ('empty RLE', {'size': [H, W], 'counts': [H * W]}, 'empty_mask', 'the RLE covers no pixel'),
    ('odd coordinates', [[10, 10, 30, 10, 30]], 'bad_mask', 'odd number \\(5\\) of coordinates'),
    ('not numbers', [[10, 10, 30, 'x', 30, 30]], 'bad_mask', 'polygon 0 is not a list of'),
    ('only short polygons', [[10, 10, 30, 10]], 'bad_mask', 'no polygon of 3 points or more'),
    ('a string', 'polygon', 'bad_mask', 'expected polygons \\(a list\\) or an RLE'),
    ('missing', None, 'missing_mask', 'no segmentation'),
    ('empty list', [], 'missing_mask', 'no segmentation'),
]


@pytest.mark.parametrize('case', BAD_MASKS, ids=[c[0] for c in BAD_MASKS])
def test_coco_bad_masks_are_counted_or_raise(tmp_path, case):
    _, segmentation, reason, problem = case
    good = [[10, 8, 40, 8, 40, 28, 10, 28]]
    path = write_coco(str(tmp_path), [annotation(41, good), annotation(42, segmentation)])
    ds = coco(str(tmp_path), masks=True)
    assert ds.report.dropped == {reason: 1} and ds.report.boxes == 1
    assert ds.report.problems() == {reason: 1}
    assert len(ds.masks(0)) == len(ds.label(0)) == 1
    np.testing.assert_array_equal(ds.masks(0).bitmaps(H, W)[0], reference(good, H, W))
    assert len(coco(str(tmp_path)).label(0)) == 2            # without masks both boxes are read
    with pytest.raises(DatasetError) as caught:
        coco(str(tmp_path), masks=True, on_error='raise')
    assert caught.value.reason == reason
    message = str(caught.value)
    assert message.startswith(path + r': annotations[1] (id 42)/segmentation: ')
    assert re.search(problem, message), message


def test_coco_keeps_a_self_intersecting_polygon(tmp_path):
    bowtie = [[10, 10, 40, 40, 40, 10, 10, 40]]
    write_coco(str(tmp_path), [annotation(5, bowtie, bbox=(10, 10, 30, 30))])
    ds = coco(str(tmp_path), masks=True, on_error='raise')
    assert not ds.report.dropped
    np.testing.assert_array_equal(ds.masks(0).bitmaps(H, W)[0], reference(bowtie, H, W))


# ---------------------------------------------------------------- Mask R-CNN transforms

def test_mask_rcnn_train_transform_matches_gluoncv_masks():
    from gluoncv.data.transforms import mask as gmask
    image, label, polygons = scene(4)
    gluoncv_polygons = [[np.reshape(p, (-1, 2)) for p in parts] for parts in polygons]
    flips = set()
    for seed in range(6):
        np.random.seed(seed)
        img, out_label, masks = MaskRCNNTrainTransform(short=(60, 90), max_size=120)(
            mx.nd.array(image, dtype='uint8'), label, polygons)
        np.random.seed(seed)
        boxes_img, boxes = RCNNTrainTransform(short=(60, 90), max_size=120)(image, label)
        np.testing.assert_array_equal(img, boxes_img)
        np.testing.assert_array_equal(out_label, boxes)
        height, width = img.shape[1:]
        assert img.dtype == np.float32 and img.shape[0] == 3
        assert masks.shape == (len(label), height, width) and masks.dtype == np.uint8
        resized = T.bbox_resize(label, (W, H), (width, height))
        flipped = not np.array_equal(out_label, resized)
        flips.add(flipped)
        for parts, mask in zip(gluoncv_polygons, masks):
            moved = gmask.flip(gmask.resize(parts, (W, H), (width, height)), (width, height),
                               flip_x=flipped)
            np.testing.assert_array_equal(mask, gmask.to_mask(moved, (width, height)))
        scale = height / H                  # see TOLERANCE
        np.testing.assert_allclose(tight(masks), out_label[:, :4],
                                   atol=0.7 + abs(1 - scale) + flipped)
    assert flips == {True, False}


def test_rcnn_val_transform_takes_the_masks_and_ignores_them():
    image, label, polygons = scene(0)
    plain = RCNNValTransform(short=32, max_size=100)(image, label)
    with_masks = RCNNValTransform(short=32, max_size=100)(image, label, InstanceMasks(polygons))
    for a, b in zip(plain, with_masks):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- demo

def test_demo_masks_are_the_drawn_shapes_and_leave_the_cache(tmp_path):
    plain = DemoDetection('val', num_images=6, image_size=64, root=str(tmp_path))
    files = {name: open(os.path.join(plain.folder, name), 'rb').read()
             for name in os.listdir(plain.folder)}
    assert 'masks.json' not in files
    ds = DemoDetection('val', num_images=6, image_size=64, root=str(tmp_path), masks=True)
    assert os.path.isfile(os.path.join(ds.folder, 'masks.json'))
    for name, data in files.items():       # images and labels.json are untouched
        assert open(os.path.join(ds.folder, name), 'rb').read() == data
    again = DemoDetection('val', num_images=6, image_size=64, root=str(tmp_path), masks=True)
    masks_file = os.path.join(ds.folder, 'masks.json')
    with open(masks_file) as f:
        written = f.read()
    stored = json.loads(written)
    stored['images'][2][0]['counts'] = stored['images'][2][0]['counts'][:-3]   # damaged
    with open(masks_file, 'w') as f:
        json.dump(stored, f)
    repaired = DemoDetection('val', num_images=6, image_size=64, root=str(tmp_path), masks=True)
    np.testing.assert_array_equal(repaired.masks(2).bitmaps(64, 64), ds.masks(2).bitmaps(64, 64))
    with open(masks_file) as f:
        assert f.read() == written                      # drawn and written again
    for i in range(len(ds)):
        drawn_image, drawn_label, drawn = render_demo_image(0, 'val', i, 64, masks=True)
        np.testing.assert_array_equal(drawn_image, render_demo_image(0, 'val', i, 64)[0])
        image, label, masks = ds[i]
        np.testing.assert_array_equal(label, plain.label(i))
        np.testing.assert_array_equal(label, drawn_label)
        np.testing.assert_array_equal(image.asnumpy(), plain[i][0].asnumpy())
        bitmaps = masks.bitmaps(64, 64)
        np.testing.assert_array_equal(bitmaps, drawn)
        np.testing.assert_array_equal(again.masks(i).bitmaps(64, 64), drawn)
        np.testing.assert_array_equal(tight(bitmaps), label[:, :4])   # tight box = the box


def test_demo_coco_ground_truth_is_a_valid_coco_dict(tmp_path):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    ds = DemoDetection('val', num_images=5, image_size=64, root=str(tmp_path), masks=True)
    gt = ds.coco_ground_truth()
    json.dumps(gt)
    assert [c['name'] for c in gt['categories']] == list(ds.classes)
    assert [c['id'] for c in gt['categories']] == [1, 2, 3, 4, 5]
    assert [im['id'] for im in gt['images']] == ds.image_ids == [1, 2, 3, 4, 5]
    assert ds.contiguous_id_to_json == {0: 1, 1: 2, 2: 3, 3: 4, 4: 5}
    api = COCO()
    api.dataset = gt
    api.createIndex()
    assert len(api.anns) == sum(len(ds.label(i)) for i in range(len(ds)))
    for i, image_id in enumerate(ds.image_ids):
        anns = api.loadAnns(api.getAnnIds(imgIds=image_id))
        label, masks = ds.label(i), ds.masks(i).bitmaps(64, 64)
        np.testing.assert_array_equal([a['bbox'] for a in anns], xyxy_to_coco(label[:, :4]))
        np.testing.assert_array_equal([a['category_id'] for a in anns], label[:, 4] + 1)
        np.testing.assert_array_equal([api.annToMask(a) for a in anns], masks)
        assert [a['area'] for a in anns] == masks.sum(axis=(1, 2)).tolist()
        assert all(a['iscrowd'] == 0 for a in anns)
    results = [dict(a, score=1.0) for a in gt['annotations']]
    for iou_type in ('segm', 'bbox'):
        evaluator = COCOeval(api, api.loadRes(results), iou_type)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
        assert evaluator.stats[0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match='masks=True'):
        DemoDetection('val', num_images=5, image_size=64, root=str(tmp_path)).coco_ground_truth()


# ---------------------------------------------------------------- batchify

def test_pad_masks_matches_pad_images_and_pad():
    first = np.ones((2, 5, 7), np.uint8)
    second = np.zeros((0, 9, 4), np.uint8)
    third = np.arange(3 * 4 * 6).reshape(3, 4, 6) % 2
    batch = PadMasks(multiple=4)([first, second, third])
    assert batch.dtype == np.uint8 and batch.shape == (3, 3, 12, 8)
    out = batch.asnumpy()
    np.testing.assert_array_equal(out[0, :2, :5, :7], first)
    assert out[0].sum() == first.sum() and out[1].sum() == 0
    np.testing.assert_array_equal(out[2, :, :4, :6], third)
    assert out[2].sum() == third.sum()
    assert PadMasks(min_length=5)([first]).shape == (1, 5, 5, 7)
    samples = [(np.zeros((3, 5, 7), np.float32), np.zeros((2, 6), np.float32), first),
               (np.zeros((3, 9, 4), np.float32), np.zeros((0, 6), np.float32), second)]
    images, sizes, labels, masks = Tuple(PadImages(32), Pad(-1), PadMasks(32))(samples)
    assert images.shape[2:] == masks.shape[2:] == (32, 32)
    assert labels.shape[:2] == masks.shape[:2] == (2, 2)
    with pytest.raises(ValueError, match='N x H x W'):
        PadMasks()([np.zeros((4, 4))])


# ---------------------------------------------------------------- records

def test_records_carry_masks(tmp_path):
    image, label, polygons = scene(2)
    ok, data = cv2.imencode('.png', image)
    masks = InstanceMasks(polygons)
    bitmaps = masks.bitmaps(H, W)
    path = str(tmp_path / 'm.rec')
    writer = RecordWriter(path)
    writer.add(data.tobytes(), label, W, H, masks=masks)
    writer.add(data.tobytes(), label[:2], W, H, masks=bitmaps[:2])
    writer.add(data.tobytes(), label[:0], W, H, masks=bitmaps[:0])
    writer.add(data.tobytes(), label, W, H)                   # no masks
    writer.commit()
    classes = ['c%d' % i for i in range(4)]
    ds = RecordDetection(path, classes=classes, masks=True)
    assert ds.report.dropped == {'missing_mask': 4} and len(ds) == 4
    for i, rows in enumerate([4, 2, 0]):
        np.testing.assert_array_equal(ds.label(i), label[:rows])
        np.testing.assert_array_equal(ds.masks(i).bitmaps(H, W), bitmaps[:rows])
    assert len(ds.label(3)) == 0
    _, item_label, item_masks = ds[0]
    np.testing.assert_array_equal(item_masks.bitmaps(H, W), bitmaps)
    plain = RecordDetection(path, classes=classes)            # the masks do not disturb labels
    for i, rows in enumerate([4, 2, 0, 4]):
        np.testing.assert_array_equal(plain.label(i), label[:rows])
    from gluoncv.data import RecordFileDetection
    gluoncv = RecordFileDetection(path)
    _, gluoncv_label = gluoncv[0]
    np.testing.assert_allclose(gluoncv_label[:, :4], label[:, :4], atol=1e-4)
    np.testing.assert_array_equal(gluoncv_label[:, 4], label[:, 4])


def test_record_mask_extras_are_exact_and_checked(tmp_path):
    big = np.zeros((1, 4100, 4200), np.uint8)                 # runs past float32's 2**24
    big[0, -1, -1] = 1
    vector = encode_label([[4199, 4099, 4199, 4099, 0, 0]], 4200, 4100, big)
    counts = decode_masks(vector, 'x')[0]
    assert counts.sum() == 4100 * 4200 and counts.max() <= 1 << 24
    assert counts.tolist()[-3:] == [0, 4100 * 4200 - 1 - 1 * (1 << 24), 1]
    np.testing.assert_array_equal(cocomask.decode(cocomask.frPyObjects(
        {'size': [4100, 4200], 'counts': counts.tolist()}, 4100, 4200)), big[0])
    label = np.array([[1, 1, 3, 3, 0, 0]], np.float32)
    mask = np.zeros((1, 6, 5), np.uint8)
    mask[0, 1:4, 1:4] = 1
    vector = encode_label(label, 5, 6, mask)
    # header (4), pixel box (4), one run count, the runs, then the row
    assert vector[:4].tolist() == [4 + 4 + 1 + 7, 6, 5, 6]
    assert vector[8:16].tolist() == [7, 7, 3, 3, 3, 3, 3, 8]
    assert decode_masks(encode_label(label, 5, 6), 'x') is None
    bad = vector.copy()
    bad[8] = 99
    with pytest.raises(DatasetError, match='x: label: mask extras: the run counts add up to 99'):
        decode_masks(bad, 'x')
    ok, data = cv2.imencode('.png', np.zeros((6, 5, 3), np.uint8))
    long_runs, no_pixel = vector.copy(), vector.copy()
    long_runs[15] = 9
    no_pixel[9:16] = [30, 0, 0, 0, 0, 0, 0]
    for broken, reason, problem in ((long_runs, 'bad_mask', "mask runs add up to 31 pixels, "
                                     "not the 5x6 image's 30"),
                                    (no_pixel, 'empty_mask', 'empty mask \\(no pixel\\)')):
        path = str(tmp_path / ('%s.rec' % reason))
        record = mx.recordio.MXIndexedRecordIO(path[:-4] + '.idx', path, 'w')
        record.write_idx(0, mx.recordio.pack(mx.recordio.IRHeader(0, broken, 0, 0),
                                             data.tobytes()))
        record.close()
        with pytest.raises(DatasetError, match=r'%s#0: object\[0\]/mask: %s' % (
                re.escape(path), problem)):
            RecordDetection(path, classes=['a'], masks=True, on_error='raise')
        ds = RecordDetection(path, classes=['a'], masks=True, skip_empty=False)
        assert ds.report.dropped == {reason: 1} and len(ds.label(0)) == 0
    with pytest.raises(ValueError, match='masks must be N x height x width = 1 x 6 x 5'):
        encode_label(label, 5, 6, np.zeros((2, 6, 5)))
