"""The command line: python -m gluondet and the gluondet console script."""
import os
import re
import signal
import subprocess
import sys

import pytest

import gluondet

BIN = os.path.dirname(sys.executable)


def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_module_version_and_help():
    out = run(sys.executable, '-m', 'gluondet', '--version')
    assert out.returncode == 0 and out.stdout.strip() == 'gluondet ' + gluondet.__version__
    out = run(sys.executable, '-m', 'gluondet', '--help')
    assert out.returncode == 0 and 'demo' in out.stdout


def test_console_script_is_installed():
    out = run(os.path.join(BIN, 'gluondet'), '--version')
    assert out.returncode == 0 and gluondet.__version__ in out.stdout


def test_unknown_command_is_a_usage_error():
    out = run(sys.executable, '-m', 'gluondet', 'fly')
    assert out.returncode == 2 and 'invalid choice' in out.stderr


def test_help_imports_no_mxnet():
    """Every command's --help is built from light modules (the flags' own: dataset_flags,
    inference_flags); MXNet is imported when a command runs."""
    code = ('import sys\nfrom gluondet import cli\n'
            'for command in [name for name, *_ in cli.COMMANDS]:\n'
            '    try:\n'
            '        cli.main([command, "--help"])\n'
            '    except SystemExit:\n'
            '        pass\n'
            'print(sorted(m for m in ("mxnet", "onnx", "cv2") if m in sys.modules))')
    out = run(sys.executable, '-c', code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == '[]'


def test_a_stopped_demo_names_its_checkpoint_and_no_flag_it_lacks(tmp_path, monkeypatch):
    """``gluondet demo`` has no --resume (nor --lr ...): its stop message offers none."""
    from gluondet import cli, demo
    from gluondet.data import DemoDetection
    from gluondet.engine import HookBase, TrainingInterrupted, fit

    class Stop(HookBase):
        def after_step(self):
            os.kill(os.getpid(), signal.SIGTERM)
    monkeypatch.setattr(demo, 'DemoDetection', lambda split, num, **kw: DemoDetection(
        split, 8, **kw))
    monkeypatch.setattr(demo, 'fit', lambda task, config: fit(task, config, hooks=[Stop()]))
    with pytest.raises(TrainingInterrupted) as stopped:
        cli.main(['demo', '--output', str(tmp_path)])
    last = tmp_path / 'ssd_160_mobilenet0.5_custom_last.json'
    assert last.is_file()
    assert re.fullmatch(r'SIGTERM: stopped at epoch \d+, batch \d+, iteration \d+; checkpoint '
                        r'%s\. This command does not resume: run again, it starts over\.'
                        % re.escape(str(last)), str(stopped.value)), str(stopped.value)
