"""MXNet's parameter server on loopback, started by ``gluondet launch`` (issue 11)."""
import subprocess
import sys

import pytest

from distributed import (check_two_process_ssd_run, demo_root, driver_command, failure, launch,
                         rank_report, run_spec)
from gluondet import launch as launcher


@pytest.fixture(scope='module')
def demo(tmp_path_factory):
    return demo_root(str(tmp_path_factory.mktemp('demo')))


def _launch(tmp_path, demo, name, spec, **kwargs):
    spec['config'].setdefault('kv_store', 'dist_sync')
    return launch(driver_command(tmp_path, name, spec), tmp_path,
                  env={'GLUONDET_TEST_DEMO': demo}, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize('kind', ['dist_sync', 'dist_device_sync'])
def test_two_workers_end_identical_and_only_one_writes(tmp_path, demo, kind):
    out = tmp_path / 'out'
    spec = run_spec('ssd', out, out / 'ssd', batch_size=8, epochs=1, val_interval=1,
                    kv_store=kind)
    code, log, _ = _launch(tmp_path, demo, 'ssd', spec)
    assert code == 0, failure(log)
    check_two_process_ssd_run(out, demo)


@pytest.mark.slow
def test_a_killed_worker_ends_the_job_at_once(tmp_path, demo):
    spec = run_spec('toy', tmp_path / 'out', tmp_path / 'toy', batch_size=8, epochs=3,
                    hang_timeout=0)
    spec['fault'] = {'rank': 1, 'iteration': 2, 'kind': 'kill'}
    code, log, seconds = _launch(tmp_path, demo, 'kill', spec, timeout=120)
    assert code != 0 and 'exited with signal SIGKILL; ending the job' in log, failure(log)
    assert seconds < 60


@pytest.mark.slow
def test_a_stalled_worker_ends_the_job_within_the_hang_timeout(tmp_path, demo):
    spec = run_spec('toy', tmp_path / 'out', tmp_path / 'toy', batch_size=8, epochs=3,
                    hang_timeout=5)
    spec['fault'] = {'rank': 1, 'iteration': 2, 'kind': 'stall'}
    code, log, seconds = _launch(tmp_path, demo, 'stall', spec, timeout=120)
    assert code == 124, failure(log)
    assert 'of 2 (kvstore) made no progress for 5 s' in log and 'exited with code 124' in log
    assert seconds < 5 + 30, failure(log)


def test_the_plan_on_loopback_and_over_ssh(tmp_path):
    local = launcher.plan(['python', 'train.py'], workers=2, servers=1, port=9000)
    assert [name for name, _, _ in local] == ['scheduler', 'server 0', 'worker 0', 'worker 1']
    roles = {name: env for name, _, env in local}
    assert roles['scheduler']['DMLC_ROLE'] == 'scheduler'
    assert roles['worker 1'] == dict(
        DMLC_ROLE='worker', DMLC_PS_ROOT_URI='127.0.0.1', DMLC_PS_ROOT_PORT='9000',
        DMLC_NUM_SERVER='1', DMLC_NUM_WORKER='2', DMLC_NODE_HOST='127.0.0.1',
        DMLC_INTERFACE='lo', GLUONDET_LOCAL_SIZE='2')
    assert local[1][1] == launcher.SERVER_COMMAND and local[1][1][0] == sys.executable
    hostfile = tmp_path / 'hosts'
    hostfile.write_text('# the cluster\nnode1 slots=4\n\nnode2\n')
    remote = launcher.plan(['python', 'train.py', '--kv-store', 'dist_sync'], workers=2,
                           servers=2, hosts=launcher.read_hostfile(str(hostfile)), port=9000,
                           scheduler_host='10.0.0.1', cwd='/home/me/gluondet')
    names = [name for name, _, _ in remote]
    assert names == ['scheduler', 'server 0 on node1', 'server 1 on node2', 'worker 0 on node1',
                     'worker 1 on node2']
    worker = remote[4][1]
    assert worker[:2] == ['ssh', '-tt'] and worker[-2] == 'node2'
    assert worker[-1].startswith('cd /home/me/gluondet && env DMLC_NODE_HOST=node2 ')
    assert 'DMLC_PS_ROOT_URI=10.0.0.1' in worker[-1] and 'GLUONDET_LOCAL_SIZE=1' in worker[-1]
    assert worker[-1].endswith('python train.py --kv-store dist_sync')


@pytest.mark.parametrize('argv, message', [
    (['-n', '2'], 'no command to run'),
    (['-n', '0', '--', 'python'], 'need at least one worker'),
    (['-n', '2', '-H', 'missing-hosts', '--', 'python'], 'host file missing-hosts: No such file'),
])
def test_launch_mistakes_are_one_line(tmp_path, argv, message):
    out = subprocess.run([sys.executable, '-m', 'gluondet', 'launch'] + argv, cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.strip().count('\n') == 0
    assert message in out.stderr, out.stderr


@pytest.mark.slow
def test_dist_async_trains_checkpoints_and_resumes(tmp_path, demo):
    """The servers update and follow the schedule; the checkpoint has no optimizer states."""
    spec = run_spec('toy', tmp_path / 'a', tmp_path / 'toy', batch_size=8, epochs=1,
                    kv_store='dist_async')
    code, log, _ = _launch(tmp_path, demo, 'first', spec)
    assert code == 0, failure(log)
    spec = run_spec('toy', tmp_path / 'b', tmp_path / 'toy', batch_size=8, epochs=2,
                    kv_store='dist_async', resume='auto')
    code, log, _ = _launch(tmp_path, demo, 'second', spec)
    assert code == 0, failure(log)
    assert 'optimizer states of this run live on the parameter servers' in log
    assert rank_report(tmp_path / 'b', 0)['iteration'] == 2 * rank_report(tmp_path / 'a', 0)[
        'iteration']


def test_the_servers_schedule_counts_every_workers_updates():
    from gluondet.engine import LRSchedule
    from gluondet.engine.distributed import ServerSchedule
    import pickle
    schedule = LRSchedule(0.1, iters_per_epoch=10, epochs=4, decay_epochs=[2])
    server = pickle.loads(pickle.dumps(ServerSchedule(schedule, workers=2)))
    assert server(39) == schedule(19) == 0.1 and server(40) == schedule(20) == 0.1 * 0.1
