"""resolve_dataset: one way to name data for train_*.py and gluondet evaluate.

GluonCV's own folders under its default root (``~/.mxnet/datasets/voc/VOC2007``,
``coco/annotations`` ...), the real BCCD and cards datasets, and the one-line errors
of both command lines.
"""
import json
import re
import os
import subprocess
import sys

import pytest

from gluondet.data import COCODetection, DatasetError, KITTIDetection, VOCDetection
from gluondet.data import resolve_dataset
from gluondet.train import common

from conftest import ROOT
from filetools import BCCD_CLASSES, CARD_CLASSES, jpeg, write

DOG = ('dog', 'cat')


def voc_xml(name):
    """A dog and a cat (each class of DOG has a box, as training asks of --classes)."""
    return ('<annotation><filename>%s.jpg</filename><size><width>64</width><height>48</height>'
            '</size>%s</annotation>' % (name, ''.join(
                '<object><name>%s</name><bndbox><xmin>5</xmin><ymin>6</ymin><xmax>30</xmax>'
                '<ymax>40</ymax></bndbox></object>' % c for c in DOG)))


def voc_year(folder, splits):
    """A VOC<year> folder: ``splits`` maps a list name to image ids."""
    for name, ids in splits.items():
        write(os.path.join(folder, 'ImageSets', 'Main', name + '.txt'), '\n'.join(ids) + '\n')
        for image_id in ids:
            write(os.path.join(folder, 'Annotations', image_id + '.xml'), voc_xml(image_id))
            write(os.path.join(folder, 'JPEGImages', image_id + '.jpg'), jpeg())


def coco_split(root, split, ids):
    folder = split.split('_')[-1]
    images = [{'id': i, 'file_name': '%d.jpg' % i, 'width': 64, 'height': 48} for i in ids]
    for entry in images:
        write(os.path.join(root, folder, entry['file_name']), jpeg())
    annotations = [{'id': i, 'image_id': i, 'category_id': 1 + i % 2, 'bbox': [4, 5, 20, 30],
                    'area': 600, 'iscrowd': 0} for i in ids[:-1]]    # the last without boxes
    write(os.path.join(root, 'annotations', split + '.json'), json.dumps(
        {'images': images, 'annotations': annotations,
         'categories': [{'id': 1, 'name': 'dog'}, {'id': 2, 'name': 'cat'}]}))


@pytest.fixture
def gluoncv_home(tmp_path, monkeypatch):
    """A home whose ~/.mxnet/datasets is laid out as GluonCV's download scripts leave it."""
    root = tmp_path / 'home' / '.mxnet' / 'datasets'
    voc_year(str(root / 'voc' / 'VOC2007'), {'trainval': ['07a', '07b'], 'test': ['07t'],
                                              'train': ['07a'], 'val': ['07b']})
    voc_year(str(root / 'voc' / 'VOC2012'), {'trainval': ['12a', '12b', '12c'],
                                              'train': ['12a'], 'val': ['12b', '12c']})
    coco_split(str(root / 'coco'), 'instances_train2017', [1, 2, 3])
    coco_split(str(root / 'coco'), 'instances_val2017', [10, 11])
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))
    return str(root)


def stems(ds):
    return sorted(os.path.splitext(os.path.basename(ds.image_path(i)))[0]
                  for i in range(len(ds)))


def script_args(*argv):
    from gluondet.train import ssd
    return ssd, ssd.parse_args(list(argv))


# -- GluonCV's default root ---------------------------------------------------------

def test_gluoncv_voc_layout_under_its_default_root(gluoncv_home):
    train = resolve_dataset('voc', classes=DOG, train=True)      # root: ~/.mxnet/datasets
    val = resolve_dataset('voc', gluoncv_home, classes=DOG)
    assert stems(train) == ['07a', '07b', '12a', '12b', '12c']   # VOC07+12 trainval
    assert stems(val) == ['07t']                                 # VOC07 test
    assert train.layout == val.layout == 'devkit'
    assert stems(resolve_dataset('voc', gluoncv_home, '2012_val', DOG)) == ['12b', '12c']
    # a bare name is that list in every year that has it
    assert stems(resolve_dataset('voc', gluoncv_home, 'val', DOG)) == ['07b', '12b', '12c']
    assert stems(resolve_dataset('voc', os.path.join(gluoncv_home, 'voc'), 'test', DOG)) == ['07t']
    with pytest.raises(DatasetError, match=r'voc: split: no VOC<year>/ImageSets/Main/minival'):
        resolve_dataset('voc', gluoncv_home, 'minival', DOG)


def test_train_ssd_finds_gluoncv_voc_as_gluoncv_does(gluoncv_home):
    """``train_ssd.py --network vgg16_atrous --dataset voc`` on a machine GluonCV set up."""
    train_ssd, args = script_args('--network', 'vgg16_atrous', '--dataset', 'voc')
    assert train_ssd.network_name(args) == 'ssd_300_vgg16_atrous_voc'
    train, val = common.build_datasets(args)
    assert stems(train) == ['07a', '07b', '12a', '12b', '12c'] and stems(val) == ['07t']
    assert train.classes == VOCDetection.CLASSES
    _, args = script_args('--dataset', 'voc', '--train-split', '2007_train',
                          '--val-split', '2007_val,2012_val', '--dataset-root', gluoncv_home)
    train, val = common.build_datasets(args)
    assert stems(train) == ['07a'] and stems(val) == ['07b', '12b', '12c']


def test_gluoncv_coco_layout_under_the_root(gluoncv_home):
    train = resolve_dataset('coco', classes=DOG, train=True)
    val = resolve_dataset('coco', gluoncv_home, classes=DOG)
    assert isinstance(train, COCODetection) and isinstance(val, COCODetection)
    # images without boxes are kept (background images), unless --skip-empty (training data)
    assert train.image_ids == [1, 2, 3] and val.image_ids == [10, 11]
    assert train.image_path(0) == os.path.join(gluoncv_home, 'coco', 'train2017', '1.jpg')
    assert resolve_dataset('coco', classes=DOG, train=True, skip_empty=True).image_ids == [1, 2]
    _, args = script_args('--dataset', 'coco', '--classes', 'dog,cat')
    assert [ds.image_ids for ds in common.build_datasets(args)] == [[1, 2, 3], [10, 11]]
    _, args = script_args('--dataset', 'coco', '--classes', 'dog,cat', '--skip-empty')
    assert [ds.image_ids for ds in common.build_datasets(args)] == [[1, 2], [10, 11]]
    assert resolve_dataset('coco', os.path.join(gluoncv_home, 'coco'), 'instances_train2017',
                           DOG).image_ids == [1, 2, 3]
    with pytest.raises(DatasetError, match=r'no annotations/instances_test2017\.json in it or in '
                                           r'coco/ \(splits there: instances_train2017, '
                                           r'instances_val2017\)'):
        resolve_dataset('coco', gluoncv_home, 'instances_test2017')


# -- the real datasets: the same names in training and evaluation -----------------------

def test_labelimg_folder_and_split_as_train_ssd_takes_them(cards_root):
    root = os.path.join(cards_root, 'images')
    evaluated = resolve_dataset('voc', root, 'test', CARD_CLASSES)
    _, args = script_args('--dataset', 'voc', '--dataset-root', root, '--classes',
                          ','.join(CARD_CLASSES), '--val-split', 'test')
    train, val = common.build_datasets(args)
    assert evaluated.layout == 'labelimg' and len(evaluated) == 67 and len(train) == 296
    assert stems(val) == stems(evaluated)
    with pytest.raises(DatasetError, match=r'images: layout: not a VOC dataset.*subfolders '
                                           r'test, train hold \.xml files: name them as splits'):
        resolve_dataset('voc', root, None, CARD_CLASSES)    # no val/, no xml in the folder


def test_voc_folder_splits_and_coco_json(bccd_root):
    voc = os.path.join(bccd_root, 'BCCD')
    assert len(resolve_dataset('voc', voc, None, BCCD_CLASSES)) == 87            # val
    assert len(resolve_dataset('voc', voc, None, BCCD_CLASSES, train=True)) == 205
    assert len(resolve_dataset('voc', voc, 'train,val', BCCD_CLASSES)) == 292
    json_file = os.path.join(bccd_root, 'coco', 'instances_val.json')
    coco = resolve_dataset('coco', annotation_file=json_file, image_root=voc,
                           classes=BCCD_CLASSES)
    assert len(coco) == 87 and coco.classes == BCCD_CLASSES
    _, args = script_args('--train-json', os.path.join(bccd_root, 'coco', 'instances_train.json'),
                          '--val-json', json_file, '--image-root', voc)
    assert [len(ds) for ds in common.build_datasets(args)] == [205, 87]


def test_kitti_splits(tmp_path):
    for split in ('training', 'val'):
        write(tmp_path / split / 'image_2' / '000000.jpg', jpeg())
        write(tmp_path / split / 'label_2' / '000000.txt',
              'Car 0 0 0 2 3 20 17 0 0 0 0 0 0 0\n')
    assert resolve_dataset('kitti', str(tmp_path), train=True).image_path(0).startswith(
        str(tmp_path / 'training'))
    val = resolve_dataset('kitti', str(tmp_path), classes=('Car',))
    assert isinstance(val, KITTIDetection) and val.classes == ('Car',)
    assert val.image_path(0).startswith(str(tmp_path / 'val'))
    # a folder that is the data itself is its own validation split (gluondet evaluate)
    assert len(resolve_dataset('kitti', str(tmp_path / 'val'))) == 1
    with pytest.raises(DatasetError, match=r'training: split: not a KITTI split'):
        resolve_dataset('kitti', str(tmp_path / 'val'), 'training')
    (tmp_path / 'val' / 'label_2' / '000000.txt').unlink()
    (tmp_path / 'val' / 'label_2').rmdir()
    with pytest.raises(DatasetError, match=r'val: split: not a KITTI split: no label_2/ and '
                                           r'image_2/ in it \(name the split, or put a'):
        resolve_dataset('kitti', str(tmp_path))


def test_demo_and_bad_arguments(tmp_path, caplog):
    assert len(resolve_dataset('Demo', train=False)) == 200
    with pytest.raises(ValueError, match="unknown dataset 'yolo': use voc, coco, kitti, demo"):
        resolve_dataset('yolo')
    with pytest.raises(DatasetError, match=r'nowhere: dataset root: no such folder'):
        resolve_dataset('voc', str(tmp_path / 'nowhere'))
    with pytest.raises(ValueError, match='go with the coco dataset, not voc'):
        resolve_dataset('voc', str(tmp_path), annotation_file='x.json')
    with pytest.raises(ValueError, match='coco reads one split at a time'):
        resolve_dataset('coco', str(tmp_path), 'a,b')
    # the same LabelImg folder for training and validation is allowed, with a warning
    write(tmp_path / 'a.xml', voc_xml('a'))
    write(tmp_path / 'a.jpg', jpeg())
    _, args = script_args('--dataset', 'voc', '--dataset-root', str(tmp_path), '--classes', 'dog')
    train, val = common.build_datasets(args)
    assert len(train) == len(val) == 1
    assert 'the validation data is the training data' in caplog.text


# -- one line, no traceback ----------------------------------------------------------

@pytest.mark.parametrize('argv, message', [
    (['--dataset', 'voc', '--dataset-root', '/nowhere/at/all'],
     '/nowhere/at/all: dataset root: no such folder'),
    (['--dataset', 'yolo'], "argument --dataset: invalid choice: 'yolo'"),
    (['--dataset', 'voc', '--dataset-root', ROOT], '%s: layout: not a VOC dataset' % ROOT)])
def test_train_ssd_reports_bad_data_in_one_line(argv, message):
    out = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'train_ssd.py'), '--gpus',
                          ''] + argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == (2 if 'argument' in message else 1)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('train_ssd.py: error: ' + message), out.stderr


# -- the classes of custom VOC data, and training data without a box ------------------------

def _objects_xml(name, classes):
    """An image ``name``.jpg with one box of each of ``classes``."""
    return ('<annotation><filename>%s.jpg</filename><size><width>64</width><height>48</height>'
            '</size>%s</annotation>' % (name, ''.join(
                '<object><name>%s</name><bndbox><xmin>5</xmin><ymin>6</ymin><xmax>30</xmax>'
                '<ymax>40</ymax></bndbox></object>' % c for c in classes)))


def test_without_classes_training_takes_the_names_of_its_annotations_validation_the_same(
        tmp_path, caplog):
    """A LabelImg folder: train/ names cat and dog, val/ only dog (alone it would be id 0)."""
    for split, classes in (('train', ('dog', 'cat')), ('val', ('dog',))):
        write(tmp_path / split / 'a.xml', _objects_xml('a', classes))
        write(tmp_path / split / 'a.jpg', jpeg())
    _, args = script_args('--dataset', 'voc', '--dataset-root', str(tmp_path))
    with caplog.at_level('INFO', logger='gluondet.data'):
        train, val = common.build_datasets(args)
    assert train.classes == val.classes == ('cat', 'dog')
    assert val.label(0)[:, 4].tolist() == [1]
    found = [r.getMessage() for r in caplog.records if 'classes found' in r.getMessage()]
    assert found == ['VOCDetection(%s, labelimg, train): classes found in its annotations: cat, '
                     'dog (sorted; --classes sets them)' % tmp_path]


def test_bccd_without_classes_trains_its_three_classes_on_a_custom_network(bccd_root,
                                                                          gluoncv_home):
    root = os.path.join(bccd_root, 'BCCD')
    train_ssd, args = script_args('--dataset', 'voc', '--dataset-root', root)
    train, val = common.build_datasets(args)
    assert train.classes == val.classes == ('Platelets', 'RBC', 'WBC')
    assert train.report.dropped == {'zero_area': 1} and train.report.boxes > 2000
    assert train_ssd.network_name(args) == 'ssd_300_vgg16_atrous_custom'
    # GluonCV's VOCdevkit keeps VOC's classes and network
    _, args = script_args('--dataset', 'voc', '--dataset-root', gluoncv_home)
    assert train_ssd.network_name(args) == 'ssd_300_vgg16_atrous_voc'


def test_coco_of_its_own_categories_without_classes_trains_them_on_a_custom_network(
        gluoncv_home, tmp_path):
    """GluonCV's layout (ROOT/coco/annotations/...) of a json of dog and cat: its categories on
    the *_custom network, as a VOC folder's names; a json of COCO's 80 keeps the *_coco one."""
    from gluondet.cli import main
    from gluondet.model_zoo import COCO_CLASSES
    train_ssd, args = script_args('--dataset', 'coco', '--dataset-root', gluoncv_home)
    assert train_ssd.network_name(args) == 'ssd_300_vgg16_atrous_custom'
    train, val = common.build_datasets(args)
    assert train.classes == val.classes == DOG
    run = tmp_path / 'run'
    assert main(['train', 'ssd', '--dataset', 'coco', '--network', 'mobilenet0.25', '--data-shape',
                 '128', '--epochs', '1', '--batch-size', '2', '--no-pretrained-base', '--gpus', '',
                 '-j', '0', '--save-prefix', str(run) + '/']) == 0
    assert (run / 'ssd_300_mobilenet0.25_custom_best.params').is_file()
    path = os.path.join(gluoncv_home, 'coco', 'annotations', 'instances_train2017.json')
    with open(path) as f:
        data = json.load(f)
    data['categories'] = [{'id': i + 1, 'name': name} for i, name in enumerate(COCO_CLASSES)]
    write(path, json.dumps(data))
    assert train_ssd.network_name(args) == 'ssd_300_vgg16_atrous_coco'


@pytest.fixture
def bccd_devkit(bccd_root, tmp_path):
    """BCCD as GluonCV's VOCdevkit (``VOC2007/``), whose classes are VOC's: no box of BCCD's."""
    devkit = tmp_path / 'VOCdevkit'
    devkit.mkdir()
    os.symlink(os.path.join(bccd_root, 'BCCD'), str(devkit / 'VOC2007'))
    return str(devkit)


NO_BOX = (r'VOCdevkit, devkit, 2007train\): boxes: no box to train on \(205 images \(205 '
          r'background images, without a box\), 0 boxes; dropped boxes: unknown_class 2805\); '
          r'--classes names the classes to train \(the annotations name: Platelets, RBC, WBC\)$')


def test_training_data_without_a_box_is_an_error_naming_what_was_dropped(bccd_devkit, tmp_path):
    with pytest.raises(DatasetError, match=NO_BOX):
        resolve_dataset('voc', bccd_devkit, '2007_train', train=True)
    assert len(resolve_dataset('voc', bccd_devkit, '2007_train')) == 205   # not to train on
    # boxes left out for a reason no flag undoes: the counts alone
    write(tmp_path / 'flat' / 'a.xml', _objects_xml('a', ()).replace(
        '</annotation>', '<object><name>dog</name><bndbox><xmin>5</xmin><ymin>6</ymin><xmax>5'
        '</xmax><ymax>40</ymax></bndbox></object></annotation>'))
    write(tmp_path / 'flat' / 'a.jpg', jpeg())
    with pytest.raises(DatasetError, match=r'flat, labelimg, \.\): boxes: no box to train on '
                                           r'\(1 images \(1 background images, without a box\), '
                                           r'0 boxes; dropped boxes: zero_area 1\)$'):
        resolve_dataset('voc', str(tmp_path / 'flat'), classes=('dog',), train=True,
                        allow_missing_classes=True)


def test_gluondet_train_on_data_without_a_box_is_one_line_before_training(bccd_devkit, tmp_path,
                                                                          capsys):
    from gluondet.cli import main
    run = tmp_path / 'run'
    code = main(['train', 'ssd', '--dataset', 'voc', '--dataset-root', bccd_devkit,
                 '--train-split', '2007_train', '--gpus', '', '--save-prefix', str(run) + '/'])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if 'error' in line]
    assert code == 1 and 'Traceback' not in err and len(errors) == 1, err
    assert errors[0].startswith('gluondet train ssd: error: ') and re.search(NO_BOX, errors[0])
    assert not os.listdir(str(run))        # nothing trained, nothing written


def test_detector_train_on_data_without_a_box_raises_the_same_message(bccd_devkit, tmp_path):
    from gluondet import Detector
    from gluondet.errors import UserError
    d = Detector('ssd_160_mobilenet0.5_custom')
    with pytest.raises(UserError, match=r'^[^\n]*' + NO_BOX):
        d.train(data={'dataset': 'voc', 'dataset_root': bccd_devkit,
                      'train_split': '2007_train'}, gpus='', save_prefix=str(tmp_path) + '/')
    with pytest.raises(ValueError, match='give data'):     # nothing trained
        d.val()
