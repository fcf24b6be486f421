"""``gluondet launch``: the processes of an MXNet parameter-server job, started and watched.

MXNet's own ``tools/launch.py`` fails on Python 3.11 (``Thread.isAlive``) and advertises a
non-loopback address on one machine. This starts the scheduler, the servers (both MXNet's
``kvstore_server`` module in ``python -c``) and the workers (the user's command), here or
over ssh on the hosts of a host file, and ends them all as soon as one fails: a killed
worker would otherwise leave the others waiting for it for ever. Before a job on hosts starts,
each host must run a command over ssh: an unreachable host or a refused login is one line.
"""
import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

# MXNet runs a scheduler or server inside `import mxnet` when DMLC_ROLE says so; run it after
# the import instead, so that the optimizer a dist_async worker sends (pickled, with its
# gluondet learning-rate schedule) can import what it needs. It leaves stop signals to this
# launcher (gluondet.helper_signals): a server the job's SIGTERM killed would hang the
# workers' last step, which their checkpoint needs.
SERVER_COMMAND = [sys.executable, '-c', (
    "import os, signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
    "role = os.environ.pop('DMLC_ROLE'); from gluondet import helper_signals; import mxnet; "
    "os.environ['DMLC_ROLE'] = role; helper_signals.leave_signals_to_parent(); "
    "from mxnet.kvstore import kvstore_server; kvstore_server._init_kvstore_server_module()")]
POLL_SECONDS = 0.2
GRACE_SECONDS = 10     # for the servers to finish after the workers, and for a stop
SSH_CHECK_SECONDS = 15     # for each host to answer the check before the job starts
# Variables of this environment that the processes started over ssh get too (the local ones
# inherit all of it): MXNet's, its parameter server's, OpenMP's, NCCL's and gluondet's own.
FORWARDED_PREFIXES = ('DMLC_', 'PS_', 'MXNET_', 'OMP_', 'KMP_', 'NCCL_', 'GLUONDET_')


def free_port(host='127.0.0.1'):
    """A TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def read_hostfile(path):
    """Host names or addresses, one per line (``#`` comments and blank lines skipped)."""
    try:
        with open(path) as f:
            hosts = [line.split('#')[0].strip() for line in f]
    except OSError as err:
        raise ValueError('host file %s: %s' % (path, err.strerror)) from None
    hosts = [h.split()[0] for h in hosts if h]
    if not hosts:
        raise ValueError('host file %s names no host' % path)
    return hosts


def local_address(towards):
    """This machine's address on the route to ``towards`` (the scheduler's, for the hosts)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((towards, 9))
        except OSError as err:
            raise ValueError('cannot reach host %s from here: %s' % (towards, err.strerror)) \
                from None
        return sock.getsockname()[0]


def plan(command, workers, servers, hosts=None, port=None, scheduler_host=None,
         ssh_port=22, cwd=None, environ=os.environ):
    """The processes of the job: a list of ``(name, argv, env)``; ``env`` holds only what
    is added to this environment. Without ``hosts`` everything runs here on loopback; with
    them, servers and workers are spread over the hosts in turn and started with ssh, with
    the variables of ``environ`` named by `FORWARDED_PREFIXES`."""
    if workers < 1 or servers < 1:
        raise ValueError('need at least one worker and one server, got -n %d -s %d'
                         % (workers, servers))
    if not command:
        raise ValueError('no command to run: gluondet launch -n 2 -s 1 -- python '
                         'scripts/train_ssd.py --kv-store dist_sync ...')
    local = not hosts
    root = '127.0.0.1' if local else (scheduler_host or local_address(hosts[0]))
    port = port or free_port('127.0.0.1' if local else '')
    common = {'DMLC_PS_ROOT_URI': root, 'DMLC_PS_ROOT_PORT': str(port),
              'DMLC_NUM_SERVER': str(servers), 'DMLC_NUM_WORKER': str(workers)}
    if local:
        common.update(DMLC_NODE_HOST='127.0.0.1', DMLC_INTERFACE='lo')
    processes = [('scheduler', SERVER_COMMAND,
                  dict(common, DMLC_ROLE='scheduler', OMP_NUM_THREADS='1'))]
    placed = {}
    for role, count in (('server', servers), ('worker', workers)):
        for i in range(count):
            host = None if local else hosts[(i if role == 'worker' else i + workers) % len(hosts)]
            env = dict(common, DMLC_ROLE=role)
            if role == 'server':
                env['OMP_NUM_THREADS'] = '1'
            else:
                placed[host] = placed.get(host, 0) + 1
            if host is not None:
                env['DMLC_NODE_HOST'] = host
            processes.append(('%s %d' % (role, i), list(SERVER_COMMAND if role == 'server'
                                                         else command), env, host))
    forwarded = {k: v for k, v in environ.items() if k.startswith(FORWARDED_PREFIXES)}
    out = []
    for name, argv, env, *host in processes:
        host = host[0] if host else None
        if env['DMLC_ROLE'] == 'worker':
            env['GLUONDET_LOCAL_SIZE'] = str(placed[host])
        if host is not None:
            argv = ssh_command(host, argv, dict(forwarded, **env), ssh_port, cwd or os.getcwd())
            env = {}
        out.append((name + ('' if host is None else ' on ' + host), argv, env))
    return out


def _ssh(host, ssh_port, *options):
    return ['ssh', *options, '-o', 'StrictHostKeyChecking=no', '-o', 'BatchMode=yes',
            '-p', str(ssh_port), host]


def ssh_command(host, argv, env, ssh_port, cwd):
    """``ssh -tt host 'cd CWD && env K=V ... ARGV'`` (the same paths on every host; the
    terminal makes the remote processes end when this ssh does)."""
    remote = 'cd %s && env %s %s' % (shlex.quote(cwd), ' '.join(
        '%s=%s' % (k, shlex.quote(v)) for k, v in sorted(env.items())), shlex.join(argv))
    return _ssh(host, ssh_port, '-tt') + [remote]


def check_hosts(hosts, ssh_port):
    """ValueError, in one line with ssh's reason, unless every host runs ``true`` over ssh
    within `SSH_CHECK_SECONDS` (all asked at once)."""
    checks = [(host, subprocess.Popen(
        _ssh(host, ssh_port, '-o', 'ConnectTimeout=%d' % SSH_CHECK_SECONDS) + ['true'],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)) for host in dict.fromkeys(hosts)]
    failures = []
    for host, proc in checks:
        try:
            err = proc.communicate(timeout=SSH_CHECK_SECONDS + 5)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            err = proc.communicate()[1] + '\nno answer in %d s' % (SSH_CHECK_SECONDS + 5)
        lines = [line.strip() for line in err.splitlines() if line.strip()]
        if proc.returncode != 0:
            failures.append((host, lines[-1].rstrip('.') if lines else 'code %d'
                             % proc.returncode))
    if failures:
        host, reason = failures[0]
        raise ValueError('cannot run a command on host %s over ssh (port %d): %s; the hosts '
                         'need passwordless ssh (docs/distributed.md)' % (host, ssh_port, reason))


def run(processes, out=sys.stderr):
    """Start ``processes`` (`plan`), wait for the workers, end everything as soon as one
    process fails or a signal arrives. Returns the job's exit code."""
    started = []
    stop = []

    def on_signal(signum, frame):
        stop.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for name, argv, env in processes:
            started.append((name, subprocess.Popen(argv, env=dict(os.environ, **env),
                                                   start_new_session=True)))
        workers = [(n, p) for n, p in started if n.startswith('worker')]
        while True:
            failed = [(n, p.returncode) for n, p in started
                      if p.poll() is not None and p.returncode != 0]
            if failed:
                name, code = failed[0]
                out.write('gluondet launch: %s exited with %s; ending the job\n'
                          % (name, _describe(code)))
                _end(started, signal.SIGTERM, grace=3)   # the others wait for it in C++
                return code if code > 0 else 128 - code
            if stop:
                out.write('gluondet launch: %s; passing it to the workers\n'
                          % signal.Signals(stop[0]).name)
                _end(workers, stop[0])
                _end(started, signal.SIGTERM)
                return 128 + stop[0]
            if all(p.poll() is not None for _, p in workers):
                _wait(started, GRACE_SECONDS)
                _end(started, signal.SIGTERM)
                return 0
            time.sleep(POLL_SECONDS)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _end(started, signal.SIGKILL, grace=0)


def _describe(code):
    return 'signal %s' % signal.Signals(-code).name if code < 0 else 'code %d' % code


def _wait(started, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(p.poll() is None for _, p in started):
        time.sleep(POLL_SECONDS)


def _end(started, signum, grace=GRACE_SECONDS):
    """Send ``signum`` to each running process's group, then SIGKILL what outlives ``grace``."""
    for _, proc in started:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signum)
            except ProcessLookupError:
                pass
    _wait(started, grace)
    for _, proc in started:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def add_arguments(parser):
    add = parser.add_argument
    add('-n', '--num-workers', type=int, required=True, help='worker processes (the command)')
    add('-s', '--num-servers', type=int, help='server processes (default: as many as workers)')
    add('-H', '--hostfile', help='hosts to ssh to, one per line (workers, then servers, placed '
                                 'in turn); default: everything on this machine, on loopback')
    add('--port', type=int, help="the scheduler's port (default: a free one)")
    add('--scheduler-host', help="with -H: this machine's address the hosts reach (default: "
                                 'the one on the route to the first host)')
    add('--ssh-port', type=int, default=22, help='with -H: the ssh port of the hosts')
    add('--dry-run', action='store_true', help='print the processes and their environment, '
                                               'start nothing')
    add('command', nargs=argparse.REMAINDER,
        help='-- then the worker command, e.g. -- python scripts/train_ssd.py --kv-store '
             'dist_sync ...')


def main(args):
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    try:
        hosts = read_hostfile(args.hostfile) if args.hostfile else None
        processes = plan(command, args.num_workers, args.num_servers or args.num_workers,
                         hosts, args.port, args.scheduler_host, args.ssh_port)
        if args.dry_run:
            for name, argv, env in processes:
                print('%s: %s%s' % (name, ''.join('%s=%s ' % kv for kv in sorted(env.items())),
                                    shlex.join(argv)))
            return 0
        if hosts:
            check_hosts(hosts, args.ssh_port)
    except ValueError as err:
        sys.stderr.write('gluondet launch: error: %s\n' % err)
        return 2
    return run(processes)
