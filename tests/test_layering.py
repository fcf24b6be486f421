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
    'deploy': ('tasks', 'engine', 'cli'),
    'data': ('tasks', 'engine', 'deploy', 'model_zoo', 'nn', 'cli'),
    'metrics': ('tasks', 'engine', 'deploy', 'model_zoo', 'cli'),
    'model_zoo': ('tasks', 'engine', 'deploy', 'data', 'metrics', 'cli'),
    'engine': ('tasks', 'model_zoo', 'deploy', 'cli'),
}


def imported_packages(path):
    """The first-level gluondet packages ``path`` imports (absolute or relative imports)."""
    module = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, '.')
    parts = module.split('.')
    if parts[-1] == '__init__':
        parts = parts[:-1]
    else:
        parts = parts[:-1]      # the package a relative import starts from
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[:len(parts) - node.level + 1]
                target = base + (node.module.split('.') if node.module else [])
                if not node.module:     # from .. import x: x may be a package
                    names.extend('.'.join(target + [alias.name]) for alias in node.names)
                else:
                    names.append('.'.join(target))
            else:
                names.append(node.module)
    return {name.split('.')[1] for name in names
            if name.startswith('gluondet.') and len(name.split('.')) > 1}


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


def test_importing_every_deploy_module_loads_no_task_and_no_engine():
    modules = sorted(os.path.splitext(os.path.basename(p))[0]
                     for p in glob.glob(os.path.join(PACKAGE, 'deploy', '*.py')))
    code = ('import importlib, sys\n'
            'for name in %r:\n'
            '    importlib.import_module("gluondet.deploy." + name if name != "__init__" '
            'else "gluondet.deploy")\n'
            'print(" ".join(sorted(m for m in sys.modules if m.startswith(("gluondet.tasks", '
            '"gluondet.engine", "gluondet.cli")))))' % modules)
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ''
