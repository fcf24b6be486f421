"""gluondet.deploy.predictor: one Predictor over Gluon, symbol and ONNX Runtime, on real images.

The detector is ``ssd_160_mobilenet0.5_custom`` at 128 px, trained for a few steps on
BCCD and demo images together (its classes are both sets'), so it finds many boxes
with distinct scores on both kinds of image. ``trained_model`` trains it once per test
session (the files are kept in pytest's base temp folder; ``test_cli_deploy`` uses them).
"""
import json
import logging
import os
import shutil

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon.data import DataLoader

from gluondet.data import DemoDetection, VOCDetection
from gluondet.data.base import DetectionDataset, Record, read_image
from gluondet.data.batchify import Pad, Stack, Tuple
from gluondet.deploy import compare_detections
from gluondet.deploy.commands import export_model
from gluondet.deploy.networks import load_network
from gluondet.deploy.predictor import Predictor, list_images, rescale_boxes
from gluondet.deploy.sources import ModelSource
from gluondet.engine import TrainConfig, fit
from gluondet.tasks import SSDTask
from gluondet.data.preprocess import SSDValTransform, fixed_size

from ssd_reference import detect_batches

pytest.importorskip('onnxruntime')

NETWORK = 'ssd_160_mobilenet0.5_custom'
DATA_SHAPE = 128
BCCD_CLASSES = ('RBC', 'WBC', 'Platelets')
SMALL_SPLIT = 'small'       # a 12-image BCCD val split, for fast evaluation
SMALL_SPLIT_SIZE = 12


class UnionDataset(DetectionDataset):
    """Several datasets as one, their classes concatenated."""

    def __init__(self, parts, limit):
        super().__init__([name for part in parts for name in part.classes])
        records, offset = [], 0
        for part in parts:
            for i in range(min(limit, len(part))):
                label = part.label(i)
                label[:, 4] += offset
                records.append(Record(part.image_path(i), label, *part.image_size(i)))
            offset += len(part.classes)
        self._finish(records, 'UnionDataset')


def small_bccd(bccd_root, folder):
    """A VOC folder with the real BCCD files and a ``small`` split of the first val images,
    and the COCO json of those images; returns ``(voc folder, json path)``."""
    voc = os.path.join(folder, 'BCCD')
    if not os.path.isdir(voc):
        os.makedirs(os.path.join(voc, 'ImageSets', 'Main'))
        for name in ('Annotations', 'JPEGImages'):
            os.symlink(os.path.abspath(os.path.join(bccd_root, 'BCCD', name)),
                       os.path.join(voc, name))
        with open(os.path.join(bccd_root, 'BCCD', 'ImageSets', 'Main', 'val.txt')) as f:
            ids = f.read().split()[:SMALL_SPLIT_SIZE]
        with open(os.path.join(voc, 'ImageSets', 'Main', SMALL_SPLIT + '.txt'), 'w') as f:
            f.write('\n'.join(ids) + '\n')
        with open(os.path.join(bccd_root, 'coco', 'instances_val.json')) as f:
            coco = json.load(f)
        names = {'JPEGImages/%s.jpg' % i for i in ids}
        coco['images'] = [im for im in coco['images'] if im['file_name'] in names]
        kept = {im['id'] for im in coco['images']}
        coco['annotations'] = [a for a in coco['annotations'] if a['image_id'] in kept]
        with open(os.path.join(folder, 'instances_small.json'), 'w') as f:
            json.dump(coco, f)
    return voc, os.path.join(folder, 'instances_small.json')


def train_model(bccd_root, folder):
    """Train the test detector into ``folder``; returns ``(params file, validation metrics)``."""
    voc, _ = small_bccd(bccd_root, folder)
    prefix = os.path.join(folder, 'ssd')
    metrics_file = prefix + '_validation.json'
    if not os.path.exists(metrics_file):
        parts = [DemoDetection('train', 16, image_size=128),
                 VOCDetection(os.path.join(bccd_root, 'BCCD'), splits='train',
                              classes=BCCD_CLASSES)]
        train = UnionDataset(parts, limit=16)
        val = VOCDetection(voc, splits=SMALL_SPLIT, classes=train.classes)
        task = SSDTask(NETWORK, train, val, DATA_SHAPE, pretrained_base=False, zoom=False)
        config = TrainConfig(batch_size=8, num_workers=0, epochs=4, lr=0.02, warmup_epochs=1,
                             lr_decay_epoch=(),
                             log_interval=100, save_prefix=prefix, save_interval=0,
                             val_interval=4, seed=1, gpus='')
        result = fit(task, config)
        with open(metrics_file, 'w') as f:
            json.dump(result.metrics, f)
    with open(metrics_file) as f:
        return prefix + '_best.params', json.load(f)


@pytest.fixture(scope='session')
def trained_model(bccd_root, tmp_path_factory):
    """``(params file, validation metrics, folder)`` of the test detector."""
    folder = str(tmp_path_factory.getbasetemp() / 'deploy_model')
    os.makedirs(folder, exist_ok=True)
    params, metrics = train_model(bccd_root, folder)
    return params, metrics, folder


@pytest.fixture(scope='module')
def images(bccd_root):
    """Four BCCD val images (640 x 480) and four demo images (96 x 96) as paths."""
    bccd = VOCDetection(os.path.join(bccd_root, 'BCCD'), splits='val', classes=BCCD_CLASSES)
    demo = DemoDetection('val', 4, image_size=96)
    return ([bccd.image_path(i) for i in range(4)]
            + [demo.image_path(i) for i in range(4)])


def assert_same_detections(a, b, min_per_image=20):
    result = compare_detections(a, b)
    assert result.ok, str(result)
    assert result.compared >= min_per_image * len(a), str(result)


def test_backends_give_the_same_detections(trained_model, images, tmp_path):
    params, _, _ = trained_model
    gluon_net = Predictor.from_model(params)
    assert gluon_net.backend == 'mxnet' and gluon_net.data_shape == (DATA_SHAPE, DATA_SHAPE)
    assert gluon_net.classes == DemoDetection.CLASSES + BCCD_CLASSES
    arrays = [read_image(path).asnumpy() for path in images]
    expected = gluon_net.detect(arrays, batch_size=3)
    assert all(len(d.ids) == 100 for d in expected[:4])            # BCCD: found something
    assert all(np.unique(d.scores).size == d.scores.size for d in expected)
    assert min(d.scores.max() for d in expected) > 0.1

    prefix = str(tmp_path / 'symbol' / 'ssd')
    export_model(params, prefix, 'symbol')
    path = str(tmp_path / 'ssd.onnx')
    export_model(params, path, 'onnx', dynamic_batch=True)
    for model in (prefix, path):
        predictor = Predictor.from_model(model)
        assert predictor.classes == gluon_net.classes
        assert predictor.data_shape == gluon_net.data_shape
        got = [p.detections for p in predictor.predict(images, batch_size=3)]
        assert_same_detections(expected, got)
    # paths and arrays, any batch: the same detections
    from_paths = [p.detections for p in gluon_net.predict(images, batch_size=8)]
    assert_same_detections(expected, from_paths)


def test_boxes_are_those_of_validation(trained_model, bccd_root):
    """Same numbers as ``detect_batches`` (the engine's validation), padding removed, boxes
    clipped to the 640 x 480 image: ``[0, 639] x [0, 479]``, inclusive pixels."""
    params, _, folder = trained_model
    net, info = load_network(params)
    predictor = Predictor.from_model(net, data_shape=info['data_shape'])
    voc, _ = small_bccd(bccd_root, folder)
    dataset = VOCDetection(voc, splits=SMALL_SPLIT, classes=predictor.classes)
    loader = DataLoader(dataset.transform(SSDValTransform(DATA_SHAPE, DATA_SHAPE)), 4,
                        batchify_fn=Tuple(Stack(), Pad(pad_val=-1), Stack()))
    found = predictor.detect([dataset[i][0] for i in range(len(dataset))], batch_size=4)
    expected = [part for out in detect_batches(net, loader, [mx.cpu()], (DATA_SHAPE, DATA_SHAPE))
                for part in zip(*[o.asnumpy() for o in out[:3]])]
    assert len(found) == len(expected) == SMALL_SPLIT_SIZE
    outside = 0
    for got, (ids, scores, boxes) in zip(found, expected):
        keep = ids[:, 0] >= 0
        np.testing.assert_array_equal(got.ids, ids[keep, 0])
        np.testing.assert_array_equal(got.scores, scores[keep, 0])
        clipped = np.clip(boxes[keep], 0, [639, 479, 639, 479])
        np.testing.assert_array_equal(got.boxes, clipped)
        outside += (clipped != boxes[keep]).any(axis=1).sum()
        assert got.boxes[:, 2].max() > DATA_SHAPE      # in the 640 x 480 image's pixels
    assert outside > 10     # SSD's boxes cross the image's edges: clipped here


def test_rescale_scales_coordinates_left_of_and_above_the_image_too():
    boxes = np.array([[[10, -2, 60, 40]], [[10, -2, 60, 40]]], np.float32)
    got = rescale_boxes(boxes, np.array([[240, 320], [120, 480]], np.float32),
                        np.array([[120, 160], [120, 160]]))
    np.testing.assert_array_equal(got, [[[20, -4, 120, 80]], [[30, -2, 180, 40]]])


def test_static_batch_model_pads_and_refuses_other_batches(trained_model, images, tmp_path):
    params, _, _ = trained_model
    static, dynamic = str(tmp_path / 'static.onnx'), str(tmp_path / 'dynamic.onnx')
    export_model(params, static, 'onnx', batch_size=2)
    export_model(params, dynamic, 'onnx', dynamic_batch=True)
    fixed = Predictor.from_model(static, backend='onnxruntime')
    assert fixed.batch_range == (2, 2) and fixed.batch_size() == 2
    three = images[3:6]         # one full batch, then one image padded to two
    got = [p.detections for p in fixed.predict(three)]
    assert_same_detections([p.detections for p in Predictor.from_model(dynamic).predict(three)],
                           got)
    for bad in (1, 3):
        with pytest.raises(ValueError, match='takes batches of exactly 2, not %d.*fixed batch'
                                             % bad):
            fixed.predict(three, batch_size=bad)
    with pytest.raises(ValueError, match=r'takes inputs of 128 x 128 \(fixed at export\), not 96'):
        Predictor.from_model(static, data_shape=96)


def test_exports_made_before_preprocessing_was_recorded_still_run(trained_model, images,
                                                                  tmp_path):
    """Metadata with ``data_shape``, ``mean`` and ``std`` but no ``preprocessing`` (what
    ``gluondet export`` wrote before) runs as the fixed size it describes."""
    onnx = pytest.importorskip('onnx')
    params, _, _ = trained_model
    prefix, path = str(tmp_path / 'ssd'), str(tmp_path / 'ssd.onnx')
    export_model(params, prefix, 'symbol')
    export_model(params, path, 'onnx', dynamic_batch=True)
    arrays = [read_image(p).asnumpy() for p in images]
    new = [Predictor.from_model(m) for m in (prefix, path)]
    assert [p.preprocessing for p in new] == [fixed_size(DATA_SHAPE)] * 2
    with open(prefix + '-meta.json') as f:
        meta = json.load(f)
    del meta['preprocessing']
    with open(prefix + '-meta.json', 'w') as f:
        json.dump(meta, f)
    model = onnx.load(path)
    kept = [p for p in model.metadata_props if p.key != 'preprocessing']
    assert len(kept) == len(model.metadata_props) - 1
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    onnx.save(model, path)
    for before, model in zip(new, (prefix, path)):
        old = Predictor.from_model(model)
        assert old.preprocessing == before.preprocessing
        for a, b in zip(old.detect(arrays), before.detect(arrays)):
            np.testing.assert_array_equal(a.boxes, b.boxes)
            np.testing.assert_array_equal(a.scores, b.scores)


def test_unreadable_images_are_skipped_and_counted(trained_model, images, tmp_path, caplog):
    params, _, _ = trained_model
    folder = tmp_path / 'images'
    folder.mkdir()
    shutil.copy(images[0], str(folder / 'a_good.jpg'))
    with open(images[1], 'rb') as f:
        data = f.read()
    (folder / 'b_truncated.jpg').write_bytes(data[:len(data) // 2])
    (folder / 'c_text.png').write_text('not an image')
    (folder / 'd_empty.bmp').write_bytes(b'')
    (folder / 'notes.txt').write_text('not listed: no image extension')
    paths = list_images(str(folder))
    assert [os.path.basename(p) for p in paths] == ['a_good.jpg', 'b_truncated.jpg',
                                                    'c_text.png', 'd_empty.bmp']
    predictor = Predictor.from_model(params)
    with caplog.at_level(logging.WARNING, logger='gluondet.deploy'):
        stream = predictor.predict(paths + [paths[0]], batch_size=2)
        got = list(stream)
    assert [(p.index, os.path.basename(p.source)) for p in got] == [(0, 'a_good.jpg'),
                                                                     (4, 'a_good.jpg')]
    assert got[0].image.shape == (480, 640, 3)
    assert [os.path.basename(path) for path, _ in stream.skipped] == [
        'b_truncated.jpg', 'c_text.png', 'd_empty.bmp']
    assert sum('image skipped' in r.getMessage() for r in caplog.records) == 3
    assert 'b_truncated.jpg' in caplog.text and 'd_empty.bmp' in caplog.text
    with pytest.raises(ValueError, match='input 0: expected an H x W x 3 uint8'):
        list(predictor.predict([np.zeros((4, 4), np.uint8)]))


def test_model_sources_and_their_errors(trained_model, tmp_path):
    params, _, _ = trained_model
    # a zoo name with a params file: the classes and steps come from the json beside it
    zoo = Predictor.from_model(NETWORK, params=params)
    assert zoo.classes == DemoDetection.CLASSES + BCCD_CLASSES
    # the same source as one ModelSource; keywords left at their defaults keep its fields
    source = ModelSource(NETWORK, params=params, data_shape=96)
    assert ModelSource.of(source, backend=None) == source
    assert ModelSource.of(source, data_shape=112).data_shape == 112
    assert Predictor.from_model(source).data_shape == (96, 96)
    assert Predictor.from_model(source, data_shape=112).data_shape == (112, 112)
    with pytest.raises(TypeError, match='unknown model source keyword weights'):
        Predictor.from_model(NETWORK, weights=params)
    with pytest.raises(ValueError, match=r'give its weights, --params FILE \(params=\) or '
                                         r'--pretrained'):
        Predictor.from_model(NETWORK)
    with pytest.raises(ValueError, match='trained as ssd_160_mobilenet0.5_custom, not'):
        Predictor.from_model('ssd_300_mobilenet0.25_custom', params=params)
    with pytest.raises(FileNotFoundError, match='no model at .*expected a .params, .onnx'):
        Predictor.from_model(str(tmp_path / 'missing'))
    with pytest.raises(ValueError, match='unknown model'):
        Predictor.from_model('ssd_160_mobilenet0.5_cstom', params=params)
    with pytest.raises(ValueError, match='has classes .* but .* was given'):
        Predictor.from_model(params, classes=['a', 'b'])
    bare = str(tmp_path / 'bare.params')
    shutil.copy(params, bare)
    with pytest.raises(ValueError, match='no training json .* give the model zoo name'):
        Predictor.from_model(bare)
    with pytest.raises(ValueError, match='does not record its classes'):
        Predictor.from_model(NETWORK, params=bare)

    prefix = str(tmp_path / 'ssd')
    export_model(params, prefix, 'symbol')
    with pytest.raises(ValueError, match="an MXNet symbol: it runs with backend 'mxnet', not "
                                         "'onnxruntime'"):
        Predictor.from_model(prefix, backend='onnxruntime')
    os.remove(prefix + '-meta.json')
    with pytest.raises(ValueError, match='not described by .*ssd-meta.json.*give classes and '
                                         'data_shape'):
        Predictor.from_model(prefix + '-symbol.json')
    described = Predictor.from_model(prefix, classes=zoo.classes, data_shape=(96, 112))
    assert described.data_shape == (96, 112)    # a symbol runs at any size

    engine = str(tmp_path / 'ssd.engine')
    with open(engine, 'wb') as f:
        f.write(b'not built here')
    with pytest.raises(ValueError, match=r'not described by .*ssd\.json'):
        Predictor.from_model(engine)
    with pytest.raises(ValueError, match="a TensorRT engine: it runs with backend 'tensorrt'"):
        Predictor.from_model(engine, backend='mxnet')
    with pytest.raises(ValueError, match="export an engine from it"):
        Predictor.from_model(params, backend='tensorrt')
    with open(str(tmp_path / 'ssd.json'), 'w') as f:
        json.dump({'classes': list(zoo.classes), 'data_shape': [128, 128]}, f)
    with pytest.raises(ImportError, match='TensorRT is needed .*NVIDIA GPU'):
        Predictor.from_model(engine)
