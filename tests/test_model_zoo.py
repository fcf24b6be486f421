"""The model zoo registry: names, metadata, errors, weight loading plumbing, norm layers."""
import warnings

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from gluondet.model_zoo import (COCO_CLASSES, VOC_CLASSES, get_model, get_model_info,
                                get_model_list, register_model, registry)
from gluondet.model_zoo.backbones import get_backbone

SSD_NAMES = ['ssd_%s_%s' % (arch, dataset)
             for arch in ('300_vgg16_atrous', '512_vgg16_atrous', '512_resnet50_v1',
                          '512_mobilenet1.0', '300_mobilenet0.25')
             for dataset in ('voc', 'coco', 'custom')]


def test_model_list_holds_the_gluoncv_ssd_names():
    # plus gluondet's own small demo network, which has no voc/coco variants
    assert (sorted(n for n in get_model_list() if n.startswith('ssd_'))
            == sorted(SSD_NAMES + ['ssd_160_mobilenet0.5_custom']))


def test_metadata_beside_each_name():
    info = get_model_info('ssd_512_mobilenet1.0_coco')
    assert info.classes == COCO_CLASSES and len(info.classes) == 80
    assert info.data_shape == (512, 512)
    assert (info.backbone, info.dataset, info.has_weights) == ('mobilenet1.0', 'coco', True)
    voc = get_model_info('ssd_300_vgg16_atrous_voc')
    assert voc.classes == VOC_CLASSES and voc.data_shape == (300, 300)
    custom = get_model_info('ssd_300_mobilenet0.25_custom')
    assert custom.classes is None and not custom.has_weights
    assert custom.backbone == 'mobilenet0.25'


def test_a_name_has_weights_exactly_when_the_store_serves_them():
    from gluondet.model_zoo.store import MODEL_SHA1
    for name in get_model_list():
        assert get_model_info(name).has_weights == (name in MODEL_SHA1), name


def test_unknown_name_suggests_close_names():
    with pytest.raises(ValueError, match=r"did you mean 'ssd_300_mobilenet0.25_voc'"):
        get_model('ssd_300_mobilenet0.25_vco')
    with pytest.raises(ValueError, match='unknown model .yolo_nothing.'):
        get_model('yolo_nothing')


def test_names_are_case_insensitive():
    net = get_model('SSD_300_MobileNet0.25_VOC', pretrained_base=False)
    assert net.classes == VOC_CLASSES


def test_duplicate_registration_is_refused():
    name = get_model_list()[0]
    with pytest.raises(ValueError, match='already registered'):
        register_model(name, None, (1, 1), 'x', 'custom')(lambda **kw: None)


def test_custom_needs_classes_and_fixed_sets_refuse_them():
    with pytest.raises(ValueError, match='needs classes'):
        get_model('ssd_300_mobilenet0.25_custom', pretrained_base=False)
    with pytest.raises(TypeError, match='fixed classes'):
        get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False, classes=['a'])
    with pytest.warns(UserWarning, match='no pretrained weights'):
        net = get_model('ssd_300_mobilenet0.25_custom', classes=['a', 'b'], pretrained=True,
                        pretrained_base=False)
    assert net.classes == ('a', 'b')


def test_unknown_keyword_is_refused():
    with pytest.raises(TypeError):
        get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False, nms_tresh=0.5)


class _FakeStore:
    """Stands in for ``registry.weights_file``: serves files from a dict, records requests."""

    def __init__(self, files):
        self.files = files
        self.requests = []

    def __call__(self, name, root):
        self.requests.append((name, root))
        return self.files[name]


def _gluoncv_mobilenet_file(tmp_path):
    gluoncv = pytest.importorskip('gluoncv')
    net = gluoncv.model_zoo.get_model('mobilenet0.25')
    net.initialize(mx.init.Normal(0.1))
    net(mx.nd.zeros((1, 3, 64, 64)))
    path = str(tmp_path / 'mobilenet0.25.params')
    net.save_parameters(path)
    return path, net


def test_pretrained_base_loads_the_backbone_through_the_store(tmp_path, monkeypatch):
    path, classifier = _gluoncv_mobilenet_file(tmp_path)
    store = _FakeStore({'mobilenet0.25': path})
    monkeypatch.setattr(registry, 'weights_file', store)
    net = get_model('ssd_300_mobilenet0.25_voc', root='/weights')
    assert store.requests == [('mobilenet0.25', '/weights')]
    np.testing.assert_array_equal(net.features.backbone.stem.conv.weight.data().asnumpy(),
                                  classifier.features[0].weight.data().asnumpy())
    with pytest.raises(RuntimeError):   # the rest waits for net.initialize(), as in GluonCV
        net.class_predictors[0].weight.data()


def test_pretrained_loads_the_named_file_and_skips_the_base(tmp_path, monkeypatch):
    source = get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False)
    source.initialize()
    x = mx.nd.random.uniform(shape=(1, 3, 300, 300))
    expected = source(x)[1].asnumpy()
    path = str(tmp_path / 'ssd.params')
    source.save_parameters(path)
    store = _FakeStore({'ssd_300_mobilenet0.25_voc': path})
    monkeypatch.setattr(registry, 'weights_file', store)
    net = get_model('ssd_300_mobilenet0.25_voc', pretrained=True, root='/w')
    assert store.requests == [('ssd_300_mobilenet0.25_voc', '/w')]
    np.testing.assert_array_equal(net(x)[1].asnumpy(), expected)


def test_custom_transfer_keeps_shared_classes(tmp_path, monkeypatch):
    source = get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False)
    source.initialize()
    source(mx.nd.zeros((1, 3, 300, 300)))
    path = str(tmp_path / 'voc.params')
    source.save_parameters(path)
    monkeypatch.setattr(registry, 'weights_file', _FakeStore({'ssd_300_mobilenet0.25_voc': path}))
    net = get_model('ssd_300_mobilenet0.25_custom', classes=['dog', 'unicorn'], transfer='voc')
    assert net.classes == ('dog', 'unicorn')
    old = source.class_predictors[2].bias.data().asnumpy()
    new = net.class_predictors[2].bias.data().asnumpy()
    np.testing.assert_array_equal(new[1::3], old[VOC_CLASSES.index('dog') + 1::21])
    np.testing.assert_array_equal(new[0::3], old[0::21])
    np.testing.assert_array_equal(net.features.backbone.stem.conv.weight.data().asnumpy(),
                                  source.features.backbone.stem.conv.weight.data().asnumpy())


class _MarkedBatchNorm(nn.BatchNorm):
    """A BatchNorm subclass, to see where ``norm_layer`` reaches."""


@pytest.mark.parametrize('name', ['ssd_300_mobilenet0.25_voc', 'ssd_512_resnet50_v1_voc'])
def test_norm_layer_and_kwargs_reach_backbone_and_extras(name):
    net = get_model(name, pretrained_base=False, norm_layer=_MarkedBatchNorm,
                    norm_kwargs={'momentum': 0.8})
    norms = []
    net.apply(lambda block: norms.append(block) if isinstance(block, nn.BatchNorm) else None)
    assert norms and all(isinstance(b, _MarkedBatchNorm) for b in norms)
    assert all(b._kwargs['momentum'] == 0.8 for b in norms)  # pylint: disable=protected-access
    extra_bn = net.features.extras[0].bn1
    assert extra_bn._kwargs['eps'] == 1e-3 and extra_bn._kwargs['fix_gamma']  # GluonCV's extras


def test_sync_batch_norm_can_be_injected():
    from mxnet.gluon.contrib.nn import SyncBatchNorm
    net = get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False, norm_layer=SyncBatchNorm,
                    norm_kwargs={'num_devices': 1})
    net.initialize()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ids = net(mx.nd.zeros((1, 3, 128, 128)))[0]
    assert ids.shape == (1, 100, 1)


def test_vgg_ignores_norm_layer():
    net = get_model('ssd_300_vgg16_atrous_voc', pretrained_base=False, norm_layer=_MarkedBatchNorm)
    norms = []
    net.apply(lambda block: norms.append(block) if isinstance(block, nn.BatchNorm) else None)
    assert norms == []


def test_get_backbone_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown backbone 'resnet18_v1z'"):
        get_backbone('resnet18_v1z')
