"""benchmarks/: a failed correctness check ends in a non-zero exit, and run_all reports it; the
YOLOv3 training benchmark's GluonCV loop trains at gluondet's sizes; the CenterNet one starts
both libraries from the same weights."""
import os
import sys

import numpy as np
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


class _Side:
    """A transform of GluonCV's YOLOv3 kind (``_width``): each sample becomes its side."""

    def __init__(self, side):
        self._width = self._height = side

    def __call__(self, item):
        return np.array([self._width], np.float32)


@pytest.mark.parametrize('workers', [0, 2])
def test_yolo3_bench_gluoncv_loader_replays_gluondet_sizes(monkeypatch, workers):
    """bench_yolo3_train: GluonCV's random-shape loader makes each batch at the size gluondet's
    sampler gives its step (the benchmark checks it again on every run)."""
    pytest.importorskip('gluoncv')
    from gluoncv.data import dataloader
    from mxnet import gluon
    import bench_yolo3_train as bench
    args = bench.parse_args(['--sizes', 'random', '--steps', '30', '--warmup', '2'])
    args.mode = 'random'
    sides = bench.size_sequence(args)
    assert len(sides) == 32 and len(set(sides)) > 1
    loader = dataloader.RandomTransformDataLoader(
        [_Side(s) for s in bench.RANDOM_SHAPES], gluon.data.SimpleDataset(list(range(64))),
        interval=bench.INTERVAL, batch_size=2, num_workers=workers)
    monkeypatch.setattr(dataloader, 'np', dataloader.np)     # restored after the test
    bench.replay_sizes(sides)
    made = [batch.asnumpy() for batch in loader]
    assert [b.ravel().tolist() for b in made] == [[s, s] for s in sides]


def test_center_net_bench_starts_both_libraries_from_the_same_weights(tmp_path):
    """bench_center_net_train: the starting file (GluonCV's network for BCCD's classes) loads
    into gluondet's ``_custom`` network, and both compute the same maps from it."""
    pytest.importorskip('gluoncv')
    import mxnet as mx
    from mxnet import autograd
    import bench_center_net_train as bench
    from gluondet.model_zoo import get_model
    args = bench.parse_args(['--data-shape', '128'])
    args.weights = str(tmp_path / 'start.params')
    bench.run_weights(args)
    theirs = bench.gluoncv_net(args)
    theirs.load_parameters(args.weights)
    ours = get_model(args.network + '_custom', classes=bench.CLASSES, pretrained_base=False,
                     size=128)
    ours.load_parameters(args.weights)
    x = mx.nd.random.uniform(-2, 2, (2, 3, 128, 128))
    with autograd.train_mode():
        maps = [[m.asnumpy() for m in net(x)] for net in (theirs, ours)]
    assert [m.shape for m in maps[1]] == [(2, 3, 32, 32), (2, 2, 32, 32), (2, 2, 32, 32)]
    for a, b in zip(*maps):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert maps[1][1].std() > 0          # random weights, not zeros
