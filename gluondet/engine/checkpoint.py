"""Resumable checkpoints without pickle, written so that a kill leaves the last good one.

A checkpoint is three files beside ``{save_prefix}``:

- ``{save_prefix}_last-{iteration:08d}-{sha1[:8]}.params``: the weights
  (``net.save_parameters``; loads with ``net.load_parameters``);
- ``{save_prefix}_last-{iteration:08d}-{sha1[:8]}.states``: the optimizer
  states, ``mx.nd.save`` of ``{'<param name>[:<slot>]': NDArray}`` with
  structural parameter names as in the params file, and the hooks' arrays
  (``'<hook class>/<key>'``: the model EMA's averaged weights);
- ``{save_prefix}_last.json``: the manifest, written last as the commit
  point. It names the two files (with their sha1), and holds the training
  position (epoch, batch, iteration), the optimizer's update counts and
  state layout, every hook's state (LR schedule, best metric, log offsets),
  the seed (all RNGs are derived from the seed and the position), the task's
  ``meta()``, the config, and the gluondet version and git commit.

Data files get content-derived names and are only deleted after a newer
manifest is committed, so a kill at any moment leaves a manifest whose files
exist and match their hashes. Nothing here unpickles: MXNet's
``Trainer.save_states`` pickles its Updater, and loading pickle from a file
someone sent you runs their code.
"""
import datetime
import glob
import hashlib
import json
import logging
import os
import subprocess

from mxnet import nd

from ..errors import UserError, message
from ..files import (atomic_save, atomic_write, naming, remove_if_exists, save_ndarrays,
                     save_parameters, write_synced)
from ..threads import mxnet_threads
from .wording import setting

LOG = logging.getLogger(__name__)
FORMAT = 'gluondet-checkpoint'
PARAMS_FORMAT = 'gluondet-params'
VERSION = 1


class CheckpointError(UserError):
    """A checkpoint is missing, corrupt, does not fit the model being trained or cannot be
    written."""


class Checkpointer:
    """Writes and restores the resumable checkpoint of one training run.

    Parameters
    ----------
    prefix : str
        ``config.save_prefix``.
    meta : dict
        ``task.meta()``: what rebuilds the model.
    config : TrainConfig
    enabled : bool
        False on processes other than rank 0 (they write nothing).
    """

    def __init__(self, prefix, meta, config, enabled=True):
        self.prefix = prefix
        self.meta = meta
        self.config = config
        self.enabled = enabled
        self.json_path = manifest_path(prefix)
        self.last_path = None   # manifest of the last good checkpoint, written or resumed
        self._files = None      # the data files of that checkpoint and their optimizer info
        self._position = None   # (epoch, batch, iteration) they hold

    def save(self, loop):
        """Checkpoint the loop's current position (manifest only if its data is on disk).

        Every process calls it: BatchNorm statistics are first averaged over them."""
        loop.runtime.beat('checkpoint at iteration %d' % loop.state.iteration)
        loop.sync_statistics()
        if not self.enabled:
            return
        committed = self._files, self._position
        try:
            if loop.state.position() != self._position:
                self._write_data(loop)
            self._write_manifest(loop)
        except OSError as err:      # a full disk, a folder made read-only: the last one stays
            self._discard(committed)
            raise CheckpointError('cannot write the checkpoint of iteration %d: %s; %s'
                                  % (loop.state.iteration, message(err), self._last())) from err
        self._remove_stale()

    def resume(self, loop, resume):
        """Restore what ``resume`` names (see `TrainConfig`) into ``loop``."""
        path = resolve_resume(resume, self.json_path)
        if path is None:
            return
        if path.endswith('.params'):
            loop.net.load_parameters(path, ctx=list(loop.runtime.ctx))
            LOG.info('Resumed weights only from %s (no optimizer state); starting at epoch %d',
                     path, loop.state.epoch)
            return
        manifest = read_manifest(path)
        self._restore(loop, path, manifest)
        self.last_path = path
        LOG.info('Resumed from %s: epoch %d, batch %d, iteration %d', path,
                 loop.state.epoch, loop.state.batch, loop.state.iteration)

    def _write_data(self, loop):
        os.makedirs(os.path.dirname(os.path.abspath(self.prefix)), exist_ok=True)
        names = param_names(loop.net, loop.trainer)
        arrays, optimizer = optimizer_states(loop.trainer, names)
        arrays.update(hook_arrays(loop.hooks))
        stem = '%s_last-%08d' % (self.prefix, loop.state.iteration)
        params, params_sha1 = _write_hashed(lambda tmp: save_parameters(loop.net, tmp), stem,
                                            '.params')
        try:
            states, states_sha1 = _write_hashed(lambda tmp: save_ndarrays(tmp, arrays), stem,
                                                '.states')
        except BaseException:
            os.remove(params)
            raise
        self._files = {'params': os.path.basename(params), 'params_sha1': params_sha1,
                       'states': os.path.basename(states), 'states_sha1': states_sha1,
                       'optimizer': optimizer}
        self._position = loop.state.position()

    def _write_manifest(self, loop):
        epoch, batch, iteration = self._position
        manifest = dict(
            format=FORMAT, format_version=VERSION, **provenance(),
            epoch=epoch, batch=batch, iteration=iteration, **self._files,
            rng={'seed': self.config.seed,
                 'scheme': 'step RNGs from (seed, iteration), samples from (seed, epoch, index)'},
            hooks=hook_states(loop.hooks), meta=self.meta, config=self.config.to_dict(),
            processes=loop.runtime.world_size, threads=mxnet_threads())
        atomic_write(self.json_path, json.dumps(manifest, indent=1, allow_nan=False))
        self.last_path = self.json_path

    def _discard(self, committed):
        """Remove data files written since the ``committed`` ``(files, position)``."""
        if self._files is not committed[0]:
            for kind in ('params', 'states'):
                try:    # else the next save removes them
                    remove_if_exists(os.path.join(os.path.dirname(self.prefix),
                                                  self._files[kind]))
                except OSError:
                    pass
        self._files, self._position = committed

    def _last(self):
        """What a failed save leaves: the last good checkpoint and how to continue it."""
        if self.last_path is None:
            return 'no checkpoint of this run was written before'
        again = 'auto' if self.last_path == self.json_path else self.last_path
        resume = setting('resume', again)
        return ('the last good checkpoint, %s, is intact: make space (or the folder writable)%s'
                % (self.last_path, ', then continue with ' + resume if resume else ''))

    def _remove_stale(self):
        keep = {self._files['params'], self._files['states']}
        for ext in ('.params', '.states'):
            for path in glob.glob(glob.escape(self.prefix) + '_last-*' + ext):
                if os.path.basename(path) not in keep:
                    os.remove(path)

    def _restore(self, loop, path, manifest):
        saved, training = (m.get('network') for m in (manifest.get('meta') or {}, self.meta))
        if saved and training and saved != training:
            raise CheckpointError('%s is a checkpoint of %s, not of %s, the network this run '
                                  'trains' % (path, saved, training))
        base = os.path.dirname(path)
        params = _checked_file(base, manifest, 'params', path)
        states = _checked_file(base, manifest, 'states', path)
        _check_optimizer(manifest['optimizer']['name'], loop.trainer, path)
        loop.net.load_parameters(params, ctx=list(loop.runtime.ctx))
        arrays = nd.load(states)
        load_optimizer_states(loop.trainer, param_names(loop.net, loop.trainer), arrays,
                              manifest['optimizer'])
        state = loop.state
        state.epoch, state.batch, state.iteration = (manifest[k] for k in ('epoch', 'batch',
                                                                           'iteration'))
        _check_position(state, path)
        load_hook_states(loop.hooks, manifest['hooks'], arrays)
        _report_differences(path, manifest, self.meta, self.config)
        _report_scale(path, manifest, loop.runtime.world_size)
        self._files = {k: manifest[k] for k in ('params', 'params_sha1', 'states', 'states_sha1',
                                                'optimizer')}
        # Data files elsewhere (another save_prefix) are copied by the next save.
        same = os.path.abspath(path) == os.path.abspath(self.json_path)
        self._position = state.position() if same else None


def manifest_path(save_prefix):
    """The checkpoint manifest of a run, what ``resume='auto'`` reads."""
    return save_prefix + '_last.json'


def resolve_resume(resume, auto_path):
    """The file ``resume`` names, or None for a fresh start.

    ``''`` is a fresh start; ``'auto'`` is ``auto_path`` if it exists; a
    ``.json`` is a checkpoint manifest; a ``.params`` file is weights only.
    """
    if not resume:
        return None
    if resume == 'auto':
        if os.path.exists(auto_path):
            return auto_path
        LOG.info('resume=auto: no checkpoint at %s, starting from scratch', auto_path)
        return None
    if not resume.endswith(('.json', '.params')):
        raise ValueError("resume must be '', 'auto', a checkpoint .json or a .params file, "
                         "got %r" % resume)
    if not os.path.exists(resume):
        raise FileNotFoundError('resume: no such file %s' % resume)
    return resume


def read_manifest(path):
    """Load and check a checkpoint manifest (``{save_prefix}_last.json``)."""
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as err:
        raise CheckpointError('cannot read checkpoint %s: %s' % (path, err)) from None
    if not isinstance(manifest, dict) or manifest.get('format') != FORMAT:
        raise CheckpointError('%s is not a gluondet checkpoint manifest (format %r); '
                              'to load weights only, resume from the .params file'
                              % (path, manifest.get('format') if isinstance(manifest, dict)
                                 else None))
    if manifest.get('format_version', 0) > VERSION:
        raise CheckpointError('%s has format_version %s; this gluondet reads up to %d'
                              % (path, manifest.get('format_version'), VERSION))
    missing = [k for k in ('epoch', 'batch', 'iteration', 'params', 'params_sha1', 'states',
                           'states_sha1', 'optimizer', 'hooks') if k not in manifest]
    if missing:
        raise CheckpointError('checkpoint %s lacks %s' % (path, ', '.join(missing)))
    return manifest


def save_params(net, path, info):
    """Write ``path`` (loads with ``net.load_parameters``) and its ``.json`` description.

    Parameters
    ----------
    net : gluon.Block
    path : str
        Ends with ``.params``.
    info : dict
        JSON-ready description (meta, epoch, metrics, ...); provenance is added.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_save(lambda tmp: save_parameters(net, tmp), path)
    text = json.dumps(dict(format=PARAMS_FORMAT, **provenance(), **info), indent=1)
    atomic_write(path[:-len('.params')] + '.json', text)


def param_names(net, trainer):
    """Structural names (as in the params file) of ``trainer``'s parameters, by index."""
    by_id = {}
    for name, param in net._collect_params_with_prefix().items():
        by_id.setdefault(id(param), name)
    return [by_id.get(id(param), param.name) for param in trainer._params]


def optimizer_states(trainer, names):
    """The optimizer states as ``({key: NDArray}, JSON-ready info)``.

    Reads the trainer's first updater (all updaters hold the same values) and
    the optimizer's per-device update counts (Adam-like bias correction
    depends on them). Relies on ``gluon.Trainer`` internals of MXNet 1.9.
    """
    _init_trainer(trainer)
    arrays, layout = {}, {}
    if trainer._update_on_kvstore:    # dist_async: the states are on the servers
        return arrays, {'name': type(trainer._optimizer).__name__.lower(), 'on_servers': True,
                        'num_update': 0, 'update_counts': {}, 'layout': layout}
    for index, state in sorted(trainer._updaters[0].states.items()):
        layout[names[index]] = _flatten(state, names[index], arrays)
    opt = trainer._optimizer
    counts = {str(dev): {names[i]: n for i, n in sorted(c.items())}
              for dev, c in opt._all_index_update_counts.items()}
    info = {'name': type(opt).__name__.lower(), 'num_update': opt.num_update,
            'update_counts': counts, 'layout': layout}
    return arrays, info


def load_optimizer_states(trainer, names, arrays, info):
    """Put states saved by `optimizer_states` into every updater of ``trainer``."""
    _init_trainer(trainer)
    if trainer._update_on_kvstore or info.get('on_servers'):
        LOG.warning('the optimizer states of this run live on the parameter servers (or did: '
                    'dist_async), not in the checkpoint: they start anew')
        return
    index = {name: i for i, name in enumerate(names)}
    unknown = sorted(set(info['layout']) - set(index))
    if unknown:
        raise CheckpointError('optimizer states for parameters this run does not train (not '
                              'in the net, or frozen by task.train_params): %s'
                              % ', '.join(unknown[:10]))
    for updater, ctx in zip(trainer._updaters, trainer._contexts):
        updater.states = {index[name]: _unflatten(layout, arrays, ctx)
                          for name, layout in info['layout'].items()}
        updater.states_synced = dict.fromkeys(updater.states, True)
    opt = trainer._optimizer
    opt.num_update = info['num_update']
    opt._all_index_update_counts = {int(dev): {index[n]: c for n, c in counts.items()}
                                    for dev, counts in info['update_counts'].items()}
    opt._index_update_count = opt._all_index_update_counts.setdefault(0, {})


def hook_states(hooks):
    """``{hook class name: hook.state_dict()}``."""
    states = {}
    for hook in hooks:
        name = type(hook).__name__
        if name in states:
            raise ValueError('two hooks of class %s: their states would collide' % name)
        states[name] = hook.state_dict()
    return states


def hook_arrays(hooks):
    """``{'<hook class name>/<key>': NDArray}`` of the hooks' ``state_arrays()``."""
    return {'%s/%s' % (type(hook).__name__, key): array
            for hook in hooks for key, array in hook.state_arrays().items()}


def load_hook_states(hooks, states, arrays=None):
    """Give each hook its saved state (and its arrays of ``arrays``, the states file's); a
    hook absent from the checkpoint keeps its own."""
    for hook in hooks:
        name = type(hook).__name__
        if name in states:
            hook.load_state_dict(states[name])
            prefix = name + '/'
            hook.load_state_arrays({key[len(prefix):]: array for key, array in
                                    (arrays or {}).items() if key.startswith(prefix)})


def provenance():
    """gluondet version and git commit, for every file that describes a model."""
    from ..version import __version__
    return {'gluondet_version': __version__, 'git_commit': _git_commit(),
            'time': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}


def _write_hashed(write, stem, ext):
    """Write ``{stem}-{sha1[:8]}{ext}`` atomically; returns its path and sha1. An OSError
    names ``{stem}{ext}``."""
    tmp = '%s.tmp%d%s' % (stem, os.getpid(), ext)    # a leftover matches the stale-file glob
    try:
        try:
            write_synced(write, tmp)
        except OSError as err:
            raise naming(err, tmp, stem + ext) from None
        sha1 = _sha1(tmp)
        path = '%s-%s%s' % (stem, sha1[:8], ext)
        os.replace(tmp, path)
    finally:
        remove_if_exists(tmp)
    return path, sha1


def _sha1(path):
    digest = hashlib.sha1()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


_COMMIT = []


def _git_commit():
    if not _COMMIT:
        try:
            out = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True,
                                 timeout=10, cwd=os.path.dirname(os.path.abspath(__file__)))
            _COMMIT.append(out.stdout.strip() if out.returncode == 0 else None)
        except (OSError, subprocess.SubprocessError):
            _COMMIT.append(None)
    return _COMMIT[0]


def _checked_file(base, manifest, kind, manifest_path):
    path = os.path.join(base, manifest[kind])
    if not os.path.exists(path):
        raise CheckpointError('checkpoint %s names %s, which does not exist'
                              % (manifest_path, path))
    if _sha1(path) != manifest[kind + '_sha1']:
        raise CheckpointError('%s does not match the sha1 in %s: the file is corrupt or was '
                              'replaced' % (path, manifest_path))
    return path


def _check_position(state, path):
    steps = state.batches_per_epoch
    if state.batch > steps:
        raise CheckpointError('checkpoint %s stopped at batch %d of epoch %d, but an epoch now has '
                              '%d batches (batch size or dataset changed)'
                              % (path, state.batch, state.epoch, steps))
    if state.epoch * steps + state.batch != state.iteration:
        LOG.warning('checkpoint %s: %d steps per epoch now (batch size or dataset changed); the '
                    'LR schedule continues from iteration %d', path, steps, state.iteration)


def _check_optimizer(saved, trainer, path):
    current = type(trainer._optimizer).__name__.lower()
    if saved != current:
        raise CheckpointError('checkpoint %s holds %s optimizer states, but this run uses %s'
                              % (path, saved, current))


def _init_trainer(trainer):
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()


def _flatten(state, key, arrays):
    if state is None:
        return None
    if isinstance(state, nd.NDArray):
        arrays[key] = state
        return key
    if isinstance(state, (tuple, list)):
        return [_flatten(s, '%s:%d' % (key, i), arrays) for i, s in enumerate(state)]
    raise CheckpointError('cannot save optimizer state of type %s (%s)'
                          % (type(state).__name__, key))


def _unflatten(layout, arrays, ctx):
    if layout is None:
        return None
    if isinstance(layout, str):
        if layout not in arrays:
            raise CheckpointError('optimizer state %r is missing from the states file' % layout)
        return arrays[layout].as_in_context(ctx)
    return tuple(_unflatten(item, arrays, ctx) for item in layout)


def _report_scale(path, manifest, processes):
    """Warn when a run resumes on another number of processes or OpenMP threads."""
    saved = manifest.get('processes', 1)
    if saved != processes:
        LOG.warning('resuming %s, written by %d process(es), on %d: the global batch and the '
                    'schedule continue, but each step now draws its samples from %d shard(s) of '
                    'the data, so the run will not repeat, bit for bit, one continued on %d'
                    % (path, saved, processes, processes, saved))
    threads, now = manifest.get('threads'), mxnet_threads()
    if threads is not None and threads != now:
        LOG.warning('resuming %s, written with %d OpenMP thread(s), with %d: MKLDNN rounds '
                    'differently with another thread count, so the run will not repeat, bit for '
                    'bit, one continued with %d (set OMP_NUM_THREADS=%d to keep it)'
                    % (path, threads, now, threads, threads))


def _report_differences(path, manifest, meta, config):
    saved_meta = manifest.get('meta') or {}
    changed = sorted(k for k in set(saved_meta) | set(meta) if saved_meta.get(k) != meta.get(k))
    if changed:
        LOG.warning('resuming %s with a different task meta: %s', path, ', '.join(
            '%s %r -> %r' % (k, saved_meta.get(k), meta.get(k)) for k in changed))
    saved_config = manifest.get('config') or {}
    current = config.to_dict()
    changed = sorted(k for k in current if k not in ('resume', 'start_epoch')
                     and k in saved_config and saved_config[k] != current[k])
    if changed:
        LOG.info('resuming with a changed config: %s', ', '.join(
            '%s %r -> %r' % (k, saved_config[k], current[k]) for k in changed))
