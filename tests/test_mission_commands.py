"""The three commands of the README's mission, as a user types them (issue 23), adding only
what a CPU, a short run and an offline machine need: ``--gpus ''`` where a GPU is named,
``--epochs 1``, small sizes, ``--backbone`` (horovodrun refuses ``--network``),
``--no-pretrained-base`` (no ImageNet weights offline), and GluonCV's default dataset
location, ``~/.mxnet/datasets/voc``, under a temporary ``HOME``.

    python scripts/train_ssd.py --network vgg16_atrous --dataset voc --gpus 0,1 --amp
    horovodrun -np 8 python scripts/train_faster_rcnn.py --horovod
    get_model('ssd_512_resnet50_v1_coco', pretrained=True)
"""
import functools
import hashlib
import http.server
import os
import subprocess
import sys
import threading
import zipfile

import cv2
import mxnet as mx
import numpy as np
import pytest

from distributed import HOROVODRUN, failure, need_horovod
from gluondet.data.demo import render_demo_image
from gluondet.model_zoo import get_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, 'scripts')
# the demo's shapes stand for these VOC classes
VOC_NAMES = ('person', 'car', 'dog', 'bottle', 'chair')
SPLITS = {'VOC2007': {'trainval': 12, 'test': 6}, 'VOC2012': {'trainval': 12}}


def write_vocdevkit(root, size=128):
    """GluonCV's VOC layout (``root/VOC2007``, ``root/VOC2012``) of demo images."""
    index = 0
    for year, splits in SPLITS.items():
        folder = os.path.join(root, year)
        for sub in ('Annotations', 'JPEGImages', os.path.join('ImageSets', 'Main')):
            os.makedirs(os.path.join(folder, sub), exist_ok=True)
        for split, count in splits.items():
            ids = []
            for _ in range(count):
                image, label = render_demo_image(7, 'train', index, image_size=size)
                name = '%06d' % index
                index += 1
                ids.append(name)
                cv2.imwrite(os.path.join(folder, 'JPEGImages', name + '.jpg'),
                            image[:, :, ::-1])
                objects = ''.join(
                    '<object><name>%s</name><difficult>0</difficult><bndbox><xmin>%d</xmin>'
                    '<ymin>%d</ymin><xmax>%d</xmax><ymax>%d</ymax></bndbox></object>'
                    % (VOC_NAMES[int(row[4])], row[0] + 1, row[1] + 1, row[2] + 1, row[3] + 1)
                    for row in label)
                with open(os.path.join(folder, 'Annotations', name + '.xml'), 'w') as f:
                    f.write('<annotation><size><width>%d</width><height>%d</height><depth>3'
                            '</depth></size>%s</annotation>' % (size, size, objects))
            with open(os.path.join(folder, 'ImageSets', 'Main', split + '.txt'), 'w') as f:
                f.write('\n'.join(ids) + '\n')


@pytest.fixture(scope='module')
def home(tmp_path_factory):
    """A HOME whose ``~/.mxnet/datasets/voc`` is a small VOCdevkit."""
    home = str(tmp_path_factory.mktemp('home'))
    write_vocdevkit(os.path.join(home, '.mxnet', 'datasets', 'voc'))
    return home


def _run(argv, cwd, home, timeout=900):
    out = subprocess.run(argv, cwd=str(cwd), capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, HOME=home, GLUONDET_HOME=os.path.join(home, 'gd')))
    return out.returncode, out.stdout + out.stderr


@pytest.mark.slow
def test_train_ssd_vgg16_atrous_on_voc_with_amp(tmp_path, home):
    code, text = _run([sys.executable, os.path.join(SCRIPTS, 'train_ssd.py'),
                       '--network', 'vgg16_atrous', '--dataset', 'voc', '--gpus', '', '--amp',
                       '--epochs', '1', '--batch-size', '4',
                       '--no-pretrained-base'], tmp_path, home)
    assert code == 0, text[-3000:]
    assert 'final: ' in text and 'mAP=' in text
    # GluonCV's VOC07+12 trainval and VOC07 test, the 20 VOC classes
    assert '24 images' in text and '6 images' in text, text[-3000:]
    assert os.path.exists(str(tmp_path / 'ssd_300_vgg16_atrous_voc_best.params'))


@pytest.mark.slow
def test_horovodrun_train_faster_rcnn_without_a_batch_flag(tmp_path, home):
    """Any number of processes (3 here: an odd count; 2 ran the same way): one image per
    process (GluonCV's), said in the log; no GPU: the CPU after one warning line per
    process."""
    need_horovod()
    processes = 3
    code, text = _run([HOROVODRUN, '--gloo', '-np', str(processes), '-H',
                       'localhost:%d' % processes, sys.executable,
                       os.path.join(SCRIPTS, 'train_faster_rcnn.py'), '--horovod',
                       '--backbone', 'resnet18_v1b', '--epochs', '1', '--no-pretrained-base',
                       '--image-short', '128', '--image-max-size', '128'], tmp_path, home)
    assert code == 0, failure(text)
    assert 'final: ' in text and 'mAP=' in text
    assert ('batch size %d: 1 per device on %d devices (%d processes of 1)'
            % (processes, processes, processes)) in text, text[-3000:]
    assert text.count('no GPU on this machine: training on the CPU') == processes


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture()
def weight_server(tmp_path):
    """``(url, folder)``: an HTTP server on 127.0.0.1 serving ``folder``."""
    folder = tmp_path / 'server'
    (folder / 'gluon' / 'models').mkdir(parents=True)
    server = http.server.ThreadingHTTPServer(
        ('127.0.0.1', 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield 'http://127.0.0.1:%d' % server.server_address[1], folder
    server.shutdown()


def test_get_model_pretrained_downloads_verifies_and_detects(tmp_path, weight_server,
                                                             monkeypatch):
    """``get_model('ssd_512_resnet50_v1_coco', pretrained=True)``: GluonCV's archive from
    ``MXNET_GLUON_REPO`` (a local server standing for GluonCV's; the weights are this test's,
    the store's checksum set to theirs), checked and loaded, detects as the net it was saved
    from."""
    from gluondet.model_zoo import store
    url, folder = weight_server
    name = 'ssd_512_resnet50_v1_coco'
    saved = get_model(name, pretrained_base=False)
    saved.initialize(mx.init.Xavier())
    image = mx.nd.array(np.random.RandomState(0).uniform(-1, 1, (1, 3, 512, 512)))
    expected = [x.asnumpy() for x in saved(image)]
    params = str(tmp_path / 'weights.params')
    saved.save_parameters(params)
    with open(params, 'rb') as f:
        sha1 = hashlib.sha1(f.read()).hexdigest()
    member = '%s-%s.params' % (name, sha1[:8])
    with zipfile.ZipFile(str(folder / 'gluon' / 'models' / (member[:-7] + '.zip')), 'w') as z:
        z.write(params, member)
    monkeypatch.setitem(store.MODEL_SHA1, name, sha1)
    monkeypatch.setenv('MXNET_GLUON_REPO', url + '/')
    monkeypatch.setenv('MXNET_HOME', str(tmp_path / 'mxnet'))
    monkeypatch.delenv('GLUONDET_REPO_URL', raising=False)

    net = get_model('ssd_512_resnet50_v1_coco', pretrained=True)

    assert os.path.exists(str(tmp_path / 'mxnet' / 'models' / member))
    for got, want in zip(net(image), expected):
        assert np.array_equal(got.asnumpy(), want)


def test_get_model_offline_says_where_the_weights_go_and_how_to_train_without(tmp_path,
                                                                                monkeypatch):
    from gluondet.model_zoo.store import WeightStoreError
    import socket
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        closed = 'http://127.0.0.1:%d' % sock.getsockname()[1]
    monkeypatch.setenv('GLUONDET_REPO_URL', closed)
    monkeypatch.setenv('MXNET_HOME', str(tmp_path))
    monkeypatch.setattr('gluondet.model_zoo.store.RETRY_WAIT', 0)
    with pytest.raises(WeightStoreError) as err:
        get_model('ssd_512_resnet50_v1_coco', pretrained=True)
    text = str(err.value)
    assert 'put ssd_512_resnet50_v1_coco-' in text and str(tmp_path) in text
    with pytest.raises(WeightStoreError) as err:
        get_model('ssd_512_resnet50_v1_coco', pretrained=False)    # pretrained_base=True
    text = str(err.value)
    assert 'put resnet50_v1-' in text and str(tmp_path) in text
    assert 'pretrained_base=False (--no-pretrained-base in the training scripts)' in text
