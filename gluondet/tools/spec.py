"""Experiment specs: a YAML or JSON file of the training scripts' flags, or a TAO RetinaNet spec.

The spec and the command line are one schema, read from the script's own parser
(``scripts/train_{detector}.py``, ``build_parser()``): every flag is a key, by its argparse
dest (``lr_mode``) or its spelling (``lr-mode``, ``--lr-mode``, ``no-pretrained-base``), so a
flag added to a script is a spec key at once. ``detector`` (or ``architecture``) names the
script. A flag's spelling takes the value the flag would (``no_hybridize: true``); its dest
takes the parsed value (``hybridize: false``). Values are YAML/JSON scalars, lists (joined
with commas, or several arguments for ``nargs`` flags) and mappings (``class_mapping: {van:
car}``, written ``van=car``); null leaves a flag at its default.

`train` turns a spec into the script's command line, checks each value with the flag's own
type and choices, writes the resolved spec (every flag's final value) to
``RESULTS_DIR/resolved_spec.json`` and runs the script's ``main`` with that command line, so
a spec trains exactly as the equivalent command does. A TAO spec (any other extension,
protobuf text) is first mapped onto the RetinaNet keys by `gluondet.tools.tao`.

The training commands are the detector table's entry modules (`gluondet.detectors`), in the
package: a spec trains from an installed wheel as from a checkout.
"""
import argparse
import difflib
import json
import os
import sys

from .. import detectors
from ..files import atomic_write

__all__ = ['SpecError', 'Schema', 'load_script', 'read_spec', 'load_spec', 'prepare',
           'train', 'RESOLVED_SPEC']

META_KEYS = ('detector', 'architecture')
RESOLVED_SPEC = 'resolved_spec.json'
FLAT_EXTENSIONS = ('.yaml', '.yml', '.json')
class SpecError(ValueError):
    """A spec that cannot be trained as written; the message names the file and key."""


def load_script(detector):
    """The module of ``detector``'s training command (`gluondet.detectors`: ``build_parser``,
    ``main``)."""
    try:
        return detectors.get(detector).module()
    except ValueError as err:
        raise SpecError(str(err)) from None


def _bool_flag(action):
    return action.nargs == 0 and isinstance(action.const, bool)


class Schema:
    """The keys of one script's parser.

    Attributes
    ----------
    actions : dict
        dest -> the first argparse action with that dest (``--network`` for ``network``).
    keys : dict
        Every accepted key -> ``(action, spelling)``: ``spelling`` False for the dest, True
        for a flag's spelling (``no_pretrained_base``).
    """

    def __init__(self, parser):
        self.parser = parser
        self.actions, self.keys = {}, {}
        for action in parser._actions:
            if not action.option_strings or action.dest in ('help', argparse.SUPPRESS) or \
                    isinstance(action, argparse._HelpAction):
                continue
            self.actions.setdefault(action.dest, action)
            self.keys.setdefault(action.dest, (action, False))
            for option in action.option_strings:
                name = option.lstrip('-')
                if len(name) < 2 or name == action.dest:
                    continue
                for key in (name, name.replace('-', '_')):
                    self.keys.setdefault(key, (action, True))

    def normalize(self, spec, source='<spec>'):
        """``{dest: value}`` of a spec's flag keys (the meta keys already removed).

        Raises
        ------
        SpecError
            For an unknown key (with the closest known ones) or two keys of one flag with
            different values.
        """
        values, given = {}, {}
        for key, value in spec.items():
            name = str(key).lstrip('-') if str(key).startswith('--') else str(key)
            if name not in self.keys:
                name = name.replace('-', '_') if name.replace('-', '_') in self.keys else name
            if name not in self.keys:
                close = difflib.get_close_matches(name.replace('-', '_'), [
                    k for k in self.keys if '-' not in k] + list(META_KEYS), n=3, cutoff=0.6)
                raise SpecError('%s: unknown key %r%s' % (
                    source, key, ' (did you mean %s?)' % ', '.join(close) if close else
                    ': the keys are the flags of %s' % os.path.basename(self.parser.prog)))
            action, spelling = self.keys[name]
            if spelling and _bool_flag(action):
                if not isinstance(value, bool):
                    raise SpecError('%s: %s is a switch: true or false, got %r'
                                    % (source, key, value))
                value = action.const if value else action.default
            dest = action.dest
            if dest in values and values[dest] != value:
                raise SpecError('%s: %s and %s set the same flag (%s) to different values'
                                % (source, given[dest], key, dest))
            values[dest], given[dest] = value, key
        return values

    def argv(self, values, source='<spec>'):
        """The command line of ``{dest: value}``, each value checked with the flag's type."""
        argv = []
        for action, texts in self._texts(values, source):
            flag = next((o for o in action.option_strings if o.startswith('--')),
                        action.option_strings[0])
            if texts is None:
                argv.append(flag)
            elif action.nargs not in (None, '?'):
                argv += [flag] + texts
            else:
                argv.append('%s=%s' % (flag, texts[0]))
        return argv

    def namespace(self, values, argv=(), source='<spec>'):
        """The parsed ``argv`` with ``{dest: value}`` set over it: what parsing `argv`'s
        command line gives, without writing one (each value checked the same way)."""
        args = self.parser.parse_args(list(argv))
        for action, texts in self._texts(values, source):
            if texts is None:
                value = action.const
            else:
                value = [action.type(t) if action.type else t for t in texts]
                value = value if action.nargs not in (None, '?') else value[0]
            setattr(args, action.dest, value)
        return args

    def _texts(self, values, source):
        """``(action, texts)`` of each of ``{dest: value}`` that is given: ``texts`` the
        checked words of its value, None for the bare flag."""
        for dest, value in values.items():
            action = self.actions[dest]
            if value is None:
                if action.default is not None and not _bool_flag(action):
                    raise SpecError('%s: %s: null, but the flag has a default (%r); leave the '
                                    'key out' % (source, dest, action.default))
                continue
            if _bool_flag(action):
                if not isinstance(value, bool):
                    raise SpecError('%s: %s: true or false, got %r' % (source, dest, value))
                if value == action.const and value != action.default:
                    yield action, None
                continue
            if action.nargs == '?' and isinstance(value, bool):
                if value:           # the bare flag: its const (freeze_bn true, auto_augment v0)
                    yield action, None
                    continue
                if action.const is not True:    # off: the default (no auto_augment)
                    continue
            items = (list(value) if action.nargs not in (None, '?')
                     and isinstance(value, (list, tuple)) else [value])
            texts = [_text(v) for v in items]
            for text in texts:
                self._check(action, text, dest, source)
            yield action, texts

    @staticmethod
    def _check(action, text, dest, source):
        try:
            value = action.type(text) if action.type is not None else text
        except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
            raise SpecError('%s: %s: %s' % (source, dest, err)) from None
        if action.choices is not None and value not in action.choices:
            raise SpecError('%s: %s: %r is not one of %s' % (
                source, dest, value, ', '.join(map(str, action.choices))))

    def resolve(self, argv):
        """``{dest: value}`` of every flag after parsing ``argv`` (JSON-ready)."""
        args = self.parser.parse_args(argv)
        return {dest: _plain(getattr(args, dest)) for dest in self.actions}


def _text(value):
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, dict):
        return ','.join('%s=%s' % (k, _text(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ','.join(_text(v) for v in value)
    return str(value)


def _plain(value):
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def read_spec(path):
    """The mapping in a YAML (``.yaml``, ``.yml``) or JSON (``.json``) spec file."""
    with open(path, encoding='utf-8') as f:
        text = f.read()
    if path.lower().endswith('.json'):
        try:
            spec = json.loads(text)
        except ValueError as err:
            raise SpecError('%s: not valid JSON: %s' % (path, err)) from None
    else:
        import yaml
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise SpecError('%s: not valid YAML: %s' % (path, err)) from None
    if not isinstance(spec, dict):
        raise SpecError('%s: a spec is a mapping of flag names to values' % path)
    return spec


def detector_of(spec, source):
    """The detector a flat spec names (``detector`` or ``architecture``; a name or alias of
    `gluondet.detectors`)."""
    given = [spec[k] for k in META_KEYS if k in spec]
    if not given:
        raise SpecError('%s: name the detector: detector: %s'
                        % (source, '|'.join(detectors.names())))
    try:
        names = {detectors.get(value).name for value in given}
    except ValueError as err:
        raise SpecError('%s: %s' % (source, err)) from None
    if len(names) != 1:
        raise SpecError('%s: detector %s: name one' % (source, ' / '.join(map(repr, given))))
    return names.pop()


def is_tao_spec(path):
    return not path.lower().endswith(FLAT_EXTENSIONS)


def load_spec(path, results_dir=None, devices=None, make_data=True):
    """``(detector, flag values, translation or None)`` of a spec file.

    A TAO spec is translated (`gluondet.tools.tao.translate`) with its KITTI or COCO data
    linked under ``results_dir/tao_data`` (when ``make_data``); ``devices`` is the number of GPUs
    it trains on (``batch_size_per_gpu`` times it is the batch).
    """
    if not is_tao_spec(path):
        spec = read_spec(path)
        detector = detector_of(spec, path)
        return detector, {k: v for k, v in spec.items() if k not in META_KEYS}, None
    from . import tao
    data_dir = os.path.join(results_dir or '.', 'tao_data')
    translation = tao.translate(tao.read_tao_spec(path), path, os.path.abspath(data_dir),
                                devices or 1, results_dir and os.path.abspath(results_dir))
    if make_data:
        tao.link_data(translation, data_dir)
    return 'retinanet', dict(translation.flags), translation


def tao_devices(gpus=None, gpu_index=None):
    """``(--gpus value, device count)`` of TAO's ``--gpus N`` and ``--gpu_index``: GPUs if
    MXNet sees any, else the CPU."""
    import mxnet as mx
    available = mx.context.num_gpus()
    if gpu_index:
        indices = list(gpu_index)
    elif available:
        indices = list(range(min(gpus or 1, available)))
    else:
        indices = []
    return ','.join(str(i) for i in indices), max(1, len(indices))


def train(spec_path, results_dir, overrides=(), gpus=None, gpu_index=None, amp=None,
          log=print):
    """Train from a spec: `prepare`, then the script's ``main`` with the command line.

    Returns the script's ``main`` result (the engine's `FitResult`).
    """
    script, argv = prepare(spec_path, results_dir, overrides, gpus, gpu_index, amp, log)
    return script.main(argv)


def prepare(spec_path, results_dir, overrides=(), gpus=None, gpu_index=None, amp=None,
            log=print):
    """The training script of a spec and its command line, checked; ``resolved_spec.json``
    written.

    Parameters
    ----------
    spec_path : str
        A ``.yaml``/``.yml``/``.json`` gluondet spec, or a TAO RetinaNet spec (protobuf text).
    results_dir : str
        Checkpoints, logs and ``resolved_spec.json`` go here (``save_prefix`` is a file name
        prefix inside it).
    overrides : sequence of str
        More flags, as on the script's command line; they win over the spec.
    gpus, gpu_index : int, list of int, optional
        TAO's ``--gpus N`` and ``--gpu_index``: set ``--gpus``. A TAO spec without them
        trains on the first GPU if there is one, else on the CPU.
    amp : bool, optional
        TAO's ``--use_amp``: sets ``amp``.
    log : callable
        Where warnings and notes are written (one line each).

    Returns
    -------
    script : module
        The detector's training command (`load_script`: ``build_parser``, ``main``).
    argv : list of str
        Its command line.

    Raises
    ------
    SpecError, ProtoTextError (ValueErrors), OSError
        For a spec that cannot be trained as written.
    """
    tao_spec = is_tao_spec(spec_path)
    device_flag, devices = (tao_devices(gpus, gpu_index) if tao_spec or gpus or gpu_index
                            else (None, 1))
    if (gpus or gpu_index) and not device_flag:
        log('note: no GPU here: training on the CPU')
    detector, values, translation = load_spec(spec_path, results_dir, devices)
    if device_flag is not None:
        values['gpus'] = device_flag
    if amp:
        values['amp'] = True
    if translation is not None:
        for line in translation.warnings:
            log('warning: ' + line)
        for line in translation.notes:
            log('note: ' + line)
    script = load_script(detector)
    schema = Schema(script.build_parser())
    if translation is not None:
        _drop_missing(values, schema, spec_path, log)
    flags = schema.normalize(values, spec_path)
    prefix = flags.pop('save_prefix', '') or ''
    argv = schema.argv(flags, spec_path) + list(overrides)
    argv.append('--save-prefix=' + os.path.join(results_dir, prefix))
    resolved = schema.resolve(argv)
    resolved['save_prefix'] = prefix
    os.makedirs(results_dir, exist_ok=True)
    atomic_write(os.path.join(results_dir, RESOLVED_SPEC),
                 json.dumps(dict(detector=detector, **resolved), indent=1) + '\n')
    log('%s %s' % (os.path.basename(script.__file__), ' '.join(
        _quote(a) for a in argv)))
    return script, argv


# TAO fields whose flags may be missing from this checkout: without these the spec cannot
# train as written; without the others (early stopping, TensorBoard images) it can, warned.
_ESSENTIAL = ('pruned_model', 'train_rec', 'val_rec')


def _drop_missing(values, schema, source, log):
    for key in [k for k in values if k not in schema.keys]:
        flag = '--' + key.replace('_', '-')
        if key in _ESSENTIAL:
            raise SpecError('%s: needs %s, which this gluondet\'s train_retinanet.py does not '
                            'have' % (source, flag))
        log('warning: %s: %s is not a flag of this gluondet\'s train_retinanet.py; not used'
            % (source, flag))
        del values[key]


def _quote(arg):
    import shlex
    return shlex.quote(arg)


def eval_dataset(detector, values):
    """``evaluate_model``'s dataset keywords from a flat spec's values (its validation data)."""
    schema = Schema(load_script(detector).build_parser())
    args = schema.parser.parse_args(schema.argv(schema.normalize(values)))
    if args.val_json:
        return dict(dataset='coco', annotation_file=args.val_json,
                    image_root=args.image_root or None)
    if getattr(args, 'val_rec', ''):
        return dict(dataset='rec', records=args.val_rec)
    return dict(dataset=args.dataset, dataset_root=args.dataset_root,
                split=None if args.val_split == 'val' else args.val_split,
                class_mapping=getattr(args, 'class_mapping', None))


def main_error(command, err):
    print('gluondet %s: error: %s' % (command, err), file=sys.stderr)
    return 2
