"""The CenterNet task on the engine: samples and targets, the loss dict, weight decay, what
the checkpoint records, validation (flipped too), an epoch of training."""
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

from gluondet.data import DemoDetection
from gluondet.deploy.networks import load_network
from gluondet.engine import TrainConfig, fit
from gluondet.tasks import CenterNetTask

NET = 'center_net_mobilenet0.5_custom'


def make_task(num_images=8, data_shape=128, **kwargs):
    """The small CenterNet on small demo images (factory for the resume check)."""
    train = DemoDetection('train', num_images=num_images, image_size=128)
    val = DemoDetection('val', num_images=4, image_size=128)
    return CenterNetTask(NET, train, val, data_shape, pretrained_base=False, **kwargs)


def _batch(task, count=2):
    dataset = task.train_dataset()
    np.random.seed(0)
    return tuple(mx.nd.array(a) for a in task.train_batchify([dataset[i]
                                                               for i in range(count)]))


def test_samples_carry_the_targets_at_a_quarter_of_the_input():
    task = make_task(data_shape=96)
    task.build_net([mx.cpu()])
    batch = _batch(task)
    assert [a.shape for a in batch] == [(2, 3, 96, 96), (2, 5, 24, 24)] + [(2, 2, 24, 24)] * 4
    heatmap, wh_mask = batch[1].asnumpy(), batch[3].asnumpy()
    assert heatmap.max() == 1 and heatmap.min() == 0
    # one peak of 1 per object, where its size and offset are set
    assert (heatmap == 1).any(axis=1).sum() == wh_mask[:, 0].sum() > 0


def test_batch_images_reads_the_boxes_back_from_the_targets():
    task = make_task(data_shape=128)
    task.build_net([mx.cpu()])
    transform = task.train_transform()
    image, label = task._train[1]
    aug = transform.draw(image.shape[1], image.shape[0])
    sample = transform.apply(image, label, aug)
    transform.targets = None
    _, boxes = transform.apply(image, label, aug)
    batch = tuple(mx.nd.array(a) for a in task.train_batchify([sample]))
    (pixels, shown, names), = task.batch_images(batch, 1)
    assert pixels.shape == (128, 128, 3) and pixels.dtype == np.uint8
    assert len(shown) == len(boxes) > 0
    order = np.lexsort((shown[:, 0], shown[:, 1]))
    expected = boxes[np.lexsort((boxes[:, 0], boxes[:, 1]))]
    # the targets' map is 4 times coarser: clipped to 31 cells, i.e. 124 px, not 127
    np.testing.assert_allclose(shown[order], expected[:, :4], atol=3.01)
    assert [names[k] for k in order] == [task.classes[int(c)] for c in expected[:, 4]]


def test_losses_are_named_finite_and_per_context():
    task = make_task()
    ctx = [mx.cpu(0), mx.cpu(1)]
    net = task.build_net(ctx)
    batch = _batch(task, 4)
    parts = list(zip(*[mx.gluon.utils.split_and_load(a, ctx) for a in batch]))
    with autograd.record():
        losses = task.losses(net, parts)
    assert sorted(losses) == ['loss_center', 'loss_heatmap', 'loss_wh']
    for values in losses.values():
        assert [v.shape for v in values] == [(2,), (2,)]
        assert all(np.isfinite(v.asnumpy()).all() for v in values)
    heat = sum(float(v.sum().asscalar()) for v in losses['loss_heatmap'])
    assert 1 < heat < 100       # the focal loss at the heatmap's prior of 0.1


def test_weight_decay_is_off_on_the_biases_only():
    net = make_task().build_net([mx.cpu()])
    mults = {name: p.wd_mult for name, p in net.collect_params().items()}
    assert {m for n, m in mults.items() if n.endswith('_bias')} == {0.0}
    assert {m for n, m in mults.items() if not n.endswith('_bias')} == {1.0}
    assert any(n.endswith('_gamma') for n in mults)


def test_it_records_and_validates_at_its_data_shape(tmp_path):
    task = make_task(data_shape=160)
    net = task.build_net([mx.cpu()])
    assert task.meta() == {'task': 'center_net', 'network': NET, 'classes': list(task.classes),
                           'model_kwargs': {'size': 160}}
    assert task.preprocessing(net) == {'resize': 'keep_ratio', 'short': 160, 'max_size': 160,
                                       'multiple': 32, 'mean': [0.485, 0.456, 0.406],
                                       'std': [0.229, 0.224, 0.225]}
    # what deploy rebuilds from the json beside a saved .params
    net(mx.nd.zeros((1, 3, 160, 160)))
    net.save_parameters(str(tmp_path / 'm.params'))
    (tmp_path / 'm.json').write_text(json.dumps({'meta': task.meta()}))
    _, info = load_network(str(tmp_path / 'm.params'))
    assert info['preprocessing'] == task.preprocessing(net)


def test_val_size_is_the_networks_and_the_augmentation_strength_reaches_the_transform():
    """The demo recipe's options: it trains on 160 px squares, validates (and the checkpoint
    predicts) at 192 px; a lighter zoom and shift."""
    task = make_task(data_shape=160, val_size=192, zoom_sigma=0.1, max_shift=0.2)
    net = task.build_net([mx.cpu()])
    assert task.meta()['model_kwargs'] == {'size': 192}
    assert task.preprocessing(net)['max_size'] == 192
    transform = task.train_transform()
    assert transform.size == (160, 160)
    np.random.seed(0)
    draws = [transform.draw(200, 100) for _ in range(300)]
    centers = np.array([d.center for d in draws])
    assert (np.abs(centers - [100, 50]) <= [40, 20]).all()         # within 20% of the middle
    zooms = np.array([d.scale for d in draws]) / 200
    assert 0.05 < zooms.std() < 0.15 and abs(zooms.mean() - 1) < 0.03
    gluoncv = make_task().train_transform()          # GluonCV's: anywhere, spread 0.4 clipped
    zooms = np.array([gluoncv.draw(200, 100).scale for _ in range(300)]) / 200
    assert zooms.std() > 0.25 and zooms.min() >= 0.6 and zooms.max() <= 1.4
    with pytest.raises(ValueError, match='val_size must be an int >= 32'):
        make_task(val_size=16)


def test_flip_validation_reaches_the_network():
    task = make_task(flip_validation=True)
    net = task.build_net([mx.cpu()])
    assert net.flip_test
    metrics = task.validate(net, [mx.cpu()])
    assert 0 <= metrics['mAP'] <= 1


def test_an_epoch_trains_and_validates(tmp_path):
    """Three epochs of 8 images: the losses fall, each validation gives an mAP, the last
    checkpoint describes the network."""
    task = make_task()
    config = TrainConfig(batch_size=4, num_workers=0, epochs=3, optimizer='adam', lr=2e-3,
                         wd=1e-4, log_interval=1, save_interval=0, val_interval=1, seed=3,
                         save_prefix=str(tmp_path / 'cn'))
    result = fit(task, config)
    assert result.epoch == 3 and 0 <= result.metrics['mAP'] <= 1
    records = [json.loads(line) for line in (tmp_path / 'cn_metrics.jsonl').open()]
    heat = [np.mean([r['losses']['loss_heatmap'] for r in records
                     if r['type'] == 'train' and r['epoch'] == epoch]) for epoch in range(3)]
    assert heat[2] < heat[0] * 0.7, heat
    assert [r['epoch'] for r in records if r['type'] == 'val'] == [0, 1, 2]
    manifest = json.loads((tmp_path / 'cn_last.json').read_text())
    assert manifest['meta']['network'] == NET and manifest['optimizer']['name'] == 'adam'


def test_a_data_shape_must_be_a_square_side():
    with pytest.raises(ValueError, match='data_shape must be an int >= 32'):
        make_task(data_shape=(128, 96))
