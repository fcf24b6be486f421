"""The SSD task on the engine: transforms, anchors, losses, training, resume, the script."""
import os
import sys

import mxnet as mx
import numpy as np
import pytest

from gluondet.errors import UserError
from gluondet.data import DemoDetection
from gluondet.data.batchify import Pad, Stack, Tuple
from gluondet.engine import TrainConfig, fit, read_manifest
from gluondet.engine.testing import check_resume
from gluondet.metrics import VOC07MApMetric, voc_result
from gluondet.model_zoo import get_model
from gluondet.tasks.ssd import SSDTask, SSDTrainTransform, SSDValTransform, anchor_steps

from ssd_reference import detect_batches, val_loader

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NET = 'ssd_300_mobilenet0.25_custom'


def make_task(num_images=16, data_shape=128):
    """A tiny SSD task on the demo data (factory for the resume check)."""
    train = DemoDetection(split='train', num_images=num_images, image_size=128)
    val = DemoDetection(split='val', num_images=8, image_size=128)
    return SSDTask(NET, train, val, data_shape, pretrained_base=False, zoom=True)


def test_batchify_pads_labels_with_minus_one():
    a = np.ones((2, 6), np.float32)
    b = np.full((1, 6), 2, np.float32)
    images, labels = Tuple(Stack(), Pad(pad_val=-1))([(np.zeros((3, 2, 2)), a),
                                                     (np.ones((3, 2, 2)), b)])
    assert images.shape == (2, 3, 2, 2)
    assert labels.shape == (2, 2, 6)
    np.testing.assert_array_equal(labels[1].asnumpy(), [[2] * 6, [-1] * 6])
    empty = Pad(pad_val=-1)([np.zeros((0, 6), np.float32)])
    assert empty.shape == (1, 1, 6) and float(empty.sum().asscalar()) == -6
    with pytest.raises(ValueError, match='2 elements but 1 functions'):
        Tuple(Stack())([(a, b)])


def test_anchor_steps_fit_only_where_the_preset_leaves_the_image_uncovered():
    mobile = get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False)
    assert anchor_steps(mobile, 256, 256) == [16.0, 32.0, 64.0, 128.0, 256.0, 256.0]
    assert anchor_steps(mobile, 256, 256, 'zoo') is None
    vgg = get_model('ssd_300_vgg16_atrous_voc', pretrained_base=False)
    assert anchor_steps(vgg, 300, 300) is None
    assert anchor_steps(vgg, 300, 300, 'fit')[:3] == [7.8947, 15.7895, 30.0]
    with pytest.raises(ValueError, match="'auto', 'zoo' or 'fit'"):
        anchor_steps(vgg, 300, 300, 'wide')


def test_train_transform_is_seeded_and_keeps_boxes_inside():
    image, label = DemoDetection(split='val', num_images=4, image_size=128)[0]
    transform = SSDTrainTransform(96, 64)
    np.random.seed(3)
    x1, y1 = transform(image, label)
    np.random.seed(3)
    x2, y2 = transform(image, label)
    assert x1.shape == (3, 64, 96) and x1.dtype == np.float32
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert y1.shape[1] == 6 and np.isfinite(y1).all()
    assert (y1[:, [0, 2]] >= 0).all() and (y1[:, [0, 2]] <= 96).all()
    assert (y1[:, [1, 3]] >= 0).all() and (y1[:, [1, 3]] <= 64).all()


def test_val_transform_keeps_original_label_and_size():
    image, label = DemoDetection(split='val', num_images=2, image_size=128)[1]
    x, y, size = SSDValTransform(64, 64)(image, label)
    assert x.shape == (3, 64, 64)
    np.testing.assert_array_equal(y, label)
    np.testing.assert_array_equal(size, [128, 128])


def test_losses_are_named_finite_and_per_context():
    task = make_task(num_images=4)
    ctx = [mx.cpu(0), mx.cpu(1)]
    net = task.build_net(ctx)
    batch = task.train_batchify([task.train_dataset()[i] for i in range(4)])
    parts = [tuple(mx.gluon.utils.split_and_load(x, ctx) for x in batch)]
    parts = list(zip(*parts[0]))
    with mx.autograd.record():
        losses = task.losses(net, parts)
    assert sorted(losses) == ['loss_box', 'loss_cls']
    for terms in losses.values():
        assert len(terms) == 2
        assert all(np.isfinite(t.asnumpy()).all() for t in terms)
    assert task.meta()['steps'] == [16.0, 32.0, 64.0, 128.0, 128.0, 128.0]


def test_fit_trains_validates_and_writes_gluoncv_named_files(tmp_path):
    prefix = str(tmp_path / 'ssd')
    config = TrainConfig(batch_size=8, num_workers=0, epochs=2, lr=0.01, lr_decay_epoch=(),
                         log_interval=1, save_prefix=prefix, save_interval=1, seed=5)
    result = fit(make_task(), config)
    assert set(result.metrics) == {'mAP', 'AP/circle', 'AP/square', 'AP/triangle', 'AP/star',
                                   'AP/cross'}
    assert 0 <= result.metrics['mAP'] <= 1
    manifest = read_manifest(prefix + '_last.json')
    assert manifest['meta']['network'] == NET and manifest['iteration'] == 4
    assert os.path.exists(prefix + '_best.params')
    assert os.path.exists(prefix + '_0001_%.4f.params' % result.metrics['mAP'])
    net = get_model(NET, classes=manifest['meta']['classes'], pretrained_base=False,
                    steps=manifest['meta']['steps'])
    net.load_parameters(prefix + '_best.params')


def old_validate(task, net, ctx_list):
    """``SSDTask.validate`` before it ran the predictor's evaluation: the val loader's
    batches through ``detect_batches`` into the metric, a batch at a time (the reference),
    with the boxes clipped to the (128 px) images, as every predictor clips them."""
    metric = VOC07MApMetric(iou_thresh=0.5, class_names=task.classes)
    for ids, scores, boxes, labels in detect_batches(net, val_loader(task), ctx_list,
                                                     (task.width, task.height)):
        metric.update(boxes.clip(0, 127), ids, scores, labels[:, :, :4], labels[:, :, 4:5],
                      labels[:, :, 5:6])
    return voc_result(metric)


def test_validation_gives_the_figure_of_the_loop_it_replaced(tmp_path):
    """On demo val, a trained model's mAP and APs by ``SSDTask.validate`` (the predictor and
    ``metrics.evaluate``, as ``gluondet evaluate``) equal the old loop's, on one context and
    split over two."""
    train = DemoDetection(split='train', num_images=16, image_size=128)
    val = DemoDetection(split='val', num_images=24, image_size=128)
    task = SSDTask(NET, train, val, 128, pretrained_base=False, zoom=False, val_batch_size=10)
    config = TrainConfig(batch_size=8, num_workers=0, epochs=3, lr=0.02, lr_decay_epoch=(),
                         log_interval=10, save_prefix=str(tmp_path / 'ssd'), save_interval=0,
                         val_interval=3, seed=3, cpus=2)
    result = fit(task, config)     # validated on the two contexts it trained on

    def same(a, b):
        return a.keys() == b.keys() and all(a[k] == b[k] or np.isnan(a[k]) and np.isnan(b[k])
                                            for k in a)

    for ctx in ([mx.cpu()], [mx.cpu(0), mx.cpu(1)]):
        expected = old_validate(task, result.net, ctx)
        assert same(task.validate(result.net, ctx), expected), ctx
    # (each context keeps its own BatchNorm statistics, so only the same split agrees)
    assert same(result.metrics, expected) and expected['mAP'] > 0


@pytest.mark.slow
def test_ssd_resume_after_kill_equals_the_straight_run(tmp_path):
    config = TrainConfig(batch_size=4, num_workers=0, epochs=2, lr=0.01, lr_decay_epoch=(1,),
                         log_interval=2, save_interval=0, val_interval=0, checkpoint_interval=3,
                         seed=7, hybridize=True)
    report = check_resume('test_ssd_task:make_task', config, str(tmp_path), pythonpath=[HERE])
    assert report['params_diff'] <= 1e-6
    assert report['states_diff'] <= 1e-6


def _script(argv):
    from gluondet.train import ssd
    return ssd, ssd.parse_args(argv)


def test_script_names_networks_as_gluoncv():
    train_ssd, args = _script(['--network', 'mobilenet1.0', '--data-shape', '512'])
    assert train_ssd.network_name(args) == 'ssd_512_mobilenet1.0_voc'
    _, args = _script(['--network', 'mobilenet0.25', '--data-shape', '256', '--dataset', 'demo'])
    assert train_ssd.network_name(args) == 'ssd_300_mobilenet0.25_custom'
    _, args = _script(['--network', 'vgg16_atrous', '--classes', 'a,b'])
    assert train_ssd.network_name(args) == 'ssd_300_vgg16_atrous_custom'
    _, args = _script(['--network', 'resnet18'])
    with pytest.raises(UserError, match='unknown --network'):
        train_ssd.network_name(args)


def test_script_asks_for_missing_gpus_clearly():
    train_ssd, _ = _script([])
    if mx.context.num_gpus() > 0:
        pytest.skip('this machine has GPUs')
    with pytest.raises(Exception, match='GPU'):
        train_ssd.main(['--dataset', 'demo', '--gpus', '0', '--network', 'mobilenet0.25'])


def test_script_reads_the_splits_of_a_voc_folder(bccd_root):
    from gluondet.train import common
    _, args = _script(['--dataset', 'voc', '--dataset-root', os.path.join(bccd_root, 'BCCD'),
                       '--classes', 'RBC,WBC,Platelets', '--train-split', 'trainval',
                       '--val-split', 'test'])
    train, val = common.build_datasets(args)
    assert (len(train), len(val)) == (292, 72)
    _, args = _script(['--dataset', 'voc', '--dataset-root', os.path.join(bccd_root, 'BCCD'),
                       '--classes', 'RBC,WBC,Platelets'])
    assert tuple(map(len, common.build_datasets(args))) == (205, 87)


@pytest.mark.slow
def test_script_resume_after_kill_9_in_epoch_2_equals_the_straight_run(tmp_path, bccd_root):
    """train_ssd.py: 2 epochs straight vs 1 epoch, then ``--resume auto`` killed (-9) in
    epoch 2, then ``--resume auto`` to the end."""
    import signal
    import subprocess
    import time
    from gluondet.engine.testing import _max_diff

    def command(prefix, epochs):
        return [sys.executable, os.path.join(ROOT, 'scripts', 'train_ssd.py'),
                '--network', 'mobilenet0.25', '--data-shape', '96', '--dataset', 'voc',
                '--dataset-root', os.path.join(bccd_root, 'BCCD'), '--classes',
                'RBC,WBC,Platelets', '--train-split', 'test', '--val-split', 'test',
                '--gpus', '', '-j', '0', '--batch-size', '8', '--epochs', str(epochs),
                '--lr', '0.01', '--lr-decay-epoch', '1', '--log-interval', '1',
                '--val-interval', '0', '--save-interval', '0', '--seed', '3',
                '--no-pretrained-base', '--save-prefix', prefix, '--resume', 'auto']

    straight, resumed = str(tmp_path / 'straight' / ''), str(tmp_path / 'resumed' / '')
    name = 'ssd_300_mobilenet0.25_custom'
    subprocess.run(command(straight, 2), check=True, capture_output=True)
    subprocess.run(command(resumed, 1), check=True, capture_output=True)
    metrics = resumed + name + '_metrics.jsonl'
    with open(str(tmp_path / 'child.log'), 'w') as log:
        child = subprocess.Popen(command(resumed, 2), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while child.poll() is None and time.time() < deadline:
            with open(metrics) as f:
                if any('"epoch": 1' in line for line in f):
                    break
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        assert child.wait(60) == -signal.SIGKILL, 'the run ended before it was killed'
    assert read_manifest(resumed + name + '_last.json')['iteration'] == 9  # end of epoch 1
    subprocess.run(command(resumed, 2), check=True, capture_output=True)
    assert read_manifest(resumed + name + '_last.json')['iteration'] == 18
    assert _max_diff(straight + name, resumed + name, 'params') <= 1e-6
    assert _max_diff(straight + name, resumed + name, 'states') <= 1e-6


def test_detect_batches_scales_every_coordinate_of_a_detection_and_keeps_padding():
    def net(images):
        ids = mx.nd.array([[[0], [-1]]])
        boxes = mx.nd.array([[[-3, 10, 50, 60], [-1, -1, -1, -1]]])
        return ids, mx.nd.array([[[0.9], [-1]]]), boxes

    batch = (mx.nd.zeros((1, 3, 8, 8)), mx.nd.zeros((1, 1, 6)), mx.nd.array([[200, 100]]))
    _, _, boxes, _ = next(detect_batches(net, [batch], [mx.cpu()], (50, 100)))
    np.testing.assert_allclose(boxes.asnumpy(), [[[-6, 20, 100, 120], [-1, -1, -1, -1]]])
