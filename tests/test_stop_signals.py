"""A stop that stops (issue 23): SIGTERM or SIGINT to a training script's whole process
group, as ``timeout``, systemd, Slurm's scancel and a terminal's Ctrl-C send it, ends the run
within seconds after a checkpoint, with exit status 128 + the signal, whatever the moment
and however many data-loader processes; ``--resume auto`` then continues."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from distributed import HOROVODRUN, need_horovod
from script_runs import SMALL_NETWORKS, small_demo_command

pytestmark = pytest.mark.slow

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'scripts')
TRAIN, VAL, BATCH = 64, 160, 8      # 8 steps an epoch; a validation of some seconds
STEPS = TRAIN // BATCH
STOP_WITHIN = 20.0                  # seconds from the signal to the exit, on a busy machine
HOROVOD = [HOROVODRUN, '--gloo', '-np', '2', '-H', 'localhost:2']


@pytest.fixture(scope='module')
def home(tmp_path_factory):
    """One GLUONDET_HOME for the module: the demo images are drawn once."""
    return str(tmp_path_factory.mktemp('home'))


class Run:
    """A training script started in a process group of its own, as a scheduler starts it;
    ``launcher`` goes before the command (horovodrun, gluondet launch)."""

    def __init__(self, folder, home, argv, launcher=(), script='train_ssd.py'):
        name, small = SMALL_NETWORKS[script]
        self.folder, self.prefix = folder, os.path.join(folder, name)
        os.makedirs(folder, exist_ok=True)
        self.log = open(os.path.join(folder, 'out.txt'), 'a')
        command = list(launcher) + small_demo_command(
            os.path.join(SCRIPTS, script), TRAIN, VAL) + small + [
            '--dataset', 'demo', '--no-pretrained-base', '--epochs', '3', '--lr', '0.01',
            '--log-interval', '1', '--val-interval', '1', '--save-interval', '0',
            '--seed', '3', '--batch-size', str(BATCH), '--save-prefix', folder + '/'] + argv
        self.proc = subprocess.Popen(command, cwd=folder, stdout=self.log, stderr=self.log,
                                     start_new_session=True,
                                     env=dict(os.environ, GLUONDET_HOME=home))

    def records(self):
        """The run's metrics.jsonl records so far."""
        path = self.prefix + '_metrics.jsonl'
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith('\n')]

    def checkpoint(self):
        """The checkpoint manifest, or None."""
        try:
            with open(self.prefix + '_last.json') as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def wait_for(self, condition, timeout=300):
        deadline = time.time() + timeout
        while not condition():
            assert self.proc.poll() is None, 'the run ended early:\n' + self.output()
            assert time.time() < deadline, 'the moment never came:\n' + self.output()
            time.sleep(0.02)

    def signal_group(self, signum, every_process=False):
        """Signal the whole process group (``every_process``: each process the run started,
        whatever its group, as systemd and Slurm do); the seconds until the command exits,
        and its exit status."""
        sent = time.time()
        if every_process:
            for pid in [self.proc.pid] + _descendants(self.proc.pid):
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
        else:
            os.killpg(self.proc.pid, signum)
        try:
            code = self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        return time.time() - sent, code

    def group_is_gone(self, timeout=10, pids=()):
        """Whether the run's process group and ``pids`` end within ``timeout`` seconds."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                if not [pid for pid in pids if _alive(pid)]:
                    return True
            time.sleep(0.05)
        return False

    def output(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-4000:]


def _descendants(pid):
    """The processes started by ``pid``, their children and so on (from /proc)."""
    children = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open('/proc/%s/stat' % entry) as f:
                    parent = int(f.read().rsplit(')', 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def _train_records(run):
    return [r for r in run.records() if r['type'] == 'train']


def _validations(run):
    return [r for r in run.records() if r['type'] == 'val']


def _first_batch(run):
    return 'Start training from' in run.output()


def _mid_epoch(run):
    return any(r['batch'] >= STEPS // 2 for r in _train_records(run))


def _epoch_end(run):
    return any(r['batch'] == STEPS - 1 for r in _train_records(run))


def _in_validation(run):
    manifest = run.checkpoint()
    return manifest is not None and manifest['iteration'] == STEPS


MOMENTS = {'first batch': (_first_batch, 1), 'mid-epoch': (_mid_epoch, STEPS // 2 + 1),
           'epoch end': (_epoch_end, STEPS), 'validation': (_in_validation, STEPS)}


def _stop_at(moment, tmp_path, home, signum=signal.SIGTERM, workers=2, script='train_ssd.py'):
    condition, least_iteration = MOMENTS[moment]
    run = Run(str(tmp_path / 'run'), home, ['-j', str(workers)], script=script)
    run.wait_for(lambda: condition(run))
    seconds, code = run.signal_group(signum)
    text = run.output()
    assert code == 128 + signum, text
    assert seconds < STOP_WITHIN, (seconds, text)
    assert 'Traceback' not in text, text
    assert run.group_is_gone(), 'processes of the run outlived it'
    manifest = run.checkpoint()
    assert manifest is not None and manifest['iteration'] >= least_iteration, text
    assert '%s: stopped at epoch' % signal.Signals(signum).name in text
    return run, manifest


@pytest.mark.parametrize('moment', ['first batch', 'mid-epoch', 'epoch end'])
def test_sigterm_to_the_group_stops_after_a_checkpoint(moment, tmp_path, home):
    _stop_at(moment, tmp_path, home)


def test_sigterm_during_validation_abandons_it_and_the_resumed_run_validates_first(tmp_path,
                                                                                 home):
    run, manifest = _stop_at('validation', tmp_path, home)
    assert manifest['iteration'] == STEPS and not _validations(run), run.output()
    resumed = Run(run.folder, home, ['-j', '2', '--resume', 'auto'])
    assert resumed.proc.wait(timeout=600) == 0, resumed.output()
    validated = [r['epoch'] for r in _validations(resumed)]
    assert validated == [0, 1, 2], (validated, resumed.output())


def test_ctrl_c_to_the_group_mid_epoch_with_workers_in_the_loop(tmp_path, home):
    run, manifest = _stop_at('mid-epoch', tmp_path, home, signal.SIGINT, workers=3)
    resumed = Run(run.folder, home, ['-j', '3', '--resume', 'auto'])
    assert resumed.proc.wait(timeout=600) == 0, resumed.output()
    assert 'final: ' in resumed.output()


def test_mask_rcnn_sigterm_to_the_group_mid_epoch_and_resume(tmp_path, home):
    """Mask R-CNN's batches (masks padded beside the images) through loader processes: the
    stop, and the resumed run to its end."""
    run, _ = _stop_at('mid-epoch', tmp_path, home, script='train_mask_rcnn.py')
    resumed = Run(run.folder, home, ['-j', '2', '--resume', 'auto', '--epochs', '2',
                                     '--val-interval', '2'],
                  script='train_mask_rcnn.py')
    assert resumed.proc.wait(timeout=600) == 0, resumed.output()
    assert 'mask_AP=' in resumed.output()


def test_sigterm_without_loader_processes(tmp_path, home):
    _stop_at('mid-epoch', tmp_path, home, workers=0)


def test_dali_sigterm_to_the_group(tmp_path, home):
    pytest.importorskip('nvidia.dali')
    run = Run(str(tmp_path / 'run'), home, ['-j', '2', '--dali'])
    run.wait_for(lambda: _mid_epoch(run))
    seconds, code = run.signal_group(signal.SIGTERM)
    assert code == 128 + signal.SIGTERM and seconds < STOP_WITHIN, (seconds, run.output())
    assert run.group_is_gone() and run.checkpoint()['iteration'] >= STEPS // 2


def _stop_a_job(tmp_path, home, launcher, argv, every_process):
    """Start ``launcher`` + the script with ``argv`` (2 processes), stop it mid-epoch with
    SIGTERM; returns the run and the exit status of the launcher."""
    run = Run(str(tmp_path / 'run'), home, ['-j', '0'] + argv, launcher)
    run.wait_for(lambda: _mid_epoch(run))
    before = max(r['iteration'] for r in _train_records(run))
    job = _descendants(run.proc.pid)
    seconds, code = run.signal_group(signal.SIGTERM, every_process)
    text = run.output()
    assert seconds < STOP_WITHIN, (seconds, text)
    # no process's traceback; horovodrun's own aside (see below), its ranks' are prefixed
    assert not re.search(r'^(\[\d\]<stderr>:)?Traceback', text, re.M) or (
        'Horovod detected that one or more processes exited' in text
        and not re.search(r'^\[\d\]<stderr>:Traceback', text, re.M)), text
    assert run.group_is_gone(pids=job), 'processes of the job outlived it'
    assert run.checkpoint()['iteration'] >= before and 'SIGTERM: stopped at epoch' in text, text
    return run, code


@pytest.mark.parametrize('every_process', [False, True], ids=['group', 'every process'])
def test_horovod_ranks_stop_after_a_checkpoint(tmp_path, home, every_process):
    """horovodrun starts its ranks in sessions of their own: a group's SIGTERM reaches it,
    and it passes the signal on; systemd and Slurm signal every process. horovodrun then
    reports the ranks' status 143 with a traceback of its own and exits 1, or 0: a rank's
    status is lost when Horovod's middleman, terminating the rank's shell, reaps it with
    psutil before its subprocess.wait does, which then reads 0 (Horovod 0.28.1's
    safe_shell_exec; docs/resuming.md says so)."""
    need_horovod()
    run, code = _stop_a_job(tmp_path, home, HOROVOD, ['--horovod'], every_process)
    assert code in (0, 1), run.output()
    if not every_process:
        return
    resumed = Run(run.folder, home, ['-j', '2', '--horovod', '--resume', 'auto'], HOROVOD)
    assert resumed.proc.wait(timeout=600) == 0, resumed.output()
    assert [r['epoch'] for r in _validations(resumed)][-1] == 2


@pytest.mark.parametrize('every_process', [False, True], ids=['group', 'every process'])
def test_parameter_server_workers_stop_after_a_checkpoint(tmp_path, home, every_process):
    """gluondet launch passes a signal on to the workers; the scheduler and the server,
    signalled too by systemd or Slurm, stay until the workers' last step is done."""
    run, code = _stop_a_job(tmp_path, home, [sys.executable, '-m', 'gluondet', 'launch', '-n',
                                             '2', '-s', '1', '--'], ['--kv-store', 'dist_sync'],
                            every_process)
    assert code == 128 + signal.SIGTERM, run.output()
