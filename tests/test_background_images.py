"""Background images (no object): every reader keeps them unless asked to skip them, the
report counts them, every detector's targets and losses train on them as negatives (alone in
a batch or beside images with objects), augmentation keeps them, and evaluation counts a
detection on one as a false positive."""
import argparse
import json
import os

import cv2
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

from gluondet.data import (COCODetection, DemoDetection, KITTIDetection, RecordDetection,
                           VOCDetection)
from gluondet.data.batchify import Pad
from gluondet.data.mixup import MixupDetection
from gluondet.errors import UserError
from gluondet.losses import RetinaNetLoss, SSDMultiBoxLoss
from gluondet.metrics import COCODetectionMetric, VOC07MApMetric
from gluondet.tasks import FasterRCNNTask, RetinaNetTask, SSDTask
from gluondet.tasks.yolo3 import YOLO3Task
from gluondet.tools import convert
from gluondet.train import common

from test_data_resolve import script_args

EMPTY = np.zeros((0, 6), np.float32)


def _jpeg(path, width=64, height=48, seed=0):
    image = np.random.RandomState(seed).randint(0, 255, (height, width, 3)).astype(np.uint8)
    cv2.imwrite(str(path), image)


def _xml(path, filename, objects=()):
    body = ''.join('<object><name>%s</name><difficult>%d</difficult><bndbox><xmin>%d</xmin>'
                   '<ymin>%d</ymin><xmax>%d</xmax><ymax>%d</ymax></bndbox></object>'
                   % ((name, difficult) + tuple(box)) for name, box, difficult in objects)
    path.write_text('<annotation><filename>%s</filename><size><width>64</width><height>48'
                    '</height></size>%s</annotation>' % (filename, body))


@pytest.fixture
def labelimg(tmp_path):
    """a.jpg (a dog), b.jpg (an xml without object), c.jpg (only a cat: not a class),
    d.png (no xml)."""
    for i, name in enumerate(('a.jpg', 'b.jpg', 'c.jpg', 'd.png')):
        _jpeg(tmp_path / name, seed=i)
    _xml(tmp_path / 'a.xml', 'a.jpg', [('dog', (5, 5, 30, 30), 0)])
    _xml(tmp_path / 'b.xml', 'b.jpg')
    _xml(tmp_path / 'c.xml', 'c.jpg', [('cat', (5, 5, 30, 30), 0)])
    return tmp_path


def _names(dataset):
    return [os.path.basename(dataset.image_path(i)) for i in range(len(dataset))]


def test_voc_keeps_images_without_objects_and_reads_images_without_xml_on_request(labelimg):
    ds = VOCDetection(str(labelimg), classes=('dog',))
    assert _names(ds) == ['a.jpg', 'b.jpg', 'c.jpg'] and ds.report.background == 2
    assert ds.label(1).shape == (0, 6) and ds.label(2).shape == (0, 6)
    assert ds.report.summary().startswith('3 images (2 background images, without a box), '
                                          '1 boxes')
    both = VOCDetection(str(labelimg), classes=('dog',), background_images=True)
    assert _names(both) == ['a.jpg', 'b.jpg', 'c.jpg', 'd.png'] and both.report.background == 3
    assert both.image_size(3) == (64, 48) and both[3][1].shape == (0, 6)
    skipped = VOCDetection(str(labelimg), classes=('dog',), background_images=True,
                           skip_empty=True)
    assert _names(skipped) == ['a.jpg'] and skipped.report.skipped == {'empty': 3}
    assert set(skipped.report.problems()) == {'unknown_class'}    # 'empty': asked for


def test_voc_folder_listed_ids_without_xml_on_request(tmp_path):
    for sub in ('Annotations', 'JPEGImages', 'ImageSets/Main'):
        os.makedirs(str(tmp_path / sub))
    _jpeg(tmp_path / 'JPEGImages' / '1.jpg')
    _jpeg(tmp_path / 'JPEGImages' / '2.jpg')
    _xml(tmp_path / 'Annotations' / '1.xml', '1.jpg', [('dog', (5, 5, 30, 30), 1)])
    (tmp_path / 'ImageSets' / 'Main' / 'train.txt').write_text('1\n2\n')
    plain = VOCDetection(str(tmp_path), splits=('train',), classes=('dog',))
    assert len(plain) == 1 and plain.report.skipped == {'missing_annotation': 1}
    # a difficult-only image is no background image: its box stays, flagged
    assert plain.label(0)[0, 5] == 1 and plain.report.background == 0
    ds = VOCDetection(str(tmp_path), splits=('train',), classes=('dog',),
                      background_images=True)
    assert _names(ds) == ['1.jpg', '2.jpg'] and ds.label(1).shape == (0, 6)
    assert not ds.report.skipped and ds.report.background == 1


def test_kitti_empty_label_file_is_a_background_image(tmp_path):
    for sub in ('image_2', 'label_2'):
        os.makedirs(str(tmp_path / 'training' / sub))
    for stem, text in (('0', 'Car 0 0 0 5 5 30 30 0 0 0 0 0 0 0\n'), ('1', ''),
                       ('2', 'DontCare -1 -1 -10 5 5 30 30 0 0 0 0 0 0 0\n')):
        _jpeg(tmp_path / 'training' / 'image_2' / (stem + '.jpg'))
        (tmp_path / 'training' / 'label_2' / (stem + '.txt')).write_text(text)
    ds = KITTIDetection(str(tmp_path))
    assert len(ds) == 3 and ds.report.background == 2 and ds.label(1).shape == (0, 6)
    skipped = KITTIDetection(str(tmp_path), skip_empty=True)
    assert len(skipped) == 1 and skipped.report.skipped == {'empty': 2}


def _coco(tmp_path):
    for name in ('a.jpg', 'b.jpg'):
        _jpeg(tmp_path / name)
    data = {'images': [{'id': 1, 'file_name': 'a.jpg', 'width': 64, 'height': 48},
                       {'id': 2, 'file_name': 'b.jpg', 'width': 64, 'height': 48}],
            'annotations': [{'id': 1, 'image_id': 1, 'category_id': 1, 'bbox': [4, 4, 26, 26],
                             'area': 676, 'iscrowd': 0}],
            'categories': [{'id': 1, 'name': 'dog'}]}
    path = tmp_path / 'instances.json'
    path.write_text(json.dumps(data))
    return str(path)


def test_flags_keep_or_skip_and_convert_writes_background_images(tmp_path, labelimg):
    _coco(tmp_path)
    flags = ('--dataset', 'coco', '--train-json', str(tmp_path / 'instances.json'),
             '--val-json', str(tmp_path / 'instances.json'))
    _, args = script_args(*flags)
    train, val = common.build_datasets(args)
    assert train.image_ids == [1, 2] and val.image_ids == [1, 2]
    _, args = script_args(*flags, '--skip-empty')
    train, val = common.build_datasets(args)
    assert train.image_ids == [1] and val.image_ids == [1, 2]     # validation keeps them
    _, args = script_args('--dataset', 'voc', '--dataset-root', str(labelimg), '--classes',
                          'dog', '--train-split', '.', '--val-split', '.',
                          '--background-images')
    assert [len(ds) for ds in common.build_datasets(args)] == [4, 4]
    _, args = script_args(*flags, '--background-images')
    with pytest.raises(UserError, match='background images without an xml go with the voc '
                                        'dataset .* not coco'):
        common.build_datasets(args)
    out = str(tmp_path / 'rec' / 'data')
    parser = argparse.ArgumentParser()
    convert.add_arguments(parser)
    convert.run(parser.parse_args(['--dataset', 'voc', '--dataset-root', str(labelimg),
                                   '--classes', 'dog', '--background-images', '-o', out]))
    records = RecordDetection(out + '*.rec')
    assert len(records) == 4 and records.report.background == 3
    assert len(RecordDetection(out + '*.rec', skip_empty=True)) == 1


# -- augmentation ------------------------------------------------------------------------

def _demo(count=4, size=96):
    return DemoDetection('train', num_images=count, image_size=size)


def test_augmentation_and_mixup_keep_background_images():
    demo = _demo()
    image, label = demo[0]
    task = SSDTask('ssd_300_mobilenet0.25_custom', demo, demo, 96, pretrained_base=False)
    for seed in range(8):      # zoom-out and the constrained crop, each way
        np.random.seed(seed)
        out, boxes = task.train_transform()(image, EMPTY)
        assert out.shape == (3, 96, 96) and boxes.shape == (0, 6)
    frcnn = FasterRCNNTask('faster_rcnn_resnet18_v1b_custom', demo, demo, short=96,
                           max_size=128, pretrained_base=False)
    assert frcnn.train_transform()(image, EMPTY)[1].shape == (0, 6)

    class Index(int):
        mixup = True

    for first, second in ((EMPTY, label), (label, EMPTY), (EMPTY, EMPTY)):
        pair = MixupDetection([(image, first), (image, second)], ratio=0.5)
        _, mixed = pair[Index(0)]
        assert mixed.shape == (len(first) + len(second), 7)
        np.testing.assert_array_equal(mixed[:, :6], np.vstack([first, second]))
        assert (mixed[:, 6] == 0.5).all()
    assert Pad(pad_val=-1)([EMPTY, EMPTY]).shape == (2, 1, 6)


# -- targets and losses ------------------------------------------------------------------

def _tasks():
    demo = _demo()
    kwargs = dict(short=96, max_size=128, pretrained_base=False)
    return {
        'ssd': lambda: SSDTask('ssd_300_mobilenet0.25_custom', demo, demo, 96,
                               pretrained_base=False),
        'faster_rcnn': lambda: FasterRCNNTask('faster_rcnn_resnet18_v1b_custom', demo, demo,
                                              **kwargs),
        'faster_rcnn_fpn': lambda: FasterRCNNTask('faster_rcnn_fpn_resnet18_v1b_custom', demo,
                                                  demo, **kwargs),
        'retinanet': lambda: RetinaNetTask('retinanet_resnet18_v1b_custom', demo, demo,
                                           **kwargs),
        'yolo3': lambda: YOLO3Task('yolo3_mobilenet0.5_custom', demo, demo, 96,
                                   random_shapes=None, pretrained_base=False)}


BOX_LOSSES = ('loss_box', 'loss_rpn_box', 'loss_center', 'loss_scale')
CLASS_LOSSES = {'ssd': ('loss_cls',), 'retinanet': ('loss_cls',), 'yolo3': ('loss_obj',),
                'faster_rcnn': ('loss_rpn_obj', 'loss_cls'),
                'faster_rcnn_fpn': ('loss_rpn_obj', 'loss_cls')}


def _batch(task, empty):
    """Two training samples of the demo: both without boxes, or the first only."""
    demo, transform = task._train, task.train_transform()
    samples = []
    for i in range(2):
        image, label = demo[i]
        np.random.seed(i)
        samples.append(transform(image, EMPTY if empty or i == 0 else label))
    return task.train_batchify(samples)


def _losses_and_grads(task, net, batch):
    with autograd.record():
        losses = task.losses(net, [tuple(batch)])
        total = mx.nd.add_n(*[v.sum() for values in losses.values() for v in values])
    total.backward()
    values = {k: sum(float(v.sum().asscalar()) for v in vs) for k, vs in losses.items()}
    grads = [p.grad().asnumpy() for p in net.collect_params().values() if p.grad_req != 'null']
    return losses, values, grads


@pytest.mark.parametrize('detector', sorted(CLASS_LOSSES))
def test_every_detector_trains_on_background_images(detector):
    task = _tasks()[detector]()
    net = task.build_net([mx.cpu()])
    for empty in (True, False):
        losses, values, grads = _losses_and_grads(task, net, _batch(task, empty))
        assert all(np.isfinite(v) for v in values.values()), (detector, empty, values)
        assert all(np.isfinite(g).all() for g in grads), (detector, empty)
        for name in CLASS_LOSSES[detector]:     # all background: still a loss to learn from
            assert values[name] > 0, (detector, empty, values)
        if empty:
            assert {values[k] for k in values if k in BOX_LOSSES} == {0.0}, values
            assert sum(np.abs(g).sum() for g in grads) > 0
        else:
            assert all(values[k] > 0 for k in values if k in BOX_LOSSES), values
    if detector == 'ssd':   # the background image of the mixed batch counts on its own
        per_image = losses['loss_cls'][0].asnumpy()
        assert per_image.shape == (2,) and per_image[0] > 0
        assert losses['loss_box'][0].asnumpy()[0] == 0


def test_rpn_and_rcnn_samplers_of_background_images_are_all_negative():
    task = _tasks()['faster_rcnn']()
    net = task.build_net([mx.cpu()])
    images, sizes, labels = _batch(task, empty=False)     # image 0 without boxes
    with autograd.train_mode():
        outputs = net(images, labels[:, :, :4], labels[:, :, 4:5])
    rpn_cls, _, rpn_mask = [x.asnumpy() for x in task.rpn_targets(
        outputs[2], labels[:, :, :4], labels[:, :, 4:5], sizes)]
    rcnn_cls, box_mask = outputs[5].asnumpy(), outputs[7].asnumpy()
    assert (rpn_cls[0] != 1).all() and (rpn_cls[0] == 0).sum() > 0
    assert (rpn_cls[1] == 1).any()
    assert (rcnn_cls[0] <= 0).all() and (rcnn_cls[0] == 0).sum() > 0 and rcnn_cls[1].max() > 0
    assert box_mask[0].sum() == 0 and box_mask[1].sum() > 0 and rpn_mask[0].sum() == 0


def test_ssd_loss_mines_hard_negatives_of_a_background_image():
    rng = np.random.RandomState(0)
    cls_pred = mx.nd.array(rng.normal(0, 2, (2, 20, 3)))
    box_pred = mx.nd.array(rng.normal(0, 1, (2, 20, 4)))
    target = np.zeros((2, 20), np.float32)
    target[1, :2] = 1       # image 1: two positives; image 0: a background image
    box_target = mx.nd.zeros((2, 20, 4))
    ce = -mx.nd.pick(mx.nd.log_softmax(cls_pred, axis=-1), mx.nd.array(target)).asnumpy()
    _, gluoncv, _ = SSDMultiBoxLoss()(cls_pred, box_pred, mx.nd.array(target), box_target)
    assert gluoncv[0].asnumpy()[0] == 0     # GluonCV's: nothing from the background image
    _, cls, box = SSDMultiBoxLoss(background_negatives=6)(cls_pred, box_pred,
                                                          mx.nd.array(target), box_target)
    norm = 2 + 6 / 3
    expected0 = np.sort(ce[0])[::-1][:6].sum() / norm
    expected1 = (ce[1, :2].sum() + np.sort(ce[1, 2:])[::-1][:6].sum()) / norm
    np.testing.assert_allclose(cls[0].asnumpy(), [expected0, expected1], rtol=1e-5)
    assert box[0].asnumpy()[0] == 0
    _, alone, _ = SSDMultiBoxLoss(background_negatives=6)(cls_pred[:1], box_pred[:1],
                                                          mx.nd.array(target[:1]),
                                                          box_target[:1])
    np.testing.assert_allclose(alone[0].asnumpy(), [np.sort(ce[0])[::-1][:6].sum() / 2],
                               rtol=1e-5)


def test_retinanet_loss_counts_a_background_image_as_positives():
    rng = np.random.RandomState(0)
    cls_pred = mx.nd.array(rng.normal(-2, 1, (3, 30, 4)))
    box_pred = mx.nd.array(rng.normal(0, 1, (3, 30, 4)))
    box_target = mx.nd.array(rng.normal(0, 1, (3, 30, 4)))
    target = np.zeros((3, 30), np.float32)
    target[2, :5] = 2       # image 2: five positives; images 0 and 1: background images
    target[2, 5] = -1       # one ignored anchor
    args = (cls_pred, box_pred, mx.nd.array(target), box_target)
    odtk = RetinaNetLoss(alpha=0.25, gamma=2.0)(*args)
    ours = RetinaNetLoss(alpha=0.25, gamma=2.0, background_positives=16)(*args)
    for name in ('loss_cls', 'loss_box'):   # the same sums, divided by 5 and by 5 + 2 * 16
        np.testing.assert_allclose(ours[name][0].asnumpy() * (5 + 2 * 16),
                                   odtk[name][0].asnumpy() * 5, rtol=1e-5)
    assert ours['loss_box'][0].asnumpy()[:2].tolist() == [0, 0]
    # a batch of background images only: ODTK's divides by 1, 16 each here
    alone = [x[:2] for x in args]
    np.testing.assert_allclose(
        RetinaNetLoss(background_positives=16)(*alone)['loss_cls'][0].asnumpy() * 32,
        RetinaNetLoss()(*alone)['loss_cls'][0].asnumpy(), rtol=1e-5)
    assert RetinaNetTask('retinanet_resnet18_v1b_custom', _demo(), _demo(),
                         pretrained_base=False).loss._background_positives == 16


# -- evaluation --------------------------------------------------------------------------

def test_voc_metric_counts_detections_on_background_images_as_false_positives():
    box = np.array([[[5., 5., 30., 30.]]])
    padding = np.full((1, 1, 4), -1.)

    def ap(with_background):
        metric = VOC07MApMetric(class_names=('dog',))
        metric.update(box, np.array([[0]]), np.array([[0.8]]), box, np.array([[0]]))
        if with_background:
            metric.update(box, np.array([[0]]), np.array([[0.9]]), padding, np.array([[-1]]))
        return metric.get()[1][-1]

    assert ap(False) == pytest.approx(1.0)
    assert ap(True) == pytest.approx(0.5)  # the false positive ranks first: precision 0.5


def test_coco_metric_counts_detections_on_background_images_as_false_positives(tmp_path):
    dataset = COCODetection(annotation_file=_coco(tmp_path), image_root=str(tmp_path))
    assert dataset.image_ids == [1, 2]
    box = np.array([[[4., 4., 29., 29.]]] * 2)

    def ap(score_on_background):
        metric = COCODetectionMetric(dataset, str(tmp_path / 'r'), cleanup=True, score_thresh=0)
        metric.update(box, np.array([[0], [0]]), np.array([[0.8], [score_on_background]]))
        metric.get()
        return metric.stats['AP']

    assert ap(-1.0) == pytest.approx(1.0)      # below the threshold: no detection there
    assert ap(0.9) == pytest.approx(0.5, abs=0.01)


def test_dali_cpu_pipelines_keep_background_images():
    pytest.importorskip('nvidia.dali', reason='NVIDIA DALI is not installed (gluondet[dali])')
    from gluondet.data.dali import DaliTrainData, KeepRatioDaliAugment, SSDDaliAugment
    from gluondet.engine import EpochBatchSampler
    from test_dali import Images, synthetic
    image, label = synthetic()
    data = Images([(image, EMPTY), (image, label), (image, EMPTY), (image, EMPTY)])
    for augment in (SSDDaliAugment(96, 96, zoom=False), SSDDaliAugment(96, 96, zoom=True),
                    KeepRatioDaliAugment(96, 160, 32)):
        batches = DaliTrainData(augment, data, EpochBatchSampler(4, 2, 1, 0, 1), seed=1,
                                num_threads=1).epoch(0)
        labels = [batch[-1].asnumpy() for batch in batches]
        assert len(labels) == 2 and sum(len(x) for x in labels) == 4    # none dropped
        counts = [int((row >= 0).sum()) for x in labels for row in x[:, :, 4]]
        assert sorted(counts) == [0, 0, 0, 3]
