"""Pictures written without being asked: training curves, ``gluondet plot``, ``gluondet
evaluate --plots``; and the confusion matrix they draw."""
import functools
import hashlib
import json
import math
import os
import types

import numpy as np
import pytest

from gluondet import plots
from gluondet.cli import main
from gluondet.data import DemoDetection
from gluondet.data.preprocess import fixed_size
from gluondet.deploy import commands
from gluondet.deploy.predictor import Predictor
from gluondet.engine import CurvesHook, HookBase, fit
from gluondet.metrics import VOC07MApMetric, VOCMApMetric
from gluondet.metrics.confusion import ConfusionMatrix, match_detections
from test_engine_toy import ToyTask, toy_config
from test_evaluation import GridRunner

image = pytest.importorskip('matplotlib.image')


def assert_picture(path, size=None, least=(300, 200)):
    """``path`` is a PNG of ``size`` (width, height) pixels, or at least ``least``, and not
    blank (more than one colour)."""
    pixels = image.imread(path)
    height, width = pixels.shape[:2]
    if size is not None:
        assert (width, height) == size
    assert width >= least[0] and height >= least[1]
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 1 and pixels[..., :3].var() > 0


def _same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


# ---------------------------------------------------------------- confusion matrix

def _matrix(dets, gts, num_classes=3, iou=0.5, score=0.25, difficult=None):
    """The matrix of one image: ``dets`` rows ``(x0, y0, x1, y1, class, score)``, ``gts``
    rows ``(x0, y0, x1, y1, class)``."""
    dets = np.array(dets, np.float32).reshape(-1, 6)
    gts = np.array(gts, np.float32).reshape(-1, 5)
    cm = ConfusionMatrix(num_classes, iou, score)
    cm.update(dets[None, :, :4], dets[None, :, 4], dets[None, :, 5], gts[None, :, :4],
              gts[None, :, 4], None if difficult is None else np.array([difficult]))
    return cm.get()


def test_confusion_counts_hits_confusions_misses_and_false_detections():
    gts = [(0, 0, 9, 9, 0), (20, 20, 29, 29, 1), (40, 40, 49, 49, 2)]
    dets = [(0, 0, 9, 9, 0, 0.9),          # class 0 found
            (20, 20, 29, 30, 2, 0.8),      # class 1 taken for class 2
            (60, 60, 69, 69, 1, 0.7),      # on nothing: a false detection of class 1
            (40, 40, 49, 49, 2, 0.1)]      # would find class 2, but scores under 0.25
    m = _matrix(dets, gts)
    expected = np.zeros((4, 4), int)
    expected[0, 0] = 1
    expected[2, 1] = 1
    expected[1, 3] = 1      # background column: false detection
    expected[3, 2] = 1      # background row: the class-2 ground truth missed
    assert (m == expected).all()
    expected[2, 2], expected[3, 2] = 1, 0     # counted with a lower score threshold
    assert (_matrix(dets, gts, score=0.05) == expected).all()


def test_confusion_pairs_each_ground_truth_once_and_prefers_its_own_class():
    gt = [(0, 0, 9, 9, 1)]
    # a duplicate of the right class is a false detection
    m = _matrix([(0, 0, 9, 9, 1, 0.9), (0, 0, 9, 10, 1, 0.8)], gt)
    assert m[1, 1] == 1 and m[1, 3] == 1 and m.sum() == 2
    # a wrong class of higher IoU and score does not take it from the right one
    m = _matrix([(0, 0, 9, 9, 0, 0.9), (0, 0, 9, 11, 1, 0.5)], gt)
    assert m[1, 1] == 1 and m[0, 3] == 1 and m.sum() == 2
    # among the same class, the higher IoU wins; equal IoU: the higher score
    paired = match_detections(np.array([[0, 0, 9, 12], [0, 0, 9, 10], [0, 0, 9, 10.]]),
                              np.array([1, 1, 1]), np.array([0.9, 0.5, 0.6]),
                              np.array([[0, 0, 9, 9.]]), np.array([1]))
    assert paired.tolist() == [-1, -1, 0]


def test_confusion_iou_is_the_voc_metrics_inclusive_pixels():
    # inclusive pixels: 10 x 10 boxes overlapping 5 x 10 have IoU 50 / 150 = 1/3
    dets, gts = [(0, 0, 9, 9, 0, 0.9)], [(5, 0, 14, 9, 0)]
    assert _matrix(dets, gts, iou=0.33)[0, 0] == 1
    assert _matrix(dets, gts, iou=0.34)[0, 0] == 0
    voc = VOCMApMetric(iou_thresh=0.33)
    voc.update(np.array([[[0, 0, 9, 9]]]), np.array([[0]]), np.array([[0.9]]),
               np.array([[[5, 0, 14, 9]]]), np.array([[0]]))
    assert voc.get()[1] == 1.0     # the metric's match at the same threshold


def test_confusion_skips_difficult_ground_truths_padding_and_checks_class_ids():
    gts = [(0, 0, 9, 9, 0), (20, 20, 29, 29, 1), (-1, -1, -1, -1, -1)]
    dets = [(0, 0, 9, 9, 0, 0.9), (-1, -1, -1, -1, -1, -1)]
    m = _matrix(dets, gts, difficult=[1, 1, 0])
    assert m.sum() == 0             # the hit on a difficult one and its miss do not count
    m = _matrix(dets, gts, difficult=[0, 1, 0])
    assert m[0, 0] == 1 and m.sum() == 1
    with pytest.raises(ValueError, match='class id 3, but the matrix has 3 classes'):
        _matrix([(0, 0, 9, 9, 3, 0.9)], gts)


# ---------------------------------------------------------------- evaluation pictures

def _filled_metrics(metric=VOC07MApMetric):
    """A VOC metric of 3 classes (the third without ground truth) and a confusion matrix,
    updated with the same random detections."""
    rng = np.random.RandomState(0)
    classes = ['cat', 'dog', 'bird']
    voc = metric(class_names=classes)
    cm = ConfusionMatrix(len(classes))
    for _ in range(6):
        gt = rng.randint(0, 80, (1, 4, 2)).astype(np.float32)
        gt_boxes = np.concatenate([gt, gt + 20], axis=2)
        gt_ids = rng.randint(0, 2, (1, 4))
        boxes = np.concatenate([gt_boxes + rng.uniform(-5, 5, gt_boxes.shape),
                                rng.uniform(0, 100, (1, 3, 4))], axis=1)
        ids = np.concatenate([gt_ids, rng.randint(0, 3, (1, 3))], axis=1)
        scores = rng.uniform(0, 1, ids.shape)
        for m in (voc, cm):
            m.update(boxes, ids, scores, gt_boxes, gt_ids)
    return voc, cm, classes


@pytest.mark.parametrize('metric', [VOC07MApMetric, VOCMApMetric])
def test_curves_are_the_curves_of_the_printed_aps(metric):
    voc, _, classes = _filled_metrics(metric)
    names, values = voc.get()
    curves = voc.curves()
    assert len(curves) == len(classes)
    assert all(_same(c.ap, v) for c, v in zip(curves, values[:-1]))
    assert curves[2].num_gt == 0 and curves[2].recall.size == 0 and math.isnan(values[2])
    assert curves[0].num_gt > 0 and curves[0].recall[-1] <= 1 and curves[0].precision.size


def test_evaluation_plots_draw_what_the_metric_prints(tmp_path):
    voc, cm, classes = _filled_metrics()
    names, values = voc.get()
    drawn = plots.evaluation_plots(voc, cm, str(tmp_path / 'plots'), 'VOC07 11-point AP')
    files = [str(tmp_path / 'plots' / n) for n in plots.EVALUATION_FILES]
    assert list(drawn) == files
    for path in files:
        assert_picture(path)
    for ap_drawn in (drawn[files[0]], drawn[files[2]]):
        assert list(ap_drawn) == classes
        assert all(_same(ap_drawn[n], v) for n, v in zip(names[:-1], values[:-1]))
    assert (drawn[files[1]] == cm.get()).all() and cm.get().sum() > 0
    assert sorted(os.listdir(str(tmp_path / 'plots'))) == sorted(plots.EVALUATION_FILES)


class ClassGridRunner(GridRunner):
    """`GridRunner` with the boxes spread over the demo's five classes."""

    def __call__(self, batch):
        ids, scores, boxes = super().__call__(batch)
        ids[:] = (np.arange(ids.shape[1]) % 5)[None, :, None]
        return ids, scores, boxes


def test_evaluate_plots_writes_the_three_pictures(tmp_path, monkeypatch, capsys):
    data = DemoDetection('val', num_images=6, image_size=64, root=str(tmp_path / 'demo'))
    predictor = Predictor(ClassGridRunner(), data.classes, fixed_size(48))
    monkeypatch.setattr(commands.Predictor, 'from_model', lambda *args, **kwargs: predictor)
    monkeypatch.setattr(commands, 'resolve_dataset', lambda *args, **kwargs: data)
    folder = tmp_path / 'plots'
    assert main(['evaluate', '-m', 'grid', '--dataset', 'voc', '--plots', str(folder),
                 '--confusion-score', '0.1']) == 0
    out = capsys.readouterr().out
    for name in plots.EVALUATION_FILES:
        assert_picture(str(folder / name))
    assert 'pictures written: %s' % (folder / 'pr_curves.png') in out

    result = commands.evaluate_model('grid', 'voc', plots=str(tmp_path / 'again'), progress=False)
    drawn = result.pop('plots')
    for name in (plots.EVALUATION_FILES[0], plots.EVALUATION_FILES[2]):
        aps = drawn[str(tmp_path / 'again' / name)]
        assert list(aps) == list(data.classes)
        assert all(_same(aps[n], result['AP/' + n]) for n in data.classes)
        for n in data.classes:     # what was printed
            assert '  %-8s %.4f' % (n, result['AP/' + n]) in out
    matrix = drawn[str(tmp_path / 'again' / 'confusion_matrix.png')]
    labels = [data[i][1] for i in range(len(data))]
    assert matrix[:5].sum(axis=0)[:5].sum() + matrix[5, :5].sum() == sum(len(x) for x in labels)


# ---------------------------------------------------------------- training curves

_config = functools.partial(toy_config, epochs=2, lr_decay_epoch=(6,))


class AfterValidation(HookBase):
    """After each validation (and after `CurvesHook`): the picture's digest."""

    def __init__(self, path):
        self.path, self.digests = path, []

    def after_validation(self, epoch, metrics):
        with open(self.path, 'rb') as f:
            self.digests.append(hashlib.sha1(f.read()).hexdigest())


def test_training_draws_its_curves_at_each_validation(tmp_path, monkeypatch):
    calls = []
    real = plots.draw_curves

    def spy(runs, path, metric='mAP', title=None):
        calls.append(real(runs, path, metric, title))
        return calls[-1]

    monkeypatch.setattr(plots, 'draw_curves', spy)
    cfg = _config(tmp_path)
    path = cfg.save_prefix + '_curves.png'
    seen = AfterValidation(path)
    fit(ToyTask(), cfg, hooks=[seen])
    assert len(seen.digests) == 2 and seen.digests[0] != seen.digests[1]
    assert len(calls) == 2      # once per validation: the epochs' ends add no new record
    assert_picture(path, size=(840, 640))     # 2 losses, lr, mAP: 2 x 2 panels
    first, second = calls
    assert list(second) == ['loss_l2', 'loss_l1', 'lr', 'mAP']
    epochs, maps = second['mAP']['toy']
    with open(cfg.save_prefix + '_metrics.jsonl') as f:
        records = [json.loads(line) for line in f]
    assert epochs.tolist() == [1.0, 2.0] and len(first['mAP']['toy'][0]) == 1
    assert maps.tolist() == [r['metrics']['mAP'] for r in records if r['type'] == 'val']
    x, losses = second['loss_l2']['toy']
    assert x.tolist() == [0.5, 1.0, 1.5, 2.0]     # 8 steps per epoch, logged every 4
    assert losses.tolist() == [r['losses']['loss_l2'] for r in records if r['type'] == 'train']
    assert not [n for n in os.listdir(str(tmp_path / 'run')) if '.tmp' in n]


def test_training_without_validation_draws_at_each_epoch_end(tmp_path):
    cfg = _config(tmp_path, epochs=1, val_interval=0)
    fit(ToyTask(num_train=32), cfg)
    assert_picture(cfg.save_prefix + '_curves.png', size=(840, 640))


def test_training_without_matplotlib_warns_once_and_goes_on(tmp_path, monkeypatch):
    def missing():
        raise ImportError('drawing needs matplotlib: pip install matplotlib')

    monkeypatch.setattr(plots, 'require_matplotlib', missing)
    cfg = _config(tmp_path)
    result = fit(ToyTask(), cfg)
    assert result.epoch == 2 and not os.path.exists(cfg.save_prefix + '_curves.png')
    with open(cfg.save_prefix + '_train.log') as f:
        warnings = [line for line in f if 'curves.png' in line]
    assert warnings == ['warning: %s_curves.png not drawn: drawing needs matplotlib: pip '
                        'install matplotlib\n' % cfg.save_prefix]


def test_only_the_first_process_draws(tmp_path):
    prefix = str(tmp_path / 'toy')
    with open(prefix + '_metrics.jsonl', 'w') as f:
        f.write(json.dumps(_train_record(0, 3, 4, 0.1)) + '\n')
    reporter = types.SimpleNamespace(jsonl_path=prefix + '_metrics.jsonl',
                                     jsonl_offset=lambda: 10, info=print)
    hook = CurvesHook(reporter, prefix)
    for is_main in (False, True):
        hook.loop = types.SimpleNamespace(runtime=types.SimpleNamespace(is_main=is_main),
                                          state=types.SimpleNamespace(batches_per_epoch=8))
        hook.after_validation(0, {})
        assert os.path.exists(prefix + '_curves.png') == is_main


# ---------------------------------------------------------------- metrics files, gluondet plot

def _train_record(epoch, batch, iteration, loss, lr=0.01, name='loss_cls'):
    return {'type': 'train', 'epoch': epoch, 'batch': batch, 'iteration': iteration, 'lr': lr,
            'samples_per_sec': 10.0, 'losses': {name: loss}, 'time': 0.0}


def _write_run(prefix, per_epoch, epochs, name='loss_cls', offset=0.0):
    with open(prefix + '_metrics.jsonl', 'w') as f:
        for epoch in range(epochs):
            for batch in (per_epoch // 2 - 1, per_epoch - 1):
                it = epoch * per_epoch + batch + 1
                f.write(json.dumps(_train_record(epoch, batch, it, 1.0 / it + offset,
                                                 name=name)) + '\n')
            f.write(json.dumps({'type': 'val', 'epoch': epoch, 'iteration': (epoch + 1) *
                                per_epoch, 'metrics': {'mAP': 0.1 * epoch + offset},
                                'time': 0.0}) + '\n')


def test_metrics_log_reads_new_lines_only_and_waits_for_a_whole_line(tmp_path):
    path = str(tmp_path / 'm_metrics.jsonl')
    line = json.dumps(_train_record(1, 4, 15, None))    # a non-finite loss is null
    with open(path, 'w') as f:
        f.write(line + '\n' + line[:20])
    log = plots.MetricsLog(path).read()
    assert len(log.train) == 1
    with open(path, 'a') as f:
        f.write(line[20:] + '\n')
    assert len(log.read().train) == 2
    assert log.iters_per_epoch() == 10      # iteration 15 = epoch 1 * 10 + batch 4 + 1
    curves = log.curves()
    assert curves.epoch.tolist() == [1.5, 1.5] and np.isnan(curves.losses['loss_cls']).all()
    with open(path, 'w') as f:             # cut (a resumed run): read again from the start
        f.write('{"type": "train"}\n')
    with pytest.raises(ValueError, match=r'm_metrics.jsonl, line 1: not a metrics record'):
        log.read()


def test_plot_overlays_runs(tmp_path, monkeypatch, capsys):
    calls = []
    real = plots.draw_curves
    monkeypatch.setattr(plots, 'draw_curves',
                        lambda *args: calls.append(real(*args)) or calls[-1])
    (tmp_path / 'a').mkdir()
    (tmp_path / 'b').mkdir()
    _write_run(str(tmp_path / 'a' / 'ssd'), 10, 3)
    _write_run(str(tmp_path / 'b' / 'retina'), 6, 2, name='loss_box', offset=0.05)
    out = str(tmp_path / 'both.png')
    assert main(['plot', str(tmp_path / 'a' / 'ssd'), str(tmp_path / 'b' / 'retina_metrics.jsonl'),
                 '-o', out]) == 0
    assert capsys.readouterr().out == '%s: the curves of 2 runs\n' % out
    assert_picture(out, size=(840, 640))      # 2 losses, lr, mAP: 2 x 2 panels
    drawn, = calls
    assert list(drawn) == ['loss_cls', 'loss_box', 'lr', 'mAP']
    assert list(drawn['loss_cls']) == ['ssd'] and list(drawn['loss_box']) == ['retina']
    assert list(drawn['lr']) == list(drawn['mAP']) == ['ssd', 'retina']
    assert drawn['mAP']['ssd'][0].tolist() == [1, 2, 3]
    assert drawn['mAP']['retina'][0].tolist() == [1, 2]
    assert drawn['loss_box']['retina'][0].tolist() == [0.5, 1, 1.5, 2]

    # the same base name twice: the legend names them by their prefixes
    _write_run(str(tmp_path / 'b' / 'ssd'), 6, 1)
    runs = [str(tmp_path / 'a' / 'ssd'), str(tmp_path / 'b' / 'ssd')]
    assert main(['plot'] + runs + ['-o', out]) == 0
    assert list(calls[-1]['lr']) == runs


def test_plot_names_a_missing_or_empty_metrics_file(tmp_path, capsys):
    missing = str(tmp_path / 'nothing')
    assert main(['plot', missing, '-o', str(tmp_path / 'x.png')]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ['gluondet plot: error: %s_metrics.jsonl: no such metrics file (%s is not '
                   'the save prefix of a training run)' % (missing, missing)]
    open(str(tmp_path / 'empty_metrics.jsonl'), 'w').close()
    assert main(['plot', str(tmp_path / 'empty'), '-o', str(tmp_path / 'x.png')]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ['gluondet plot: error: %s: no training or validation records in it'
                   % (tmp_path / 'empty_metrics.jsonl')]
    assert not os.path.exists(str(tmp_path / 'x.png'))

