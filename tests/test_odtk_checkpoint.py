"""ODTK RetinaNet checkpoints load without torch and give ODTK's detections."""
import os

import mxnet as mx
import numpy as np
import pytest

from gluondet.model_zoo import load_odtk
from gluondet.model_zoo.torch_file import load_torch_file
from odtk_reference import CLASSES, FIXTURE, IMAGES, build_checkpoint, odtk_input

TORCH_FILES = os.path.join(os.path.dirname(FIXTURE), 'torch_files')


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
    return build_checkpoint(str(tmp_path_factory.mktemp('odtk') / 'odtk_r18.pth'))


def test_detections_are_odtks(checkpoint):
    net = load_odtk(checkpoint, classes=['rbc', 'wbc', 'platelets'])
    assert net.classes == ('rbc', 'wbc', 'platelets') and (net.short, net.max_size) == (800, 1333)
    expected = np.load(os.path.join(FIXTURE, 'expected.npz'))
    for i in range(len(IMAGES)):
        ids, scores, boxes = (a.asnumpy()[0] for a in net(mx.nd.array(
            odtk_input(expected['image%d' % i])[None])))
        kept = scores[:, 0] >= 0
        want_scores, want_boxes = expected['scores%d' % i], expected['boxes%d' % i]
        assert kept.sum() == len(want_scores) == 100
        np.testing.assert_allclose(scores[kept, 0], want_scores, atol=1e-4)
        np.testing.assert_array_equal(ids[kept, 0], expected['classes%d' % i])
        # ODTK's corners are inclusive: its COCO json's width is x2 - x1 + 1
        np.testing.assert_allclose(boxes[kept], want_boxes + [0, 0, 1, 1], atol=1e-2)


def test_checkpoint_fields(checkpoint):
    saved = load_torch_file(checkpoint)
    assert saved['backbone'] == ['ResNet18FPN'] and saved['classes'] == CLASSES
    assert saved['ratios'] == [1.0, 2.0, 0.5]
    net = load_odtk(checkpoint)
    assert net.classes == ('class0', 'class1', 'class2')
    with pytest.raises(ValueError, match='odtk_r18.pth: a model of 3 classes, 2 names given'):
        load_odtk(checkpoint, classes=['a', 'b'])


def test_torch_layouts():
    """torch's zip archive and its older stream: every dtype, views, shared storages."""
    expected = np.load(os.path.join(TORCH_FILES, 'expected.npz'))
    for name in ('zip.pth', 'legacy.pth'):
        saved = load_torch_file(os.path.join(TORCH_FILES, name))
        assert sorted(saved['state_dict']) == sorted(expected)
        for key, value in saved['state_dict'].items():
            assert value.dtype == expected[key].dtype and value.shape == expected[key].shape
            np.testing.assert_array_equal(value, expected[key])
        assert saved['shared'][1].tolist() == expected['a'][1].tolist()
        assert saved['optimizer']['param_groups'] == [{'lr': 0.01, 'params': [0]}]


def test_bad_files(tmp_path, checkpoint):
    text = tmp_path / 'notes.pth'
    text.write_text('hello')
    with pytest.raises(ValueError, match='notes.pth: not a file written by torch.save'):
        load_odtk(str(text))
    cut = tmp_path / 'cut.pth'
    cut.write_bytes(open(checkpoint, 'rb').read()[:1 << 20])
    with pytest.raises(ValueError, match='cut.pth: not a readable torch.save file'):
        load_odtk(str(cut))
    code = tmp_path / 'code.pth'
    code.write_bytes(open(os.path.join(TORCH_FILES, 'code.pth'), 'rb').read())
    with pytest.raises(ValueError, match=r'code.pth: holds a posix.system'):
        load_torch_file(str(code))
