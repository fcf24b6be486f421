"""ResNet v1b backbones: GluonCV ImageNet files load and give GluonCV's stage outputs."""
import hashlib
import os
import re

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from mxnet.gluon import nn

from gluondet.model_zoo import registry, store
from gluondet.model_zoo.backbones import BACKBONES, ResNetV1b, get_backbone
from gluondet.model_zoo.gluoncv_compat import load_gluoncv_v1b

gluoncv = pytest.importorskip('gluoncv')
from test_gluoncv_compat import _randomize  # noqa: E402  (needs gluoncv)

NAMES = ['resnet18_v1b', 'resnet34_v1b', 'resnet50_v1b', 'resnet101_v1b']
CHANNELS = {'resnet18_v1b': (64, 128, 256, 512), 'resnet34_v1b': (64, 128, 256, 512),
            'resnet50_v1b': (256, 512, 1024, 2048), 'resnet101_v1b': (256, 512, 1024, 2048)}
HEIGHT, WIDTH = 224, 160


def _input(seed=1):
    return mx.nd.array(np.random.RandomState(seed).normal(size=(1, 3, HEIGHT, WIDTH)))


def _gluoncv_stages(net, x):
    """GluonCV's ResNetV1b run by hand up to each of layer1..layer4."""
    x = net.maxpool(net.relu(net.bn1(net.conv1(x))))
    outputs = []
    for layer in (net.layer1, net.layer2, net.layer3, net.layer4):
        x = layer(x)
        outputs.append(x.asnumpy())
    return outputs


def _close(got, expected):
    for ours, theirs in zip(got, expected):
        np.testing.assert_allclose(ours.asnumpy(), theirs, rtol=1e-5, atol=1e-5)


def _gluoncv_network(name):
    """GluonCV's network with random weights and statistics; the last norm of every block
    scaled down (as in trained networks) so that ResNet-101's outputs stay near 1-50."""
    net = getattr(gluoncv.model_zoo, name)(pretrained=False)
    net.initialize()
    net(_input())
    _randomize(net)
    for layer in (net.layer1, net.layer2, net.layer3, net.layer4):
        for block in layer:
            last = getattr(block, 'bn3', None) or block.bn2
            last.gamma.set_data(last.gamma.data() * 0.1)
    return net


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    """``saved(name)``: (store folder, sha1, GluonCV network), the network's random weights
    in the folder under the store's file name; built once per name."""
    cache = {}

    def get(name):
        if name not in cache:
            theirs = _gluoncv_network(name)
            root = tmp_path_factory.mktemp(name)
            path = str(root / 'saved.params')
            theirs.save_parameters(path)
            with open(path, 'rb') as f:
                sha1 = hashlib.sha1(f.read()).hexdigest()
            os.rename(path, str(root / ('%s-%s.params' % (name, sha1[:8]))))
            cache[name] = str(root), sha1, theirs
        return cache[name]
    return get


@pytest.fixture
def weights(saved, monkeypatch):
    """``weights(name)``: (path found by ``registry.weights_file``, GluonCV network)."""
    def get(name):
        root, sha1, theirs = saved(name)
        monkeypatch.setitem(store.MODEL_SHA1, name, sha1)
        return registry.weights_file(name, root), theirs
    return get


def _loaded(name, path, **kwargs):
    net = get_backbone(name, **kwargs)
    load_gluoncv_v1b(net, path)
    return net


@pytest.mark.parametrize('name', NAMES)
def test_gluoncv_file_gives_the_same_stage_outputs(name, weights):
    path, theirs = weights(name)
    x = _input(2)
    ours = _loaded(name, path)
    got = ours(x)
    _close(got, _gluoncv_stages(theirs, x))
    assert [o.shape for o in got] == [(1, c, HEIGHT // s, WIDTH // s)
                                      for c, s in zip(CHANNELS[name], (4, 8, 16, 32))]
    assert ours.out_channels == CHANNELS[name] and ours.out_strides == (4, 8, 16, 32)
    assert ours.stem(x).shape == (1, 64, HEIGHT // 4, WIDTH // 4)


@pytest.mark.parametrize('name', NAMES)
def test_global_stats_in_training_mode(name, weights):
    path, _ = weights(name)
    theirs = getattr(gluoncv.model_zoo, name)(pretrained=False, use_global_stats=True)
    theirs.load_parameters(path, ignore_extra=False)
    ours = _loaded(name, path, norm_kwargs={'use_global_stats': True})
    norms = []
    ours.apply(lambda b: norms.append(b) if isinstance(b, nn.BatchNorm) else None)
    assert len(norms) == len(ours.collect_params('.*running_mean').keys())
    assert all(b._kwargs['use_global_stats'] for b in norms)  # pylint: disable=protected-access
    x = _input(3)
    with autograd.train_mode():
        expected = _gluoncv_stages(theirs, x)
        _close(ours(x), expected)
        batch_stats = _loaded(name, path)(x)[-1].asnumpy()
    assert np.abs(batch_stats - expected[-1]).max() > 1e-2 * np.abs(expected[-1]).max()


@pytest.mark.parametrize('name', ['resnet18_v1b', 'resnet50_v1b'])
def test_hybridized_equals_imperative(name, weights):
    path, _ = weights(name)
    x = _input(4)
    ours = _loaded(name, path)
    expected = [o.asnumpy() for o in ours(x)]
    ours.hybridize(static_alloc=True, static_shape=True)
    _close(ours(x), expected)
    _close(ours(x), expected)  # the cached graph


class _C4(gluon.HybridBlock):
    """Faster R-CNN C4 usage: the backbone to layer3, then layer4 on its own."""

    def __init__(self, backbone):
        super().__init__()
        with self.name_scope():
            self.backbone = backbone

    def hybrid_forward(self, F, x):
        c4, = self.backbone(x)
        return c4, self.backbone.layer4(c4)


def test_layer4_used_separately(weights):
    name = 'resnet50_v1b'
    path, _ = weights(name)
    x = _input(5)
    expected = [o.asnumpy() for o in _loaded(name, path)(x)]
    backbone = _loaded(name, path, out_stages=(3,))
    assert backbone.out_channels == (1024,) and backbone.out_strides == (16,)
    net = _C4(backbone)
    keys = net._collect_params_with_prefix()  # pylint: disable=protected-access
    inner = backbone._collect_params_with_prefix()  # pylint: disable=protected-access
    assert sorted(keys) == sorted('backbone.' + k for k in inner)
    for hybridize in (False, True):
        if hybridize:
            net.hybridize()
        _close(net(x), expected[2:])


def test_partial_or_foreign_file_is_refused_naming_every_key(weights, tmp_path):
    name = 'resnet18_v1b'
    arrays = mx.nd.load(weights(name)[0])
    del arrays['layer2.0.downsample.1.running_mean']
    del arrays['bn1.gamma']
    arrays['layer5.0.conv1.weight'] = mx.nd.zeros((1,))
    arrays['layer1.1.conv2.weight'] = mx.nd.zeros((64, 64, 1, 1))
    broken = str(tmp_path / 'broken.params')
    mx.nd.save(broken, arrays)
    net = get_backbone(name)
    with pytest.raises(ValueError) as err:
        load_gluoncv_v1b(net, broken)
    message = str(err.value)
    for expected in ('broken.params', 'ResNetV1b-18', 'layer2.0.downsample.1.running_mean',
                     'bn1.gamma', 'layer5.0.conv1.weight', 'layer1.1.conv2.weight'):
        assert expected in message
    with pytest.raises(RuntimeError):   # nothing was loaded
        net.conv1.weight.data()


def test_file_of_another_depth_is_refused(weights):
    path, _ = weights('resnet50_v1b')
    with pytest.raises(ValueError, match=r'missing from the file \(255\): layer3.10.bn1.beta'):
        load_gluoncv_v1b(get_backbone('resnet101_v1b'), path)
    with pytest.raises(ValueError, match=r'wrong shape \(.*layer1.0.conv1.weight'):
        load_gluoncv_v1b(get_backbone('resnet18_v1b'), path)


def test_loader_takes_only_v1b_backbones(tmp_path):
    with pytest.raises(TypeError, match='not ResNetV1'):
        load_gluoncv_v1b(get_backbone('resnet50_v1'), str(tmp_path / 'x.params'))


def test_registered_under_gluoncv_weight_names():
    for name in NAMES:
        assert isinstance(BACKBONES[name](), ResNetV1b)
        assert len(store.short_hash(name)) == 8


def test_stage_parameters_for_freezing():
    net = get_backbone('resnet50_v1b', norm_kwargs={'use_global_stats': True})
    frozen = net.stage_params('stem', 'layer1')
    names = sorted(frozen.keys())
    structural = sorted(k for k in net._collect_params_with_prefix()  # pylint: disable=W0212
                        if k.startswith(('conv1.', 'bn1.', 'layer1.')))
    assert names == sorted(net.prefix + k.replace('.', '_') for k in structural)
    pattern = re.escape(net.prefix) + '(conv1|bn1|layer1)_'
    assert sorted(net.collect_params(pattern).keys()) == names
    assert net.prefix + 'layer1_0_downsample_1_gamma' in names
    assert not any('layer2' in n for n in names)
    with pytest.raises(ValueError, match="no stage 'layer5'"):
        net.stage_params('layer5')


def test_norm_layer_reaches_every_norm():
    class Marked(nn.BatchNorm):
        pass
    net = get_backbone('resnet18_v1b', norm_layer=Marked, norm_kwargs={'momentum': 0.8})
    norms = []
    net.apply(lambda b: norms.append(b) if isinstance(b, nn.BatchNorm) else None)
    assert len(norms) == 1 + 2 * 8 + 3   # stem, two per block, three downsamples
    assert all(isinstance(b, Marked) and b._kwargs['momentum'] == 0.8  # pylint: disable=W0212
               for b in norms)


def test_forward_stops_at_the_last_stage_asked_for():
    net = get_backbone('resnet18_v1b', out_stages=(1, 3))
    net.initialize()
    out = net(_input())
    assert [o.shape for o in out] == [(1, 64, 56, 40), (1, 256, 14, 10)]
    for bad in ((), (0,), (3, 2), (2, 2), (5,)):
        with pytest.raises(ValueError, match='out_stages'):
            get_backbone('resnet18_v1b', out_stages=bad)
    with pytest.raises(ValueError, match='num_layers'):
        ResNetV1b(200)
