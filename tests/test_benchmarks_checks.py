"""benchmarks/: a failed correctness check ends in a non-zero exit, and run_all reports it."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'benchmarks'))
import common      # noqa: E402  (benchmarks/common.py)
import run_all     # noqa: E402


def test_checks_pass_and_fail(capsys):
    checks = common.Checks()
    assert checks.check(True, 'unused')
    assert checks.status() == 0
    checks.exit()                       # nothing failed: returns
    assert not checks.check(False, 'scores differ by 0.5')
    assert checks.status() == 1
    with pytest.raises(SystemExit) as err:
        checks.exit()
    assert err.value.code == 1
    out = capsys.readouterr().out
    assert 'CHECK FAILED: scores differ by 0.5' in out
    assert 'FAILED: 1 of 2 checks' in out


def test_run_all_reports_a_failed_benchmark(tmp_path, monkeypatch, capsys):
    (tmp_path / 'bench_good.py').write_text('print("fine")\n')
    (tmp_path / 'bench_bad.py').write_text(
        'import sys\nsys.path.insert(0, %r)\nfrom common import Checks\nc = Checks()\n'
        'c.check(False, "mAP differs")\nsys.exit(c.status())\n' % os.path.dirname(common.__file__))
    monkeypatch.setattr(run_all, 'HERE', str(tmp_path))
    with pytest.raises(SystemExit) as err:
        run_all.main([])
    assert 'bench_bad.py' in str(err.value) and 'bench_good.py' not in str(err.value)
    out = capsys.readouterr().out
    assert 'bench_good.py' in out and 'passed' in out
    assert 'FAILED (exit status 1)' in out
    with pytest.raises(SystemExit, match='no such benchmark: bench_nothing'):
        run_all.main(['bench_nothing'])
