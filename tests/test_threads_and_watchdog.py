"""OpenMP threads on every physical core (gluondet.threads), and the hang watchdog."""
import json
import os
import subprocess
import sys
import time

import pytest

from gluondet import threads
from gluondet.engine import TrainConfig, Watchdog
from gluondet.engine.testing import train
from gluondet.engine.watchdog import EXIT_CODE, beat


def _omp_in_fresh_process(**env):
    clean = {k: v for k, v in os.environ.items()
             if k not in ('OMP_NUM_THREADS', 'MXNET_OMP_MAX_THREADS', 'GLUONDET_LOCAL_SIZE',
                          'GLUONDET_OMP_NUM_THREADS')}
    clean.pop('OMP_WAIT_POLICY', None)
    code = ('import gluondet, os, mxnet; '
            'print(os.environ.get("OMP_NUM_THREADS"), os.environ.get("OMP_WAIT_POLICY"))')
    out = subprocess.run([sys.executable, '-c', code], env=dict(clean, **env),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_gluondet_gives_mxnet_every_physical_core_shared_among_local_ranks():
    cores = threads.physical_cores()
    assert 1 <= cores <= len(os.sched_getaffinity(0))
    spin = lambda n: '%d %s' % (n, 'ACTIVE' if n > 1 else None)      # noqa: E731
    assert _omp_in_fresh_process() == spin(cores)
    assert _omp_in_fresh_process(HOROVOD_LOCAL_SIZE='2') == spin(max(1, cores // 2))
    assert _omp_in_fresh_process(GLUONDET_LOCAL_SIZE='64') == spin(1)
    assert _omp_in_fresh_process(OMP_NUM_THREADS='3') == '3 None'     # a user's choice stays
    assert _omp_in_fresh_process(OMP_WAIT_POLICY='PASSIVE') == '%d PASSIVE' % cores
    # a rank started by a process that imported gluondet takes its own share
    assert _omp_in_fresh_process(OMP_NUM_THREADS=str(cores), GLUONDET_OMP_NUM_THREADS=str(cores),
                                 HOROVOD_LOCAL_SIZE='2') == spin(max(1, cores // 2))


def test_mxnet_threads_follows_mxnets_rules(monkeypatch):
    monkeypatch.delenv('MXNET_OMP_MAX_THREADS', raising=False)
    monkeypatch.setenv('OMP_NUM_THREADS', '5')
    assert threads.mxnet_threads() == 5
    monkeypatch.setenv('MXNET_OMP_MAX_THREADS', '7')
    assert threads.mxnet_threads() == 7
    monkeypatch.delenv('MXNET_OMP_MAX_THREADS')
    monkeypatch.delenv('OMP_NUM_THREADS')
    assert threads.mxnet_threads() == max(1, len(os.sched_getaffinity(0)) // 2)   # x86


def test_checkpoints_record_the_thread_count_and_a_resume_with_another_warns(tmp_path,
                                                                             monkeypatch, capfd):
    config = TrainConfig(batch_size=8, num_workers=0, epochs=1, lr=0.01, lr_decay_epoch=(),
                         save_prefix=str(tmp_path / 'run'), save_interval=0, val_interval=0,
                         seed=1)
    monkeypatch.setenv('OMP_NUM_THREADS', '1')   # what this process's MXNet does not read again
    train('test_engine_toy:make_task', config)
    with open(str(tmp_path / 'run_last.json')) as f:
        assert json.load(f)['threads'] == 1
    monkeypatch.setenv('OMP_NUM_THREADS', '4')
    capfd.readouterr()
    train('test_engine_toy:make_task', TrainConfig(**dict(config.to_dict(), epochs=2,
                                                            resume='auto')))
    assert 'written with 1 OpenMP thread(s), with 4' in capfd.readouterr().err


def test_the_watchdog_ends_a_process_without_progress_and_says_where(capsys):
    codes = []
    dog = Watchdog(0.5, 'rank 1 of 2 (horovod)', exit=codes.append)
    dog.before_train()
    try:
        for _ in range(10):       # beats keep it quiet
            beat('working')
            time.sleep(0.1)
        assert codes == []
        beat('epoch 3, iteration 7: the step')
        deadline = time.time() + 5
        while not codes and time.time() < deadline:
            time.sleep(0.05)
    finally:
        dog.after_train()
    assert codes == [EXIT_CODE]
    err = capsys.readouterr().err
    assert 'rank 1 of 2 (horovod) made no progress for 1 s (--hang-timeout 0.5)' in err
    assert 'while in: epoch 3, iteration 7: the step' in err
    beat('after the watchdog stopped: a no-op')


def test_one_process_has_no_watchdog(tmp_path):
    config = TrainConfig(batch_size=8, num_workers=0, epochs=1, lr=0.01, lr_decay_epoch=(),
                         save_prefix=str(tmp_path / 'run'), save_interval=0, val_interval=0,
                         hang_timeout=0.001)
    train('test_engine_toy:make_task', config)      # would have ended the process


@pytest.mark.parametrize('values, message', [
    (dict(kv_store='dist'), 'kv_store must be one of'),
    (dict(horovod=True, kv_store='dist_sync'), 'choose one'),
    (dict(hang_timeout=-1), 'hang_timeout must be >= 0'),
])
def test_config_refuses_bad_distributed_settings(values, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(values)
