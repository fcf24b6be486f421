"""Engine parts without a training run: config, contexts, LR schedule, sampler, per-sample seeds."""
import ast
import dataclasses
import glob
import math
import os

import mxnet as mx
import numpy as np
import pytest

from gluondet.engine import (EpochBatchSampler, LRSchedule, TrainConfig, TrainData,
                             make_contexts)
from test_engine_toy import ToyTask


def test_engine_imports_nothing_detection_specific():
    import gluondet.engine
    folder = os.path.dirname(gluondet.engine.__file__)
    for path in glob.glob(os.path.join(folder, '*.py')):
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [('.' * node.level) + (node.module or '')]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            # version, files (stdlib-only writing), AMP's float32 marks, plots (the curves
            # picture: numpy and, when drawing, matplotlib), errors (UserError), optional
            # (packages), helper_signals (the loader processes' signals), collectives (the
            # active runtime, which the engine sets)
            for name in names:
                assert (not name.startswith(('..', 'gluondet.'))
                        or name in ('..', '..version', '..files', '..threads', '..float32',
                                    '..plots', '..errors', '..optional', '..helper_signals',
                                    '..collectives')), (
                            path, name)


# -- config ------------------------------------------------------------------------------------

def test_config_unknown_key_suggests_the_close_one():
    with pytest.raises(ValueError, match=r"unknown key 'lr_decay_epochs' in run.json, "
                                         r"did you mean 'lr_decay_epoch'\?"):
        TrainConfig.from_dict({'lr': 0.1, 'lr_decay_epochs': [10]}, source='run.json')
    with pytest.raises(ValueError, match=r"unknown key 'zzz' in config$"):
        TrainConfig.from_dict({'zzz': 1})


def test_config_from_dict_round_trip_and_frozen():
    cfg = TrainConfig.from_dict({'lr_decay_epoch': '160,200', 'batch_size': 8, 'lr': 1})
    assert cfg.lr_decay_epoch == (160, 200) and cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0
    assert dataclasses.replace(cfg, lr=0.1).lr == 0.1 and cfg.lr == 1.0


@pytest.mark.parametrize('values, message', [
    ({'lr_mode': 'linear'}, "lr_mode must be one of"),
    ({'batch_size': 0}, 'batch_size must be >= 1, got 0'),
    ({'batch_size': 4.0}, 'batch_size must be int'),
    ({'hybridize': 1}, 'hybridize must be bool'),
    ({'optimizer': 'sgdd'}, "optimizer must be an MXNet optimizer name, got 'sgdd'"),
    ({'start_epoch': 5, 'epochs': 3}, r'start_epoch <= epochs, got \(5, 3\)'),
    ({'lr_decay_epoch': 'a,b'}, 'comma-separated integers'),
])
def test_config_rejects_bad_values(values, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(values, source='flags')


# -- contexts ----------------------------------------------------------------------------------

def test_contexts_cpu():
    assert make_contexts('') == [mx.cpu(0)]
    assert make_contexts('', cpus=2) == [mx.cpu(0), mx.cpu(1)]


def test_contexts_missing_gpus_name_what_was_asked_and_what_exists():
    found = mx.context.num_gpus()
    with pytest.raises(ValueError) as err:
        make_contexts('%d,%d' % (found, found + 1))
    text = str(err.value)
    assert "--gpus (gpus) %d,%d asks for GPU %d,%d" % (found, found + 1, found, found + 1) in text
    assert ('no GPU' if found == 0 else '%d GPU(s)' % found) in text


@pytest.mark.parametrize('gpus', ['a', '0,0', '-1'])
def test_contexts_malformed(gpus):
    with pytest.raises(ValueError, match='gpus'):
        make_contexts(gpus)


# -- LR schedule -------------------------------------------------------------------------------

def test_step_schedule_with_warmup():
    # 10 steps/epoch, warmup 1.5 epochs from lr/4, decay x0.1 at epochs 3 and 5.
    sched = LRSchedule(0.4, 10, 6, 'step', 0.1, (3, 5), warmup_epochs=1.5, warmup_factor=0.25)
    assert sched(0) == pytest.approx(0.1)
    assert sched(5) == pytest.approx(0.4 * (0.25 + 0.75 * 5 / 15))
    assert sched(14) == pytest.approx(0.4 * (0.25 + 0.75 * 14 / 15))
    assert sched(15) == pytest.approx(0.4)
    assert sched(29) == pytest.approx(0.4)
    assert sched(30) == pytest.approx(0.04)
    assert sched(49) == pytest.approx(0.04)
    assert sched(50) == pytest.approx(0.004)


def test_cosine_schedule_with_warmup():
    sched = LRSchedule(1.0, 10, 5, 'cosine', warmup_epochs=1, warmup_factor=0.0)
    assert sched(0) == 0.0
    assert sched(5) == pytest.approx(0.5)
    assert sched(10) == pytest.approx(1.0)
    assert sched(30) == pytest.approx(0.5)          # halfway through the 40 cosine steps
    assert sched(20) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert sched(50) == pytest.approx(0.0)


def test_schedule_from_config():
    cfg = TrainConfig(lr=0.01, epochs=4, lr_decay_epoch=(2,), lr_decay=0.5)
    sched = LRSchedule.from_config(cfg, iters_per_epoch=3)
    assert [sched(i) for i in (0, 5, 6)] == pytest.approx([0.01, 0.01, 0.005])


# -- sampler and per-sample seeding ------------------------------------------------------------

def _batches(sampler, epoch, start=0):
    sampler.set_epoch(epoch, start)
    return list(sampler)


def test_sampler_is_seeded_by_epoch_and_drops_the_last_partial_batch():
    sampler = EpochBatchSampler(10, 3, seed=7)
    first = _batches(sampler, 0)
    assert len(first) == len(sampler) == 3 and all(len(b) == 3 for b in first)
    assert first == _batches(EpochBatchSampler(10, 3, seed=7), 0)
    assert first != _batches(sampler, 1)
    assert all(10 <= key < 20 for b in _batches(sampler, 1) for key in b)   # keys epoch*10+index
    assert first != _batches(EpochBatchSampler(10, 3, seed=8), 0)


def test_sampler_resumes_inside_an_epoch():
    sampler = EpochBatchSampler(20, 4, seed=1)
    full = _batches(sampler, 3)
    assert _batches(sampler, 3, start=2) == full[2:]
    assert len(sampler) == 3


def test_sampler_shards_together_are_the_one_process_batches():
    shards = [_batches(EpochBatchSampler(11, 2, seed=3, rank=r, world_size=2), 0)
              for r in range(2)]
    assert len(shards[0]) == len(shards[1]) == 2
    assert [a + b for a, b in zip(*shards)] == _batches(EpochBatchSampler(11, 4, seed=3), 0)


def test_sampler_needs_one_full_batch():
    with pytest.raises(ValueError, match='5 samples: not one full batch of 8 .4 per rank over 2'):
        EpochBatchSampler(5, 4, seed=0, world_size=2)


def _epoch_noise(num_workers, epoch):
    """``{sample index: the jitter the toy transform added}`` for one epoch."""
    task = ToyTask(num_train=24)
    data = TrainData(task.train_dataset(), task.train_batchify, 4, num_workers, seed=5)
    data.sampler.set_epoch(epoch)
    keys = [key for batch in data.sampler for key in batch]
    xs = np.concatenate([x.asnumpy() for x, _ in data.epoch(epoch)])
    return {key % 24: x - task.train_x[key % 24] for key, x in zip(keys, xs)}


def test_augmentation_is_identical_with_0_and_2_workers():
    for epoch in (0, 1):
        single, multi = _epoch_noise(0, epoch), _epoch_noise(2, epoch)
        assert sorted(single) == sorted(multi) == list(range(24))
        for index in single:
            np.testing.assert_array_equal(single[index], multi[index])
    # Forked workers do not repeat each other's draws, and each epoch draws anew.
    multi, next_epoch = _epoch_noise(2, 0), _epoch_noise(2, 1)
    assert len({tuple(v.round(6)) for v in multi.values()}) == 24
    assert all(not np.allclose(multi[i], next_epoch[i]) for i in multi)


def test_seeded_dataset_leaves_the_callers_rng_alone():
    task = ToyTask(num_train=8)
    data = TrainData(task.train_dataset(), task.train_batchify, 4, 0, seed=5)
    np.random.seed(123)
    expected = np.random.rand()
    np.random.seed(123)
    list(data.epoch(0))
    assert np.random.rand() == expected


def _sleep_in_grandchild(pid_file):
    """Forks (in a guarded block) a grandchild that sleeps; writes its pid; sleeps."""
    import multiprocessing
    import signal
    from gluondet.engine.signals import guard_children
    with guard_children():
        child = multiprocessing.get_context('fork').Process(target=signal.pause, daemon=False)
        child.start()
    with open(pid_file, 'w') as f:
        f.write(str(child.pid))
    signal.pause()


def _alive(pid):
    """Whether process ``pid`` runs (exists and is not a zombie)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().split(')')[-1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


def test_a_data_loader_process_leaves_signals_to_the_training_process(tmp_path):
    """Processes forked during training (`guard_children`): a SIGTERM from their parent
    (Pool.terminate) ends them, even one not yet scheduled when it is sent; a SIGTERM or
    SIGINT from anyone else (the process group's: timeout, systemd, Slurm, Ctrl-C) is left
    to the training process, which stops after a checkpoint (a worker killed by it held its
    pool's queue lock and the pool waited forever); they die with their parent."""
    import multiprocessing
    import os
    import signal
    import subprocess
    import time
    from gluondet.engine.signals import guard_children
    fork = multiprocessing.get_context('fork')
    children = []
    try:
        with guard_children():
            for _ in range(20):
                children.append(fork.Process(target=signal.pause, daemon=True))
                children[-1].start()
                children[-1].terminate()
                children[-1].join(timeout=30)
                assert children[-1].exitcode == 128 + signal.SIGTERM
            children.append(fork.Process(target=signal.pause, daemon=True))
            children[-1].start()
        time.sleep(0.5)
        for signum in (signal.SIGTERM, signal.SIGINT):   # sent by another process
            subprocess.run(['kill', '-%d' % signum, str(children[-1].pid)], check=True)
        children[-1].join(timeout=2)
        assert children[-1].is_alive()
        children[-1].terminate()
        children[-1].join(timeout=30)
        assert children[-1].exitcode == 128 + signal.SIGTERM
        # outside the block, children are as usual
        children.append(fork.Process(target=signal.pause, daemon=True))
        children[-1].start()
        subprocess.run(['kill', '-TERM', str(children[-1].pid)], check=True)
        children[-1].join(timeout=30)
        assert children[-1].exitcode == -signal.SIGTERM
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
    # a guarded process dies with its parent (SIGKILLed: no cleanup of its own ran)
    pid_file = str(tmp_path / 'grandchild.pid')
    parent = fork.Process(target=_sleep_in_grandchild, args=(pid_file,))
    parent.start()
    deadline = time.time() + 30
    while not os.path.exists(pid_file) and time.time() < deadline:
        time.sleep(0.05)
    grandchild = int(open(pid_file).read())
    assert _alive(grandchild)
    parent.kill()
    parent.join()
    deadline = time.time() + 10
    while _alive(grandchild) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_a_loader_process_logs_on_a_line_of_its_own(capfd):
    """A data loader's process (forked) does not know where the parent's progress bar is:
    its warning (a skipped image) starts a line of its own instead of landing in the bar's."""
    import logging
    import multiprocessing
    import sys
    from gluondet.engine.logging import _TqdmHandler
    handler = _TqdmHandler()
    handler.setFormatter(logging.Formatter('%(message)s'))
    record = logging.LogRecord('gluondet.data', logging.WARNING, __file__, 0,
                               'image 7 unreadable; using the next readable item instead',
                               None, None)
    sys.stderr.write('[Epoch 0]  30%|###       | 3/10')     # a bar's line, not ended
    sys.stderr.flush()
    child = multiprocessing.get_context('fork').Process(target=handler.emit, args=(record,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    err = capfd.readouterr().err
    assert err.endswith('3/10\nimage 7 unreadable; using the next readable item instead\n')
