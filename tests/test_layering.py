"""The dependency directions of docs/design.md, read from the imports themselves."""
import ast
import glob
import os
import subprocess
import sys

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'gluondet')

# package -> the gluondet packages it must never import (docs/design.md, "Dependency direction")
FORBIDDEN = {
    'deploy': ('tasks', 'engine', 'cli', 'tools', 'train'),
    'data': ('tasks', 'engine', 'deploy', 'model_zoo', 'nn', 'cli', 'train'),
    'metrics': ('tasks', 'engine', 'deploy', 'model_zoo', 'cli', 'train'),
    'model_zoo': ('tasks', 'engine', 'deploy', 'data', 'metrics', 'cli', 'train'),
    'engine': ('tasks', 'model_zoo', 'deploy', 'cli', 'train'),
    # the training commands sit above the tasks; the tasks know no command line
    'tasks': ('train', 'cli', 'tools'),
}


def module_name(path):
    """``gluondet/engine/hooks.py`` -> ``gluondet.engine.hooks``; a package's ``__init__.py``
    -> the package."""
    parts = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].split(os.sep)
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


MODULES = {module_name(path): path
           for path in glob.glob(os.path.join(PACKAGE, '**', '*.py'), recursive=True)}


def imported_modules(path):
    """The gluondet modules ``path`` imports (absolute or relative imports, at module level or
    inside functions): ``from a import b`` imports ``a.b`` if that is a module, else ``a``."""
    this = module_name(path)
    package = this.split('.') if path.endswith('__init__.py') else this.split('.')[:-1]
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = '.'.join(base + (node.module.split('.') if node.module else []))
            names.update(module + '.' + alias.name if module + '.' + alias.name in MODULES
                         else module for alias in node.names)
    return {name for name in names if name in MODULES} - {this}


def imported_packages(path):
    """The first-level gluondet packages ``path`` imports (absolute or relative imports)."""
    return {name.split('.')[1] for name in imported_modules(path) if name != 'gluondet'}


@pytest.mark.parametrize('package', sorted(FORBIDDEN))
def test_package_imports_point_one_way(package):
    files = glob.glob(os.path.join(PACKAGE, package, '**', '*.py'), recursive=True)
    assert files
    bad = {os.path.relpath(path, PACKAGE): sorted(imported_packages(path)
                                                  & set(FORBIDDEN[package]))
           for path in files}
    assert not {path: names for path, names in bad.items() if names}


def test_the_checker_sees_relative_and_absolute_imports():
    here = os.path.join(PACKAGE, 'tasks', 'base.py')
    assert {'data', 'deploy', 'engine', 'metrics', 'model_zoo'} <= imported_packages(here)


def test_importing_every_deploy_module_loads_no_task_no_engine_and_no_tool():
    modules = sorted(os.path.splitext(os.path.basename(p))[0]
                     for p in glob.glob(os.path.join(PACKAGE, 'deploy', '*.py')))
    code = ('import importlib, sys\n'
            'for name in %r:\n'
            '    importlib.import_module("gluondet.deploy." + name if name != "__init__" '
            'else "gluondet.deploy")\n'
            'print(" ".join(sorted(m for m in sys.modules if m.startswith(("gluondet.tasks", '
            '"gluondet.engine", "gluondet.cli", "gluondet.tools")))))' % modules)
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ''


def test_the_training_json_reader_loads_nothing_of_deploy_nor_mxnet():
    """Tasks and prune read a trained model's json through gluondet.metadata, which must not
    bring deploy's runners and exporters (nor MXNet) with it."""
    code = ('import sys, gluondet.metadata\n'
            'print(" ".join(sorted(m for m in sys.modules if m == "mxnet" or m.startswith(('
            '"gluondet.deploy", "gluondet.engine", "gluondet.model_zoo")))))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ''


# Issue 24 item 5: the layers below the engine reach the active runtime through
# gluondet.collectives, never through the engine or anything above it.
BELOW_THE_ENGINE = ('collectives', 'nn', 'losses', 'model_zoo', 'data', 'metrics')
ABOVE_THEM = ('engine', 'deploy', 'tasks', 'cli', 'tools')


@pytest.mark.parametrize('below', BELOW_THE_ENGINE)
def test_the_layers_below_the_engine_import_nothing_above_them(below):
    prefix = 'gluondet.' + below
    modules = [name for name in MODULES if name == prefix or name.startswith(prefix + '.')]
    assert modules
    bad = {name: sorted(imported_packages(MODULES[name]) & set(ABOVE_THEM)) for name in modules}
    assert not {name: packages for name, packages in bad.items() if packages}


def import_graph(node=lambda module: module):
    """``{node: set of nodes}``: who imports whom among gluondet's modules, each module mapped
    to its node by ``node`` (itself, or its first-level package); no self-edges."""
    graph = {}
    for module, path in MODULES.items():
        graph.setdefault(node(module), set()).update(node(name) for name in imported_modules(path))
    return {name: targets - {name} for name, targets in graph.items()}


def first_level(module):
    """``gluondet.engine.hooks`` -> ``gluondet.engine``; ``gluondet.losses`` stays."""
    return '.'.join(module.split('.')[:2])


def cycle_edges(graph):
    """The edges ``(a, b)`` of ``graph`` on a cycle (``a`` is reachable from ``b``), sorted."""
    def reaches(start, goal):
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return False
    return sorted((a, b) for a, targets in graph.items() for b in targets if reaches(b, a))


def test_the_cycle_finder():
    assert cycle_edges({'a': {'b'}, 'b': {'c'}, 'c': {'a', 'd'}, 'd': set()}) == [
        ('a', 'b'), ('b', 'c'), ('c', 'a')]
    assert cycle_edges({'a': {'b'}, 'b': {'c'}, 'c': set()}) == []
    # an import inside a function is an edge too (engine/curves.py draws with plots lazily)
    assert 'gluondet.plots' in imported_modules(MODULES['gluondet.engine.curves'])


# A cycle counts the imports inside functions too: such a lazy import hides a cycle (the
# module imported first must not need the other at import time) but does not remove it.
# Importing ``a.b`` also runs ``a/__init__.py``: that is not an edge (every package that
# re-exports its modules would be a cycle), only the module named is.
def test_no_module_imports_itself_back():
    assert cycle_edges(import_graph()) == []


def test_no_package_imports_itself_back():
    """No cycle among gluondet's first-level packages and modules (``gluondet.engine``,
    ``gluondet.losses``, ...), counting the imports inside functions."""
    assert cycle_edges(import_graph(first_level)) == []


LOADERS = ('spec_from_file_location', 'run_path', 'SourceFileLoader', 'load_source')


def loads_scripts(path):
    """Where ``path`` imports ``scripts``, names a ``scripts`` folder or loads a Python file by
    its path (`LOADERS`): ``['line 7: ...']``."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ''] if not node.level else []
        else:
            modules = []
        if any(module.split('.')[0] == 'scripts' for module in modules):
            found.append('line %d: imports scripts' % node.lineno)
        elif isinstance(node, ast.Constant) and node.value == 'scripts':
            found.append("line %d: names the 'scripts' folder" % node.lineno)
        elif isinstance(node, ast.Call):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(
                node.func, 'id', '')
            if func in LOADERS:
                found.append('line %d: loads a file by path (%s)' % (node.lineno, func))
    return found


def test_the_scripts_finder(tmp_path):
    path = tmp_path / 'loader.py'
    path.write_text("import os, runpy\nimport scripts.train_ssd\n"
                    "runpy.run_path(os.path.join('scripts', 'train_ssd.py'))\n")
    assert loads_scripts(str(path)) == [
        'line 2: imports scripts', 'line 3: loads a file by path (run_path)',
        "line 3: names the 'scripts' folder"]


def test_nothing_in_gluondet_loads_scripts():
    found = {os.path.relpath(path, PACKAGE).replace(os.sep, '/'): loads_scripts(path)
             for path in MODULES.values()}
    assert not {path: lines for path, lines in found.items() if lines}
