"""gluondet export / infer / evaluate: files written, round trips, and equality with validation."""
import json
import math
import os
import shutil
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

from gluondet.cli import main
from gluondet.data import VOCDetection
from gluondet.data.base import read_image
from gluondet.data.coco import coco_to_xyxy  # GluonCV's reading, inverse of infer's
from gluondet.data.kitti import parse_kitti_label
from gluondet.data.preprocess import fixed_size
from gluondet.deploy.commands import evaluate_model, infer
from gluondet.deploy.networks import load_network
from gluondet.deploy.predictor import Predictor
from gluondet.detections import Detections
from gluondet.deploy.runners import MXNetRunner
from gluondet.metrics import VOC07MApMetric, coco_evaluate
from gluondet.metrics import evaluation
from gluondet.tasks import SSDTask
from test_deploy_predictor import (DATA_SHAPE, NETWORK, SMALL_SPLIT,  # noqa: F401
                                   SMALL_SPLIT_SIZE, assert_same_detections, small_bccd,
                                   trained_model)

onnx = pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')


@pytest.fixture(scope='module')
def small(trained_model, bccd_root):
    """``(voc folder, coco json, folder of the 12 images)`` of the small BCCD split."""
    voc, coco = small_bccd(bccd_root, trained_model[2])
    folder = os.path.join(trained_model[2], 'small_images')
    if not os.path.isdir(folder):
        os.makedirs(folder)
        with open(os.path.join(voc, 'ImageSets', 'Main', SMALL_SPLIT + '.txt')) as f:
            for name in f.read().split():
                os.symlink(os.path.realpath(os.path.join(voc, 'JPEGImages', name + '.jpg')),
                           os.path.join(folder, name + '.jpg'))
    return voc, coco, folder


def _onnx_meta(path):
    return {p.key: json.loads(p.value) for p in onnx.load(path).metadata_props}


# ---------------------------------------------------------------- export

def test_export_symbol_and_onnx(trained_model, tmp_path):
    params = trained_model[0]
    prefix = str(tmp_path / 'symbol' / 'ssd')
    assert main(['export', '--network', params, '--format', 'symbol', '-o', prefix]) == 0
    assert os.path.isfile(prefix + '-symbol.json') and os.path.isfile(prefix + '-0000.params')
    with open(prefix + '-meta.json') as f:
        meta = json.load(f)
    assert meta['network'] == NETWORK and meta['data_shape'] == [128, 128]
    assert len(meta['classes']) == 8 and meta['batch_size'] is None

    path = str(tmp_path / 'ssd.onnx')      # as a module, a zoo name with --params
    out = subprocess.run([sys.executable, '-m', 'gluondet', 'export', '--network', NETWORK,
                          '--params', params, '--format', 'onnx', '-o', path, '--batch-size',
                          '2'], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    meta = _onnx_meta(path)
    assert meta['batch_size'] == 2 and meta['network'] == NETWORK
    assert meta['classes'] == list(Predictor.from_model(params).classes)
    assert Predictor.from_model(path).batch_range == (2, 2)


def test_export_tensorrt_fails_clearly_after_writing_the_onnx(trained_model, tmp_path, capsys):
    engine = str(tmp_path / 'ssd.engine')
    code = main(['export', '--network', trained_model[0], '--format', 'tensorrt', '-o', engine,
                 '--dynamic-batch', '--batch-size', '4', '--precision', 'fp16'])
    err = capsys.readouterr().err
    assert code == 1
    assert 'gluondet export: error: the ONNX model is written to %s' % engine[:-7] in err
    assert 'TensorRT is needed' in err and 'NVIDIA GPU' in err
    assert _onnx_meta(str(tmp_path / 'ssd.onnx'))['batch_size'] is None
    assert sorted(os.listdir(str(tmp_path))) == ['ssd.onnx']


@pytest.mark.parametrize('argv, message', [
    (['--format', 'onnx', '-o', 'm.onnx', '--batch-size', '2', '--dynamic-batch'],
     'a fixed batch size or a dynamic batch, not both'),
    (['--format', 'symbol', '-o', 'm', '--batch-size', '2'], 'takes any batch'),
    (['--format', 'onnx', '-o', 'm.onnx', '--precision', 'fp16'], 'for the tensorrt format'),
    (['--format', 'onnx', '-o', 'm.engine'], 'must end with .onnx'),
    (['--format', 'tensorrt', '-o', 'm.onnx'], 'must end with .engine'),
    (['--format', 'tensorrt', '-o', 'm.engine', '--precision', 'int8'],
     'int8 calibration needs images'),
    (['--format', 'onnx', '-o', 'm.onnx', '--precision', 'int8'],
     'int8 calibration needs images'),
    (['--format', 'tensorrt', '-o', 'm.engine', '--precision', 'int8', '--calibration-method',
      'percentile'], 'for the onnx and openvino formats'),
    (['--format', 'symbol', '-o', 'm', '--precision', 'fp32'],
     'onnx, openvino and tensorrt formats'),
    (['--format', 'onnx', '-o', 'm.onnx', '--calibration-batches', '2'], 'for int8 precision'),
])
def test_export_refuses_what_it_cannot_do(trained_model, tmp_path, capsys, argv, message):
    argv = [str(tmp_path / a) if a.startswith('m') else a for a in argv]
    assert main(['export', '--network', trained_model[0]] + argv) == 1
    assert message in capsys.readouterr().err
    assert os.listdir(str(tmp_path)) == []


def test_export_int8_onnx_calibrated_on_images(trained_model, small, tmp_path):
    """ONNX Runtime's int8 model: QDQ convolutions, float post-processing, metadata kept,
    a reusable cache; run by the predictor, it finds the float model's confident boxes."""
    params, metrics = trained_model[:2]
    images = tmp_path / 'calib'
    images.mkdir()
    for name in sorted(os.listdir(small[2])):
        os.symlink(os.path.join(small[2], name), str(images / name))
    (images / 'broken.jpg').write_bytes(b'\xff\xd8 not a jpeg')
    path, cache = str(tmp_path / 'int8.onnx'), str(tmp_path / 'ranges.json')
    with pytest.warns(UserWarning, match='broken.jpg'):
        assert main(['export', '--network', params, '--format', 'onnx', '-o', path,
                     '--batch-size', '2', '--precision', 'int8', '--calibration-images',
                     str(images), '--calibration-method', 'minmax', '--calibration-cache',
                     cache]) == 0
    assert sorted(os.listdir(str(tmp_path))) == ['calib', 'int8.onnx', 'ranges.json']
    model = onnx.load(path)
    ops = [node.op_type for node in model.graph.node]
    assert ops.count('DequantizeLinear') > ops.count('Conv') > 0
    assert 'NonMaxSuppression' in ops
    meta = _onnx_meta(path)
    assert meta['precision'] == 'int8' and meta['batch_size'] == 2
    assert meta['calibration'] == {'method': 'minmax', 'batches': 6, 'images': 12, 'skipped': 1}
    assert len(meta['classes']) == 8

    again = str(tmp_path / 'again.onnx')       # from the cache alone: the same model
    assert main(['export', '--network', params, '--format', 'onnx', '-o', again,
                 '--batch-size', '2', '--precision', 'int8', '--calibration-method', 'minmax',
                 '--calibration-cache', cache]) == 0
    assert _onnx_meta(again)['calibration'] == {'method': 'minmax', 'cache': 'ranges.json'}
    assert ([i.raw_data for i in onnx.load(again).graph.initializer]
            == [i.raw_data for i in model.graph.initializer])
    assert main(['export', '--network', params, '--format', 'onnx', '-o', again,
                 '--batch-size', '2', '--precision', 'int8', '--calibration-method', 'percentile',
                 '--calibration-cache', cache]) == 1     # a cache of another method

    # the float model's confident detections, as ground truth, are found by the int8 model
    metric = VOC07MApMetric(iou_thresh=0.5)
    paths = sorted(os.path.join(small[2], n) for n in os.listdir(small[2]))
    for a, b in zip(Predictor.from_model(params).predict(paths),
                    Predictor.from_model(path).predict(paths, batch_size=2)):
        keep = a.detections.scores >= 0.3
        metric.update(b.detections.boxes[None], b.detections.ids[None],
                      b.detections.scores[None], a.detections.boxes[keep][None],
                      a.detections.ids[keep][None])
    assert metric.get()[1] >= 0.6, metric.get()     # 0.76 measured (the float model: 1)


# ---------------------------------------------------------------- infer

def test_infer_writes_coco_kitti_and_drawings(trained_model, small, tmp_path, caplog, capsys):
    params = trained_model[0]
    images = tmp_path / 'images'
    images.mkdir()
    for name in sorted(os.listdir(small[2]))[:3]:
        os.symlink(os.path.join(small[2], name), str(images / name))
    (images / 'zz_broken.jpg').write_bytes(b'\xff\xd8 not a jpeg')
    out = tmp_path / 'out'
    assert main(['infer', '--model', params, '--images', str(images), '--output',
                 str(out / 'det.json'), '--kitti-labels', str(out / 'kitti'), '--visualize',
                 str(out / 'drawn'), '--threshold', '0.3', '--batch-size', '2']) == 0
    assert 'zz_broken.jpg' in caplog.text
    printed = capsys.readouterr().out
    assert '3 images written to %s' % (out / 'det.json') in printed
    assert 'unreadable images skipped: 1' in printed

    with open(str(out / 'det.json')) as f:
        results = json.load(f)
    with open(str(out / 'det_images.json')) as f:
        index = json.load(f)
    names = sorted(os.listdir(str(images)))
    assert [(e['id'], e['file_name'], e['width']) for e in index['images']] == [
        (i + 1, name, 640) for i, name in enumerate(names[:3])]
    classes = Predictor.from_model(params).classes
    assert index['categories'] == [{'id': i + 1, 'name': c} for i, c in enumerate(classes)]

    # the json holds exactly the predictor's detections (boxes back through gluondet's reading)
    expected = list(Predictor.from_model(params).predict(
        [str(images / name) for name in names[:3]]))
    for item in expected:
        rows = [r for r in results if r['image_id'] == item.index + 1]
        found = item.detections
        assert len(rows) == len(found.ids) > 0
        np.testing.assert_array_equal([r['category_id'] - 1 for r in rows], found.ids)
        np.testing.assert_array_equal([r['score'] for r in rows], found.scores.astype(float))
        np.testing.assert_array_equal([coco_to_xyxy(r['bbox']) for r in rows],
                                      found.boxes.astype(float))

        objects = parse_kitti_label(str(out / 'kitti' / (names[item.index][:-4] + '.txt')))
        assert [kind for _, kind, _ in objects] == [classes[i] for i in found.ids]
        height, width = item.image.shape[:2]    # KITTI boxes are clipped to the image
        clipped = np.clip(found.boxes, 0, [width - 1, height - 1, width - 1, height - 1])
        np.testing.assert_allclose([box for _, _, box in objects], clipped, atol=0.006)

        drawn = read_image(str(out / 'drawn' / names[item.index])).asnumpy()
        assert drawn.shape == item.image.shape
        assert np.abs(drawn.astype(int) - item.image).max() > 100
    assert sorted(os.listdir(str(out / 'kitti'))) == [n[:-4] + '.txt' for n in names[:3]]

    broken = tmp_path / 'broken'
    broken.mkdir()
    shutil.copy(str(images / 'zz_broken.jpg'), str(broken / 'a.jpg'))
    assert main(['infer', '--model', params, '--images', str(broken), '--output',
                 str(out / 'none.json')]) == 1
    assert 'none of the 1 images in %s could be read' % broken in capsys.readouterr().err
    assert not os.path.exists(str(out / 'none.json'))

    pycocotools = pytest.importorskip('pycocotools.coco')
    loaded = pycocotools.COCO(str(out / 'det_images.json')).loadRes(str(out / 'det.json'))
    assert len(loaded.getAnnIds()) == len(results)


def test_infer_is_the_same_with_onnx_runtime(trained_model, small, tmp_path):
    params = trained_model[0]
    model = str(tmp_path / 'ssd.onnx')
    assert main(['export', '--network', params, '-o', model, '--dynamic-batch']) == 0
    found = {}
    for backend, source in (('mxnet', params), ('onnxruntime', model)):
        output = str(tmp_path / (backend + '.json'))
        assert main(['infer', '--model', source, '--backend', backend, '--images', small[2],
                     '--output', output]) == 0
        with open(output) as f:
            found[backend] = as_detections(json.load(f), SMALL_SPLIT_SIZE)
    assert_same_detections(found['mxnet'], found['onnxruntime'])


def as_detections(results, count):
    """COCO results rows back into per-image Detections (ids 1 to ``count``)."""
    out = []
    for image_id in range(1, count + 1):
        rows = [r for r in results if r['image_id'] == image_id]
        out.append(Detections(np.array([r['category_id'] - 1 for r in rows]),
                              np.array([r['score'] for r in rows]),
                              np.array([coco_to_xyxy(r['bbox']) for r in rows]).reshape(-1, 4)))
    return out


def test_tensorrt_backend_is_a_clear_error_here(trained_model, small, tmp_path, capsys):
    engine = tmp_path / 'ssd.engine'
    engine.write_bytes(b'an engine built elsewhere')
    (tmp_path / 'ssd.json').write_text(json.dumps({'classes': ['a'], 'data_shape': [128, 128]}))
    assert main(['infer', '--model', str(engine), '--images', small[2], '--output',
                 str(tmp_path / 'det.json')]) == 1
    err = capsys.readouterr().err
    assert 'gluondet infer: error: TensorRT is needed' in err and 'NVIDIA GPU' in err
    assert main(['infer', '--model', str(engine), '--backend', 'onnxruntime', '--images',
                 small[2]]) == 1
    assert "it runs with backend 'tensorrt', not 'onnxruntime'" in capsys.readouterr().err


# ---------------------------------------------------------------- evaluate

def _same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def test_evaluate_and_the_validation_of_training_are_one_code_path(trained_model, small,
                                                                   monkeypatch, capsys):
    """``gluondet evaluate`` and ``SSDTask.validate`` both run ``metrics.evaluation.evaluate``
    with a Predictor of the same preprocessing and runner over the same images and metric,
    and print / return what the training's own validation returned."""
    calls = []
    real = evaluation.evaluate

    def spy(predictor, dataset, metrics, *args, **kwargs):
        calls.append((predictor, dataset, [type(m) for m in metrics]))
        return real(predictor, dataset, metrics, *args, **kwargs)

    monkeypatch.setattr(evaluation, 'evaluate', spy)
    params, validation, _ = trained_model
    voc = small[0]
    assert main(['evaluate', '--model', params, '--dataset', 'voc', '--dataset-root', voc,
                 '--split', SMALL_SPLIT]) == 0
    out = capsys.readouterr().out
    assert 'VOC07 mAP (IoU 0.5) of %s (mxnet) on %d images: %.4f' % (
        params, SMALL_SPLIT_SIZE, validation['mAP']) in out
    assert '  RBC       %.4f' % validation['AP/RBC'] in out
    result = evaluate_model(params, 'voc', voc, SMALL_SPLIT, progress=False)
    net, info = load_network(params)
    data = VOCDetection(voc, splits=SMALL_SPLIT, classes=info['classes'])
    validated = SSDTask(NETWORK, data, data, DATA_SHAPE).validate(net, [mx.cpu()])
    assert len(calls) == 3
    (cli, cli_data, cli_metrics), (val, val_data, val_metrics) = calls[1:]
    assert cli.preprocessing == val.preprocessing == fixed_size(DATA_SHAPE)
    assert type(cli.runner) is type(val.runner) is MXNetRunner
    assert [cli_data.image_path(i) for i in range(len(cli_data))] == [
        val_data.image_path(i) for i in range(len(val_data))]
    assert cli_metrics == val_metrics == [VOC07MApMetric]
    assert validation['mAP'] > 0.01
    assert set(result) == set(validation) == set(validated)
    for k in validation:
        assert _same(result[k], validation[k]) and _same(validated[k], validation[k]), k


def test_evaluate_takes_a_labelimg_folder_and_split_as_training_does(trained_model, small,
                                                                    tmp_path, capsys):
    """The small split as a LabelImg folder (xml beside each jpg) in ``test/``: the
    ``--dataset-root``/``--split`` pair train_ssd.py takes gives the validation's mAP."""
    params, validation, _ = trained_model
    voc, _, folder = small
    split = tmp_path / 'labelimg' / 'test'
    split.mkdir(parents=True)
    for name in os.listdir(folder):
        os.symlink(os.path.join(folder, name), str(split / name))
        stem = os.path.splitext(name)[0]
        os.symlink(os.path.join(voc, 'Annotations', stem + '.xml'), str(split / (stem + '.xml')))
    assert main(['evaluate', '--model', params, '--dataset', 'voc', '--dataset-root',
                 str(tmp_path / 'labelimg'), '--split', 'test']) == 0
    assert 'on %d images: %.4f' % (SMALL_SPLIT_SIZE, validation['mAP']) in capsys.readouterr().out


@pytest.mark.parametrize('argv, message', [
    (['--dataset', 'voc', '--dataset-root', '/nowhere/at/all'],
     '/nowhere/at/all: dataset root: no such folder'),
    (['--dataset', 'coco', '--dataset-root', '/'], '/: layout: not a COCO dataset'),
    (['--dataset', 'kitti', '--dataset-root', '/', '--split', 'val'],
     '/val: split: not a KITTI split')])
def test_evaluate_reports_bad_data_in_one_line(trained_model, argv, message, capsys):
    assert main(['evaluate', '--model', trained_model[0]] + argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('gluondet evaluate: error: ' + message), err


def test_evaluate_plots_of_the_trained_ssd(trained_model, small, tmp_path, capsys):
    """``--plots`` on a real model (more in test_plots.py): the pictures, the same mAP."""
    from test_plots import assert_picture
    params, validation, _ = trained_model
    assert main(['evaluate', '--model', params, '--dataset', 'voc', '--dataset-root', small[0],
                 '--split', SMALL_SPLIT, '--plots', str(tmp_path)]) == 0
    assert ': %.4f' % validation['mAP'] in capsys.readouterr().out
    for name in ('pr_curves.png', 'confusion_matrix.png', 'ap_per_class.png'):
        assert_picture(str(tmp_path / name))


def test_evaluate_coco_equals_the_infer_results_scored(trained_model, small, tmp_path, capsys):
    params, validation, _ = trained_model
    voc, annotations, folder = small
    assert main(['evaluate', '--model', params, '--dataset', 'coco', '--annotation-file',
                 annotations, '--image-root', voc, '--batch-size', '5']) == 0
    out = capsys.readouterr().out
    assert 'Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ]' in out
    result = evaluate_model(params, 'coco', annotation_file=annotations, image_root=voc,
                            progress=False)
    assert result['mAP'] == validation['mAP']     # the COCO json holds the VOC xml's boxes
    assert result['coco']['AP50'] > 0

    summary = infer(params, folder, str(tmp_path / 'det.json'), progress=False)
    assert summary['images'] == SMALL_SPLIT_SIZE and not summary['skipped']
    # ids are ours: match images by file name and categories by name to the json's
    with open(str(tmp_path / 'det_images.json')) as f:
        ours = json.load(f)
    with open(annotations) as f:
        theirs = json.load(f)
    image_ids = {os.path.basename(e['file_name']): e['id'] for e in theirs['images']}
    image_ids = {e['id']: image_ids[e['file_name']] for e in ours['images']}
    category_ids = {c['name']: c['id'] for c in theirs['categories']}
    category_ids = {c['id']: category_ids.get(c['name'], -1) for c in ours['categories']}
    with open(str(tmp_path / 'det.json')) as f:
        results = [dict(r, image_id=image_ids[r['image_id']],
                        category_id=category_ids[r['category_id']])
                   for r in json.load(f) if r['score'] >= 0.05 and
                   category_ids[r['category_id']] > 0]   # COCODetectionMetric's threshold
    assert coco_evaluate(annotations, results) == result['coco']


def test_evaluate_kitti_against_its_own_confident_detections(trained_model, small, tmp_path):
    """KITTI labels written by infer read back as ground truth: the confident detections,
    clipped to their images as written, score as they do in memory."""
    params = trained_model[0]
    root = tmp_path / 'kitti'
    root.mkdir()
    os.symlink(small[2], str(root / 'image_2'))
    assert infer(params, small[2], str(tmp_path / 'det.json'), kitti_labels=str(tmp_path / 'all'),
                 progress=False)['detections'] > 0
    (root / 'label_2').mkdir()
    for name in os.listdir(str(tmp_path / 'all')):
        with open(str(tmp_path / 'all' / name)) as f:
            lines = [line for line in f if float(line.split()[-1]) >= 0.3]
        (root / 'label_2' / name).write_text(''.join(lines))
    result = evaluate_model(params, 'kitti', str(root), progress=False)

    predictor = Predictor.from_model(params)
    metric = VOC07MApMetric(iou_thresh=0.5, class_names=predictor.classes)
    paths = sorted(os.path.join(small[2], n) for n in os.listdir(small[2]))
    for item in predictor.predict(paths):
        found = item.detections
        height, width = item.image.shape[:2]
        keep = np.round(found.scores, 4) >= 0.3      # as the label files were filtered
        truth = np.round(np.clip(found.boxes[keep], 0, [width - 1, height - 1] * 2), 2)
        metric.update(found.boxes[None], found.ids[None], found.scores[None], truth[None],
                      found.ids[keep][None])
    expected = dict(zip(*metric.get()))
    present = [k for k, v in result.items() if k.startswith('AP/') and not math.isnan(v)]
    assert present and result['mAP'] > 0.8, result
    for key in present:
        assert result[key] == pytest.approx(expected[key[3:]], abs=1e-9), (key, expected)
