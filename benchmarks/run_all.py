"""Run every benchmark in this folder in turn, each with its defaults (``make bench``).

Long: the training and ONNX benchmarks take several minutes each on two cores. A
benchmark fails when it exits non-zero: a correctness check failed (parity with the
baseline, the same detections, the same metric values: see ``common.Checks``) or it
crashed. At the end a line per benchmark says passed or failed (with its exit status and
time); the exit status is 1 if any failed. ``onnx_check.py`` (needs a trained model)
and ``trt_check.py`` (needs a GPU) are run by hand, as docs/benchmarks.md says.

    .venv/bin/python benchmarks/run_all.py [name ...]    (e.g. bench_voc_metric)
"""
import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main(names):
    scripts = sorted(glob.glob(os.path.join(HERE, 'bench_*.py')))
    if names:
        unknown = set(names) - {os.path.basename(s)[:-3] for s in scripts}
        if unknown:
            raise SystemExit('no such benchmark: %s' % ', '.join(sorted(unknown)))
        scripts = [s for s in scripts if os.path.basename(s)[:-3] in names]
    results = []
    for script in scripts:
        name = os.path.basename(script)
        print('==> %s' % name, flush=True)
        start = time.perf_counter()
        code = subprocess.run([sys.executable, script]).returncode
        results.append((name, code, time.perf_counter() - start))
    print('==> summary')
    for name, code, seconds in results:
        print('%-24s %s  (%.0f s)' % (name, 'passed' if code == 0
                                      else 'FAILED (exit status %d)' % code, seconds))
    failed = [name for name, code, _ in results if code]
    if failed:
        raise SystemExit('failed: %s' % ', '.join(failed))


if __name__ == '__main__':
    main(sys.argv[1:])
