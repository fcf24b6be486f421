"""benchmarks/: a failed correctness check ends in a non-zero exit, and run_all reports it; the
YOLOv3 training benchmark's GluonCV loop trains at gluondet's sizes; the CenterNet one starts
both libraries from the same weights; the Mask R-CNN one gives both the same data and network."""
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


def test_mask_rcnn_bench_gives_both_libraries_the_same_data_and_network(tmp_path, monkeypatch):
    """bench_mask_rcnn_train: its COCO json of the demo's masks reads as the same masks and
    classes in both libraries (GluonCV's boxes end 1 px further: it reads ``x + w``), and both
    build the same network from its keywords, with the same trainable parameters and the same
    detections and masks from its starting file."""
    pytest.importorskip('gluoncv')
    import mxnet as mx
    from gluoncv.data import COCOInstance
    from gluoncv.data.transforms.mask import to_mask
    import bench_mask_rcnn_train as bench
    from gluondet.data import COCODetection
    from gluondet.model_zoo import get_model
    args = bench.parse_args(['--image-size', '128', '--steps', '2', '--warmup', '1'])
    args.data, args.weights = str(tmp_path), str(tmp_path / 'start.params')
    args.root, args.folder = bench.write_data(args)
    bench.write_weights(args)

    class Theirs(COCOInstance):
        CLASSES = bench._classes(args.root)

    theirs = Theirs(root=args.root, splits=[bench.SPLIT])
    ours = COCODetection(annotation_file=os.path.join(args.root, 'annotations',
                                                      bench.SPLIT + '.json'),
                         image_root=os.path.join(args.root, args.folder), masks=True)
    assert len(theirs) == len(ours) == 3 and list(ours.classes) == Theirs.CLASSES
    objects = 0
    for (_, label, polygons), (image, our_label, masks) in zip(theirs, ours):
        height, width = image.shape[:2]
        np.testing.assert_array_equal(label[:, 4], our_label[:, 4])
        np.testing.assert_allclose(label[:, :4], our_label[:, :4] + [0, 0, 1, 1])
        bitmaps = np.stack([to_mask(p, (width, height)) for p in polygons])
        np.testing.assert_array_equal(bitmaps, masks.bitmaps(height, width))
        assert bitmaps.sum(axis=(1, 2)).min() > 100
        objects += len(label)
    assert objects == 7

    # GluonCV's FPN pools other levels' ROIs with batch index -1, which MXNet's CPU ROIAlign
    # leaves uninitialized (tests/test_mask_rcnn.py): pool them all and zero those, as GPUs
    roi_align = mx.nd.contrib.ROIAlign

    def masked(data, rois, *a, **kw):
        out = roi_align(data, mx.nd.concat(mx.nd.relu(rois[:, :1]), rois[:, 1:], dim=1), *a, **kw)
        return mx.nd.where(rois[:, 0] >= 0, out, mx.nd.zeros_like(out))
    monkeypatch.setattr(mx.nd.contrib, 'ROIAlign', masked)
    fewer = dict(rpn_test_post_nms=100, rcnn_max_dets=20)      # a fast inference
    monkeypatch.setattr(bench, 'CUSTOM_MODEL', dict(bench.CUSTOM_MODEL, **fewer))
    ref = bench.gluoncv_net(args, ours.classes)
    ref.load_parameters(args.weights)
    net = get_model('custom_mask_rcnn_fpn', **bench.network_kwargs(args, ours.classes))
    net.load_parameters(args.weights)
    mx.random.seed(0)
    x = mx.nd.random.uniform(-1, 1, (1, 3, 128, 128))
    expected, result = ([o.asnumpy() for o in n(x)] for n in (ref, net))
    # (after a forward: GluonCV's FPN is a SymbolBlock, whose parameters get their data there)
    shapes = [sorted(p.data().shape for p in n.collect_train_params().values()) for n in (ref, net)]
    assert shapes[0] == shapes[1] and sum(np.prod(s) for s in shapes[1]) > 3e7
    assert result[3].shape == (1, 20, 28, 28)
    np.testing.assert_array_equal(result[0], expected[0])
    for theirs_out, ours_out, tolerance in zip(expected[1:], result[1:], (1e-4, 1e-2, 1e-4)):
        np.testing.assert_allclose(ours_out, theirs_out, atol=tolerance)
    assert result[3].std() > 1e-3          # masks that differ, not one constant
