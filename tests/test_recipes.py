"""The recipes (``model_zoo/*.sh``) run `gluondet train DETECTOR` with flags its command
takes, also from a folder outside a checkout: each recipe, copied to such a folder, runs with
stand-ins for ``gluondet`` and ``python`` on PATH that record their arguments; the recorded
``gluondet`` command lines are then parsed as the entry point parses them (`gluondet.cli`:
``train``, a detector of the table, that detector's parser), by the Python given (this
checkout's here; tests/test_install.py passes the venv the wheel was installed into)."""
import glob
import json
import os
import shutil
import subprocess
import sys

from gluondet import detectors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = sorted(glob.glob(os.path.join(ROOT, 'model_zoo', '*.sh')))

# a stand-in appends its name and arguments to $RECIPE_CALLS, a JSON list a line
RECORD = ('import json, os, sys\n'
          'with open(os.environ["RECIPE_CALLS"], "a") as f:\n'
          '    f.write(json.dumps(sys.argv[1:]) + "\\n")\n')

# What `gluondet train DETECTOR FLAGS` does before it trains: the detector from the table (a
# name or an alias), its training command's parser over the flags.
PARSE = '''import json, sys
import gluondet
from gluondet import detectors
parsed = []
for argv in json.load(sys.stdin):
    assert argv[0] == 'train', argv
    detector = detectors.get(argv[1])
    sys.argv[0:1] = ['gluondet train ' + detector.name]     # its prog in a message
    parsed.append([detector.name, vars(detector.build_parser().parse_args(argv[2:]))])
print(json.dumps([gluondet.__file__, parsed], default=str))
'''


def run_recipe(path, workdir, args=(), env=None):
    """Run the recipe ``path``, copied into ``workdir/recipes`` (outside any checkout), in
    ``workdir`` with ``args``; the stand-ins' calls, ``[[name, arg, ...], ...]``."""
    stand_ins, recipes = os.path.join(workdir, 'bin'), os.path.join(workdir, 'recipes')
    for folder in (stand_ins, recipes):
        os.makedirs(folder, exist_ok=True)
    with open(os.path.join(stand_ins, 'record.py'), 'w') as f:
        f.write(RECORD)
    for name in ('gluondet', 'python'):
        with open(os.path.join(stand_ins, name), 'w') as f:
            f.write('#!/bin/sh\nexec "%s" -S "%s" %s "$@"\n' % (
                sys.executable, os.path.join(stand_ins, 'record.py'), name))
        os.chmod(os.path.join(stand_ins, name), 0o755)
    recipe = shutil.copy(path, recipes)
    calls = os.path.join(workdir, 'calls.jsonl')
    if os.path.exists(calls):
        os.remove(calls)
    env = dict(os.environ if env is None else env, RECIPE_CALLS=calls,
               PATH=stand_ins + os.pathsep + os.environ['PATH'])
    done = subprocess.run(['sh', recipe] + list(args), cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (path, done.stderr)
    with open(calls) as f:
        return [json.loads(line) for line in f]


def parse_commands(python, commands, cwd):
    """``(the gluondet file imported, [[detector, {dest: value}], ...])``: each ``gluondet``
    argument list parsed by ``python``'s gluondet, run in ``cwd``."""
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    done = subprocess.run([python, '-c', PARSE], input=json.dumps(commands), cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def check_recipes(python, workdir):
    """Every recipe, run in ``workdir`` with a save prefix and a data folder (and, for the
    cards, one more flag), runs one ``gluondet train`` of its detector (the file's name),
    which ``python``'s gluondet parses, with the prefix, the data and the flag in it; the
    file of the gluondet that parsed them."""
    workdir = str(workdir)
    prefix, data = os.path.join('runs', 'x', ''), os.path.join(workdir, 'data')
    runs = []
    for path in RECIPES:
        name = os.path.basename(path)
        if name.startswith('cards_'):
            runs.append((path, [prefix, data, '--epochs', '1'], {}, data))
        elif name == 'bccd_retinanet.sh':
            runs.append((path, [prefix], {'BCCD': data}, data))
            runs.append((path, [prefix, 'kitti'], {'BCCD': data}, prefix + 'kitti'))
        else:
            runs.append((path, [prefix], {'BCCD': data}, data))
    assert len(runs) >= 9, RECIPES
    commands, expected = [], []
    for path, args, env, root in runs:
        calls = run_recipe(path, workdir, args, dict(os.environ, **env))
        trains = [call[1:] for call in calls if call[0] == 'gluondet']
        assert len(trains) == 1 and trains[0][0] == 'train', (path, calls)
        if 'kitti' in args:     # first the KITTI copy of BCCD, by the Python beside gluondet
            assert calls[0][0] == 'python' and calls[0][-3:-1] == [data, prefix + 'kitti/']
        commands += trains
        expected.append((path, args, root))
    source, parsed_commands = parse_commands(python, commands, workdir)
    assert len(parsed_commands) == len(expected)
    for (path, args, root), (detector, parsed) in zip(expected, parsed_commands):
        name = os.path.basename(path)[:-len('.sh')].split('_', 1)[1]
        assert detector == detectors.get(name).name == name, path
        assert (parsed['save_prefix'], parsed['dataset_root']) == (prefix, root), path
        assert parsed['pretrained_base'] is False and parsed['gpus'] == '', path
        if '--epochs' in args:     # the cards recipes' more flags, after theirs
            assert parsed['epochs'] == 1, path
    return source


def test_every_recipe_runs_gluondet_train_with_flags_it_takes(tmp_path):
    check_recipes(sys.executable, tmp_path)


def test_a_recipe_in_a_checkout_runs_its_venv(tmp_path):
    """In a checkout the recipe runs the gluondet of its ``.venv``, whatever is on PATH."""
    checkout = tmp_path / 'checkout'
    (checkout / 'model_zoo').mkdir(parents=True)
    (checkout / '.venv' / 'bin').mkdir(parents=True)
    recipe = shutil.copy(os.path.join(ROOT, 'model_zoo', 'bccd_ssd.sh'),
                         str(checkout / 'model_zoo'))
    calls = tmp_path / 'venv_calls'
    with open(str(checkout / '.venv' / 'bin' / 'gluondet'), 'w') as f:
        f.write('#!/bin/sh\necho "$@" >> "%s"\n' % calls)
    os.chmod(str(checkout / '.venv' / 'bin' / 'gluondet'), 0o755)
    done = subprocess.run(['sh', recipe, 'runs/'], cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PATH='/usr/bin:/bin'))
    assert done.returncode == 0, done.stderr
    assert calls.read_text().startswith('train ssd --network mobilenet0.5 ')
