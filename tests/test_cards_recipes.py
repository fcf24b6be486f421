"""The cards recipes (``model_zoo/cards_*.sh``, from scratch on the CPU): docs/training.md shows
each one's command as the recipe runs it, with the mAP model_zoo/README.md records; RetinaNet's
defaults from scratch, which the recipe relies on. The recipes run to their mAP in
`make test-learning` (test_recipes_learning.py)."""
import os
import shlex

import pytest

from gluondet import docgen
from gluondet.train import retinanet as script
from test_docs import _commands

ROOT = docgen.ROOT
TRAINING = os.path.join(ROOT, 'docs', 'training.md')
DETECTORS = ('ssd', 'faster_rcnn', 'retinanet')
CARD_CLASSES = 'nine,ten,jack,queen,king,ace'
USER_PATHS = ('--dataset-root', '--save-prefix')     # where the user keeps data and runs


def _recipe(detector):
    return os.path.join(ROOT, 'model_zoo', 'cards_%s.sh' % detector)


def _start(argv, detector):
    """Where ``gluondet train {detector}`` begins in ``argv``, or None."""
    return next((i for i, a in enumerate(argv) if os.path.basename(a) == 'gluondet'
                 and argv[i + 1:i + 3] == ['train', detector]), None)


def _after_command(argv, detector):
    """The arguments after ``gluondet train {detector}`` in ``argv``, the user's paths masked
    and the recipe's pass-through ``"$@"`` left out."""
    flags = [a for a in argv[_start(argv, detector) + 3:] if a != '$@']
    return [('<path>' if i and flags[i - 1] in USER_PATHS else a) for i, a in enumerate(flags)]


def recipe_flags(detector):
    with open(_recipe(detector), encoding='utf-8') as f:
        lines = f.read().replace('\\\n', ' ').splitlines()
    command, = [line for line in lines if line.startswith('gluondet train %s ' % detector)]
    return _after_command(shlex.split(command), detector)


def docs_flags(detector):
    found = [argv for _, argv in _commands(TRAINING) if CARD_CLASSES in argv
             and _start(argv, detector) is not None]
    assert len(found) == 1, 'docs/training.md: %d cards commands of gluondet train %s, not 1' % (
        len(found), detector)
    return _after_command(found[0], detector)


@pytest.mark.parametrize('detector', DETECTORS)
def test_docs_command_is_the_recipes_and_states_its_measured_map(detector):
    assert '--no-pretrained-base' in recipe_flags(detector)
    assert docs_flags(detector) == recipe_flags(detector)
    label = 'cards_%s.sh' % detector
    rows = [r for rows in docgen.read_recipes().values() for r in rows if r.label == label]
    assert len(rows) == 1 and rows[0].map, 'model_zoo/README.md: no measured row of ' + label
    with open(TRAINING, encoding='utf-8') as f:
        page = f.read()
    assert 'mAP %s' % rows[0].map in page, 'docs/training.md does not state %s mAP %s' % (
        label, rows[0].map)


def test_retinanet_heads_learn_from_scratch_by_default_and_keep_odtks_otherwise():
    scratch = script.parse_args(['--no-pretrained-base'])
    heads, line = script.head_flags(scratch, from_scratch=True)
    assert heads == {'head_norm': 'group', 'head_init': 'msra'}
    assert line.startswith('From scratch (--no-pretrained-base): --head-norm group '
                           '--head-init msra for the flags left unset')
    assert script.model_kwargs(scratch, True) == {'head_norm': 'group', 'head_init': 'msra'}
    # with ImageNet weights (ODTK's and the paper's heads), or weights of a trained model
    assert script.model_kwargs(script.parse_args([])) == {}
    assert script.head_flags(scratch, from_scratch=False) == (
        {'head_norm': 'none', 'head_init': 'normal'}, '')
    # flags given are kept, and only the unset one is named
    given = script.parse_args(['--no-pretrained-base', '--head-norm', 'batch'])
    heads, line = script.head_flags(given, True)
    assert heads == {'head_norm': 'batch', 'head_init': 'msra'}
    assert '--head-init msra for the flags' in line and '--head-norm batch' not in line
    paper = script.parse_args(['--no-pretrained-base', '--head-norm', 'none',
                               '--head-init', 'normal'])
    assert script.head_flags(paper, True) == ({'head_norm': 'none', 'head_init': 'normal'}, '')

