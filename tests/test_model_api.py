"""gluondet.Detector: one object that trains, validates, predicts and exports."""
import os
import re
import types

import numpy as np
import pytest

from gluondet import Detector, Results
from gluondet.data import DemoDetection, write_kitti
from gluondet.data.demo import DEMO_CLASSES
from gluondet.model import data_flags
from gluondet.tools.spec import SpecError

from export_checks import by_class_and_box

NETWORK = 'ssd_160_mobilenet0.5_custom'


@pytest.fixture(scope='module')
def kitti(tmp_path_factory):
    """A KITTI folder of demo images: training/ (16) and val/ (8)."""
    root = tmp_path_factory.mktemp('kitti')
    write_kitti(DemoDetection('train', num_images=16, image_size=128), str(root / 'training'))
    write_kitti(DemoDetection('val', num_images=8, image_size=128), str(root / 'val'))
    return str(root)


@pytest.fixture(scope='module')
def trained(kitti, tmp_path_factory):
    """A Detector after one epoch on the KITTI folder, and what train() returned."""
    out = tmp_path_factory.mktemp('run')
    d = Detector(NETWORK, classes=DEMO_CLASSES)
    metrics = d.train(data=kitti, epochs=1, batch_size=4, no_pretrained_base=True, gpus='',
                      val_interval=1, save_prefix=str(out / 'run_'))
    return d, metrics, out


def test_train_runs_the_training_command_and_the_model_becomes_its_best(trained):
    d, metrics, out = trained
    assert d.model == str(out / ('run_%s_best.params' % NETWORK))
    assert os.path.isfile(d.model)
    assert set(metrics) == {'mAP'} | {'AP/' + c for c in DEMO_CLASSES}
    assert d.data['dataset'] == 'kitti'


def test_val_evaluates_the_trained_model_on_the_training_validation_data(trained):
    d, metrics, _ = trained
    result = d.val()
    assert result['mAP'] == pytest.approx(metrics['mAP'], abs=1e-6)


def test_predict_files_globs_arrays_and_results(trained, kitti, tmp_path):
    d, _, _ = trained
    folder = os.path.join(kitti, 'val', 'image_2')
    names = sorted(os.listdir(folder))
    results = d.predict(folder)
    assert [os.path.basename(r.source) for r in results] == names
    assert [r.frame for r in results] == list(range(len(names)))
    globbed = d.predict(os.path.join(folder, '*.jpg'))
    for a, b in zip(results, globbed):
        np.testing.assert_array_equal(a.boxes, b.boxes)
    array = results[0].image
    (again,) = d(array)                  # __call__ is predict
    assert again.source is None
    np.testing.assert_allclose(again.boxes, results[0].boxes, rtol=1e-6)
    r = results[0]
    assert isinstance(r, Results) and r.names == DEMO_CLASSES
    assert r.boxes.shape == (len(r), 4) and r.scores.dtype == np.float32
    assert r.labels() == [DEMO_CLASSES[i] for i in r.class_ids]
    rows = r.to_list()
    assert len(rows) == len(r) and set(rows[0]) == {'box', 'score', 'class_id', 'name'}
    drawn = r.plot(conf=0.0)
    assert drawn.shape == r.image.shape and (drawn != r.image).any()
    saved = r.save(str(tmp_path / 'drawn' / 'first.png'))
    assert os.path.getsize(saved) > 0
    with pytest.raises(FileNotFoundError, match='no image files .* match'):
        d.predict(str(tmp_path / '*.jpg'))
    streamed = d.predict(folder, stream=True)
    assert not isinstance(streamed, list) and len(list(streamed)) == len(names)
    # a list of files and arrays goes through the frame loop of a folder: an unreadable
    # file is skipped with a warning, the others keep their places
    broken = tmp_path / 'broken.jpg'
    broken.write_bytes(b'not a jpeg')
    mixed = d.predict([os.path.join(folder, names[0]), str(broken), array])
    assert [(r.frame, r.source) for r in mixed] == [(0, os.path.join(folder, names[0])),
                                                    (2, None)]
    np.testing.assert_array_equal(mixed[0].boxes, results[0].boxes)
    np.testing.assert_allclose(mixed[1].boxes, results[0].boxes, rtol=1e-6)


def test_predict_a_video_with_tracking_nms_options_and_slicing(trained, kitti, tmp_path):
    import cv2
    from gluondet.deploy.nms import NMSOptions
    from gluondet.deploy.views import Slicing, ViewOptions, wrap
    d, _, _ = trained
    folder = os.path.join(kitti, 'val', 'image_2')
    frames = [cv2.imread(os.path.join(folder, name)) for name in sorted(os.listdir(folder))]
    video = str(tmp_path / 'clip.avi')
    writer = cv2.VideoWriter(video, cv2.VideoWriter_fourcc(*'MJPG'), 10, (128, 128))
    for frame in frames:
        writer.write(frame)
    writer.release()
    results = d.predict(video, conf=0.05, max_det=5, track=True, vid_stride=2)
    assert [r.frame for r in results] == list(range(0, len(frames), 2))
    assert [r.time for r in results] == pytest.approx([i / 10 for i in range(0, 8, 2)])
    assert all(len(r) <= 5 and (r.scores > 0.05).all() for r in results)
    assert all(r.track_ids is not None and len(r.track_ids) == len(r) for r in results)
    assert results[0].to_list()[0]['track_id'] >= -1
    # the same as the predictor with those options, on the decoded frames
    nms = NMSOptions(conf=0.05, max_det=5)
    expected = d.predictor(nms).detect([r.image for r in results])
    for r, found in zip(results, expected):
        np.testing.assert_array_equal(r.boxes, found.boxes)
    sliced = d.predict(results[0].image, slice=64, slice_overlap=0.25)
    views = wrap(d.predictor(), ViewOptions(Slicing(64, 0.25), None, None))
    (found,) = views.detect([results[0].image])
    np.testing.assert_array_equal(sliced[0].boxes, found.boxes)
    with pytest.raises(ValueError, match='not a list of images'):
        d.predict([results[0].image], track=True)
    # the tracker's settings (gluondet infer's --new-track-thresh ...): none starts a track
    strict = d.predict(video, conf=0.05, max_det=5, vid_stride=2,
                       track={'new_track_thresh': 1.0})
    assert [r.boxes.tolist() for r in strict] == [r.boxes.tolist() for r in results]
    assert all((r.track_ids == -1).all() for r in strict) and any(len(r) for r in strict)
    with pytest.raises(ValueError, match="no ByteTrack setting 'buffer'"):
        d.predict(video, track={'buffer': 10}, stream=True)


def test_export_onnx_then_the_exported_model_predicts_the_same(trained, kitti):
    d, _, _ = trained
    path = d.export('onnx')
    assert path == os.path.splitext(d.model)[0] + '.onnx' and os.path.isfile(path)
    image = os.path.join(kitti, 'val', 'image_2', sorted(os.listdir(
        os.path.join(kitti, 'val', 'image_2')))[0])
    (gluon,) = d.predict(image)
    (onnx,) = Detector(path).predict(image)
    ir = d.export('openvino', dynamic_batch=True)
    assert ir.endswith('_best.xml') and os.path.isfile(ir)
    (openvino,) = Detector(ir).predict(image)
    # the little-trained model's many nearly equal scores may come in another order
    ids, _, boxes = by_class_and_box(gluon.class_ids, gluon.scores, gluon.boxes)
    for result, atol in ((onnx, 1e-3), (openvino, 5e-3)):
        assert result.names == gluon.names
        got_ids, _, got_boxes = by_class_and_box(result.class_ids, result.scores, result.boxes)
        np.testing.assert_array_equal(got_ids, ids)
        np.testing.assert_allclose(got_boxes, boxes, atol=atol)
    with pytest.raises(ValueError, match='only a zoo name or a training output .params trains'):
        Detector(path).train(data=kitti)


def test_mistakes_get_one_clear_error(tmp_path):
    d = Detector(NETWORK, classes=DEMO_CLASSES)
    with pytest.raises(SpecError, match="unknown key 'batchsize'.*batch_size"):
        d.train(data='demo', batchsize=4)
    with pytest.raises(ValueError, match='give data'):
        d.val()
    with pytest.raises(FileNotFoundError, match='no dataset folder'):
        d.train(data=str(tmp_path / 'missing'))


def test_data_flags_recognize_the_layouts(tmp_path, kitti):
    assert data_flags('demo') == {'dataset': 'demo'}
    assert data_flags(kitti)['dataset'] == 'kitti'
    (tmp_path / 'coco' / 'annotations').mkdir(parents=True)
    (tmp_path / 'coco' / 'annotations' / 'instances_val2017.json').write_text('{}')
    assert data_flags(str(tmp_path / 'coco'))['dataset'] == 'coco'
    (tmp_path / 'voc').mkdir()
    assert data_flags(str(tmp_path / 'voc')) == {'dataset': 'voc',
                                                 'dataset_root': str(tmp_path / 'voc')}
    assert data_flags({'dataset': 'coco', 'train_json': 'a.json'})['train_json'] == 'a.json'


@pytest.mark.slow(minutes=1.5)
def test_the_quickstart_of_docs_python_md_runs_as_written(tmp_path):
    """The page's python block, run in a fresh folder as a user would (python file.py)."""
    import re
    import subprocess
    import sys
    page = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs',
                        'python.md')
    with open(page) as f:
        (code,) = re.findall(r'```python\n(.*?)```', f.read(), re.S)
    (tmp_path / 'quickstart.py').write_text(code)
    run = subprocess.run([sys.executable, 'quickstart.py'], cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert 'runs/demo/ssd_160_mobilenet0.5_custom_best.params' in out
    assert re.search(r'^mAP [0-9.]+$', out, re.M)
    assert re.search(r'^\d+ detections from ONNX Runtime$', out, re.M)
    assert (tmp_path / 'runs' / 'demo' / 'drawn.jpg').stat().st_size > 0
    assert (tmp_path / 'runs' / 'demo' / 'ssd_160_mobilenet0.5_custom_best.onnx').is_file()
    frames = re.findall(r'^frame (\d+) at ([0-9.]+) s: \d+ detections, tracks \[', out, re.M)
    assert [(int(f), float(t)) for f, t in frames] == [(i, i / 10) for i in range(8)]


def test_a_missing_or_unreadable_model_is_one_error_at_construction(tmp_path):
    for name in ('missing.params', 'missing.onnx', 'missing.engine'):
        path = str(tmp_path / name)
        with pytest.raises(FileNotFoundError, match='^Detector: no such file: %s$'
                           % re.escape(path)):
            Detector(path)
    with pytest.raises(FileNotFoundError, match='^Detector: no such file: .*nowhere.params$'):
        Detector(NETWORK, params=str(tmp_path / 'nowhere.params'))
    (tmp_path / 'folder.params').mkdir()
    with pytest.raises(OSError, match=r'^Detector: .*folder\.params cannot be read \(Is a dir'):
        Detector(str(tmp_path / 'folder.params'))
    with pytest.raises(ValueError, match="^Detector: ssd_160_mobilenet0.5_cust is no model file "
                                         "and an unknown model .*did you mean 'ssd_160_mobile"):
        Detector('ssd_160_mobilenet0.5_cust')


def test_train_speaks_python_and_val_after_it_wrote_no_weights_says_why(tmp_path, monkeypatch):
    from gluondet.engine.wording import setting
    from gluondet.train import ssd
    heard = []

    def run(args):              # a training whose validation never scored: no _best.params
        heard.append((setting('resume', 'auto'), setting('lr_warmup')))
        return types.SimpleNamespace(best_path=None, metrics={})
    monkeypatch.setattr(ssd, 'run', run)
    d = Detector(NETWORK, classes=DEMO_CLASSES)
    d.train(data='demo', gpus='', save_prefix=str(tmp_path / 'run_'))
    assert heard == [("resume='auto'", 'lr_warmup=')]
    assert (setting('resume', 'auto'), setting('lr_warmup')) == ('--resume auto', '--lr-warmup')
    assert d.model == NETWORK
    best = str(tmp_path / ('run_%s_best.params' % NETWORK))
    for action, call in (('val', d.val), ('predict', lambda: d.predict(np.zeros((8, 8, 3))))):
        with pytest.raises(ValueError, match=re.escape(
                "%s: Detector('%s') has no weights: its train() wrote no %s (no validation "
                "scored a finite metric: see %s_train.log). It needs trained weights"
                % (action, NETWORK, best, best[:-len('_best.params')]))):
            call()


def test_train_on_bccd_without_classes_learns_its_three_classes(bccd_root, tmp_path):
    """A VOC folder of 4 BCCD images, one epoch: the classes its annotations name."""
    voc = tmp_path / 'bccd'
    (voc / 'ImageSets' / 'Main').mkdir(parents=True)
    for name in ('Annotations', 'JPEGImages'):
        os.symlink(os.path.join(bccd_root, 'BCCD', name), str(voc / name))
    with open(os.path.join(bccd_root, 'BCCD', 'ImageSets', 'Main', 'val.txt')) as f:
        ids = f.read().split()[:4]
    for split in ('train', 'val'):
        (voc / 'ImageSets' / 'Main' / (split + '.txt')).write_text('\n'.join(ids) + '\n')
    d = Detector(NETWORK)
    metrics = d.train(data=str(voc), epochs=1, batch_size=4, no_pretrained_base=True, gpus='',
                      num_workers=0, save_prefix=str(tmp_path / 'run_'))
    assert set(metrics) == {'mAP', 'AP/Platelets', 'AP/RBC', 'AP/WBC'}
    assert d.model == str(tmp_path / ('run_%s_best.params' % NETWORK))
    assert d.predictor().classes == ('Platelets', 'RBC', 'WBC')
