"""How many OpenMP threads MXNet computes with.

MXNet 1.9 sizes its OpenMP pool to half the CPUs it may run on (on x86 it assumes two
hyperthreads per core), so on a machine without SMT it leaves one core in two idle. Unless
``OMP_NUM_THREADS`` (or ``MXNET_OMP_MAX_THREADS``) is set, importing gluondet before MXNet
sets ``OMP_NUM_THREADS`` to this machine's physical cores shared among the training
processes started on it (``horovodrun``'s and ``gluondet launch``'s local size), with
``OMP_WAIT_POLICY=ACTIVE`` (`configure`). MXNet reads
it once, when it is imported: a program that imports mxnet before gluondet keeps MXNet's
default. Checkpoints record the count (`mxnet_threads`): MKLDNN rounds differently with
another one, so only a run resumed with the same count repeats bit for bit.
"""
import os
import platform
import sys

# Environment variables holding the number of training processes on this machine.
LOCAL_SIZE_VARIABLES = ('GLUONDET_LOCAL_SIZE', 'HOROVOD_LOCAL_SIZE', 'OMPI_COMM_WORLD_LOCAL_SIZE')


# What `configure` set OMP_NUM_THREADS to: a process it starts (horovodrun's ranks, gluondet
# launch's workers) inherits the variable and must still take its own share.
_SET_BY_GLUONDET = 'GLUONDET_OMP_NUM_THREADS'


def _cpus():
    return sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else list(
        range(os.cpu_count() or 1))


def physical_cores():
    """The physical cores among the CPUs this process may run on (hyperthreads counted once)."""
    cpus, cores = _cpus(), set()
    for cpu in cpus:
        topology = '/sys/devices/system/cpu/cpu%d/topology/' % cpu
        try:
            with open(topology + 'physical_package_id') as f, open(topology + 'core_id') as g:
                cores.add((f.read().strip(), g.read().strip()))
        except OSError:
            return len(cpus)
    return len(cores)


def local_processes():
    """The training processes started on this machine (1 unless a launcher says more)."""
    for name in LOCAL_SIZE_VARIABLES:
        try:
            return max(1, int(os.environ[name]))
        except (KeyError, ValueError):
            continue
    return 1


def default_threads():
    """Every physical core, shared among this machine's training processes (at least 1)."""
    return max(1, physical_cores() // local_processes())


def configure():
    """Set ``OMP_NUM_THREADS`` to `default_threads` if nothing chose a count and MXNet is
    not imported yet (called by ``import gluondet``), and then, unless set,
    ``OMP_WAIT_POLICY=ACTIVE``: between MXNet's many small operators the threads wait
    spinning instead of sleeping (GNU OpenMP's default sleeps soon; measured here with two
    threads, an epoch of the SSD demo took 11.5 s with it, 8.1 s spinning, 10.0 s with one
    thread)."""
    chosen = os.environ.get('OMP_NUM_THREADS')
    if ('mxnet' in sys.modules or 'MXNET_OMP_MAX_THREADS' in os.environ
            or chosen not in (None, os.environ.get(_SET_BY_GLUONDET))):
        return      # a count chosen by someone else than a parent's configure()
    threads = default_threads()
    os.environ['OMP_NUM_THREADS'] = os.environ[_SET_BY_GLUONDET] = str(threads)
    if threads > 1:
        os.environ.setdefault('OMP_WAIT_POLICY', 'ACTIVE')


def mxnet_threads():
    """The OpenMP threads MXNet uses in this process, from what it read at import: as
    MXNet 1.9 decides, ``MXNET_OMP_MAX_THREADS``, else ``OMP_NUM_THREADS``, else half the
    CPUs on x86 (all elsewhere)."""
    for name in ('MXNET_OMP_MAX_THREADS', 'OMP_NUM_THREADS'):
        try:
            return max(1, int(os.environ[name].split(',')[0]))
        except (KeyError, ValueError):
            continue
    cpus = len(_cpus())
    x86 = platform.machine().lower() in ('x86_64', 'amd64', 'i386', 'i686')
    return max(1, cpus // 2 if x86 else cpus)


def request_mxnet_threads(count):
    """Make MXNet compute with ``count`` OpenMP threads, if it is not imported yet (it reads
    the count once, at import): sets ``OMP_NUM_THREADS`` (and ``MXNET_OMP_MAX_THREADS`` if
    set, which MXNet reads first) and, above one thread, ``OMP_WAIT_POLICY=ACTIVE`` unless
    set (as `configure`). Returns True if MXNet will use ``count`` (`mxnet_threads`)."""
    if 'mxnet' not in sys.modules:
        os.environ['OMP_NUM_THREADS'] = str(int(count))
        os.environ.pop(_SET_BY_GLUONDET, None)      # chosen, not gluondet's default
        if 'MXNET_OMP_MAX_THREADS' in os.environ:
            os.environ['MXNET_OMP_MAX_THREADS'] = str(int(count))
        if count > 1:
            os.environ.setdefault('OMP_WAIT_POLICY', 'ACTIVE')
    return mxnet_threads() == count
