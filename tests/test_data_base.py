"""The dataset contract: errors, image checks, load-time failures, reports."""
import io
import logging
import os
import pickle

import cv2
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from gluondet.data import DatasetError, DetectionDataset, VOCDetection
from gluondet.data.base import probe_image, read_image, safe_join

from filetools import write


def encode(ext, image):
    ok, data = cv2.imencode(ext, image)
    assert ok
    return data.tobytes()


def gradient(height=48, width=64):
    """A BGR image with distinct channels, so RGB order can be checked."""
    image = np.zeros((height, width, 3), np.uint8)
    image[..., 0] = np.arange(width, dtype=np.uint8)[None, :]
    image[..., 1] = 200
    image[..., 2] = np.arange(height, dtype=np.uint8)[:, None]
    return image


def make_voc(root, ids=('a', 'b', 'c', 'd')):
    """A VOC folder with one 64x48 image and one 'dog' box per id."""
    for sub in ('Annotations', 'JPEGImages', os.path.join('ImageSets', 'Main')):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for i, image_id in enumerate(ids):
        write(os.path.join(root, 'JPEGImages', image_id + '.jpg'),
              encode('.jpg', np.full((48, 64, 3), 40 * i, np.uint8)))
        write(os.path.join(root, 'Annotations', image_id + '.xml'), (
            '<annotation><filename>%s.jpg</filename><size><width>64</width><height>48</height>'
            '</size><object><name>dog</name><bndbox><xmin>%d</xmin><ymin>3</ymin><xmax>20</xmax>'
            '<ymax>30</ymax></bndbox></object></annotation>' % (image_id, i + 1)).encode())
    write(os.path.join(root, 'ImageSets', 'Main', 'trainval.txt'), '\n'.join(ids).encode())
    return str(root)


def test_dataset_error_names_file_and_field_and_survives_pickling():
    error = DatasetError('/data/a.xml', 'object[2]/bndbox/xmin', 'expected a number', 'bad')
    assert str(error) == '/data/a.xml: object[2]/bndbox/xmin: expected a number'
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.field, copy.problem, copy.reason, str(copy)) == \
        ('/data/a.xml', 'object[2]/bndbox/xmin', 'expected a number', 'bad', str(error))


def test_read_image_is_rgb_uint8_ndarray(tmp_path):
    bgr = gradient()
    image = read_image(write(tmp_path / 'x.png', encode('.png', bgr)))
    assert isinstance(image, mx.nd.NDArray)
    assert image.dtype == np.uint8 and image.shape == (48, 64, 3)
    np.testing.assert_array_equal(image.asnumpy(), bgr[..., ::-1])


def test_read_image_matches_mxnet_imread_on_jpeg(tmp_path):
    path = write(tmp_path / 'x.jpg', encode('.jpg', gradient()))
    np.testing.assert_array_equal(read_image(path).asnumpy(), mx.image.imread(path).asnumpy())


def test_read_image_ignores_exif_orientation_like_mxnet(tmp_path):
    from PIL import Image
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90" would swap width and height
    buffer = io.BytesIO()
    Image.fromarray(gradient()).save(buffer, 'JPEG', exif=exif.tobytes())
    path = write(tmp_path / 'rotated.jpg', buffer.getvalue())
    assert read_image(path).shape == mx.image.imread(path).shape == (48, 64, 3)
    assert probe_image(path) == (64, 48)


def test_read_image_converts_grey_and_alpha(tmp_path):
    grey = read_image(write(tmp_path / 'g.png', encode('.png', np.full((5, 7), 9, np.uint8))))
    rgba = read_image(write(tmp_path / 'a.png', encode('.png', np.full((5, 7, 4), 9, np.uint8))))
    assert grey.shape == rgba.shape == (5, 7, 3)
    assert grey.asnumpy().max() == 9


@pytest.mark.parametrize('check', [read_image, probe_image])
def test_random_bytes_are_refused(tmp_path, check):
    path = write(tmp_path / 'x.jpg', np.random.RandomState(0).bytes(2000))
    with pytest.raises(DatasetError, match='x.jpg: image: (cannot be decoded|not a readable)'):
        check(path)


@pytest.mark.parametrize('check', [read_image, probe_image])
@pytest.mark.parametrize('ext, message', [('.jpg', 'truncated JPEG'), ('.png', 'truncated PNG')])
def test_truncated_files_are_refused(tmp_path, check, ext, message):
    data = encode(ext, np.random.RandomState(0).randint(0, 255, (64, 64, 3), np.uint8))
    path = write(tmp_path / ('x' + ext), data[:len(data) * 2 // 3])
    with pytest.raises(DatasetError, match=message):
        check(path)


def test_mxnet_reader_alone_would_accept_a_truncated_jpeg():
    """Why the end marker is checked: GluonCV's reader decodes half a JPEG without a word."""
    data = encode('.jpg', np.random.RandomState(0).randint(0, 255, (256, 256, 3), np.uint8))
    assert mx.image.imdecode(data[:len(data) // 2]).shape == (256, 256, 3)


def test_jpeg_padded_with_nul_bytes_is_accepted(tmp_path):
    path = write(tmp_path / 'x.jpg', encode('.jpg', gradient()) + b'\x00' * 10)
    assert probe_image(path) == (64, 48)
    assert read_image(path).shape == (48, 64, 3)


def test_probe_image_refuses_missing_empty_and_unsupported(tmp_path):
    with pytest.raises(DatasetError, match='nope.jpg: image: cannot be read'):
        probe_image(str(tmp_path / 'nope.jpg'))
    with pytest.raises(DatasetError, match='not a readable image'):
        probe_image(write(tmp_path / 'empty.jpg', b''))
    from PIL import Image
    Image.new('RGB', (4, 4)).save(str(tmp_path / 'x.gif'))
    with pytest.raises(DatasetError, match='unsupported format GIF'):
        probe_image(str(tmp_path / 'x.gif'))
    with pytest.raises(DatasetError, match='empty file'):
        read_image(str(tmp_path / 'empty.jpg'))


@pytest.mark.parametrize('name, ok', [
    ('a.jpg', True), ('sub/a.jpg', True), ('sub/../a.jpg', True), ('../a.jpg', False),
    ('sub/../../a.jpg', False), ('/etc/passwd', False), ('C:\\images\\a.jpg', False),
    ('\\\\server\\a.jpg', False), ('', False), ('a\x00.jpg', False), ('..', False)])
def test_safe_join(name, ok):
    result = safe_join('/data/root', name)
    assert (result is not None) == ok
    if ok:
        assert result.startswith('/data/root/')


def test_on_error_must_be_skip_or_raise():
    with pytest.raises(ValueError, match='on_error'):
        DetectionDataset(('a',), on_error='ignore')


def test_class_names_must_differ_beyond_case():
    with pytest.raises(ValueError, match='differ beyond case'):
        DetectionDataset(('Car', 'car '))


def test_items_labels_and_copies(tmp_path):
    ds = VOCDetection(make_voc(tmp_path), classes=('dog',))
    assert len(ds) == 4 and ds.classes == ('dog',) and ds.num_class == 1
    image, label = ds[1]
    assert image.shape == (48, 64, 3) and image.dtype == np.uint8
    np.testing.assert_array_equal(label, np.array([[1, 2, 19, 29, 0, 0]], np.float32))
    assert label.dtype == np.float32
    label[:] = -5
    np.testing.assert_array_equal(ds.label(1), [[1, 2, 19, 29, 0, 0]])
    assert ds.image_size(1) == (64, 48)
    assert ds.image_path(1) == os.path.join(str(tmp_path), 'JPEGImages', 'b.jpg')
    assert len(list(ds)) == 4  # iteration stops at the end
    assert ds[-1][1][0, 0] == 3


def test_transform_is_lazy_and_takes_image_and_label(tmp_path):
    ds = VOCDetection(make_voc(tmp_path), classes=('dog',))
    shifted = ds.transform(lambda image, label: (image.shape[0], label[:, 0] + 100))
    assert shifted[2] == (48, np.array([102.], np.float32))
    direct = VOCDetection(str(tmp_path), classes=('dog',), transform=lambda im, lb: len(lb))
    assert direct[0] == 1


def test_build_logs_one_info_line(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger='gluondet.data'):
        VOCDetection(make_voc(tmp_path), classes=('dog',))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert 'folder, trainval), 1 classes: 4 images, 4 boxes' in messages[0]


def corrupt_after_build(path):
    """Keep the JPEG start and end markers, garble the middle: only decoding notices."""
    data = bytearray(open(path, 'rb').read())
    data[2:len(data) - 2] = b'\x00' * (len(data) - 4)
    write(path, bytes(data))


def collate(samples):
    return samples


@pytest.mark.parametrize('num_workers', [0, 2])
def test_load_time_failure_raises_dataset_error_through_dataloader(tmp_path, num_workers):
    ds = VOCDetection(make_voc(tmp_path), classes=('dog',), on_error='raise')
    corrupt_after_build(ds.image_path(2))
    loader = gluon.data.DataLoader(ds, batch_size=2, num_workers=num_workers, batchify_fn=collate)
    with pytest.raises(DatasetError) as info:
        list(loader)
    assert info.value.path == ds.image_path(2)
    assert str(info.value).endswith('c.jpg: image: cannot be decoded')


def test_load_time_failure_is_replaced_by_next_item_in_skip_mode(tmp_path, caplog):
    ds = VOCDetection(make_voc(tmp_path), classes=('dog',))
    corrupt_after_build(ds.image_path(2))
    with caplog.at_level(logging.WARNING, logger='gluondet.data'):
        image, label = ds[2]
    np.testing.assert_array_equal(label, ds.label(3))
    assert image.asnumpy()[0, 0, 0] == pytest.approx(120, abs=2)  # image d is 40 * 3 grey
    assert ds.report.replaced['unreadable_image'] == 1
    assert 'c.jpg: image: cannot be decoded; using the next readable item' in caplog.text
    # the last item wraps around to the first
    corrupt_after_build(ds.image_path(3))
    np.testing.assert_array_equal(ds[3][1], ds.label(0))
    assert ds.report.replaced['unreadable_image'] == 2


@pytest.mark.parametrize('num_workers', [0, 2])
def test_load_time_replacement_through_dataloader(tmp_path, num_workers):
    ds = VOCDetection(make_voc(tmp_path), classes=('dog',))
    corrupt_after_build(ds.image_path(1))
    loader = gluon.data.DataLoader(ds, batch_size=2, num_workers=num_workers, batchify_fn=collate)
    labels = [label for batch in loader for _, label in batch]
    expected = [ds.label(i) for i in (0, 2, 2, 3)]  # item 1 is replaced by item 2
    assert len(labels) == 4
    for found, wanted in zip(labels, expected):
        np.testing.assert_array_equal(found, wanted)


def test_load_time_size_mismatch_is_an_error(tmp_path):
    ds = VOCDetection(make_voc(tmp_path), classes=('dog',), on_error='raise')
    write(ds.image_path(0), encode('.jpg', np.zeros((10, 10, 3), np.uint8)))
    with pytest.raises(DatasetError, match='a.jpg: image: decoded as 10x10, expected 64x48'):
        ds[0]


def test_all_items_unreadable_raises(tmp_path):
    ds = VOCDetection(make_voc(tmp_path, ids=('a', 'b')), classes=('dog',))
    for i in range(2):
        corrupt_after_build(ds.image_path(i))
    with pytest.raises(DatasetError, match='no item could be read'):
        ds[0]


def test_report_as_dict_and_summary(tmp_path):
    ds = VOCDetection(make_voc(tmp_path), classes=('dog',))
    assert ds.report.as_dict() == {'images': 4, 'background': 0, 'boxes': 4, 'clipped': 0,
                                   'skipped': {},
                                   'dropped': {}, 'replaced': {}, 'examples': {}}
    assert ds.report.summary() == '4 images, 4 boxes'
    assert repr(ds) == 'VOCDetection(4 images, 4 boxes)'
