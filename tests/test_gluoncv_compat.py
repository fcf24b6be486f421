"""GluonCV 0.10 ``.params`` files load into gluondet networks and give the same detections."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

from gluondet.model_zoo import get_model
from gluondet.model_zoo.gluoncv_compat import load_gluoncv_backbone, ssd_key_table
from gluondet.model_zoo.ssd import build_ssd

gluoncv = pytest.importorskip('gluoncv')

# input size used for each architecture (any size the network accepts)
SIZES = {'ssd_300_mobilenet0.25': 300, 'ssd_512_mobilenet1.0': 256, 'ssd_512_resnet50_v1': 256,
         'ssd_300_vgg16_atrous': 300, 'ssd_512_vgg16_atrous': 300}
# one name of every backbone family runs in the fast suite; the rest are slow (GluonCV
# needs 5-10 s to build each of its symbol-based networks)
FAST = {'ssd_300_mobilenet0.25_voc', 'ssd_300_mobilenet0.25_coco', 'ssd_300_mobilenet0.25_custom',
        'ssd_512_resnet50_v1_voc', 'ssd_300_vgg16_atrous_voc'}
NAMES = ['%s_%s' % (arch, d) for arch in SIZES for d in ('voc', 'coco', 'custom')]
CUSTOM = ['apple', 'dog', 'kiwi']


def _kwargs(name):
    return {'classes': CUSTOM} if name.endswith('_custom') else {}


def _input(size, batch=1):
    return mx.nd.array(np.random.RandomState(1).normal(size=(batch, 3, size, size)))


def _randomize(net, seed=0):
    """Random weights and non-trivial BatchNorm statistics, GluonCV or gluondet naming."""
    rng = np.random.RandomState(seed)
    for name, param in net.collect_params().items():
        shape = param.shape
        if name.endswith('weight'):
            value = rng.normal(0, np.sqrt(2.0 / np.prod(shape[1:])), shape)
        elif name.endswith('bias'):
            value = rng.uniform(-0.1, 0.1, shape)
        elif name.endswith('gamma'):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith(('beta', 'running_mean', 'moving_mean')):
            value = rng.uniform(-0.2, 0.2, shape)
        elif name.endswith(('running_var', 'moving_var')):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith('normalize_scale'):
            value = rng.uniform(10, 30, shape)
        else:
            continue  # anchors and the VGG input scale are constants
        param.set_data(mx.nd.array(value))


def _gluoncv_ssd(name, x):
    """GluonCV's SSD with random weights, its predictors scaled to confident, finite outputs."""
    net = gluoncv.model_zoo.get_model(name, pretrained=False, pretrained_base=False,
                                      **_kwargs(name))
    net.initialize()
    net(x)
    _randomize(net)
    for feature, cls_pred, box_pred in zip(net.features(x), net.class_predictors,
                                           net.box_predictors):
        for predictor, spread in ((cls_pred, 3.0), (box_pred, 0.5)):
            scale = spread / predictor(feature).asnumpy().std()
            for param in predictor.collect_params().values():
                param.set_data(param.data() * scale)
    return net


def _saved_gluoncv_ssd(name, tmp_path):
    x = _input(SIZES[name.rsplit('_', 1)[0]])
    net = _gluoncv_ssd(name, x)
    path = str(tmp_path / (name + '.params'))
    net.save_parameters(path)
    return net, path, x


@pytest.mark.parametrize('name', [n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in NAMES])
def test_gluoncv_file_gives_the_same_detections(name, tmp_path):
    theirs, path, x = _saved_gluoncv_ssd(name, tmp_path)
    expected = [o.asnumpy() for o in theirs(x)]
    ours = get_model(name, pretrained_base=False, **_kwargs(name))
    ours.load_parameters(path)
    got = [o.asnumpy() for o in ours(x)]
    assert (expected[0] >= 0).sum() == 100      # 100 real detections
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1], atol=1e-4, rtol=0)
    np.testing.assert_allclose(got[2], expected[2], atol=1e-4, rtol=0)


def test_hybridized_net_with_gluoncv_weights(tmp_path):
    theirs, path, _ = _saved_gluoncv_ssd('ssd_300_mobilenet0.25_voc', tmp_path)
    x = _input(300, batch=2)
    ours = get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False)
    ours.load_parameters(path)
    ours.hybridize(static_alloc=True, static_shape=True)
    for a, b in zip(ours(x), theirs(x)):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), atol=1e-4, rtol=0)
    with autograd.train_mode():   # raw predictions and anchors too
        for a, b in zip(ours(x), theirs(x)):
            np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize('arch', list(SIZES))
def test_key_table_covers_every_parameter_once(arch):
    net = get_model(arch + '_voc', pretrained_base=False)
    table = ssd_key_table(net)
    ours = sorted(net._collect_params_with_prefix())  # pylint: disable=protected-access
    assert sorted(table.values()) == ours
    assert len(set(table.values())) == len(table)


@pytest.mark.parametrize('arch,gluoncv_key,our_key', [
    ('ssd_300_mobilenet0.25', 'features.mobilenet_conv0_weight',
     'features.backbone.stem.conv.weight'),
    ('ssd_300_mobilenet0.25', 'features.mobilenet_conv3_weight',
     'features.backbone.blocks.1.depthwise.conv.weight'),
    ('ssd_300_mobilenet0.25', 'features.mobilenet_batchnorm26_running_var',
     'features.backbone.blocks.12.pointwise.bn.running_var'),
    ('ssd_300_mobilenet0.25', 'features.expand_trans_bn1_moving_var',
     'features.extras.1.bn1.running_var'),
    ('ssd_300_mobilenet0.25', 'features.expand_conv3_weight', 'features.extras.3.conv2.weight'),
    ('ssd_512_resnet50_v1', 'features.resnetv1_batchnorm0_gamma', 'features.backbone.bn1.gamma'),
    ('ssd_512_resnet50_v1', 'features.resnetv1_stage1_conv3_weight',
     'features.backbone.stages.0.0.proj_conv.weight'),
    ('ssd_512_resnet50_v1', 'features.resnetv1_stage2_conv4_bias',
     'features.backbone.stages.1.1.conv1.bias'),
    ('ssd_512_resnet50_v1', 'features.resnetv1_stage3_batchnorm18_beta',
     'features.backbone.stages.2.5.bn3.beta'),
    ('ssd_300_vgg16_atrous', 'features.stages.3.4.weight', 'features.backbone.stage4.2.weight'),
    ('ssd_300_vgg16_atrous', 'features.stages.5.2.bias', 'features.backbone.fc7.bias'),
    ('ssd_300_vgg16_atrous', 'features.norm4.scale', 'features.backbone.conv4_3_norm.scale'),
    ('ssd_300_vgg16_atrous', 'features.extras.3.2.weight', 'features.extras.3.conv2.weight'),
    ('ssd_300_vgg16_atrous', 'class_predictors.5.predictor.bias', 'class_predictors.5.bias'),
    ('ssd_300_vgg16_atrous', 'anchor_generators.2.anchors', 'anchor_generators.2.anchors'),
])
def test_key_table_entries(arch, gluoncv_key, our_key):
    assert ssd_key_table(get_model(arch + '_voc', pretrained_base=False))[gluoncv_key] == our_key


def test_partial_gluoncv_file_is_refused_with_the_names(tmp_path):
    _, path, _ = _saved_gluoncv_ssd('ssd_300_mobilenet0.25_voc', tmp_path)
    arrays = mx.nd.load(path)
    dropped = [k for k in arrays if k.endswith('batchnorm5_running_mean')][0]
    del arrays[dropped]
    arrays['features.mobilenet0_conv99_weight'] = mx.nd.zeros((1,))
    broken = str(tmp_path / 'broken.params')
    mx.nd.save(broken, arrays)
    net = get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False)
    with pytest.raises(ValueError) as err:
        net.load_parameters(broken)
    message = str(err.value)
    assert 'broken.params' in message
    assert 'features.mobilenet0_conv99_weight' in message
    assert 'features.backbone.blocks.2.depthwise.bn.running_mean' in message


def test_gluoncv_file_of_another_backbone_is_refused(tmp_path):
    _, path, _ = _saved_gluoncv_ssd('ssd_300_mobilenet0.25_voc', tmp_path)
    net = get_model('ssd_512_resnet50_v1_voc', pretrained_base=False)
    with pytest.raises(ValueError, match='GluonCV SSD file that does not fit this ResNetV1'):
        net.load_parameters(path)


def test_gluoncv_file_of_other_classes_is_refused(tmp_path):
    _, path, _ = _saved_gluoncv_ssd('ssd_300_mobilenet0.25_voc', tmp_path)
    net = get_model('ssd_300_mobilenet0.25_coco', pretrained_base=False)
    with pytest.raises(ValueError, match=r'wrong shape \(12\): class_predictors.0.bias'):
        net.load_parameters(path)


# ---- ImageNet backbone files (pretrained_base) ---------------------------------------------

def _saved_gluoncv_classifier(name, tmp_path, x):
    net = gluoncv.model_zoo.get_model(name, pretrained=False)
    net.initialize()
    net(x)
    _randomize(net)
    path = str(tmp_path / (name + '.params'))
    net.save_parameters(path)
    return net, path


@pytest.mark.parametrize('arch,backbone,cut', [
    ('ssd_300_mobilenet0.25', 'mobilenet0.25', -2),   # drop global pool + flatten
    ('ssd_512_mobilenet1.0', 'mobilenet1.0', -2),
    ('ssd_160_mobilenet0.5', 'mobilenet0.5', -2),
    ('ssd_512_resnet50_v1', 'resnet50_v1', -1),       # drop global pool
])
def test_imagenet_backbone_weights(arch, backbone, cut, tmp_path):
    x = _input(128, batch=1)
    classifier, path = _saved_gluoncv_classifier(backbone, tmp_path, x)
    net = build_ssd(arch, ['a'], pretrained_base=False)
    load_gluoncv_backbone(net.features, path)
    expected = classifier.features[:cut](x).asnumpy()
    np.testing.assert_allclose(net.features.backbone(x)[-1].asnumpy(), expected,
                               rtol=1e-5, atol=1e-5)
    for extra in net.features.extras:   # extra layers keep their own init
        with pytest.raises(RuntimeError):
            extra.conv1.weight.data()


def test_vgg_backbone_file_loads_with_or_without_extras(tmp_path):
    from gluoncv.model_zoo.ssd.vgg_atrous import vgg16_atrous_300
    x = _input(300, batch=1)
    theirs = vgg16_atrous_300()
    theirs.initialize()
    theirs(x)
    _randomize(theirs)
    full = str(tmp_path / 'full.params')
    theirs.save_parameters(full)
    base_only = str(tmp_path / 'base.params')
    mx.nd.save(base_only, {k: v for k, v in mx.nd.load(full).items() if k.startswith('stages.')})
    expected = [o.asnumpy() for o in theirs(x)]

    net = build_ssd('ssd_300_vgg16_atrous', ['a'], pretrained_base=False)
    load_gluoncv_backbone(net.features, full)
    for got, want in zip(net.features(x), expected):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-4, atol=1e-4)

    net = build_ssd('ssd_300_vgg16_atrous', ['a'], pretrained_base=False)
    load_gluoncv_backbone(net.features, base_only)
    net.features.backbone.conv4_3_norm.initialize()
    net.features.backbone.init_scale.initialize()
    np.testing.assert_allclose(net.features.backbone(x)[1].asnumpy(), expected[1],
                               rtol=1e-4, atol=1e-4)
    assert (net.features.backbone.conv4_3_norm.scale.data().asnumpy() == 20).all()


def test_backbone_file_with_foreign_keys_is_refused(tmp_path):
    x = _input(128, batch=1)
    _, path = _saved_gluoncv_classifier('mobilenet0.25', tmp_path, x)
    net = build_ssd('ssd_512_resnet50_v1', ['a'], pretrained_base=False)
    with pytest.raises(ValueError, match=r'mobilenet0.25.params does not fit backbone ResNetV1'):
        load_gluoncv_backbone(net.features, path)
