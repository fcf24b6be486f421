"""gluondet.masks: the same RLEs, areas, boxes, IoUs and unions as pycocotools, the same
pasted masks as GluonCV's evaluation."""
import numpy as np
import pytest

from gluondet import masks

pm = pytest.importorskip('pycocotools.mask')


def _ref_encode(bitmaps):
    """pycocotools' RLEs of N x H x W bitmaps, counts as str."""
    rles = pm.encode(np.asfortranarray(bitmaps.transpose(1, 2, 0).astype(np.uint8)))
    return [{'size': list(r['size']), 'counts': r['counts'].decode()} for r in rles]


def _bitmaps(rng, n, height, width):
    """Random masks: noise, blocks, empty and full ones."""
    out = (rng.random((n, height, width)) < rng.random((n, 1, 1))).astype(np.uint8)
    for i in range(n):
        kind = rng.integers(0, 4)
        if kind == 0:
            out[i] = 0
            y, x = rng.integers(0, height), rng.integers(0, width)
            out[i, y:y + rng.integers(1, height + 1), x:x + rng.integers(1, width + 1)] = 1
        elif kind == 1:
            out[i] = rng.integers(0, 2)     # all 0 or all 1
    return out


def test_encode_decode_area_bbox_as_pycocotools():
    rng = np.random.default_rng(0)
    for shape in [(1, 1), (1, 7), (9, 1), (5, 6), (31, 17), (48, 64)]:
        bitmaps = _bitmaps(rng, 12, *shape)
        rles = masks.encode(bitmaps)
        assert rles == _ref_encode(bitmaps)
        assert all(isinstance(r['counts'], str) for r in rles)
        assert masks.encode(bitmaps[3] * 7) == rles[3]      # nonzero is inside
        assert np.array_equal(masks.decode(rles), bitmaps)
        assert masks.decode(rles).dtype == np.uint8
        assert np.array_equal(masks.decode(rles[0]), bitmaps[0])
        ref = [dict(r, counts=r['counts'].encode()) for r in rles]
        assert np.array_equal(masks.area(rles), pm.area(ref))
        assert masks.area(rles[2]) == pm.area(ref[2])
        assert np.array_equal(masks.to_bbox(rles), pm.toBbox(ref))
        assert np.array_equal(masks.to_bbox(rles[5]), pm.toBbox(ref[5]))
    assert masks.encode(np.zeros((0, 4, 5))) == []


def test_decode_forms_and_empty_lists():
    rle = masks.encode(np.eye(4, 6, dtype=bool))
    as_bytes = dict(rle, counts=rle['counts'].encode())
    uncompressed = {'size': [4, 6], 'counts': [0, 1, 4, 1, 4, 1, 4, 1, 8]}
    for form in (rle, as_bytes, uncompressed):
        assert np.array_equal(masks.decode(form), np.eye(4, 6))
    assert masks.decode([], size=(4, 6)).shape == (0, 4, 6)
    with pytest.raises(ValueError, match='no RLEs and no size'):
        masks.decode([])
    with pytest.raises(ValueError, match='different sizes'):
        masks.decode([rle, masks.encode(np.zeros((6, 4)))])


def _polygon(rng, kind, height, width):
    """One random polygon (flat list) of a kind."""
    k = int(rng.integers(3, 16))
    span = max(height, width, 3)
    if kind == 'convex':
        angles = np.sort(rng.uniform(0, 2 * np.pi, k))
        radius = rng.uniform(1, span / 2)
        points = np.c_[np.cos(angles), np.sin(angles)] * radius + rng.uniform(0, span, 2)
    elif kind == 'concave':       # star-shaped
        angles = np.sort(rng.uniform(0, 2 * np.pi, k))
        radii = rng.uniform(0.2, 1, k)[:, None] * rng.uniform(1, span / 2)
        points = np.c_[np.cos(angles), np.sin(angles)] * radii + rng.uniform(0, span, 2)
    elif kind == 'crossing':      # points in random order: self-intersecting
        points = rng.uniform(0, span, (k, 2))
    elif kind == 'outside':       # partly or wholly outside the image, negative coordinates
        points = rng.uniform(-span, 2 * span, (k, 2))
    elif kind == 'tiny':
        points = rng.uniform(0, 2, (k, 2)) + rng.uniform(0, span, 2)
    elif kind == 'subpixel':
        points = rng.uniform(0, 0.5, (k, 2)) + rng.integers(-1, span, 2)
    elif kind == 'grid':          # on the half-pixel grid: ties in pycocotools' rounding
        points = rng.integers(-4, 2 * span + 4, (k, 2)) / 2.
    else:                         # repeated and collinear points
        base = rng.uniform(0, span, (3, 2))
        points = np.repeat(base, rng.integers(1, 4, 3), axis=0)
        points = np.r_[points, (points[:1] + points[-1:]) / 2]
    return points.ravel().tolist()


KINDS = ('convex', 'concave', 'crossing', 'outside', 'tiny', 'subpixel', 'grid', 'repeated')


@pytest.mark.parametrize('kind', KINDS)
def test_polygons_rasterize_as_pycocotools(kind):
    """Hundreds of polygons of each kind, alone and in unions, give pycocotools' strings."""
    rng = np.random.default_rng(KINDS.index(kind))
    for trial in range(150):
        height, width = (int(v) for v in rng.integers(1, 70, 2))
        polygons = [_polygon(rng, kind, height, width)
                    for _ in range(1 if trial % 3 else int(rng.integers(2, 4)))]
        expected = pm.merge(pm.frPyObjects(polygons, height, width))
        got = masks.from_polygons(polygons, height, width)
        assert got == {'size': [height, width], 'counts': expected['counts'].decode()}, \
            (polygons, height, width)
        assert masks.to_rle(polygons, height, width) == got


def test_large_polygons_as_pycocotools():
    rng = np.random.default_rng(11)
    for _ in range(20):
        height, width = 480, 640
        polygons = [_polygon(rng, kind, height, width) for kind in ('concave', 'crossing')]
        expected = pm.merge(pm.frPyObjects(polygons, height, width))
        assert masks.from_polygons(polygons, height, width)['counts'] == \
            expected['counts'].decode()


def test_to_rle_of_each_form():
    rng = np.random.default_rng(2)
    bitmap = _bitmaps(rng, 1, 9, 7)[0]
    rle = masks.encode(bitmap)
    counts = [int(c) for c in np.diff(np.r_[0, np.flatnonzero(np.diff(bitmap.T.ravel())) + 1,
                                            63])]
    uncompressed = {'size': [9, 7], 'counts': ([0] if bitmap[0, 0] else []) + counts}
    assert masks.to_rle(uncompressed, 9, 7) == rle
    ref = pm.frPyObjects(uncompressed, 9, 7)
    assert masks.to_rle(uncompressed, 9, 7)['counts'] == ref['counts'].decode()
    # zero-length runs are kept as given, as pycocotools keeps them
    odd = {'size': [2, 3], 'counts': [1, 0, 2, 2, 0, 1]}
    assert masks.to_rle(odd, 2, 3)['counts'] == pm.frPyObjects(odd, 2, 3)['counts'].decode()
    assert masks.to_rle(rle, 9, 7) == rle
    assert masks.to_rle(dict(rle, counts=rle['counts'].encode()), 9, 7) == rle


def test_bad_segmentations_are_named():
    good = masks.encode(np.ones((4, 5), np.uint8))
    cases = [
        (dict(good, size=[5, 4]), r'ann 3: RLE size \[5, 4\] is not the image size \[4, 5\]'),
        ({'size': [4, 5], 'counts': [3, 4]}, 'ann 3: RLE counts add up to 7, not height'),
        ({'size': [4, 5], 'counts': [3, -1, 18]}, 'ann 3: RLE counts must be >= 0'),
        ({'size': [4, 5], 'counts': [1.5, 18.5]}, 'ann 3: uncompressed counts must be a flat'),
        ({'size': [4, 5], 'counts': 'a~'}, 'ann 3: counts has a character outside'),
        ({'size': [4, 5], 'counts': 'Pa'}, 'ann 3: counts is cut short'),
        ({'size': [4, 5], 'counts': 7}, 'ann 3: counts must be a compressed string or a list'),
        ({'size': [4], 'counts': '04'}, r'ann 3: size must be \[height, width\]'),
        ([[1, 1, 3, 1]], r'ann 3\[0\]: a polygon needs at least 3 points, got 2'),
        ([[1, 1, 3, 1, 2]], r'ann 3\[0\]: a polygon has an odd number of coordinates \(5\)'),
        ([[1, 1, 3, 1, float('nan'), 2]], r'ann 3\[0\]: a polygon has a non-finite'),
        ([[1, 1, 3, 1, float('inf'), 2]], r'ann 3\[0\]: a polygon has a non-finite'),
        ([[1, 1, 3, 'a', 2, 2]], r'ann 3\[0\]: a polygon holds numbers only'),
        ([1, 1, 3, 1, 2, 2], r'ann 3\[0\]: a polygon is a flat list .*got int'),
        ([], 'ann 3: no polygons'),
        ('polygon', 'ann 3: a list of polygons or an RLE dict'),
        ({'counts': [20]}, 'ann 3: a list of polygons or an RLE dict'),
        (None, 'ann 3: a list of polygons or an RLE dict'),
    ]
    for segmentation, message in cases:
        with pytest.raises(ValueError, match=message):
            masks.to_rle(segmentation, 4, 5, source='ann 3')
    with pytest.raises(ValueError, match=r'polygons\[0\]: a polygon needs at least 3 points'):
        masks.from_polygons([[0, 0, 1, 1]], 4, 5)


def test_non_canonical_rles_as_pycocotools():
    """Empty runs inside counts (pycocotools keeps them as given)."""
    rles = [{'size': [3, 4], 'counts': [5, 0, 0, 2, 5]}, {'size': [3, 4], 'counts': [0, 0, 12]},
            {'size': [3, 4], 'counts': [2, 3, 0, 2, 5]}, {'size': [3, 4], 'counts': [0, 12, 0]}]
    ref = [pm.frPyObjects(r, 3, 4) for r in rles]
    assert masks.merge(rles[:1])['counts'] == ref[0]['counts'].decode()
    assert masks.to_rle(rles[2], 3, 4)['counts'] == ref[2]['counts'].decode()
    assert np.array_equal(masks.to_bbox(rles[::2] + rles[3:]), pm.toBbox(ref[::2] + ref[3:]))
    assert np.array_equal(masks.area(rles), pm.area(ref))
    assert np.array_equal(masks.decode(rles), pm.decode(ref).transpose(2, 0, 1))
    # the masks' IoU (pycocotools' stops early where both counts hold an empty run at one
    # place: it gives 0 for rles[0] with itself)
    bitmaps = masks.decode(rles).reshape(4, -1).astype(float)
    inter = bitmaps @ bitmaps.T
    union = np.where([0, 1, 0, 1], bitmaps.sum(1)[:, None], bitmaps.sum(1)[:, None] +
                     bitmaps.sum(1) - inter)
    assert np.array_equal(masks.iou(rles, rles, [0, 1, 0, 1]),
                          np.where(inter > 0, inter / np.maximum(union, 1), 0))
    assert pm.iou(ref[:1], ref[:1], [0])[0, 0] == 0
    # an empty mask: 0s (pycocotools 2.0.11 overflows where its counts hold an empty run of 1s)
    assert masks.to_bbox(rles[1]).tolist() == [0, 0, 0, 0]


def test_iou_as_pycocotools():
    rng = np.random.default_rng(3)
    for _ in range(40):
        height, width = (int(v) for v in rng.integers(1, 40, 2))
        dets = _bitmaps(rng, int(rng.integers(1, 7)), height, width)
        gts = _bitmaps(rng, int(rng.integers(1, 7)), height, width)
        crowd = rng.random(len(gts)) < 0.4
        ref = pm.iou([dict(r, counts=r['counts'].encode()) for r in _ref_encode(dets)],
                     [dict(r, counts=r['counts'].encode()) for r in _ref_encode(gts)],
                     crowd.astype(np.uint8).tolist())
        got = masks.iou(masks.encode(dets), masks.encode(gts), crowd)
        assert got.dtype == np.float64 and got.shape == (len(dets), len(gts))
        assert np.array_equal(got, ref)


def test_iou_of_polygon_masks_and_edge_cases():
    rng = np.random.default_rng(4)
    gts = [masks.from_polygons([_polygon(rng, 'concave', 120, 160)], 120, 160)
           for _ in range(15)]
    dets = [masks.from_polygons([_polygon(rng, kind, 120, 160)], 120, 160)
            for kind in KINDS for _ in range(3)]
    crowd = np.arange(15) % 4 == 0
    as_bytes = [[dict(r, counts=r['counts'].encode()) for r in rles] for rles in (dets, gts)]
    expected = pm.iou(*as_bytes, crowd.tolist())
    assert (expected > 0).sum() > 20
    assert np.array_equal(masks.iou(dets, gts, crowd), expected)
    assert masks.iou([], gts, crowd).shape == (0, 15)
    assert masks.iou(dets, [], []).shape == (24, 0)
    with pytest.raises(ValueError, match='different sizes'):
        masks.iou(dets, [masks.encode(np.ones((5, 5)))], [0])
    with pytest.raises(ValueError, match='iscrowd has 2 values for 15'):
        masks.iou(dets, gts, [0, 1])


def test_merge_as_pycocotools():
    rng = np.random.default_rng(5)
    for _ in range(60):
        height, width = (int(v) for v in rng.integers(1, 30, 2))
        bitmaps = _bitmaps(rng, int(rng.integers(1, 5)), height, width)
        rles = masks.encode(bitmaps)
        ref = [dict(r, counts=r['counts'].encode()) for r in rles]
        for intersect in (False, True):
            got = masks.merge(rles, intersect)
            assert got['counts'] == pm.merge(ref, intersect)['counts'].decode()
            want = bitmaps.all(0) if intersect else bitmaps.any(0)
            assert np.array_equal(masks.decode(got), want)
    with pytest.raises(ValueError, match='no RLEs'):
        masks.merge([])
    with pytest.raises(ValueError, match='different sizes'):
        masks.merge([masks.encode(np.ones((3, 3))), masks.encode(np.ones((3, 4)))])


# -- paste == GluonCV's fill -----------------------------------------------------------------


def _mask_probabilities(rng, n, size):
    """Mask R-CNN-like outputs: sigmoid blobs, some of them noise, some exactly 0.5."""
    yy, xx = np.mgrid[0:size, 0:size]
    out = []
    for i in range(n):
        if i % 4 == 3:
            out.append(1 / (1 + np.exp(-rng.normal(0, 3, (size, size)))))
            continue
        centre = rng.uniform(2, size - 2, 2)
        logit = (size / 3 - np.hypot(xx - centre[0], yy - centre[1])) * rng.uniform(0.3, 3)
        out.append(1 / (1 + np.exp(-logit)))
    out = np.array(out, np.float32)
    out[:, :2, :2] = 0.5
    return out


def _boxes(rng, kind, n, width, height):
    if kind == 'inside':
        x1, y1 = rng.uniform(0, width - 2, n), rng.uniform(0, height - 2, n)
        x2, y2 = x1 + rng.uniform(0, width - x1), y1 + rng.uniform(0, height - y1)
    elif kind == 'border':          # clipped to the image, as a detector clips them
        x1 = np.clip(rng.uniform(-20, width, n), 0, width - 1)
        y1 = np.clip(rng.uniform(-20, height, n), 0, height - 1)
        x2 = np.clip(x1 + rng.uniform(0, 120, n), 0, width - 1)
        y2 = np.clip(y1 + rng.uniform(0, 120, n), 0, height - 1)
    elif kind == 'outside':         # partly outside the image
        x1, y1 = rng.uniform(-30, width - 5, n), rng.uniform(-30, height - 5, n)
        x2, y2 = x1 + rng.uniform(36, 90, n), y1 + rng.uniform(36, 90, n)
    elif kind == 'tiny':            # under a pixel
        x1, y1 = rng.uniform(0, width - 2, n), rng.uniform(0, height - 2, n)
        x2, y2 = x1 + rng.uniform(0, 1, n), y1 + rng.uniform(0, 1, n)
    else:                           # about the whole image
        x1, y1 = rng.uniform(-4, 4, n), rng.uniform(-4, 4, n)
        x2, y2 = x1 + width * rng.uniform(.8, 1.1, n), y1 + height * rng.uniform(.8, 1.1, n)
    return np.stack([x1, y1, x2, y2], axis=1)


@pytest.mark.parametrize('size', [14, 28])
@pytest.mark.parametrize('kind', ['inside', 'border', 'outside', 'tiny', 'whole'])
def test_paste_is_gluoncv_fill(size, kind):
    fill = pytest.importorskip('gluoncv.data.transforms.mask').fill
    rng = np.random.default_rng(size + len(kind))
    for trial in range(12):
        width, height = (int(v) for v in rng.integers(16, 160, 2))
        n = int(rng.integers(1, 6))
        probabilities = _mask_probabilities(rng, n, size)
        boxes = _boxes(rng, kind, n, width, height)
        boxes = boxes.astype(np.float32 if trial % 2 else np.float64)
        expected = fill(probabilities, boxes, (width, height))
        got = masks.paste(probabilities, boxes, (width, height))
        assert got.dtype == np.uint8 and got.shape == (n, height, width)
        assert np.array_equal(got, expected), (boxes, width, height)
        assert expected.sum() > 0 or kind == 'tiny'


def test_paste_edge_cases():
    probabilities = np.full((2, 28, 28), 0.9, np.float32)
    # a box wholly outside the image pastes nothing (GluonCV's fill fails on some)
    outside = masks.paste(probabilities, np.array([[200., 10, 260, 50], [-80, -80, -10, -2]]),
                          (100, 60))
    assert outside.shape == (2, 60, 100) and not outside.any()
    assert masks.paste(np.zeros((0, 28, 28)), np.zeros((0, 4)), (7, 5)).shape == (0, 5, 7)
    one = masks.paste(probabilities[:1], [[10, 10, 29, 19]], (50, 40), threshold=0.95)
    assert not one.any()
    with pytest.raises(ValueError, match=r'boxes\[1\] has xmax < xmin'):
        masks.paste(probabilities, [[0, 0, 5, 5], [9, 0, 2, 5]], (20, 20))
    with pytest.raises(ValueError, match='boxes must be finite'):
        masks.paste(probabilities, [[0, 0, 5, 5], [0, 0, np.nan, 5]], (20, 20))
    with pytest.raises(ValueError, match='masks N x M x M and boxes N x 4'):
        masks.paste(probabilities, [[0, 0, 5, 5]], (20, 20))
