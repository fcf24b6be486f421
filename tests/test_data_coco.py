"""COCODetection: layouts, id maps, box conversion, bad input, agreement with VOC."""
import json
import os
import re

import numpy as np
import pytest

from gluondet.data import COCODetection, DatasetError, VOCDetection
from gluondet.data.coco import coco_to_xyxy, xyxy_to_coco

from filetools import BCCD_CLASSES, CARD_CLASSES, write, jpeg

CATEGORIES = [{'id': 7, 'name': 'dog'}, {'id': 3, 'name': 'cat'}]


def ann(image_id, bbox, category_id=7, **extra):
    fields = dict(image_id=image_id, bbox=list(bbox), category_id=category_id, iscrowd=0)
    fields.update(extra)
    return fields


def coco_files(folder, images, annotations, categories=CATEGORIES, write_images=True):
    """Write images (id, file_name) as 64x48 JPEGs and the json; return its path."""
    entries = []
    for image_id, name in images:
        entries.append({'id': image_id, 'file_name': name, 'width': 64, 'height': 48})
        if write_images:
            write(os.path.join(str(folder), 'images', name), jpeg())
    for i, a in enumerate(annotations):
        a.setdefault('id', i + 1)
    return write(os.path.join(str(folder), 'ann.json'), json.dumps(
        {'images': entries, 'annotations': annotations, 'categories': categories}))


def load(folder, **kwargs):
    return COCODetection(annotation_file=os.path.join(str(folder), 'ann.json'),
                         image_root=os.path.join(str(folder), 'images'), **kwargs)


def test_box_conversion_and_its_inverse():
    assert coco_to_xyxy([10, 20, 30, 40]) == (10, 20, 39, 59)   # GluonCV: x + w - 1
    assert coco_to_xyxy([10, 20, 0.5, -3]) == (10, 20, 10, 20)   # max(w - 1, 0)
    np.testing.assert_array_equal(xyxy_to_coco([[10, 20, 39, 59], [0, 0, 1.5, 2]]),
                                  [[10, 20, 30, 40], [0, 0, 2.5, 3]])
    boxes = np.random.default_rng(0).uniform(0, 500, (50, 4))
    boxes[:, 2:] += boxes[:, :2]
    np.testing.assert_allclose([coco_to_xyxy(b) for b in xyxy_to_coco(boxes)], boxes, rtol=1e-12)


def test_labels_ids_and_maps(tmp_path):
    coco_files(tmp_path, [(5, 'b.jpg'), (2, 'a.jpg')],
               [ann(5, [10, 20, 30, 20]), ann(2, [1, 1, 5, 5], 3), ann(2, [2, 3, 4, 5], 7)])
    ds = load(tmp_path)
    assert ds.classes == ('cat', 'dog')  # categories in order of id
    assert ds.json_id_to_contiguous == {3: 0, 7: 1}
    assert ds.contiguous_id_to_json == {0: 3, 1: 7}
    assert ds.image_ids == [2, 5]  # images in order of id, as GluonCV
    np.testing.assert_array_equal(ds.label(0), [[1, 1, 5, 5, 0, 0], [2, 3, 5, 7, 1, 0]])
    np.testing.assert_array_equal(ds.label(1), [[10, 20, 39, 39, 1, 0]])
    assert ds.image_size(1) == (64, 48)
    assert ds.annotation_file == os.path.join(str(tmp_path), 'ann.json')
    image, label = ds[1]
    assert image.shape == (48, 64, 3)
    np.testing.assert_array_equal(ds.to_coco_bbox(label[:, :4]), [[10, 20, 30, 20]])


def test_given_classes_are_matched_by_name(tmp_path):
    coco_files(tmp_path, [(1, 'a.jpg')], [ann(1, [1, 1, 5, 5], 3), ann(1, [1, 1, 5, 5], 7)])
    ds = load(tmp_path, classes=('Dog', 'bird'))
    assert ds.json_id_to_contiguous == {7: 0} and ds.contiguous_id_to_json == {0: 7}
    assert ds.report.dropped == {'unknown_class': 1} and len(ds.label(0)) == 1
    with pytest.raises(DatasetError, match=r"annotations\[0\]/category_id: category 'cat' is not"):
        load(tmp_path, classes=('dog',), on_error='raise')


def test_gluoncv_layout(tmp_path):
    write(tmp_path / 'val2017' / 'x.jpg', jpeg())
    write(tmp_path / 'annotations' / 'instances_val2017.json', json.dumps({
        'images': [{'id': 1, 'file_name': 'x.jpg', 'width': 64, 'height': 48}],
        'annotations': [ann(1, [1, 2, 3, 4], id=1)], 'categories': CATEGORIES}))
    ds = COCODetection(root=str(tmp_path))
    assert ds.image_path(0) == os.path.join(str(tmp_path), 'val2017', 'x.jpg')
    assert ds.annotation_file == os.path.join(str(tmp_path), 'annotations',
                                              'instances_val2017.json')
    assert len(COCODetection(root=str(tmp_path), splits='instances_val2017')) == 1
    with pytest.raises(ValueError, match='one annotation file'):
        COCODetection(root=str(tmp_path), splits=('instances_val2017', 'instances_train2017'))
    with pytest.raises(ValueError, match='needs image_root'):
        COCODetection(annotation_file=ds.annotation_file)


def test_crowd_and_ignore_are_left_out_of_labels(tmp_path):
    coco_files(tmp_path, [(1, 'a.jpg')], [ann(1, [1, 1, 5, 5]), ann(1, [2, 2, 9, 9], iscrowd=1),
                                          ann(1, [3, 3, 9, 9], ignore=1)])
    ds = load(tmp_path)
    assert len(ds.label(0)) == 1 and ds.report.dropped == {'crowd': 1, 'ignored': 1}
    assert len(load(tmp_path, use_crowd=True).label(0)) == 2
    assert len(load(tmp_path, on_error='raise').label(0)) == 1  # expected, not an error


def test_images_without_boxes_are_kept_unless_skip_empty(tmp_path):
    coco_files(tmp_path, [(1, 'a.jpg'), (2, 'b.jpg'), (3, 'c.jpg')],
               [ann(1, [1, 1, 5, 5]), ann(3, [1, 1, 5, 5], iscrowd=1)])
    kept = load(tmp_path)
    assert kept.image_ids == [1, 2, 3] and kept.label(1).shape == (0, 6)
    assert kept.label(2).shape == (0, 6)     # its only box is a crowd: a background image
    assert kept.report.background == 2 and not kept.report.skipped
    assert '3 images (2 background images, without a box), 1 boxes' in kept.report.summary()
    skipped = load(tmp_path, skip_empty=True)
    assert skipped.image_ids == [1] and skipped.report.skipped == {'empty': 2}
    assert skipped.report.background == 0 and not skipped.report.problems()
    assert [skipped.image_path(0)] == [kept.image_path(0)]


def test_min_object_area(tmp_path):
    coco_files(tmp_path, [(1, 'a.jpg')], [ann(1, [1, 1, 5, 5], area=25), ann(1, [1, 1, 20, 20])])
    ds = load(tmp_path, min_object_area=30)
    assert len(ds.label(0)) == 1 and ds.report.dropped == {'small': 1}


@pytest.mark.parametrize('bbox, extra, reason', [
    ([5, 5, 0, 9], {}, 'zero_area'), ([5, 5, 1, 9], {}, 'zero_area'),   # as GluonCV: w - 1 = 0
    ([5, 5, 0.5, 9], {}, 'zero_area'), ([5, 5, 4, 9], {'area': 0}, 'zero_area'),
    ([5, 5, -3, 9], {}, 'inverted'), ([100, 5, 9, 9], {}, 'outside_image'),
    ([63, 5, 9, 9], {}, 'outside_image')])      # clipped to the last column: no width left
def test_bad_boxes_are_dropped_or_raise(tmp_path, bbox, extra, reason):
    coco_files(tmp_path, [(1, 'a.jpg')], [ann(1, bbox, **extra), ann(1, [1, 1, 5, 5])])
    ds = load(tmp_path)
    assert ds.report.dropped == {reason: 1} and len(ds.label(0)) == 1
    with pytest.raises(DatasetError, match=r'ann\.json: annotations\[0\]/bbox: '):
        load(tmp_path, on_error='raise')


def test_partly_outside_box_is_clipped(tmp_path):
    coco_files(tmp_path, [(1, 'a.jpg')], [ann(1, [-4, 40, 100, 100])])
    ds = load(tmp_path)
    np.testing.assert_array_equal(ds.label(0), [[0, 40, 63, 47, 1, 0]])
    assert ds.report.clipped == 1


@pytest.mark.parametrize('bad, message', [
    ({'bbox': [1, 2, 3]}, r'annotations\[0\]/bbox: expected \[x, y, w, h\]'),
    ({'bbox': [1, 2, 3, float('nan')]}, r'annotations\[0\]/bbox: expected'),
    ({'bbox': [1, 2, 3, '4']}, r'annotations\[0\]/bbox: expected'),
    ({'bbox': None}, r'annotations\[0\]/bbox: expected'),
    ({'bbox': {'x': 1}}, r'annotations\[0\]/bbox: expected'),
    ({'bbox': '1 2 3 4'}, r'annotations\[0\]/bbox: expected'),
    ({'bbox': [1, 2, 3, 10 ** 400]}, r'annotations\[0\]/bbox: expected'),   # too big for a float
    ({'bbox': [1, 2, True, 4]}, r'annotations\[0\]/bbox: expected'),
    ({'area': '25'}, r'annotations\[0\]/area: expected a finite number'),
    ({'category_id': 99}, r'annotations\[0\]/category_id: no category with id 99'),
    ({'category_id': [7]}, r'annotations\[0\]/category_id: no category with id \[7\]'),
    ({'category_id': {'id': 7}}, r'annotations\[0\]/category_id: no category'),
    ({'category_id': None}, r'annotations\[0\]/category_id: no category with id None'),
    ({'category_id': '7'}, r"annotations\[0\]/category_id: no category with id '7'")])
def test_malformed_annotation_skips_the_image(tmp_path, bad, message):
    a = ann(1, [1, 1, 5, 5])
    a.update(bad)
    coco_files(tmp_path, [(1, 'a.jpg'), (2, 'b.jpg')], [a, ann(2, [1, 1, 5, 5])])
    ds = load(tmp_path)
    assert ds.image_ids == [2] and ds.report.skipped == {'bad_annotation': 1}
    with pytest.raises(DatasetError, match=message):
        load(tmp_path, on_error='raise')


@pytest.mark.parametrize('image_id', [None, [1], {'id': 1}, 1.0, True, 'missing'])
def test_annotation_without_a_usable_image_id_is_dropped_or_raises(tmp_path, image_id):
    a = ann(image_id, [1, 1, 5, 5])
    if image_id == 'missing':
        del a['image_id']
    coco_files(tmp_path, [(1, 'a.jpg')], [ann(1, [2, 2, 5, 5]), a])
    ds = load(tmp_path)
    assert ds.report.dropped == {'bad_annotation': 1} and len(ds.label(0)) == 1
    with pytest.raises(DatasetError, match=r'annotations\[1\]/image_id: missing or not an int or '
                                           r'str, got %s' % re.escape(repr(a.get('image_id')))):
        load(tmp_path, on_error='raise')


def check_bad_image(tmp_path, name, data, reason, message):
    coco_files(tmp_path, [(1, 'good.jpg'), (2, name)], [ann(1, [1, 1, 5, 5]), ann(2, [1, 1, 5, 5])],
               write_images=False)
    write(tmp_path / 'images' / 'good.jpg', jpeg())
    if data is not None:
        write(tmp_path / 'images' / name, data)
    ds = load(tmp_path)
    assert ds.image_ids == [1] and ds.report.skipped == {reason: 1}
    with pytest.raises(DatasetError, match=message):
        load(tmp_path, on_error='raise')


def test_missing_image(tmp_path):
    check_bad_image(tmp_path, 'b.jpg', None, 'missing_image', r'b\.jpg: image: file not found')


def test_corrupt_image(tmp_path):
    check_bad_image(tmp_path, 'b.jpg', os.urandom(1000), 'bad_image', 'not a readable image')


def test_truncated_image(tmp_path):
    check_bad_image(tmp_path, 'b.jpg', jpeg()[:-50], 'bad_image', 'truncated JPEG')


@pytest.mark.parametrize('name', ['../b.jpg', '/etc/hosts', 'sub/../../b.jpg'])
def test_file_name_escaping_the_image_root_is_refused(tmp_path, name):
    write(tmp_path / 'b.jpg', jpeg())
    check_bad_image(tmp_path, name, None, 'unsafe_path', r'images\[1\]/file_name: refused')


def test_size_in_json_must_match_the_file(tmp_path):
    check_bad_image(tmp_path, 'b.jpg', jpeg(48, 64), 'size_mismatch', 'says 64x48 but')


def test_malformed_json_always_raises(tmp_path):
    path = write(tmp_path / 'ann.json', '{"images": [\n  {"id": 1,,}]}')
    for on_error in ('skip', 'raise'):
        with pytest.raises(DatasetError, match=r'ann\.json: json: malformed JSON at line 2 col'):
            COCODetection(annotation_file=path, image_root=str(tmp_path), on_error=on_error)


@pytest.mark.parametrize('data, message', [
    ([], 'categories: missing or not a list'),
    ({'images': [], 'annotations': [], 'categories': [{'id': 1}]},
     r'categories\[0\]: needs an id and a name'),
    ({'images': [], 'annotations': [], 'categories': [{'id': [1], 'name': 'a'}]},
     r'categories\[0\]/id: missing or not an int or str, got \[1\]'),
    ({'images': [], 'annotations': [None], 'categories': []},
     r'annotations\[0\]: not a json object, got None'),
    ({'images': [{'id': [1], 'file_name': 'a.jpg'}], 'annotations': [], 'categories': []},
     r'images\[0\]/id: missing or not an int or str'),
    ({'images': {}, 'annotations': [], 'categories': []}, 'images: missing or not a list'),
    ({'images': [{'file_name': 'a.jpg'}], 'annotations': [], 'categories': []},
     r'images\[0\]/id: missing'),
    ({'images': [{'id': 1, 'file_name': 'a.jpg'}, {'id': 1, 'file_name': 'b.jpg'}],
      'annotations': [], 'categories': []}, r'images\[1\]/id: duplicate id 1')])
def test_structural_errors_always_raise(tmp_path, data, message):
    path = write(tmp_path / 'ann.json', json.dumps(data))
    with pytest.raises(DatasetError, match=message):
        COCODetection(annotation_file=path, image_root=str(tmp_path))


def test_missing_json(tmp_path):
    with pytest.raises(DatasetError, match='annotation file not found'):
        COCODetection(annotation_file=str(tmp_path / 'no.json'), image_root=str(tmp_path))


def test_pycocotools_view(tmp_path):
    pytest.importorskip('pycocotools')
    coco_files(tmp_path, [(1, 'a.jpg')], [ann(1, [1, 1, 5, 5])])
    ds = load(tmp_path)
    assert ds.coco.getImgIds() == [1] and ds.coco is ds.coco


# -- real data: the COCO json and the VOC xml give the same boxes --------------

def by_image(ds, names):
    """image path -> sorted rows of (box, class name)."""
    return {ds.image_path(i): sorted((tuple(r[:4]), names[int(r[4])]) for r in ds.label(i))
            for i in range(len(ds))}


@pytest.mark.parametrize('dataset, voc_root, splits, json_names, classes', [
    ('bccd', 'BCCD', ('train', 'val', 'test'), ('train', 'val', 'test'), BCCD_CLASSES),
    ('bccd', 'BCCD', ('trainval',), ('trainval',), BCCD_CLASSES),
    ('cards', 'images', ('train', 'test'), ('train', 'test'), CARD_CLASSES)])
def test_coco_json_gives_the_voc_boxes(bccd_root, cards_root, dataset, voc_root, splits,
                                       json_names, classes):
    base = {'bccd': bccd_root, 'cards': cards_root}[dataset]
    voc = VOCDetection(os.path.join(base, voc_root), splits=splits, classes=classes)
    expected = by_image(voc, voc.classes)
    voc_index = {voc.image_path(i): i for i in range(len(voc))}
    found = {}
    for name in json_names:
        coco = COCODetection(annotation_file=os.path.join(base, 'coco', 'instances_%s.json' % name),
                             image_root=os.path.join(base, voc_root))
        assert coco.report.skipped == {} and coco.report.dropped == {}
        found.update(by_image(coco, coco.classes))
        # with the VOC class order the label arrays are identical, row for row
        same_order = COCODetection(annotation_file=coco.annotation_file,
                                   image_root=os.path.join(base, voc_root), classes=classes)
        for i in range(len(same_order)):
            np.testing.assert_array_equal(same_order.label(i),
                                          voc.label(voc_index[same_order.image_path(i)]))
    assert found == expected
    assert sum(len(v) for v in found.values()) == voc.report.boxes


def test_bccd_coco_categories(bccd_root):
    ds = COCODetection(annotation_file=os.path.join(bccd_root, 'coco', 'instances_train.json'),
                       image_root=os.path.join(bccd_root, 'BCCD'))
    assert ds.classes == ('Platelets', 'RBC', 'WBC')
    assert ds.json_id_to_contiguous == {1: 0, 2: 1, 3: 2}
    assert len(ds) == 205 and ds.image_size(0) == (640, 480)
