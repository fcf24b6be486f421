"""KITTIDetection on small KITTI folders built from generated images."""
import os

import cv2
import numpy as np
import pytest

from gluondet.data import DatasetError, KITTIDetection
from gluondet.data.kitti import KITTI_CLASSES

from filetools import write

WIDTH, HEIGHT = 124, 37
REST = '1.65 1.67 3.64 -0.65 1.71 46.70 -1.59'  # h w l x y z rotation_y


def line(kind, box, score=None):
    text = '%s 0.00 0 -1.58 %s %s' % (kind, ' '.join('%.2f' % v for v in box), REST)
    return text if score is None else text + ' %.2f' % score


def png(width=WIDTH, height=HEIGHT, seed=0):
    image = np.random.RandomState(seed).randint(0, 255, (height, width, 3), np.uint8)
    return cv2.imencode('.png', image)[1].tobytes()


def kitti(folder, labels, images=None):
    """labels: id -> list of lines (or raw text); images: id -> bytes (default a PNG)."""
    for i, (stem, lines) in enumerate(sorted(labels.items())):
        text = lines if isinstance(lines, str) else '\n'.join(lines) + '\n'
        write(os.path.join(str(folder), 'label_2', stem + '.txt'), text)
        image = (images or {}).get(stem, png(seed=i))
        if image is not None:
            write(os.path.join(str(folder), 'image_2', stem + '.png'), image)
    return str(folder)


SCENE = {
    '000000': [line('Car', (10.5, 5.25, 40.0, 30.0)), line('Van', (50, 5, 70, 20)),
               line('DontCare', (80, 5, 90, 20)), line('Pedestrian', (95, 2, 100, 30), 0.9)],
    '000001': [line('Cyclist', (1, 1, 20, 20)), line('car', (20, 10, 200, 50))],
}


def test_default_classes_and_exact_boxes(tmp_path):
    kitti(tmp_path / 'training', SCENE)
    ds = KITTIDetection(str(tmp_path))
    assert ds.classes == KITTI_CLASSES and len(ds) == 2
    car, van, ped, cyc = (KITTI_CLASSES.index(c) for c in ('Car', 'Van', 'Pedestrian', 'Cyclist'))
    np.testing.assert_array_equal(ds.label(0), np.array(
        [[10.5, 5.25, 40, 30, car, 0], [50, 5, 70, 20, van, 0], [95, 2, 100, 30, ped, 0]],
        np.float32))
    # the second car reaches past the right and bottom edges: clipped to the last pixel
    np.testing.assert_array_equal(ds.label(1), [[1, 1, 20, 20, cyc, 0],
                                                [20, 10, WIDTH - 1, HEIGHT - 1, car, 0]])
    assert ds.report.dropped == {'dontcare': 1} and ds.report.clipped == 1
    image, label = ds[1]
    assert image.shape == (HEIGHT, WIDTH, 3) and image.dtype == np.uint8
    assert ds.image_size(1) == (WIDTH, HEIGHT)
    assert ds.image_path(0).endswith(os.path.join('training', 'image_2', '000000.png'))


def test_class_mapping_many_to_one_case_insensitive(tmp_path):
    kitti(tmp_path / 'training', SCENE)
    ds = KITTIDetection(str(tmp_path), class_mapping={'CAR': 'vehicle', 'van': 'vehicle',
                                                      'Pedestrian': 'person'})
    assert ds.classes == ('vehicle', 'person')
    np.testing.assert_array_equal(ds.label(0)[:, 4], [0, 0, 1])
    np.testing.assert_array_equal(ds.label(1)[:, 4], [0])
    assert ds.report.dropped == {'dontcare': 1, 'unmapped_class': 1}
    assert 'line 1: Cyclist' in ds.report.examples['unmapped_class'][0]
    # unmapped types are expected, not errors, even in 'raise' mode
    strict = KITTIDetection(str(tmp_path), class_mapping={'car': 'car'}, on_error='raise')
    assert strict.report.dropped == {'dontcare': 1, 'unmapped_class': 3}


def test_explicit_classes_set_the_order(tmp_path):
    kitti(tmp_path / 'training', SCENE)
    ds = KITTIDetection(str(tmp_path), class_mapping={'car': 'car', 'pedestrian': 'person'},
                        classes=('person', 'car'))
    np.testing.assert_array_equal(ds.label(0)[:, 4], [1, 0])
    with pytest.raises(ValueError, match="maps 'car' to 'car', which is not in classes"):
        KITTIDetection(str(tmp_path), class_mapping={'car': 'car'}, classes=('person',))


def test_folders_directly_under_root(tmp_path):
    kitti(tmp_path, SCENE)
    assert len(KITTIDetection(str(tmp_path))) == 2


def test_not_a_kitti_folder(tmp_path):
    with pytest.raises(DatasetError, match='not a KITTI dataset'):
        KITTIDetection(str(tmp_path))
    os.makedirs(str(tmp_path / 'training' / 'label_2'))
    with pytest.raises(DatasetError, match='image_2: folder not found'):
        KITTIDetection(str(tmp_path))


def check_skip_and_raise(tmp_path, labels, images, reason, message):
    kitti(tmp_path / 'training', dict(SCENE, **labels), images)
    ds = KITTIDetection(str(tmp_path))
    assert len(ds) == 2 and ds.report.skipped == {reason: 1}
    with pytest.raises(DatasetError, match=message):
        KITTIDetection(str(tmp_path), on_error='raise')


@pytest.mark.parametrize('bad, message', [
    ('Car 0 0 -1 1 2 3\n', 'line 1: expected 15 or 16 columns'),
    (line('Car', (1, 2, 3, 4)) + '\nCar 0.00 0 x 1 2 3 4 ' + REST + '\n',
     "line 2: malformed number in 'Car"),
    (line('Car', (1, 2, 3, 4)).replace('1.00', 'nan') + '\n', 'line 1: non-finite number')])
def test_malformed_label_file(tmp_path, bad, message):
    check_skip_and_raise(tmp_path, {'000002': bad}, None, 'bad_annotation',
                         r'000002\.txt: ' + message)


def test_missing_image(tmp_path):
    check_skip_and_raise(tmp_path, {'000002': [line('Car', (1, 2, 3, 4))]}, {'000002': None},
                         'missing_image', r'000002\.png: image: file not found')


def test_truncated_png(tmp_path):
    check_skip_and_raise(tmp_path, {'000002': [line('Car', (1, 2, 3, 4))]},
                         {'000002': png()[:-30]}, 'bad_image', 'truncated PNG')


@pytest.mark.parametrize('box, reason', [((5, 5, 5, 9), 'zero_area'), ((9, 5, 5, 9), 'inverted'),
                                         ((500, 5, 600, 9), 'outside_image')])
def test_bad_boxes(tmp_path, box, reason):
    kitti(tmp_path / 'training', {'000000': [line('Car', box), line('Car', (1, 2, 3, 4))]})
    ds = KITTIDetection(str(tmp_path))
    assert ds.report.dropped == {reason: 1} and len(ds.label(0)) == 1
    with pytest.raises(DatasetError, match=r'000000\.txt: line 1: '):
        KITTIDetection(str(tmp_path), on_error='raise')


def test_empty_label_file_gives_an_empty_label(tmp_path):
    kitti(tmp_path / 'training', {'000000': '', '000001': [line('Car', (1, 2, 3, 4))]})
    ds = KITTIDetection(str(tmp_path))
    assert ds.label(0).shape == (0, 6) and len(ds) == 2


def _assert_same_items(kitti, dataset):
    assert kitti.classes == dataset.classes and len(kitti) == len(dataset)
    order = sorted(range(len(dataset)), key=lambda i: os.path.basename(dataset.image_path(i)))
    for k, i in enumerate(order):
        assert os.path.basename(kitti.image_path(k)) == os.path.basename(dataset.image_path(i))
        assert kitti.image_size(k) == dataset.image_size(i)
        expected = dataset.label(i)
        np.testing.assert_allclose(kitti.label(k)[:, :5], expected[:, :5], atol=0.005)
        assert not kitti.label(k)[:, 5].any()           # KITTI has no difficult flag


def test_write_kitti_reads_back_as_the_dataset_was(tmp_path):
    from gluondet.data import DemoDetection, write_kitti
    demo = DemoDetection('val', 6, seed=0, root=str(tmp_path / 'demo'))
    assert write_kitti(demo, str(tmp_path / 'kitti' / 'val')) == 6
    back = KITTIDetection(str(tmp_path / 'kitti'), 'val', classes=demo.classes,
                          class_mapping={name: name for name in demo.classes})
    _assert_same_items(back, demo)


def test_write_kitti_refuses_two_images_with_one_stem(tmp_path):
    from gluondet.data import write_kitti

    class Two:
        classes = ('a',)

        def __len__(self):
            return 2

        def image_path(self, i):
            return ('x/1.png', 'y/1.jpg')[i]

    with pytest.raises(ValueError, match='same KITTI label file 1.txt'):
        write_kitti(Two(), str(tmp_path / 'out'))
    assert not (tmp_path / 'out').exists()


def test_bccd_written_as_kitti_reads_back_as_its_voc_splits(tmp_path, bccd_root):
    """The KITTI copy of BCCD that model_zoo/bccd_retinanet.sh trains on (``kitti``)."""
    from gluondet.data import VOCDetection, write_kitti
    classes = ('RBC', 'WBC', 'Platelets')
    for split, folder in (('trainval', 'training'), ('test', 'val')):
        voc = VOCDetection(os.path.join(bccd_root, 'BCCD'), splits=(split,),
                           classes=classes)
        write_kitti(voc, str(tmp_path / folder))
        back = KITTIDetection(str(tmp_path), folder, classes=classes,
                              class_mapping={name: name for name in classes})
        _assert_same_items(back, voc)
