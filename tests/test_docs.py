"""The documentation site (mkdocs.yml, docs/): the generated pages match the code, every
command written in a page parses with the real parsers, and ``mkdocs build --strict`` passes."""
import argparse
import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from gluondet import detectors
from gluondet import cli as gluondet_cli
from gluondet.model_zoo import get_model_list
from gluondet import docgen

ROOT = docgen.ROOT
DOCS = os.path.join(ROOT, 'docs')
# Pages whose commands are checked: all but the generated ones and benchmarks.md (its
# commands run benchmark scripts, not the parsers checked here).
UNCHECKED = set(docgen.PAGES) | {'benchmarks.md'}
SCRIPT = re.compile(r'(?:^|/)train_(%s)\.py$' % '|'.join(detectors.names()))


@pytest.fixture(scope='module')
def generated():
    return docgen.pages()


def test_generated_pages_are_up_to_date(generated):
    stale = docgen.stale_pages(generated=generated)
    assert not stale, ('%s differ from what the code generates: run `make docs` (or `python -m '
                       'gluondet.docgen`) and commit the result' % ', '.join(
                           'docs/' + name for name in stale))


def test_output_does_not_depend_on_the_terminal_or_argv(generated, monkeypatch):
    monkeypatch.setenv('COLUMNS', '37')
    monkeypatch.setattr(sys, 'argv', ['/somewhere/else.py', '--flag'])
    assert docgen.pages() == generated
    assert sys.argv == ['/somewhere/else.py', '--flag']


def test_cli_page_has_every_command_and_flag(generated):
    page = generated['cli.md']
    for name, *_ in gluondet_cli.COMMANDS:
        assert '### gluondet %s\n' % name in page, name
        assert '](#gluondet-%s)' % name in page, name
    parsers = [docgen.script_parser(d) for d in detectors.names()]
    parsers += [sub for _, _, sub in docgen._subcommands(docgen.gluondet_parser())]
    for parser in parsers:
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:    # an earlier spelling, not shown
                continue
            for option in action.option_strings:
                if option not in ('-h', '--help'):
                    assert option in page, (parser.prog, option)


def test_model_zoo_page_has_every_name_and_measured_map(generated):
    page = generated['model_zoo.md']
    for name in get_model_list():
        assert '| `%s` |' % name in page, name
    recipes = docgen.read_recipes()
    demo = [r for r in recipes['ssd_160_mobilenet0.5_custom'] if r.command == 'gluondet demo']
    assert demo and re.fullmatch(r'0\.\d+', demo[0].map)
    rows = {line.split(' | ')[0][3:-1]: line.split(' | ') for line in page.splitlines()
            if line.startswith('| `')}
    assert rows['ssd_512_mobilenet1.0_voc'][4] == 'yes'             # GluonCV's weights
    assert rows['retinanet_resnet50_v1b_coco'][4] == 'no'            # none published
    assert rows['ssd_300_vgg16_atrous_custom'][6] == '— |'           # no recipe, no mAP
    assert '0.' in rows['ssd_160_mobilenet0.5_custom'][6]


def test_recipes_without_a_number_get_a_dash(tmp_path):
    readme = tmp_path / 'README.md'
    readme.write_text('| recipe | network | data | epochs | mAP |\n|---|---|---|---|---|\n'
                      '| [demo](#demo) | `retinanet_resnet18_v1b_custom` at 128 px | demo val | 8 '
                      '| not measured |\n| [x.sh](x.sh) | `ssd_160_mobilenet0.5_custom` | BCCD | 3 '
                      '| 0.5 (0.6 elsewhere) |\n\ntext | not a table\n')
    recipes = docgen.read_recipes(str(readme))
    assert recipes['retinanet_resnet18_v1b_custom'][0].map is None
    assert recipes['retinanet_resnet18_v1b_custom'][0].command == \
        'gluondet demo --detector retinanet'
    assert recipes['ssd_160_mobilenet0.5_custom'][0] == docgen.Recipe(
        'x.sh', 'bash model_zoo/x.sh', '`ssd_160_mobilenet0.5_custom`', 'BCCD', '0.5')


def test_written_pages_are_whole_and_check_passes(tmp_path, capsys):
    assert docgen.main(['--docs-dir', str(tmp_path), '--check']) == 1
    assert 'run make docs' in capsys.readouterr().err
    assert docgen.main(['--docs-dir', str(tmp_path)]) == 0
    assert sorted(os.listdir(tmp_path)) == sorted(docgen.PAGES)      # no temporary files left
    assert docgen.main(['--docs-dir', str(tmp_path), '--check']) == 0
    (tmp_path / 'cli.md').write_text('edited by hand\n')
    assert docgen.stale_pages(str(tmp_path)) == ['cli.md']


# --- the commands written in the pages ---

def _commands(path):
    """``(line number, argv)`` of each shell command in the page's code blocks (not those of
    another language: ```python)."""
    found, fence, block, start, pending = [], False, False, 0, ''
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith('```'):
                fence, pending = not fence, ''
                block = fence and line.strip()[3:] in ('', 'sh', 'bash', 'shell')
                continue
            if not block:
                continue
            if not pending:
                start = number
            pending += line.rstrip('\n')
            if pending.endswith('\\'):
                pending = pending[:-1] + ' '
                continue
            text, pending = pending, ''
            try:
                argv = shlex.split(text, comments=True)
            except ValueError:
                continue
            if argv and not any('...' in a or a.startswith('[') or a == '|' for a in argv):
                found.append((start, argv))
    return found


def _parse(parser, argv, where):
    """The parsed ``argv``, or None for one that exits well (``--version``)."""
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            return parser.parse_args(argv)
    except SystemExit as done:
        if done.code:
            pytest.fail('%s: %s' % (where, err.getvalue().strip().splitlines()[-1]))
        return None


def _check_command(argv, where, gluondet_parser):
    """Parse ``argv`` if it runs a training script or gluondet; True if it did."""
    for i, arg in enumerate(argv):
        match = SCRIPT.search(arg)
        if match and i > 0 and os.path.basename(argv[i - 1]).startswith('python'):
            _parse(docgen.script_parser(match.group(1)), argv[i + 1:], where)
            return True
        if arg == 'gluondet' or (arg == '-m' and argv[i + 1:i + 2] == ['gluondet']):
            rest = argv[i + 1:] if arg == 'gluondet' else argv[i + 2:]
            if rest[:1] == ['train'] and rest[1:2] and not rest[1].startswith('-'):
                # gluondet train DETECTOR: that detector's command (a name or an alias)
                try:
                    detector = detectors.get(rest[1]).name
                except ValueError as err:
                    pytest.fail('%s: %s' % (where, err))
                _parse(docgen.script_parser(detector), rest[2:], where)
                return True
            args = _parse(gluondet_parser, rest, where)
            if args is not None and args.command == 'launch' and '--' in rest:
                _check_command(rest[rest.index('--') + 1:], where, gluondet_parser)
            return True
        if arg == '-m' and argv[i + 1:i + 2] == ['gluondet.docgen']:
            _parse(docgen.build_parser(), argv[i + 2:], where)
            return True
    return False


def test_commands_in_the_pages_parse():
    parser = docgen.gluondet_parser()
    pages = sorted(n for n in os.listdir(DOCS) if n.endswith('.md') and n not in UNCHECKED)
    checked = {}
    for name in pages:
        for line, argv in _commands(os.path.join(DOCS, name)):
            if _check_command(argv, 'docs/%s:%d: %s' % (name, line, ' '.join(argv)), parser):
                checked[name] = checked.get(name, 0) + 1
    for name in ('training.md', 'resuming.md', 'quickstart.md', 'migrating.md', 'deploy.md',
                 'distributed.md'):
        assert checked.get(name), 'no command checked in docs/%s' % name


def test_mkdocs_builds_strict(tmp_path):
    mkdocs = shutil.which('mkdocs', path=os.path.dirname(sys.executable))
    if mkdocs is None:
        pytest.skip('mkdocs is not installed: pip install -e .[docs]')
    done = subprocess.run([mkdocs, 'build', '--strict', '--site-dir', str(tmp_path / 'site')],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING='1'))
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ('index', 'cli', 'model_zoo', 'training', 'api'):
        assert (tmp_path / 'site' / (page + '.html')).is_file(), page
