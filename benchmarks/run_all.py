"""Run every benchmark in this folder in turn, each with its defaults (``make bench``).

Long: the training and ONNX benchmarks take several minutes each on two cores.

    .venv/bin/python benchmarks/run_all.py [name ...]    (e.g. bench_voc_metric)
"""
import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(names):
    scripts = sorted(glob.glob(os.path.join(HERE, 'bench_*.py')))
    if names:
        scripts = [s for s in scripts if os.path.basename(s)[:-3] in names]
    failed = []
    for script in scripts:
        print('==> %s' % os.path.basename(script), flush=True)
        if subprocess.run([sys.executable, script]).returncode:
            failed.append(os.path.basename(script))
    if failed:
        raise SystemExit('failed: %s' % ', '.join(failed))


if __name__ == '__main__':
    main(sys.argv[1:])
