"""``gluondet.utils.export_block`` writes the files GluonCV's ``export_block`` writes (the same
graph and parameters, for a tiny block and a gluondet SSD), and ``gluondet.utils.download``
fetches, verifies and writes files whole, against a real HTTP server on 127.0.0.1."""
import hashlib
import inspect
import json
import os
import re
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from gluondet import utils
from gluondet.model_zoo import get_model, store
from gluondet.utils.downloads import ChecksumError, DownloadError
from gluondet.utils.export import IMAGENET_MEAN_255, IMAGENET_STD_255
from test_store import _ok, _status, _truncated, server  # noqa: F401  (the server fixture)

MEAN = mx.nd.array(IMAGENET_MEAN_255)
STD = mx.nd.array(IMAGENET_STD_255)


@pytest.fixture
def gcv_export(monkeypatch):
    """GluonCV's ``export_block``; the ``mx.sym.contrib.box_encode`` it removes for good is
    put back after the test."""
    gcv_utils = pytest.importorskip('gluoncv.utils')
    monkeypatch.setitem(mx.sym.contrib.__dict__, 'box_encode', mx.sym.contrib.box_encode)
    return gcv_utils.export_block


class Tiny(nn.HybridBlock):
    """Convolution, BatchNorm (random running statistics), ReLU, pooling, dense."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv = nn.Conv2D(4, 3, padding=1)
            self.bn = nn.BatchNorm()
            self.dense = nn.Dense(3)

    def hybrid_forward(self, F, x):
        return self.dense(F.contrib.AdaptiveAvgPooling2D(F.relu(self.bn(self.conv(x))), 2))


def _tiny():
    net = Tiny()
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 3, 8, 8)))
    rng = np.random.RandomState(0)
    net.bn.running_mean.set_data(mx.nd.array(rng.normal(0, 1, 4)))
    net.bn.running_var.set_data(mx.nd.array(rng.uniform(0.5, 2, 4)))
    return net


def _normalized(hwc):
    """GluonCV's default preprocessing, outside the graph: ``B x 3 x H x W``."""
    x = mx.nd.broadcast_div(mx.nd.broadcast_minus(hwc, MEAN.reshape((1, 1, 1, 3))),
                            STD.reshape((1, 1, 1, 3)))
    return x.transpose((0, 3, 1, 2))


def _graph(prefix):
    """The symbol file's text, without what depends on the process: the versions MXNet
    gives the mutable inputs (aux states; they count every graph traced) and the ``id`` in
    a constant's initializer attribute (``"Constant_NAME_140229556849424"``)."""
    with open(prefix + '-symbol.json') as f:
        text = re.sub(r'\[(\d+), (\d+), \d+\]', r'[\1, \2]', f.read())
    return re.sub(r'("__init__": "Constant_\S*?)_\d+"', r'\1"', text)


def _params(prefix, epoch=0):
    with open('%s-%04d.params' % (prefix, epoch), 'rb') as f:
        return f.read()


def _both(tmp_path, gcv_export, net, **kwargs):
    """Export ``net`` with gluondet's and GluonCV's ``export_block`` (fresh name counters);
    check the files are the same; return gluondet's prefix."""
    ours, theirs = str(tmp_path / 'ours'), str(tmp_path / 'gluoncv')
    with mx.name.NameManager():
        files = utils.export_block(ours, net, **kwargs)
    with mx.name.NameManager():
        assert gcv_export(theirs, net, **kwargs) is None
    epoch = kwargs.get('epoch', 0)
    assert files == (ours + '-symbol.json', '%s-%04d.params' % (ours, epoch))
    assert _graph(ours) == _graph(theirs)
    assert _params(ours, epoch) == _params(theirs, epoch)
    return ours


def _imported(prefix, epoch=0):
    with warnings.catch_warnings():     # MXNet's note that it cannot tell the input's type
        warnings.filterwarnings('ignore', 'Cannot decide type')
        return mx.gluon.SymbolBlock.imports(prefix + '-symbol.json', ['data'],
                                            '%s-%04d.params' % (prefix, epoch))


def _close(got, expected):
    for g, e in zip(got if isinstance(got, (list, tuple)) else [got],
                    expected if isinstance(expected, (list, tuple)) else [expected]):
        np.testing.assert_allclose(g.asnumpy(), e.asnumpy(), rtol=1e-5, atol=1e-5)


def _uint8_images(shape, seed=0):
    return mx.nd.array(np.random.RandomState(seed).randint(0, 256, shape).astype(np.float32))


# ---------------------------------------------------------------- export_block


def test_signature_is_gluoncv_s(gcv_export):
    assert inspect.signature(utils.export_block) == inspect.signature(gcv_export)


@pytest.mark.parametrize('data_shape', [(32, 40, 3), None])
def test_tiny_block_with_default_preprocessing_is_gluoncv_s(tmp_path, gcv_export, data_shape):
    net = _tiny()
    prefix = _both(tmp_path, gcv_export, net, data_shape=data_shape, epoch=3)
    assert sorted(os.listdir(tmp_path)) == sorted(
        '%s-%s' % (who, end) for who in ('gluoncv', 'ours')
        for end in ('symbol.json', '0003.params'))
    with open(prefix + '-symbol.json') as f:
        ops = [node['op'] for node in json.load(f)['nodes']]
    assert ops[:6] == ['null', 'null', 'broadcast_sub', 'null', 'broadcast_div', 'transpose']
    params = mx.nd.load(prefix + '-0003.params')
    assert params['arg:_defaultpreprocess0_init_mean'].shape == (1, 1, 1, 3)
    assert 'aux:%srunning_mean' % net.bn.prefix in params
    images = _uint8_images((2, 20, 24, 3))
    _close(_imported(prefix, 3)(images), net(_normalized(images)))


def test_tiny_block_without_preprocessing_is_gluoncv_s(tmp_path, gcv_export):
    net = _tiny()
    prefix = _both(tmp_path, gcv_export, net, data_shape=(3, 16, 16), preprocess=False,
                   layout='chw')
    x = mx.nd.array(np.random.RandomState(1).normal(0, 1, (2, 3, 12, 10)))
    _close(_imported(prefix)(x), net(x))


def test_default_preprocessing_of_chw_input(tmp_path, gcv_export):
    """GluonCV refuses ``preprocess=True`` with CHW input; gluondet normalizes it in place."""
    net = _tiny()
    with pytest.raises(AssertionError):
        gcv_export(str(tmp_path / 'gluoncv'), net, data_shape=(3, 16, 16), layout='CHW')
    hwc = str(tmp_path / 'hwc')
    utils.export_block(hwc, net, data_shape=(16, 16, 3))
    chw = str(tmp_path / 'chw')
    utils.export_block(chw, net, data_shape=(3, 16, 16), layout='CHW')
    images = _uint8_images((2, 16, 18, 3))
    _close(_imported(chw)(images.transpose((0, 3, 1, 2))), _imported(hwc)(images))


def test_custom_preprocess_block_is_gluoncv_s(tmp_path, gcv_export):
    class Scale(nn.HybridBlock):
        def hybrid_forward(self, F, x):
            return F.transpose(x / 255., axes=(0, 3, 1, 2))

    net = _tiny()
    prefix = _both(tmp_path, gcv_export, net, data_shape=(10, 12, 3), preprocess=Scale())
    images = _uint8_images((1, 10, 12, 3))
    _close(_imported(prefix)(images), net(images.transpose((0, 3, 1, 2)) / 255.))


def test_refusals(tmp_path, gcv_export):
    net = _tiny()
    where = str(tmp_path / 'x')
    with pytest.raises(AssertionError):
        gcv_export(where, net, data_shape=(16, 16, 3), preprocess=False)
    with pytest.raises(ValueError, match='layout must be CHW'):
        utils.export_block(where, net, data_shape=(16, 16, 3), preprocess=False)
    with pytest.raises(ValueError, match='default preprocessing takes HWC'):
        utils.export_block(where, net, data_shape=(2, 16, 16, 3), layout='THWC')
    with pytest.raises(ValueError, match='Unable to predict data_shape'):
        utils.export_block(where, net, preprocess=None, layout='CTHW')
    with pytest.raises(ValueError, match=r'does not match layout HWC \(3 numbers'):
        utils.export_block(where, net, data_shape=(3, 16))
    with pytest.raises(ValueError, match='not supported'):
        utils.export_block(where, net, layout='NHWC')
    with pytest.raises(TypeError, match='preprocess must be'):
        utils.export_block(where, net, data_shape=(16, 16, 3), preprocess='imagenet')
    assert not os.listdir(tmp_path)


def test_no_shape_runs(tmp_path, gcv_export):
    net = nn.Dense(2, in_units=5)           # takes 5 numbers, no image
    net.initialize()
    for export in (gcv_export, utils.export_block):
        with pytest.raises(RuntimeError, match='Shape inconsistent'):
            export(str(tmp_path / 'x'), net, preprocess=False, layout='CHW')
    assert not os.listdir(tmp_path)


def test_target_generator_is_left_out_and_box_encode_hidden_while_tracing(tmp_path,
                                                                           gcv_export):
    seen = []

    class WithTargets(Tiny):
        def __init__(self):
            super().__init__()
            with self.name_scope():
                self._target_generator = nn.Dense(5)    # never initialized

        def hybrid_forward(self, F, x):
            seen.append('box_encode' in F.contrib.__dict__)
            return super().hybrid_forward(F, x)

    net = WithTargets()
    net.initialize(mx.init.Xavier())     # the generator's stays deferred: it never runs
    net(mx.nd.zeros((1, 3, 8, 8)))
    seen.clear()
    prefix = str(tmp_path / 'ours')
    utils.export_block(prefix, net, data_shape=(8, 8, 3))
    assert seen == [False]                          # traced once, box_encode hidden
    assert 'box_encode' in mx.sym.contrib.__dict__   # and put back
    assert '_target_generator' in net._children
    saved = mx.nd.load(prefix + '-0000.params')
    assert saved and not any(net._target_generator.prefix in k for k in saved)
    images = _uint8_images((1, 8, 8, 3))
    _close(_imported(prefix)(images), Tiny.hybrid_forward(net, mx.nd, _normalized(images)))


@pytest.fixture(scope='module')
def ssd():
    net = get_model('ssd_300_mobilenet0.25_custom', classes=['a', 'b'], pretrained_base=False)
    net.initialize(mx.init.Xavier(rnd_type='gaussian', magnitude=3))
    return net


@pytest.mark.parametrize('preprocess, layout, data_shape', [
    (True, 'HWC', (300, 300, 3)), (False, 'CHW', (3, 300, 300))])
def test_ssd_export_is_gluoncv_s_and_detects_as_the_net(tmp_path, gcv_export, ssd, preprocess,
                                                        layout, data_shape):
    prefix = _both(tmp_path, gcv_export, ssd, data_shape=data_shape, preprocess=preprocess,
                   layout=layout)
    images = _uint8_images((1, 300, 300, 3), seed=2)
    got = _imported(prefix)(images if preprocess else _normalized(images))
    expected = ssd(_normalized(images))
    assert [o.shape for o in got] == [o.shape for o in expected] and len(got) == 3
    assert (expected[1].asnumpy() > 0).sum() > 10          # the random net detects
    _close(got, expected)


# ---------------------------------------------------------------- download

PAYLOAD = bytes(range(256)) * 300
SHA1 = hashlib.sha1(PAYLOAD).hexdigest()
FILE = '/files/street_small.jpg'


@pytest.fixture(autouse=True)
def _local_only(monkeypatch):
    """No retry waits; 127.0.0.1 reached without a proxy."""
    monkeypatch.setattr(store, 'RETRY_WAIT', 0.0)
    for var in ('HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'http_proxy', 'https_proxy',
                'all_proxy'):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv('NO_PROXY', '127.0.0.1')


def _url(server, path=FILE):
    return 'http://127.0.0.1:%d%s' % (server.server_port, path)


def _read(path):
    with open(path, 'rb') as f:
        return f.read()


def test_download_signature_extends_gluoncv_s():
    gcv_download = pytest.importorskip('gluoncv.utils').download
    ours = list(inspect.signature(utils.download).parameters.values())
    theirs = list(inspect.signature(gcv_download).parameters.values())
    assert ours[:len(theirs)] == theirs
    assert inspect.signature(utils.download) == inspect.signature(mx.gluon.utils.download)


def test_download_to_the_current_folder_a_folder_or_a_file(server, tmp_path, monkeypatch):
    server.routes[FILE] = [_ok(PAYLOAD)]
    monkeypatch.chdir(tmp_path)
    assert utils.download(_url(server)) == 'street_small.jpg'
    assert _read(tmp_path / 'street_small.jpg') == PAYLOAD
    (tmp_path / 'images').mkdir()
    there = utils.download(_url(server), path=str(tmp_path / 'images'), sha1_hash=SHA1)
    assert there == str(tmp_path / 'images' / 'street_small.jpg')
    deep = str(tmp_path / 'a' / 'b' / 'photo.jpg')
    assert utils.download(_url(server), path=deep, sha1_hash=SHA1[:8]) == deep
    assert _read(deep) == PAYLOAD
    assert sorted(os.listdir(tmp_path / 'a' / 'b')) == ['photo.jpg']
    assert len(server.requests) == 3


def test_download_paths_are_gluoncv_s(server, tmp_path, monkeypatch):
    gcv_download = pytest.importorskip('gluoncv.utils').download
    server.routes[FILE] = [_ok(PAYLOAD)]
    monkeypatch.chdir(tmp_path)
    for path in (None, str(tmp_path), str(tmp_path / 'new.jpg'), '~/x.jpg'):
        monkeypatch.setenv('HOME', str(tmp_path / 'home'))
        os.makedirs(str(tmp_path / 'home'), exist_ok=True)
        theirs = gcv_download(_url(server), path=path, overwrite=True)
        assert utils.download(_url(server), path=path, overwrite=True) == theirs
        assert _read(theirs) == PAYLOAD


def test_existing_file_kept_unless_overwrite_or_other_sha1(server, tmp_path):
    server.routes[FILE] = [_ok(PAYLOAD)]
    dest = str(tmp_path / 'photo.jpg')
    with open(dest, 'wb') as f:
        f.write(b'old')
    assert utils.download(_url(server), dest) == dest and _read(dest) == b'old'
    assert utils.download(_url(server), dest, overwrite=True) == dest
    assert _read(dest) == PAYLOAD and len(server.requests) == 1
    assert utils.download(_url(server), dest, sha1_hash=SHA1) == dest
    assert len(server.requests) == 1                    # it matches: not fetched again
    with open(dest, 'wb') as f:
        f.write(b'damaged')
    assert utils.download(_url(server), dest, sha1_hash=SHA1) == dest
    assert _read(dest) == PAYLOAD and len(server.requests) == 2
    assert utils.check_sha1(dest, SHA1) and utils.check_sha1(dest, SHA1[:8].upper())
    assert not utils.check_sha1(dest, '0' * 40)


def test_sha1_mismatch_is_a_clear_error_and_saves_nothing(server, tmp_path):
    server.routes[FILE] = [_ok(PAYLOAD)]
    dest = str(tmp_path / 'photo.jpg')
    with pytest.raises(ChecksumError, match=r'sha1 is %s, not 1234abcd.*photo.jpg was not '
                                            'written' % SHA1) as err:
        utils.download(_url(server), dest, sha1_hash='1234abcd')
    assert isinstance(err.value, UserWarning) and isinstance(err.value, RuntimeError)
    assert not os.listdir(tmp_path)
    with open(dest, 'wb') as f:
        f.write(b'old')
    with pytest.raises(UserWarning):
        utils.download(_url(server), dest, sha1_hash='1234abcd', overwrite=True)
    assert os.listdir(tmp_path) == ['photo.jpg'] and _read(dest) == b'old'


def test_refused_url_fails_at_once(server, tmp_path):
    with pytest.raises(DownloadError, match=r'Failed downloading url .*/missing.jpg: the '
                                            'server answered HTTP 404'):
        utils.download(_url(server, '/missing.jpg'), str(tmp_path / 'm.jpg'))
    assert server.requests == ['/missing.jpg'] and not os.listdir(tmp_path)


def test_retries_after_server_errors_and_cut_transfers(server, tmp_path):
    server.routes[FILE] = [_status(503), _truncated(PAYLOAD), _ok(PAYLOAD)]
    dest = str(tmp_path / 'photo.jpg')
    assert utils.download(_url(server), dest, sha1_hash=SHA1, retries=3) == dest
    assert _read(dest) == PAYLOAD and server.requests == [FILE] * 3
    server.routes['/down'] = [_status(500)]
    with pytest.raises(DownloadError, match='after 2 attempts: HTTP 500'):
        utils.download(_url(server, '/down'), dest, overwrite=True, retries=2)
    assert server.requests.count('/down') == 2
    assert os.listdir(tmp_path) == ['photo.jpg'] and _read(dest) == PAYLOAD


def test_unverified_download_warns(server, tmp_path):
    server.routes[FILE] = [_ok(PAYLOAD)]
    with pytest.warns(UserWarning, match='without checking its TLS certificate'):
        utils.download(_url(server), str(tmp_path / 'p.jpg'), verify_ssl=False)
    with pytest.raises(ValueError, match='give path'):
        utils.download(_url(server, '/files/'))
