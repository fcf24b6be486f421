"""Running a training script as a user would: in a subprocess, on a smaller demo set."""
import os
import subprocess
import sys

# Each script's smallest network at a small input: script -> (save name, flags). --backbone,
# not --network: horovodrun would take --network as its --network-interface.
SMALL_NETWORKS = {
    'train_ssd.py': ('ssd_300_mobilenet0.25_custom',
                     ['--backbone', 'mobilenet0.25', '--data-shape', '128', '--batch-size', '4']),
    'train_faster_rcnn.py': ('faster_rcnn_fpn_resnet18_v1b_custom',
                             ['--backbone', 'resnet18_v1b', '--use-fpn', '--image-short', '128',
                              '--image-max-size', '160', '--batch-size', '2']),
    # the syncbn network: --norm-layer syncbn synchronizes BatchNorm under horovodrun
    'train_mask_rcnn.py': ('mask_rcnn_fpn_syncbn_resnet18_v1b_custom',
                           ['--backbone', 'resnet18_v1b', '--norm-layer', 'syncbn',
                            '--image-short', '128', '--image-max-size', '160',
                            '--batch-size', '2']),
    'train_retinanet.py': ('retinanet_resnet18_v1b_custom',
                           ['--backbone', 'resnet18_v1b', '--resize', '128', '--max-size', '160',
                            '--batch-size', '2']),
    # multi-scale from 320 to 608 px (GluonCV's) unless --no-random-shape; 128 validates
    'train_yolo3.py': ('yolo3_mobilenet0.5_custom',
                       ['--backbone', 'mobilenet0.5', '--data-shape', '128', '--batch-size', '4',
                        '--warmup-epochs', '1']),
}


def run(*argv, **kwargs):
    """``python *argv`` in a subprocess, output captured as text."""
    return subprocess.run([sys.executable] + list(argv), capture_output=True, text=True,
                          timeout=900, **kwargs)


def small_demo_command(script, train=8, val=4):
    """``[python, -c, CODE, script]``: runs ``script`` (its arguments follow) with
    ``--dataset demo`` made of ``train`` and ``val`` images (DemoDetection's default size
    patched in that process; the command line is the user's)."""
    code = ('import runpy, sys; import gluondet.data.demo as demo; '
            'demo.DEFAULT_NUM_IMAGES.update(train=%d, val=%d); '
            'sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name="__main__")'
            % (train, val))
    return [sys.executable, '-c', code, script]


def run_on_small_demo(script, argv, cwd, train=8, val=4):
    """`small_demo_command` with ``argv``, in ``cwd`` with its own GLUONDET_HOME."""
    return run(*(small_demo_command(script, train, val)[1:] + list(argv)), cwd=str(cwd),
               env=dict(os.environ, GLUONDET_HOME=os.path.join(str(cwd), 'home')))


def run_cpu_command(script, argv, cwd, name, train=8, val=4):
    """`run_on_small_demo`, checked: it exits 0 and prints ``final: ... mAP=``. Returns its
    stdout and the training log ``{name}_train.log`` it wrote in ``cwd``."""
    out = run_on_small_demo(script, argv, cwd, train, val)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith('final: ') and 'mAP=' in out.stdout
    with open(os.path.join(str(cwd), name + '_train.log')) as f:
        return out.stdout, f.read()
