"""OpenMP threads: gluondet uses every core where MXNet would use half (no SMT)."""
import os
import subprocess
import sys

from gluondet import _compat


def _sysfs(tmp_path, siblings):
    cpu = min(os.sched_getaffinity(0))
    folder = tmp_path / ('cpu%d' % cpu) / 'topology'
    folder.mkdir(parents=True)
    (folder / 'thread_siblings_list').write_text(siblings + '\n')
    return str(tmp_path)


def test_threads_per_core_reads_the_sibling_list(tmp_path):
    assert _compat.cpu_threads_per_core(_sysfs(tmp_path / 'a', '0')) == 1
    assert _compat.cpu_threads_per_core(_sysfs(tmp_path / 'b', '0,64')) == 2
    assert _compat.cpu_threads_per_core(_sysfs(tmp_path / 'c', '0-3')) == 4
    assert _compat.cpu_threads_per_core(str(tmp_path / 'missing')) is None


def test_all_cores_without_smt_and_mxnet_default_otherwise(tmp_path):
    usable = len(os.sched_getaffinity(0))
    assert _compat.default_omp_threads({}, _sysfs(tmp_path / 'a', '0')) == usable
    assert _compat.default_omp_threads({}, _sysfs(tmp_path / 'b', '0,1')) is None
    assert _compat.default_omp_threads({}, str(tmp_path / 'missing')) is None
    assert _compat.default_omp_threads({'OMP_NUM_THREADS': '3'},
                                       _sysfs(tmp_path / 'c', '0')) is None


def test_import_sets_the_pool_before_mxnet_and_respects_the_user():
    code = 'import os, gluondet, mxnet; print(os.environ.get("OMP_NUM_THREADS"))'
    env = {k: v for k, v in os.environ.items() if k != 'OMP_NUM_THREADS'}
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    expected = _compat.default_omp_threads({})
    assert out == (str(expected) if expected else 'None')
    env['OMP_NUM_THREADS'] = '1'
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == '1'
