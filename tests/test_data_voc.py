"""VOCDetection: the three layouts, GluonCV's coordinates, real data, bad input."""
import logging
import os

import cv2
import numpy as np
import pytest

from gluondet.data import DatasetError, VOCDetection
from gluondet.data.voc import VOC_CLASSES, infer_layout

from filetools import BCCD_CLASSES, CARD_CLASSES, write, jpeg


def xml(filename, objects=(), size=(64, 48)):
    """VOC xml; objects are (name, (xmin, ymin, xmax, ymax), difficult)."""
    body = ''.join('<object><name>%s</name><difficult>%s</difficult><bndbox><xmin>%s</xmin>'
                   '<ymin>%s</ymin><xmax>%s</xmax><ymax>%s</ymax></bndbox></object>'
                   % ((name, difficult) + tuple(box)) for name, box, difficult in objects)
    size = '<size><width>%d</width><height>%d</height></size>' % size if size else ''
    name = '<filename>%s</filename>' % filename if filename is not None else ''
    return '<annotation>%s%s%s</annotation>' % (name, size, body)


DOG = [('dog', (11, 21, 30, 40), 0)]


def voc_folder(root, records, split='train'):
    """records: id -> (xml text or None, image bytes or None)."""
    for image_id, (text, image) in records.items():
        if text is not None:
            write(os.path.join(root, 'Annotations', image_id + '.xml'), text)
        if image is not None:
            write(os.path.join(root, 'JPEGImages', image_id + '.jpg'), image)
    write(os.path.join(root, 'ImageSets', 'Main', split + '.txt'), '\n'.join(records) + '\n')
    return str(root)


def good(image_id, objects=DOG):
    return xml(image_id + '.jpg', objects), jpeg()


def build(root, records, on_error='skip', **kwargs):
    voc_folder(root, records)
    kwargs.setdefault('classes', ('dog', 'cat'))
    return VOCDetection(str(root), splits='train', on_error=on_error, **kwargs)


# -- coordinates and fields ---------------------------------------------------

def test_voc_coordinates_shift_by_one_as_gluoncv(tmp_path):
    ds = build(tmp_path, {'a': good('a', [('dog', (1, 2, 64, 48), 0),
                                          ('Cat', (10.5, 20, 30, 40), 1)])})
    np.testing.assert_array_equal(ds.label(0), np.array(
        [[0, 1, 63, 47, 0, 0], [9.5, 19, 29, 39, 1, 1]], np.float32))


def test_class_names_match_case_insensitively_and_keep_given_spelling(tmp_path):
    ds = build(tmp_path, {'a': good('a', [(' DOG ', (11, 21, 30, 40), 0)])}, classes=('Dog',))
    assert ds.classes == ('Dog',) and ds.label(0)[0, 4] == 0


def test_unreadable_difficult_flag_counts_as_zero_as_gluoncv(tmp_path):
    ds = build(tmp_path, {'a': good('a', [('dog', (11, 21, 30, 40), 'yes')])})
    assert ds.label(0)[0, 5] == 0


def test_image_without_objects_is_kept_with_empty_label(tmp_path):
    ds = build(tmp_path, {'a': good('a', []), 'b': good('b')})
    assert len(ds) == 2 and ds.label(0).shape == (0, 6) and ds.label(0).dtype == np.float32


def test_without_classes_a_folder_has_the_names_its_annotations_write_sorted(tmp_path, caplog):
    records = {'a': good('a', [('dog', (11, 21, 30, 40), 0), ('Cat', (2, 2, 9, 9), 0)]),
               'b': good('b', [('cat', (2, 2, 9, 9), 0), ('bird', (2, 2, 9, 9), 0)])}
    with caplog.at_level(logging.INFO, logger='gluondet.data'):
        ds = build(tmp_path, records, classes=None)
    assert ds.classes == ('bird', 'Cat', 'dog')         # case ignored, as first written
    np.testing.assert_array_equal(ds.label(0)[:, 4], [2, 1])
    np.testing.assert_array_equal(ds.label(1)[:, 4], [1, 0])
    found = [r.getMessage() for r in caplog.records if 'classes found' in r.getMessage()]
    assert found == ['VOCDetection(%s, folder, train): classes found in its annotations: bird, '
                     'Cat, dog (sorted; --classes sets them)' % tmp_path]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger='gluondet.data'):
        assert build(tmp_path, records).classes == ('dog', 'cat')
    assert not [r for r in caplog.records if 'classes found' in r.getMessage()]


def test_without_classes_a_devkit_has_the_voc_classes_as_gluoncv(tmp_path):
    voc_folder(tmp_path / 'VOC2007', {'a': good('a')}, split='trainval')
    ds = VOCDetection(str(tmp_path), splits=[(2007, 'trainval')])
    assert ds.classes == VOC_CLASSES and ds.label(0)[0, 4] == VOC_CLASSES.index('dog')


def test_missing_size_is_read_from_the_image(tmp_path):
    ds = build(tmp_path, {'a': (xml('a.jpg', [('dog', (1, 1, 500, 500), 0)], size=None),
                                jpeg())})
    assert ds.image_size(0) == (64, 48)
    np.testing.assert_array_equal(ds.label(0)[0, :4], [0, 0, 63, 47])


# -- box policy ---------------------------------------------------------------

@pytest.mark.parametrize('box, reason', [
    ((30, 21, 30, 40), 'zero_area'), ((11, 40, 30, 40), 'zero_area'),
    ((30, 21, 11, 40), 'inverted'), ((11, 40, 30, 21), 'inverted'),
    ((100, 100, 200, 200), 'outside_image')])
def test_bad_boxes_are_dropped_and_counted_or_raise(tmp_path, box, reason):
    records = {'a': good('a', [('dog', box, 0), ('cat', (2, 2, 9, 9), 0)])}
    ds = build(tmp_path, records)
    np.testing.assert_array_equal(ds.label(0), [[1, 1, 8, 8, 1, 0]])
    assert ds.report.dropped == {reason: 1} and ds.report.boxes == 1
    with pytest.raises(DatasetError, match=r'a\.xml: object\[0\]/bndbox: '):
        build(tmp_path, records, on_error='raise')


def test_boxes_partly_outside_are_clipped_in_both_modes(tmp_path):
    records = {'a': good('a', [('dog', (-5, 10, 80, 60), 0)])}
    for on_error in ('skip', 'raise'):
        ds = build(tmp_path, records, on_error=on_error)
        np.testing.assert_array_equal(ds.label(0), [[0, 9, 63, 47, 0, 0]])
        assert ds.report.clipped == 1


def test_unknown_class_is_dropped_or_raises(tmp_path):
    records = {'a': good('a', [('horse', (11, 21, 30, 40), 0), ('dog', (11, 21, 30, 40), 0)])}
    ds = build(tmp_path, records)
    assert ds.report.dropped == {'unknown_class': 1} and len(ds.label(0)) == 1
    with pytest.raises(DatasetError, match=r"object\[0\]/name: unknown class 'horse'"):
        build(tmp_path, records, on_error='raise')


@pytest.mark.parametrize('value', ['abc', 'nan', 'inf', ''])
def test_malformed_coordinate_skips_the_image_never_a_nan(tmp_path, value):
    records = {'a': good('a', [('dog', (value, 21, 30, 40), 0)]), 'b': good('b')}
    ds = build(tmp_path, records)
    assert len(ds) == 1 and ds.report.skipped == {'bad_annotation': 1}
    assert not np.isnan(ds.label(0)).any()
    with pytest.raises(DatasetError, match=r'a\.xml: object\[0\]/bndbox/xmin: expected a'):
        build(tmp_path, records, on_error='raise')


# -- bad records --------------------------------------------------------------

def check_skip_and_raise(tmp_path, bad, reason, message):
    """A bad record 'a' beside a good one 'b': skipped and counted, or raises."""
    records = {'a': bad, 'b': good('b')}
    ds = build(tmp_path, records)
    assert len(ds) == 1 and ds.image_path(0).endswith('b.jpg')
    assert ds.report.skipped == {reason: 1}
    assert message in ds.report.examples[reason][0]
    with pytest.raises(DatasetError, match=message):
        build(tmp_path, records, on_error='raise')


def test_missing_image(tmp_path):
    check_skip_and_raise(tmp_path, (xml('a.jpg', DOG), None), 'missing_image',
                         'a.jpg: image: file not found')


def test_corrupt_image(tmp_path):
    check_skip_and_raise(tmp_path, (xml('a.jpg', DOG), os.urandom(3000)), 'bad_image',
                         'a.jpg: image: not a readable image')


def test_truncated_jpeg(tmp_path):
    data = jpeg()
    check_skip_and_raise(tmp_path, (xml('a.jpg', DOG), data[:len(data) - 40]), 'bad_image',
                         'a.jpg: image: truncated JPEG')


def test_malformed_xml(tmp_path):
    check_skip_and_raise(tmp_path, ('<annotation><object>', jpeg()), 'bad_annotation',
                         'a.xml: xml: malformed XML')


def test_missing_annotation_of_a_listed_image(tmp_path):
    check_skip_and_raise(tmp_path, (None, jpeg()), 'missing_annotation',
                         'a.xml: xml: annotation file not found')


def test_size_mismatch(tmp_path):
    check_skip_and_raise(tmp_path, (xml('a.jpg', DOG, size=(48, 64)), jpeg()), 'size_mismatch',
                         'a.xml: size: says 48x64 but')


def test_entity_bomb_is_refused(tmp_path):
    bomb = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
            '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
            '<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
            '<annotation><filename>&lol3;</filename></annotation>')
    check_skip_and_raise(tmp_path, (bomb, jpeg()), 'bad_annotation',
                         'a.xml: xml: refused: EntitiesForbidden')


def test_external_entity_is_refused(tmp_path):
    text = ('<?xml version="1.0"?><!DOCTYPE a [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
            '<annotation><filename>&e;</filename></annotation>')
    check_skip_and_raise(tmp_path, (text, jpeg()), 'bad_annotation', 'a.xml: xml: refused:')


def test_listed_id_escaping_the_dataset_is_refused(tmp_path):
    write(tmp_path / 'outside.xml', xml('outside.jpg', DOG))
    write(tmp_path / 'outside.jpg', jpeg())
    root = tmp_path / 'voc'
    voc_folder(root, {'b': good('b')})
    write(root / 'ImageSets' / 'Main' / 'train.txt', '../../outside\nb\n')
    ds = VOCDetection(str(root), splits='train', classes=('dog',))
    assert len(ds) == 1 and ds.report.skipped == {'unsafe_path': 1}
    with pytest.raises(DatasetError, match=r"train\.txt: id: refused: '../../outside'"):
        VOCDetection(str(root), splits='train', classes=('dog',), on_error='raise')


def test_empty_dataset_raises(tmp_path):
    with pytest.raises(DatasetError, match='no usable image'):
        build(tmp_path, {'a': (xml('a.jpg', DOG), None)})


def test_one_summary_warning_names_the_files(tmp_path, caplog):
    records = {'a': (xml('a.jpg', DOG), None), 'b': good('b', [('dog', (5, 5, 5, 9), 0)]),
               'c': good('c')}
    with caplog.at_level(logging.INFO, logger='gluondet.data'):
        ds = build(tmp_path, records)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert 'left out: missing_image 1, zero_area 1' in warnings[0]
    assert 'a.jpg: image: file not found' in warnings[0] and 'b.xml: object[0]' in warnings[0]
    assert ds.report.images == 2 and ds.report.boxes == 1


# -- layouts ------------------------------------------------------------------

def labelimg_folder(folder, entries):
    """entries: xml stem -> (filename in xml, image bytes written under that name or None)."""
    for stem, (filename, image) in entries.items():
        write(os.path.join(folder, stem + '.xml'), xml(filename, DOG))
        if image is not None:
            write(os.path.join(folder, filename), image)
    return str(folder)


def test_labelimg_uses_filename_exactly(tmp_path):
    folder = labelimg_folder(tmp_path / 'train', {'x': ('X.JPG', jpeg()), 'y': ('y.jpg', jpeg())})
    ds = VOCDetection(folder, classes=('dog',))
    assert ds.layout == 'labelimg'
    assert [os.path.basename(ds.image_path(i)) for i in range(2)] == ['X.JPG', 'y.jpg']


def test_labelimg_splits_are_subfolders(tmp_path):
    labelimg_folder(tmp_path / 'train', {'x': ('x.jpg', jpeg())})
    labelimg_folder(tmp_path / 'test', {'y': ('y.jpg', jpeg()), 'z': ('z.jpg', jpeg())})
    ds = VOCDetection(str(tmp_path), splits=('train', 'test'), classes=('dog',))
    assert ds.layout == 'labelimg' and len(ds) == 3


@pytest.mark.parametrize('name', ['../x.jpg', '/etc/hosts', 'C:\\x.jpg'])
def test_labelimg_filename_escaping_the_folder_is_refused(tmp_path, name):
    write(tmp_path / 'x.jpg', jpeg())
    folder = labelimg_folder(tmp_path / 'train', {'a': (name, None), 'b': ('b.jpg', jpeg())})
    ds = VOCDetection(folder, classes=('dog',))
    assert len(ds) == 1 and ds.report.skipped == {'unsafe_path': 1}
    with pytest.raises(DatasetError, match=r'a\.xml: filename: refused'):
        VOCDetection(folder, classes=('dog',), on_error='raise')


def test_folder_layout_falls_back_to_filename_in_jpegimages(tmp_path):
    root = voc_folder(tmp_path, {'a': (xml('a.png', DOG), None)})
    ok, png = cv2.imencode('.png', np.zeros((48, 64, 3), np.uint8))
    write(tmp_path / 'JPEGImages' / 'a.png', png.tobytes())
    ds = VOCDetection(root, splits='train', classes=('dog',))
    assert ds.image_path(0).endswith(os.path.join('JPEGImages', 'a.png'))


def test_devkit_layout_as_gluoncv(tmp_path):
    voc_folder(tmp_path / 'VOC2007', {'a': good('a'), 'b': good('b')}, split='trainval')
    voc_folder(tmp_path / 'VOC2012', {'c': good('c')}, split='trainval')
    ds = VOCDetection(str(tmp_path), classes=('dog',))
    assert ds.layout == 'devkit' and len(ds) == 3
    only_2012 = VOCDetection(str(tmp_path), splits=[(2012, 'trainval')], classes=('dog',))
    assert only_2012.image_path(0).endswith(os.path.join('VOC2012', 'JPEGImages', 'c.jpg'))


def test_layout_inference_and_errors(tmp_path):
    voc_folder(tmp_path / 'voc', {'a': good('a')})
    assert infer_layout(str(tmp_path / 'voc'), None) == 'folder'
    assert infer_layout(str(tmp_path), [('voc', 'train')]) == 'devkit'
    with pytest.raises(DatasetError, match='not a VOC dataset'):
        VOCDetection(str(tmp_path / 'voc' / 'JPEGImages'))
    with pytest.raises(DatasetError, match='root: not a directory'):
        VOCDetection(str(tmp_path / 'nowhere'))
    with pytest.raises(DatasetError, match=r'val\.txt: split: cannot read'):
        VOCDetection(str(tmp_path / 'voc'), splits='val', classes=('dog',))
    with pytest.raises(ValueError, match='devkit splits are'):
        VOCDetection(str(tmp_path / 'voc'), layout='devkit', splits=('train',))
    with pytest.raises(ValueError, match='layout must be'):
        VOCDetection(str(tmp_path / 'voc'), layout='yolo')


# -- real data ----------------------------------------------------------------

@pytest.fixture(scope='module')
def bccd_splits(bccd_root):
    root = os.path.join(bccd_root, 'BCCD')
    return {s: VOCDetection(root, splits=s, classes=BCCD_CLASSES) for s in ('train', 'val', 'test')}


def test_bccd_loads_all_images_and_boxes(bccd_splits):
    counts = {s: (len(ds), ds.report.boxes) for s, ds in bccd_splits.items()}
    assert {s: c[0] for s, c in counts.items()} == {'train': 205, 'val': 87, 'test': 72}
    assert sum(c[1] for c in counts.values()) == 4888 - 2
    assert bccd_splits['train'].layout == 'folder'


def test_bccd_zero_area_boxes_are_dropped_and_counted(bccd_splits, bccd_root):
    dropped = {s: dict(ds.report.dropped) for s, ds in bccd_splits.items()}
    assert dropped == {'train': {'zero_area': 1}, 'val': {'zero_area': 1}, 'test': {}}
    examples = bccd_splits['train'].report.examples['zero_area'] + \
        bccd_splits['val'].report.examples['zero_area']
    assert 'BloodImage_00343.xml: object[3]/bndbox: zero-area box [181, 329, 181, 329]' \
        in examples[0]
    assert 'BloodImage_00338.xml: object[12]/bndbox: zero-area box [504, 337, 504, 337]' \
        in examples[1]
    with pytest.raises(DatasetError, match=r'BloodImage_00343\.xml: object\[3\]/bndbox: zero'):
        VOCDetection(os.path.join(bccd_root, 'BCCD'), splits='train', classes=BCCD_CLASSES,
                     on_error='raise')


def test_bccd_known_boxes(bccd_splits):
    ds = bccd_splits['val']
    index = [os.path.basename(ds.image_path(i)) for i in range(len(ds))].index(
        'BloodImage_00338.jpg')
    label = ds.label(index)
    assert label.shape == (13, 6)  # 14 objects, one zero-area
    np.testing.assert_array_equal(label[0], [452, 80, 554, 181, 0, 0])       # RBC
    np.testing.assert_array_equal(label[-1], [243, 326, 508, 479, 1, 0])     # WBC to the edge
    image, item_label = ds[index]
    assert image.shape == (480, 640, 3) and image.dtype == np.uint8
    np.testing.assert_array_equal(item_label, label)


def test_bccd_devkit_form_as_gluoncv(bccd_root):
    ds = VOCDetection(bccd_root, splits=[('BCCD', 'trainval')], classes=BCCD_CLASSES)
    assert ds.layout == 'devkit' and len(ds) == 292 and ds.report.dropped == {'zero_area': 2}


def test_bccd_labels_equal_gluoncv(bccd_root, bccd_splits):
    pytest.importorskip('gluoncv')
    from gluoncv.data import VOCDetection as GluonCVVOC

    class BCCD(GluonCVVOC):
        CLASSES = tuple(c.lower() for c in BCCD_CLASSES)

    for split, ds in bccd_splits.items():
        reference = BCCD(root=bccd_root, splits=[('BCCD', split)])
        assert len(reference) == len(ds)
        for i in range(len(ds)):
            np.testing.assert_array_equal(ds.label(i), reference._label_cache[i].astype(np.float32))


def test_bccd_and_cards_without_classes_have_their_annotations_names(bccd_root, bccd_splits,
                                                                     cards_root):
    bccd = VOCDetection(os.path.join(bccd_root, 'BCCD'), splits='val')
    assert bccd.classes == ('Platelets', 'RBC', 'WBC')
    assert bccd.report.dropped == {'zero_area': 1}      # no box of an unknown class
    assert bccd.report.boxes == bccd_splits['val'].report.boxes
    cards = VOCDetection(os.path.join(cards_root, 'images'), splits=('test',))
    assert cards.classes == ('ace', 'jack', 'king', 'nine', 'queen', 'ten')
    assert len(cards) == 67 and cards.report.boxes and not cards.report.dropped


def test_cards_labelimg_with_mixed_extensions(cards_root):
    root = os.path.join(cards_root, 'images')
    ds = VOCDetection(root, splits=('train', 'test'), classes=CARD_CLASSES)
    assert ds.layout == 'labelimg'
    assert (len(ds), ds.report.boxes, ds.report.skipped, ds.report.dropped) == (363, 670, {}, {})
    extensions = {os.path.splitext(ds.image_path(i))[1] for i in range(len(ds))}
    assert extensions == {'.JPG', '.jpg'}
    train = VOCDetection(os.path.join(root, 'train'), classes=CARD_CLASSES)
    assert len(train) == 296
    image, label = train[0]
    assert image.shape[:2] == train.image_size(0)[::-1]
    np.testing.assert_array_equal(label, [[91, 182, 222, 347, CARD_CLASSES.index('king'), 0]])
