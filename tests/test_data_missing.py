"""Silent data problems made loud: COCO annotations of unknown images are counted and named,
and a ``--classes`` name without a box in the training data is an error with a did-you-mean,
the same for every format (issue 23, item 6)."""
import json
import logging
import os
import re

import numpy as np
import pytest

from gluondet.errors import UserError
from gluondet import cli as gluondet_cli
from gluondet.data import COCODetection, DatasetError, resolve_dataset
from gluondet.train import common
from gluondet.tools.convert import convert

from filetools import jpeg, write
from test_data_resolve import script_args

# the cards' classes as a user may type them: a typo, and one in capitals
TYPED = ('nine', 'ten', 'jakc', 'QUEEN', 'king', 'ace')
DID_YOU_MEAN = "--classes: no object of class 'jakc' (did you mean 'jack'?)"
# small data of each format: image stem -> the class names of its objects
OBJECTS = {'a': ('jack', 'queen'), 'b': ('Queen',), 'c': ('ace',)}


def _object(name):
    return ('<object><name>%s</name><bndbox><xmin>5</xmin><ymin>6</ymin><xmax>30</xmax>'
            '<ymax>40</ymax></bndbox></object>' % name)


def _xml(stem, names):
    return ('<annotation><filename>%s.jpg</filename><size><width>64</width><height>48'
            '</height></size>%s</annotation>' % (stem, ''.join(_object(n) for n in names)))


def voc_folder(folder):
    for stem, names in OBJECTS.items():
        write(os.path.join(folder, 'Annotations', stem + '.xml'), _xml(stem, names))
        write(os.path.join(folder, 'JPEGImages', stem + '.jpg'), jpeg())
    write(os.path.join(folder, 'ImageSets', 'Main', 'train.txt'), '\n'.join(OBJECTS))


def labelimg(folder):
    for stem, names in OBJECTS.items():
        write(os.path.join(folder, 'train', stem + '.xml'), _xml(stem, names))
        write(os.path.join(folder, 'train', stem + '.jpg'), jpeg())


def kitti(folder):
    for stem, names in OBJECTS.items():
        write(os.path.join(folder, 'training', 'label_2', stem + '.txt'), ''.join(
            '%s 0 0 0 4 5 29 39 0 0 0 0 0 0 0\n' % n for n in names))
        write(os.path.join(folder, 'training', 'image_2', stem + '.jpg'), jpeg())


def coco(folder):
    categories = sorted({n.lower() for names in OBJECTS.values() for n in names})
    images, annotations = [], []
    for i, (stem, names) in enumerate(OBJECTS.items()):
        images.append({'id': i, 'file_name': stem + '.jpg', 'width': 64, 'height': 48})
        write(os.path.join(folder, 'train2017', stem + '.jpg'), jpeg())
        annotations += [{'id': len(annotations) + k, 'image_id': i, 'bbox': [4, 5, 25, 34],
                         'category_id': categories.index(n.lower()) + 1, 'area': 850,
                         'iscrowd': 0} for k, n in enumerate(names)]
    write(os.path.join(folder, 'annotations', 'instances_train2017.json'), json.dumps(
        {'images': images, 'annotations': annotations,
         'categories': [{'id': k + 1, 'name': n} for k, n in enumerate(categories)]}))


def record(folder):
    voc_folder(os.path.join(folder, 'voc'))
    data = resolve_dataset('voc', os.path.join(folder, 'voc'), 'train', ('jack', 'queen', 'ace'))
    convert(data, os.path.join(folder, 'cards'))
    return dict(records=os.path.join(folder, 'cards-fold-000-of-001-shard-00000-of-00001.rec'))


FORMATS = {   # name: (dataset, writer, split)
    'voc folder': ('voc', voc_folder, 'train'),
    'labelimg': ('voc', labelimg, 'train'),
    'devkit': ('voc', lambda f: voc_folder(os.path.join(f, 'VOC2007')), '2007_train'),
    'kitti': ('kitti', kitti, 'training'),
    'coco': ('coco', coco, 'instances_train2017'),
    'rec': ('rec', record, None),
}


@pytest.mark.parametrize('layout', sorted(FORMATS))
def test_every_format_refuses_a_class_without_boxes_with_a_did_you_mean(tmp_path, layout):
    dataset, writer, split = FORMATS[layout]
    keywords = writer(str(tmp_path)) or dict(root=str(tmp_path), split=split)
    with pytest.raises(DatasetError) as error:
        resolve_dataset(dataset, classes=('jakc', 'QUEEN', 'ace'), train=True, **keywords)
    message = str(error.value)
    assert DID_YOU_MEAN in message and 'QUEEN' not in message     # matched beside 'queen'
    assert 'the annotations name: ace, jack, queen' in message
    assert message.endswith('--allow-missing-classes trains a class without boxes on purpose')
    # on purpose, and in validation data, the class is kept without boxes
    for allowed in (dict(train=True, allow_missing_classes=True), dict(train=False)):
        data = resolve_dataset(dataset, classes=('jakc', 'QUEEN', 'ace'), **keywords, **allowed)
        labels = np.concatenate([data.label(i) for i in range(len(data))])
        assert np.bincount(labels[:, 4].astype(int), minlength=3).tolist() == [0, 2, 1]
    resolve_dataset(dataset, classes=('Jack', 'queen', 'ACE'), train=True, **keywords)


def test_classes_whose_objects_were_all_left_out_are_named_as_such(tmp_path):
    voc_folder(str(tmp_path))
    write(str(tmp_path / 'Annotations' / 'c.xml'), _xml('c', ['ace']).replace(
        '<xmax>30</xmax>', '<xmax>5</xmax>'))       # the only ace has no area
    with pytest.raises(DatasetError, match="--classes: every object of class 'ace' was left "
                                           r"out \(the report above says why\)"):
        resolve_dataset('voc', str(tmp_path), 'train', ('jack', 'ace'), train=True)


def test_cards_training_flags_refuse_a_typo_in_classes(cards_root):
    """The command of issue 23: the real LabelImg cards, and their COCO json."""
    images = os.path.join(cards_root, 'images')
    _, args = script_args('--dataset', 'voc', '--dataset-root', images, '--val-split', 'test',
                          '--classes', ','.join(TYPED))
    with pytest.raises(UserError) as error:
        common.build_datasets(args)
    assert str(error.value).startswith(
        'VOCDetection(%s, labelimg, train): %s; the annotations name: ace, jack, king, nine, '
        'queen, ten. ' % (images, DID_YOU_MEAN)), error.value
    _, args = script_args('--dataset', 'voc', '--dataset-root', images, '--val-split', 'test',
                          '--classes', ','.join(TYPED), '--allow-missing-classes')
    train, val = common.build_datasets(args)
    assert (len(train), len(val), train.classes) == (296, 67, TYPED)
    # the COCO json: its categories are matched to --classes as the xml names are
    _, args = script_args('--train-json', os.path.join(cards_root, 'coco', 'instances_train.json'),
                          '--val-json', os.path.join(cards_root, 'coco', 'instances_test.json'),
                          '--image-root', images, '--classes', ','.join(TYPED))
    with pytest.raises(UserError, match=r'COCODetection\(.*instances_train\.json\): '
                                         + re.escape(DID_YOU_MEAN)):
        common.build_datasets(args)


def test_convert_refuses_a_typo_in_classes(cards_root, tmp_path, capsys):
    argv = ['convert', '--dataset', 'voc', '--dataset-root', os.path.join(cards_root, 'images'),
            '--split', 'test', '--classes', ','.join(TYPED), '-o', str(tmp_path / 'cards')]
    assert gluondet_cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith('gluondet convert: error: ') and DID_YOU_MEAN in err
    assert len(err.strip().splitlines()) == 1 and not os.listdir(str(tmp_path))
    assert gluondet_cli.main(argv + ['--allow-missing-classes']) == 0


@pytest.fixture
def cards_test_json(cards_root):
    with open(os.path.join(cards_root, 'coco', 'instances_test.json')) as f:
        return json.load(f)


def _coco_dataset(tmp_path, cards_root, data, **kwargs):
    path = write(str(tmp_path / 'test.json'), json.dumps(data))
    return COCODetection(annotation_file=path, image_root=os.path.join(cards_root, 'images'),
                         skip_empty=False, **kwargs)


def test_coco_annotations_of_unknown_images_are_counted_and_named(cards_root, cards_test_json,
                                                                  tmp_path, caplog):
    boxes = len(cards_test_json['annotations'])
    assert boxes == 143
    cards_test_json['annotations'].append(dict(cards_test_json['annotations'][0], id=10 ** 6,
                                               image_id=999))
    with caplog.at_level(logging.INFO, logger='gluondet.data'):
        data = _coco_dataset(tmp_path, cards_root, cards_test_json)
    assert (data.report.boxes, data.report.dropped) == (143, {'unknown_image': 1})
    assert data.report.problems() == {'unknown_image': 1}
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1
    assert 'left out: unknown_image 1' in warning[0]
    assert 'test.json: annotations[143]/image_id: no image has the id 999' in warning[0]
    assert '67 images, 143 boxes; dropped boxes: unknown_image 1' in caplog.text
    with pytest.raises(DatasetError, match=r'annotations\[143\]/image_id: no image has the id '
                                           r'999$'):
        _coco_dataset(tmp_path, cards_root, cards_test_json, on_error='raise')


def test_coco_image_ids_of_the_other_type_are_named_as_such(cards_root, cards_test_json,
                                                            tmp_path):
    """Issue 26's mixed ids, as far as the reader goes: ``"7"`` is not the image ``7``."""
    first = cards_test_json['annotations'][0]
    first['image_id'] = str(first['image_id'])
    data = _coco_dataset(tmp_path, cards_root, cards_test_json)
    assert (data.report.boxes, data.report.dropped) == (142, {'unknown_image': 1})
    assert data.report.examples['unknown_image'] == [
        "%s: annotations[0]/image_id: no image has the id '%s' (images has it as the int %s: "
        "ids must be of one type)" % (tmp_path / 'test.json', first['image_id'],
                                      first['image_id'])]
    # an image list mixing the types is read (its image of the first annotation keeps an int)
    for entry in cards_test_json['images']:
        if str(entry['id']) != first['image_id']:
            entry['id'] = str(entry['id'])
    for ann in cards_test_json['annotations']:
        ann['image_id'] = str(ann['image_id'])
    data = _coco_dataset(tmp_path, cards_root, cards_test_json)
    assert (len(data), data.report.boxes, data.report.dropped) == (67, 142, {'unknown_image': 1})
