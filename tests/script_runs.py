"""Running a training script as a user would: in a subprocess, on a smaller demo set."""
import os
import subprocess
import sys


def run(*argv, **kwargs):
    """``python *argv`` in a subprocess, output captured as text."""
    return subprocess.run([sys.executable] + list(argv), capture_output=True, text=True,
                          timeout=900, **kwargs)


def run_on_small_demo(script, argv, cwd, train=8, val=4):
    """``python script *argv`` with ``--dataset demo`` made of ``train`` and ``val`` images
    (DemoDetection's default size is patched in that process; the command line is the
    user's), in ``cwd`` with its own GLUONDET_HOME."""
    code = ('import runpy, sys; import gluondet.data.demo as demo; '
            'demo.DEFAULT_NUM_IMAGES.update(train=%d, val=%d); '
            'sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name="__main__")'
            % (train, val))
    return run('-c', code, script, *argv, cwd=str(cwd),
               env=dict(os.environ, GLUONDET_HOME=os.path.join(str(cwd), 'home')))
