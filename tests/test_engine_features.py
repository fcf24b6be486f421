"""The engine's optional features on the toy tasks: frozen parameters, no weight decay on
biases and BatchNorm, gradient clipping, warmup in iterations, mixup, grouped batches, padded
image batches, and the kill -9 resume check with all of them on."""
import dataclasses
import functools
import os
import signal

import mxnet as mx
import numpy as np
import pytest

from gluondet.data.batchify import Pad, PadImages, Stack, Tuple
from gluondet.data.mixup import MixupDetection
from gluondet.engine import (CheckpointError, GroupedBatchSampler, HookBase, LRSchedule,
                             SampleIndex, TrainConfig, TrainData, fit, read_manifest)
from gluondet.engine.testing import check_resume
from test_engine_toy import ToyImages, ToyImageTask, ToyTask, toy_config

HERE = os.path.dirname(os.path.abspath(__file__))


_config = functools.partial(toy_config, epochs=1, lr_decay_epoch=(6,))


def _values(net):
    """``{structural name: numpy}`` of every parameter (first context)."""
    return {name: p.list_data()[0].asnumpy()
            for name, p in net._collect_params_with_prefix().items()}


class Steps(HookBase):
    """Records each step's learning rate, and the parameters around every step that
    starts with them initialized (ToyTask's are deferred to the first forward)."""

    def __init__(self):
        self.before, self.after, self.lrs = [], [], []
        self._pending = None

    def before_step(self):
        try:
            self._pending = _values(self.loop.net)
        except mx.gluon.parameter.DeferredInitializationError:
            self._pending = None

    def after_step(self):
        self.lrs.append(self.loop.state.lr)
        if self._pending is not None:
            self.before.append(self._pending)
            self.after.append(_values(self.loop.net))


# -- config ------------------------------------------------------------------------------------

@pytest.mark.parametrize('values, message', [
    ({'warmup_iters': 10, 'warmup_epochs': 1}, 'warmup_iters or warmup_epochs, not both'),
    ({'warmup_iters': -1}, 'warmup_iters must be >= 0'),
    ({'clip_gradient': float('inf')}, 'clip_gradient must be finite'),
    ({'no_mixup_epochs': -1}, 'no_mixup_epochs must be >= 0'),
    ({'no_wd': 1}, 'no_wd must be bool'),
])
def test_config_checks_the_feature_fields(values, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(values)


def test_mixup_epochs_leave_out_the_last_no_mixup_epochs():
    assert TrainConfig(epochs=10, mixup=True, no_mixup_epochs=3).mixup_epochs == 7
    assert TrainConfig(epochs=10, mixup=True, no_mixup_epochs=20).mixup_epochs == 0
    assert TrainConfig(epochs=10, no_mixup_epochs=3).mixup_epochs == 0


# -- trainable parameters ----------------------------------------------------------------------

def test_frozen_parameters_do_not_move_have_no_state_and_are_saved(tmp_path):
    cfg = _config(tmp_path, batch_size=4, epochs=2)
    steps = Steps()
    fit(ToyImageTask(), cfg, hooks=[steps])
    net = steps.loop.net
    frozen = [n for n in _values(net) if n.startswith('stem.')]
    assert sorted(frozen) == ['stem.0.bias', 'stem.0.weight', 'stem.1.beta', 'stem.1.gamma',
                              'stem.1.running_mean', 'stem.1.running_var']
    first, last = steps.before[0], steps.after[-1]
    for name in ('stem.0.weight', 'stem.0.bias', 'stem.1.gamma', 'stem.1.beta'):
        np.testing.assert_array_equal(first[name], last[name])
        assert net._collect_params_with_prefix()[name].grad_req == 'null'
    # MXNet 1.9 does not update BatchNorm's running statistics when no input of it needs a
    # gradient (measured imperative and hybridized): a frozen stem keeps them too.
    np.testing.assert_array_equal(first['stem.1.running_mean'], last['stem.1.running_mean'])
    assert all(not np.array_equal(first[n], last[n]) for n in first if n.startswith('head.'))

    manifest = read_manifest(cfg.save_prefix + '_last.json')
    assert sorted(manifest['optimizer']['layout']) == [
        'head.2.bias', 'head.2.weight', 'head.4.bias', 'head.4.weight']
    folder = os.path.dirname(cfg.save_prefix)
    for path in (os.path.join(folder, manifest['params']), cfg.save_prefix + '_best.params'):
        saved = mx.nd.load(path)
        assert sorted(saved) == sorted(last)
        np.testing.assert_array_equal(saved['stem.0.weight'].asnumpy(), first['stem.0.weight'])


def test_resume_with_fewer_trainable_parameters_is_refused(tmp_path):
    class LastLayer(ToyImageTask):
        def train_params(self, net):
            return net.head[4].collect_params()
    cfg = _config(tmp_path, batch_size=4)
    fit(ToyImageTask(), cfg)
    with pytest.raises(CheckpointError, match='this run does not train .*head.2.bias'):
        fit(LastLayer(), dataclasses.replace(cfg, epochs=2, resume='auto'))


def test_train_params_must_be_the_nets_own(tmp_path):
    class Foreign(ToyTask):
        def train_params(self, net):
            return [mx.gluon.Parameter('elsewhere', shape=(1,))]
    with pytest.raises(ValueError, match="parameters that are not the net's: elsewhere"):
        fit(Foreign(), _config(tmp_path))


# -- weight decay ------------------------------------------------------------------------------

@pytest.mark.parametrize('no_wd', [False, True])
def test_no_wd_keeps_biases_gamma_and_beta_from_decaying(tmp_path, no_wd):
    # Zero losses: each step only applies weight decay, w <- w * (1 - lr * wd).
    lr, wd = 0.1, 0.5
    cfg = _config(tmp_path, lr=lr, wd=wd, momentum=0.0, no_wd=no_wd)
    steps = Steps()
    fit(ToyTask(loss_scale=0.0, bias_init=mx.init.Constant(0.5)), cfg, hooks=[steps])
    decayed = {name: bool(np.any(after != before))
               for name, before, after in zip(steps.before[0], steps.before[0].values(),
                                              steps.after[-1].values())
               if not name.endswith(('running_mean', 'running_var'))}
    free = {'body.0.gamma', 'body.0.beta', 'body.1.bias', 'body.3.bias'}
    assert len(decayed) == 6
    for name, changed in decayed.items():
        if name == 'body.0.beta':
            assert not changed          # 0: wd leaves it at 0 either way
        else:
            assert changed == (not no_wd or name not in free), name
    weight = [b['body.1.weight'] for b in steps.before]
    np.testing.assert_allclose(steps.after[-1]['body.1.weight'],
                               weight[0] * (1 - lr * wd) ** len(weight), rtol=1e-5)
    trainer = steps.loop.trainer
    wds = [trainer._optimizer._get_wd(i) for i, p in enumerate(trainer._params)
           if p.grad_req != 'null']
    assert sorted(wds) == ([0.0] * 4 + [wd] * 2 if no_wd else [wd] * 6)


# -- gradient clipping -------------------------------------------------------------------------

@pytest.mark.parametrize('cpus', [1, 2])
def test_clip_gradient_bounds_every_element_of_the_step(tmp_path, cpus):
    lr, clip = 0.001, 0.05

    def largest_step(clip_gradient):
        steps = Steps()
        cfg = _config(tmp_path, lr=lr, wd=0.0, momentum=0.0, cpus=cpus,
                      clip_gradient=clip_gradient)
        fit(ToyTask(loss_scale=100.0), cfg, hooks=[steps])
        trained = [n for n in steps.before[0] if not n.endswith(('running_mean', 'running_var'))]
        for param in steps.loop.trainer._params:     # the trained copies stay equal
            data = param.list_data()
            assert param.grad_req == 'null' or all(
                np.array_equal(d.asnumpy(), data[0].asnumpy()) for d in data)
        return max(float(np.abs(a[n] - b[n]).max())
                   for b, a in zip(steps.before, steps.after) for n in trained)

    assert largest_step(-1.0) > 10 * lr * clip
    assert lr * clip * 0.5 < largest_step(clip) <= lr * clip + 1e-6    # float32 rounding


# -- warmup ------------------------------------------------------------------------------------

def test_warmup_in_iterations_as_gluoncv_faster_rcnn():
    # GluonCV: lr = base * (factor * (1 - a) + a), a = i / lr_warmup; here across epochs too.
    sched = LRSchedule(0.1, 4, 3, 'step', 0.1, (2,), warmup_factor=0.2, warmup_iters=6)
    expected = [0.1 * (0.2 * (1 - i / 6) + i / 6) for i in range(6)] + [0.1, 0.1, 0.01]
    assert [sched(i) for i in (*range(6), 6, 7, 8)] == pytest.approx(expected)


def test_fit_warms_up_by_iteration(tmp_path):
    cfg = _config(tmp_path, epochs=2, lr=0.01, warmup_iters=12, warmup_factor=0.25)
    steps = Steps()
    fit(ToyTask(), cfg, hooks=[steps])
    assert steps.lrs == pytest.approx([0.01 * (0.25 + 0.75 * i / 12) if i < 12 else 0.01
                                       for i in range(16)])


# -- mixup -------------------------------------------------------------------------------------

def test_mixup_blends_two_images_on_the_larger_canvas_with_weighted_labels():
    images = ToyImages(6, seed=3)
    mixed = MixupDetection(images, ratio=0.3)
    np.random.seed(0)
    other = np.random.randint(5)
    other += other >= 2
    np.random.seed(0)
    image, label = mixed[SampleIndex(2, epoch=0, mixup=True)]
    (a, la), (b, lb) = images[2], images[other]
    a, b = a.asnumpy().astype('float32'), b.asnumpy().astype('float32')
    h, w = max(a.shape[0], b.shape[0]), max(a.shape[1], b.shape[1])
    expected = np.zeros((h, w, 3), 'float32')
    expected[:a.shape[0], :a.shape[1]] = a * 0.3
    expected[:b.shape[0], :b.shape[1]] += b * 0.7
    assert image.dtype == np.uint8 and image.shape == (h, w, 3)
    np.testing.assert_array_equal(image.asnumpy(), expected.astype('uint8'))
    np.testing.assert_array_equal(label[:, :6], np.vstack([la, lb]))
    np.testing.assert_allclose(label[:, 6], [0.3] * len(la) + [0.7] * len(lb))

    for index in (SampleIndex(2, epoch=5, mixup=False), 2):      # off, and a plain int
        image, label = mixed[index]
        np.testing.assert_array_equal(image.asnumpy(), images[2][0].asnumpy())
        np.testing.assert_array_equal(label, np.hstack([images[2][1], np.ones((len(la), 1))]))


def test_sample_index_is_an_int_that_keeps_its_epoch_through_pickle():
    import pickle
    index = pickle.loads(pickle.dumps(SampleIndex(3, epoch=2, mixup=True)))
    assert index == 3 and (index.epoch, index.mixup) == (2, True)
    assert type(index + 1) is int and np.arange(5)[index] == 3


def test_mixup_ratio_is_drawn_from_beta_1_5():
    mixed = MixupDetection(ToyImages(4, seed=3))
    np.random.seed(1)
    ratios = [mixed[SampleIndex(0, 0, True)][1][0, 6] for _ in range(400)]
    assert 0 < min(ratios) and max(ratios) < 1 and abs(np.mean(ratios) - 0.5) < 0.03
    assert abs(np.std(ratios) - 0.25) < 0.03        # Beta(1.5, 1.5): std 1/4
    with pytest.raises(ValueError, match='mixup ratio'):
        MixupDetection(ToyImages(4, seed=3), ratio=1.5)


def _epoch_items(task, num_workers, epoch, mixup_epochs):
    data = TrainData(task.train_dataset(), task.train_batchify, 4, num_workers, seed=5,
                     sampler=task.train_batch_sampler(48, 4, 5, 0, 1),
                     mixup_epochs=mixup_epochs)
    return [tuple(x.asnumpy() for x in batch) for batch in data.epoch(epoch)]


def test_mixup_batches_are_identical_with_0_and_2_workers_and_stop_after_mixup_epochs():
    task = ToyImageTask()
    for epoch in (0, 1):
        single, multi = _epoch_items(task, 0, epoch, 1), _epoch_items(task, 2, epoch, 1)
        assert len(single) == len(multi) == 12
        for a, b in zip(single, multi):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
        weights = np.concatenate([labels[:, :, 6][labels[:, :, 4] >= 0] for _, _, labels in
                                  single])
        assert (weights < 1).any() if epoch == 0 else (weights == 1).all()


def test_fit_refuses_mixup_for_a_task_without_it(tmp_path):
    with pytest.raises(ValueError, match='ToyTask does not support mixup'):
        fit(ToyTask(), _config(tmp_path, mixup=True))


def test_ssd_trains_on_seven_column_mixup_labels():
    from gluondet.data import DemoDetection
    from gluondet.tasks.ssd import SSDTask, SSDTrainTransform
    train = DemoDetection(split='train', num_images=4, image_size=128)
    task = SSDTask('ssd_300_mobilenet0.25_custom', train, train, 128, pretrained_base=False)
    net = task.build_net([mx.cpu()])
    dataset = MixupDetection(train).transform(SSDTrainTransform(128, 128))
    items = [dataset[SampleIndex(i, 0, True)] for i in range(4)]
    images, labels = task.train_batchify(items)
    assert labels.shape[2] == 7 and (labels[:, :, 6].asnumpy() < 1).any()
    with mx.autograd.record():
        losses = task.losses(net, [(images, labels)])
    assert all(np.isfinite(t.asnumpy()).all() for terms in losses.values() for t in terms)


# -- grouped batches ---------------------------------------------------------------------------

GROUPS = [0] * 13 + [1] * 9 + [2] * 5          # 6 + 4 + 2 = 12 batches of 2


def _batches(sampler, epoch, start=0):
    sampler.set_epoch(epoch, start)
    return list(sampler)


def test_grouped_batches_hold_one_group_each_and_are_seeded_by_epoch():
    sampler = GroupedBatchSampler(GROUPS, 2, seed=4)
    first = _batches(sampler, 0)
    assert len(first) == len(sampler) == sampler.batches_per_epoch == 12
    assert all(len({GROUPS[k % 27] for k in batch}) == 1 for batch in first)
    assert len({k for b in first for k in b}) == 24
    assert first == _batches(GroupedBatchSampler(GROUPS, 2, seed=4), 0)
    second = _batches(sampler, 1)
    assert all(27 <= k < 54 for b in second for k in b) and second != [
        [k + 27 for k in b] for b in first]
    # Groups come mixed in the epoch's order, not one after the other.
    assert [GROUPS[b[0] % 27] for b in first] != sorted(GROUPS[b[0] % 27] for b in first)


def test_grouped_batches_resume_inside_an_epoch():
    sampler = GroupedBatchSampler(GROUPS, 2, seed=4)
    full = _batches(sampler, 3)
    resumed = GroupedBatchSampler(GROUPS, 2, seed=4)
    assert _batches(resumed, 3, start=5) == full[5:]
    assert len(resumed) == 7


def test_grouped_shards_together_are_the_one_process_batches():
    whole = _batches(GroupedBatchSampler(GROUPS, 4, seed=4), 2)
    shards = [_batches(GroupedBatchSampler(GROUPS, 2, seed=4, rank=r, world_size=2), 2)
              for r in range(2)]
    assert [len(s) for s in shards] == [len(whole)] * 2
    assert [a + b for a, b in zip(*shards)] == whole


def test_grouped_sampler_needs_a_full_batch_per_rank():
    with pytest.raises(ValueError, match=r"groups of \{0: 3, 1: 3\}: not one full batch of 6 "
                                         r"\(2 per rank over 3"):
        GroupedBatchSampler([0, 0, 0, 1, 1, 1], 2, seed=0, world_size=3)


def test_fit_uses_the_tasks_batch_sampler(tmp_path):
    task = ToyImageTask()
    seen = []

    class Record(HookBase):
        def after_step(self):
            seen.append(self.loop.state.losses)
    hook = Record()
    original = task.losses

    def losses(net, parts):
        for _, sizes, _ in parts:
            sizes = sizes.asnumpy()
            assert len(set(sizes[:, 1] > sizes[:, 0])) == 1      # one orientation per batch
        return original(net, parts)
    task.losses = losses
    fit(task, _config(tmp_path, batch_size=4), hooks=[hook])
    assert isinstance(hook.loop.data.sampler, GroupedBatchSampler) and len(seen) == 12


# -- padded image batches ----------------------------------------------------------------------

def test_pad_images_rounds_up_and_records_the_real_sizes():
    a = np.ones((3, 5, 9), 'float32')
    b = np.full((3, 7, 4), 2, 'float32')
    images, sizes, labels = Tuple(PadImages(multiple=4), Pad(pad_val=-1))(
        [(a, np.zeros((1, 6))), (b, np.zeros((2, 6)))])
    assert images.shape == (2, 3, 8, 12) and labels.shape == (2, 2, 6)
    np.testing.assert_array_equal(sizes.asnumpy(), [[5, 9], [7, 4]])
    out = images.asnumpy()
    np.testing.assert_array_equal(out[0, :, :5, :9], a)
    np.testing.assert_array_equal(out[1, :, :7, :4], b)
    assert out[0, :, 5:].sum() == out[0, :, :, 9:].sum() == out[1, :, :, 4:].sum() == 0
    assert PadImages()([a, b])[0].shape == (2, 3, 7, 9)
    assert Tuple(Stack(), Stack())([(a, 1), (a, 2)])[1].shape == (2,)
    with pytest.raises(ValueError, match='C x H x W'):
        PadImages()([a, np.ones((1, 5, 5))])


# -- all together, killed and resumed ----------------------------------------------------------

def test_kill_9_resume_with_every_feature_equals_the_straight_run(tmp_path):
    # 48 images, 32 landscape and 16 portrait, batches of 4 of one orientation: 12 steps per
    # epoch. Mixup in epochs 0-1 (not 2); warmup over 15 steps crosses into epoch 1, where
    # the child is killed at step 18 after the checkpoint at step 15.
    config = TrainConfig(batch_size=4, num_workers=0, epochs=3, lr=0.02, lr_decay_epoch=(2,),
                         warmup_iters=15, no_wd=True, clip_gradient=0.1, mixup=True,
                         no_mixup_epochs=1, log_interval=4, save_interval=0,
                         checkpoint_interval=5, seed=7)
    report = check_resume('test_engine_toy:make_image_task', config, str(tmp_path),
                          kill_signal=signal.SIGKILL, pythonpath=[HERE])
    assert (report['paused_at'], report['resumed_from']) == (18, 15)
    assert report['params_diff'] <= 1e-6 and report['states_diff'] <= 1e-6
    straight = read_manifest(str(tmp_path / 'straight' / 'run_last.json'))
    assert straight['iteration'] == 36 and straight['config']['mixup'] is True


def test_each_feature_changes_the_run(tmp_path):
    base = _config(tmp_path, batch_size=4, epochs=1, lr=0.02, seed=7)
    final = {}
    for name, change in [('plain', {}), ('clip', {'clip_gradient': 0.01}),
                         ('warmup', {'warmup_iters': 8}),
                         ('mixup', {'mixup': True, 'no_mixup_epochs': 0})]:
        cfg = dataclasses.replace(base, save_prefix=str(tmp_path / name / 'run'), **change)
        final[name] = _values(fit(ToyImageTask(), cfg).net)['head.4.bias']
    for name in ('clip', 'warmup', 'mixup'):
        assert not np.array_equal(final[name], final['plain']), name
