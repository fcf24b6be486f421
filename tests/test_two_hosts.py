"""Two machines made of network namespaces on this one (issue 26): ``horovodrun -H`` and
``gluondet launch -H HOSTFILE`` start their processes over ssh on both, as on a cluster.

Each host is a network namespace with its own address on a veth pair (the same interface
name, ``gdt0``, on both, like ``eth0`` on the machines of a cluster), its own host name
resolving to that address, and an sshd of Debian's openssh-server on port 2222 with a host
key made here. A client key, a known_hosts file and an ssh config made here stand in for the
user's ``~/.ssh`` (an ``ssh`` first on PATH adds ``-F``). The namespaces share this file
system, so the venv, the code and the data have the same paths on both hosts, as on a
cluster with a shared file system. Needs root, ``ip netns``, ``unshare`` and sshd
(``.ci/run`` installs it); skipped with the reason otherwise. ``make test-two-hosts`` runs
this file alone.
"""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from distributed import (_run, check_two_process_ssd_run, demo_root, driver_command, failure,
                         horovodrun, identical, launch, load_params, max_difference,
                         need_horovod, rank_report, run_spec)
from gluondet import launch as launcher

ADDRESSES = ('10.77.0.1', '10.77.0.2')
NAMES = ('gdt-host-a', 'gdt-host-b')
IFACE = 'gdt0'
SSH_PORT = 2222
SSHD = '/usr/sbin/sshd'
HANG_TIMEOUT = 60      # the watchdog's, in the fault tests: the job must end sooner
# what a job leaves behind on a host if it failed to end it
JOB_PROCESSES = ('distributed_run.py', 'kvstore_server')


def _sh(*argv):
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


class Hosts:
    """The two hosts: namespaces, sshds, keys; `on` runs a command on one of them."""

    def __init__(self, folder):
        self.folder = str(folder)
        self.namespaces = ['gdt%d-%s' % (os.getpid(), n) for n in 'ab']
        self.sshds = [None, None]
        self.bin = os.path.join(self.folder, 'bin')

    def on(self, host, argv):
        """``argv`` run on host ``host`` (0 or 1): in its namespace, with its host name."""
        return ['ip', 'netns', 'exec', self.namespaces[host], 'unshare', '--uts', 'sh', '-c',
                'hostname %s && exec "$@"' % NAMES[host], 'sh'] + list(argv)

    def run(self, argv, cwd, timeout=300, env=None, host=0):
        """``argv`` on ``host`` with the test's ssh: (returncode, output, seconds)."""
        env = dict(env or {}, PATH=self.bin + os.pathsep + os.environ['PATH'])
        return _run(self.on(host, argv), cwd, timeout, env)

    def setup(self):
        for ns in self.namespaces:
            _sh('ip', 'netns', 'add', ns)
            # `ip netns exec` mounts /etc/netns/NS/hosts on /etc/hosts: each host's name resolves
            # to its own address, as on a machine (Horovod's Gloo binds to that address)
            os.makedirs('/etc/netns/' + ns, exist_ok=True)
            with open('/etc/netns/%s/hosts' % ns, 'w') as f:
                f.write('127.0.0.1 localhost\n' + ''.join(
                    '%s %s\n' % pair for pair in zip(ADDRESSES, NAMES)))
        ends = ['gdt%d%s' % (os.getpid() % 100000, n) for n in 'ab']
        _sh('ip', 'link', 'add', ends[0], 'type', 'veth', 'peer', 'name', ends[1])
        for ns, end, address in zip(self.namespaces, ends, ADDRESSES):
            _sh('ip', 'link', 'set', end, 'netns', ns)
            _sh('ip', '-n', ns, 'link', 'set', end, 'name', IFACE)
            _sh('ip', '-n', ns, 'addr', 'add', address + '/24', 'dev', IFACE)
            _sh('ip', '-n', ns, 'link', 'set', IFACE, 'up')
            _sh('ip', '-n', ns, 'link', 'set', 'lo', 'up')
        self._keys()
        os.makedirs('/run/sshd', exist_ok=True)      # sshd's privilege separation folder
        for host in range(2):
            self.start_sshd(host)

    def _keys(self):
        for name in ('host_key', 'client_key', 'other_key'):
            _sh('ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C', name, '-f',
                os.path.join(self.folder, name))
        self.authorized_keys = os.path.join(self.folder, 'authorized_keys')
        shutil.copy(os.path.join(self.folder, 'client_key.pub'), self.authorized_keys)
        with open(os.path.join(self.folder, 'host_key.pub')) as f:
            host_key = ' '.join(f.read().split()[:2])
        with open(os.path.join(self.folder, 'known_hosts'), 'w') as f:
            f.write(''.join('[%s]:%d %s\n' % (a, SSH_PORT, host_key) for a in ADDRESSES))
        config = os.path.join(self.folder, 'ssh_config')
        with open(config, 'w') as f:
            f.write('Host *\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n'
                    '  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 10\n'
                    % (os.path.join(self.folder, 'client_key'),
                       os.path.join(self.folder, 'known_hosts')))
        os.makedirs(self.bin)
        wrapper = os.path.join(self.bin, 'ssh')
        with open(wrapper, 'w') as f:
            f.write('#!/bin/sh\nexec %s -F %s "$@"\n' % (shutil.which('ssh'), config))
        os.chmod(wrapper, 0o755)
        for host, address in enumerate(ADDRESSES):
            with open(os.path.join(self.folder, 'sshd_%d.conf' % host), 'w') as f:
                f.write('Port %d\nListenAddress %s\nHostKey %s\nPidFile none\n'
                        'AuthorizedKeysFile %s\nPermitRootLogin prohibit-password\n'
                        'PasswordAuthentication no\nKbdInteractiveAuthentication no\n'
                        'UsePAM no\nStrictModes no\n'
                        % (SSH_PORT, address, os.path.join(self.folder, 'host_key'),
                           self.authorized_keys))

    def start_sshd(self, host):
        """sshd on ``host``, in the foreground (its pid is ours to stop), once it answers."""
        log = open(os.path.join(self.folder, 'sshd_%d.log' % host), 'a')
        self.sshds[host] = subprocess.Popen(self.on(host, [
            SSHD, '-D', '-e', '-f', os.path.join(self.folder, 'sshd_%d.conf' % host)]),
            stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while self.ssh(host).returncode != 0:
            assert time.monotonic() < deadline and self.sshds[host].poll() is None, \
                open(log.name).read()
            time.sleep(0.2)

    def stop_sshd(self, host):
        self.sshds[host].terminate()
        self.sshds[host].wait(timeout=10)

    def ssh(self, host, command='true'):
        """``ssh ADDRESS COMMAND`` from host 0."""
        return subprocess.run(self.on(0, [os.path.join(self.bin, 'ssh'), '-p', str(SSH_PORT),
                                          ADDRESSES[host], command]),
                              capture_output=True, text=True, timeout=30)

    def job_processes(self, host):
        """Processes of a training job left on ``host``: (pid, command line)."""
        listed = subprocess.run(['ip', 'netns', 'pids', self.namespaces[host]],
                                capture_output=True, text=True).stdout.split()
        found = []
        for pid in listed:
            try:
                with open('/proc/%s/cmdline' % pid, 'rb') as f:
                    command = f.read().replace(b'\0', b' ').decode()
            except OSError:
                continue
            if any(name in command for name in JOB_PROCESSES):
                found.append((int(pid), command))
        return found

    def traffic(self):
        """Bytes host 0 received and sent on the veth."""
        out = subprocess.run(['ip', '-n', self.namespaces[0], '-j', '-s', 'link', 'show', IFACE],
                             capture_output=True, text=True, check=True).stdout
        stats = json.loads(out)[0]['stats64']
        return stats['rx']['bytes'] + stats['tx']['bytes']

    def cleanup(self):
        """Everything still running in the namespaces (sshds, what they started), the
        namespaces (their veth ends go with them), the hosts files."""
        for ns in self.namespaces:
            pids = subprocess.run(['ip', 'netns', 'pids', ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
        for sshd in self.sshds:
            if sshd is not None:
                sshd.wait(timeout=10)
        for ns in self.namespaces:
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)
            shutil.rmtree('/etc/netns/' + ns, ignore_errors=True)


def _missing():
    """Why two hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return 'not root: network namespaces and sshd need root'
    for tool in ('ip', 'unshare', 'ssh', 'ssh-keygen'):
        if shutil.which(tool) is None:
            return '%s is not installed' % tool
    if not os.access(SSHD, os.X_OK):
        return '%s is not installed (apt-get install openssh-server; .ci/run does)' % SSHD
    probe = 'gdt%d-probe' % os.getpid()
    made = subprocess.run(['ip', 'netns', 'add', probe], capture_output=True, text=True)
    if made.returncode != 0:
        return '`ip netns add` fails here: %s' % made.stderr.strip()
    subprocess.run(['ip', 'netns', 'del', probe], capture_output=True)
    return None


@pytest.fixture(scope='module')
def hosts(tmp_path_factory):
    reason = _missing()
    if reason:
        pytest.skip(reason)
    made = Hosts(tmp_path_factory.mktemp('hosts'))
    try:
        made.setup()
        yield made
    finally:
        made.cleanup()


@pytest.fixture(scope='module')
def demo(tmp_path_factory):
    return demo_root(str(tmp_path_factory.mktemp('demo')))


def _hostfile(tmp_path, *addresses):
    path = tmp_path / 'hostfile'
    path.write_text('# the cluster\n' + ''.join(a + '\n' for a in addresses))
    return str(path)


def _horovodrun(hosts, spec, tmp_path, demo, name, timeout=300):
    """``horovodrun`` on host 0, one rank on each host."""
    spec['config']['horovod'] = True
    argv = [os.path.join(os.path.dirname(sys.executable), 'horovodrun'), '--gloo',
            '--disable-cache', '-np', '2', '-H', ','.join(a + ':1' for a in ADDRESSES),
            '--network-interface', IFACE, '--ssh-port', str(SSH_PORT)]
    return hosts.run(argv + driver_command(tmp_path, name, spec), tmp_path, timeout,
                     env={'GLUONDET_TEST_DEMO': demo})


def _launch(hosts, spec, tmp_path, demo, name, hostfile=None, timeout=300):
    """``gluondet launch -n 2 -s 1 -H HOSTFILE`` on host 0: worker 0 and the server on
    host 0, worker 1 on host 1."""
    spec['config'].setdefault('kv_store', 'dist_sync')
    argv = [sys.executable, '-m', 'gluondet', 'launch', '-n', '2', '-s', '1', '-H',
            hostfile or _hostfile(tmp_path, *ADDRESSES), '--ssh-port', str(SSH_PORT), '--']
    return hosts.run(argv + driver_command(tmp_path, name, spec), tmp_path, timeout,
                     env={'GLUONDET_TEST_DEMO': demo} if demo else None)


def _ssd_spec(out, **config):
    return run_spec('ssd', out, out / 'ssd', batch_size=8, epochs=1, val_interval=1, **config)


@pytest.mark.slow
@pytest.mark.parametrize('tool', ['horovodrun', 'launch'])
def test_two_hosts_train_as_one_machine_does(hosts, demo, tmp_path, tool):
    """Both ranks end bit-identical, validate as one process does on their weights, and
    equal bit for bit the same run of 2 processes on loopback; the exchanges of the 4 steps
    crossed the veth (more bytes than 4 times the parameters')."""
    if tool == 'horovodrun':
        need_horovod()
    across, there = (_horovodrun, horovodrun) if tool == 'horovodrun' else (_launch, launch)
    received = hosts.traffic()
    code, log, _ = across(hosts, _ssd_spec(tmp_path / 'hosts'), tmp_path, demo, 'hosts')
    assert code == 0, failure(log)
    check_two_process_ssd_run(tmp_path / 'hosts', demo)
    params = load_params(tmp_path / 'hosts' / 'rank0.params')
    assert hosts.traffic() - received > 4 * sum(v.nbytes for v in params.values())
    spec = _ssd_spec(tmp_path / 'loopback', horovod=tool == 'horovodrun')
    if tool == 'launch':
        spec['config']['kv_store'] = 'dist_sync'
    code, log, _ = there(driver_command(tmp_path, 'loopback', spec), tmp_path,
                         env={'GLUONDET_TEST_DEMO': demo})
    assert code == 0, failure(log)
    reports = [rank_report(tmp_path / 'loopback', r) for r in range(2)]
    assert [(r['world_size'], r['iteration']) for r in reports] == [(2, 4)] * 2, failure(log)
    here = load_params(tmp_path / 'loopback' / 'rank0.params')
    # (4 SSD steps amplify any rounding difference to ~0.1: bit-identity or a real difference)
    assert identical(params, here), 'loopback differs by %g:\n%s' % (
        max_difference(params, here), failure(log))


@pytest.mark.parametrize('tool', ['horovodrun', 'launch'])
@pytest.mark.parametrize('rank', [1, 0])
def test_a_worker_killed_on_one_host_ends_the_job(hosts, demo, tmp_path, tool, rank):
    """A rank SIGKILLed at its third step (rank r runs on host r): the job ends non-zero
    within the watchdog's time, and no process of it is left on either host."""
    if tool == 'horovodrun':
        need_horovod()
    spec = run_spec('toy', tmp_path / 'out', tmp_path / 'toy', batch_size=8, epochs=3,
                    hang_timeout=HANG_TIMEOUT)
    spec['fault'] = {'rank': rank, 'iteration': 2, 'kind': 'kill'}
    across = _horovodrun if tool == 'horovodrun' else _launch
    code, log, seconds = across(hosts, spec, tmp_path, demo, 'kill', timeout=120)
    assert code != 0 and 'fault: rank %d kill at iteration 2' % rank in log, failure(log)
    assert seconds < HANG_TIMEOUT, failure(log)
    deadline = time.monotonic() + 10
    while any(hosts.job_processes(h) for h in range(2)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [hosts.job_processes(h) for h in range(2) if hosts.job_processes(h)]


def _launch_line(hosts, tmp_path, hostfile):
    code, log, seconds = _launch(hosts, run_spec('toy', tmp_path / 'out', tmp_path / 'toy'),
                                 tmp_path, None, 'refused', hostfile=hostfile, timeout=60)
    assert code == 2 and log.strip().count('\n') == 0, log
    assert log.startswith('gluondet launch: error: cannot run a command on host '), log
    return log.strip()


def test_an_unreachable_host_is_one_line(hosts, tmp_path):
    line = _launch_line(hosts, tmp_path, _hostfile(tmp_path, ADDRESSES[0], '10.77.0.9'))
    assert 'host 10.77.0.9 over ssh (port 2222): ssh: connect to host 10.77.0.9 port 2222: ' \
           'No route to host; the hosts need passwordless ssh' in line


def test_a_refused_ssh_is_one_line(hosts, tmp_path):
    """A key the hosts do not accept, then host 1's sshd stopped."""
    hostfile = _hostfile(tmp_path, *ADDRESSES)
    shutil.copy(os.path.join(hosts.folder, 'other_key.pub'), hosts.authorized_keys)
    try:
        line = _launch_line(hosts, tmp_path, hostfile)
    finally:
        shutil.copy(os.path.join(hosts.folder, 'client_key.pub'), hosts.authorized_keys)
    assert 'on host 10.77.0.1 over ssh (port 2222): root@10.77.0.1: Permission denied ' \
           '(publickey); the hosts' in line
    hosts.stop_sshd(1)
    try:
        line = _launch_line(hosts, tmp_path, hostfile)
    finally:
        hosts.start_sshd(1)
    assert 'on host 10.77.0.2 over ssh (port 2222): ssh: connect to host 10.77.0.2 port ' \
           '2222: Connection refused; the hosts' in line


def test_the_processes_over_ssh_get_the_variables_of_mxnet_openmp_nccl_and_gluondet():
    environ = {'OMP_NUM_THREADS': '1', 'NCCL_SOCKET_IFNAME': 'eth1', 'DMLC_INTERFACE': 'eth1',
               'GLUONDET_TEST_DEMO': '/data/demo', 'HOME': '/root', 'DMLC_ROLE': 'scheduler'}
    local, remote = [launcher.plan(['python', 'train.py'], workers=1, servers=1, hosts=names,
                                   port=9000, scheduler_host='10.0.0.1', cwd='/w',
                                   environ=environ) for names in (None, ['node1'])]
    assert local[2][2]['DMLC_ROLE'] == 'worker' and 'OMP_NUM_THREADS' not in local[2][2]
    command = remote[2][1][-1]
    for forwarded in ('OMP_NUM_THREADS=1', 'NCCL_SOCKET_IFNAME=eth1', 'DMLC_INTERFACE=eth1',
                      'GLUONDET_TEST_DEMO=/data/demo', 'DMLC_ROLE=worker'):
        assert ' %s ' % forwarded in command, command
    assert 'HOME=' not in command and 'scheduler' not in command
