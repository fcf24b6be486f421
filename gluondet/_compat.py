"""Settings that must precede ``import mxnet``: numpy aliases and OpenMP threads.

numpy 1.24 removed ``np.bool``; mxnet 1.9.1 reads it when it is imported
(mxnet#21165). The pinned numpy (1.23.5) still has it, so this only matters
when a user runs a newer 1.x.

MXNet sizes its OpenMP pool to half the CPUs on x86, assuming two hyperthreads
per core. On a machine without SMT (cores, not hyperthreads) that leaves half
the cores idle, so the pool is set to the usable CPUs instead. An
``OMP_NUM_THREADS`` set by the user always wins, and nothing changes once
mxnet is imported.
"""
import os
import sys

import numpy as np

if 'bool' not in np.__dict__:
    np.bool = bool

SYSFS_CPU = '/sys/devices/system/cpu'


def cpu_threads_per_core(sysfs=SYSFS_CPU):
    """Hardware threads per core of the first usable CPU (1 without SMT), None if unknown."""
    cpu = min(os.sched_getaffinity(0))
    path = os.path.join(sysfs, 'cpu%d' % cpu, 'topology', 'thread_siblings_list')
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    count = 0
    for part in text.split(','):
        first, _, last = part.partition('-')
        count += int(last or first) - int(first) + 1
    return count


def default_omp_threads(environ=os.environ, sysfs=SYSFS_CPU):
    """The OpenMP pool gluondet asks for, or None to leave MXNet's default."""
    if 'OMP_NUM_THREADS' in environ or cpu_threads_per_core(sysfs) != 1:
        return None
    return len(os.sched_getaffinity(0))


if 'mxnet' not in sys.modules:
    _threads = default_omp_threads()
    if _threads:
        os.environ['OMP_NUM_THREADS'] = str(_threads)
