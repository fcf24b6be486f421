"""ResNet-101 v1d and MobileNet as R-CNN backbones: GluonCV's ImageNet and R-CNN files load
and give GluonCV's maps (the backbones of its mask_rcnn zoo that v1b does not cover)."""
import re

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from gluondet.model_zoo import store
from gluondet.model_zoo.backbones import BACKBONES, MobileNet, ResNetV1b, get_backbone
from gluondet.model_zoo.detector import norm_param_names
from gluondet.model_zoo.faster_rcnn import FasterRCNN
from gluondet.model_zoo.gluoncv_compat import load_gluoncv_base, load_gluoncv_v1b, read_params
from gluondet.model_zoo.gluoncv_rcnn import convert_faster_rcnn, rcnn_key_table
from gluondet.nn import FPN

gluoncv = pytest.importorskip('gluoncv')
from test_gluoncv_compat import _randomize  # noqa: E402  (needs gluoncv)

_SIZES = (32, 64, 128, 256, 512)
# GluonCV's settings of these networks, as FasterRCNN's arguments
C4_COCO = dict(short=800, max_size=1333, nms_thresh=0.5, nms_topk=-1, post_nms=-1,
               anchor_sizes=(_SIZES,), rpn_test_post_nms=1000, rpn_min_size=1, clip=4.14)
FPN_COCO = dict(short=800, max_size=1333, nms_thresh=0.5, nms_topk=-1, post_nms=-1,
                strides=(4, 8, 16, 32, 64), anchor_sizes=_SIZES, alloc_size=(384, 384),
                roi_size=(7, 7), rpn_test_post_nms=1000, rpn_min_size=1, clip=4.14,
                num_sample=512)
MOBILENET_MASK = dict(FPN_COCO, short=(640, 800), roi_size=(14, 14), clip=4.42,
                      trainable_norm=True)
C4 = 'faster_rcnn_resnet101_v1d_coco'
FPN_R101 = 'faster_rcnn_fpn_resnet101_v1d_coco'
MOBILENET = 'mask_rcnn_fpn_syncbn_mobilenet1_0_coco'
RCNN_NAMES = [C4, FPN_R101, MOBILENET]
FEW = 16     # test proposals and detections of the GluonCV networks: their heads stay cheap


def _input(shape, seed):
    return mx.nd.array(np.random.RandomState(seed).normal(size=shape))


def _close(got, expected, rtol):
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected):
        theirs = theirs.asnumpy() if isinstance(theirs, mx.nd.NDArray) else theirs
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours.asnumpy(), theirs, rtol=rtol,
                                   atol=rtol * np.abs(theirs).max())


def _damp_residuals(net):
    """The last norm of every bottleneck scaled down (as in trained networks), so that
    ResNet-101's random outputs stay moderate; its symbol names are its gluon names."""
    for name, param in net.collect_params(r'.*layers\d_batchnorm\d+_gamma').items():
        if int(re.search(r'batchnorm(\d+)_gamma$', name).group(1)) % 3 == 2:
            param.set_data(param.data() * 0.1)


def _gluoncv_stages(net, x):
    """GluonCV's ResNetV1b run by hand up to each of layer1..layer4."""
    x = net.maxpool(net.relu(net.bn1(net.conv1(x))))
    outputs = []
    for layer in (net.layer1, net.layer2, net.layer3, net.layer4):
        x = layer(x)
        outputs.append(x.asnumpy())
    return outputs


@pytest.fixture(scope='module')
def imagenet_v1d(tmp_path_factory):
    """(file, network): GluonCV's ImageNet resnet101_v1d with random weights, saved."""
    net = gluoncv.model_zoo.resnet101_v1d(pretrained=False)
    net.initialize()
    net(mx.nd.zeros((1, 3, 64, 64)))
    _randomize(net)
    _damp_residuals(net)
    path = str(tmp_path_factory.mktemp('imagenet') / 'resnet101_v1d.params')
    net.save_parameters(path)
    return path, net


def test_resnet101_v1d_imagenet_file_gives_gluoncv_stage_outputs(imagenet_v1d):
    """Odd map sizes (25, 13, 7 rows) check the average pools' rounding and edge counts."""
    path, theirs = imagenet_v1d
    x = _input((1, 3, 100, 132), 1)
    expected = _gluoncv_stages(theirs, x)
    ours = get_backbone('resnet101_v1d', norm_kwargs={'use_global_stats': True})
    load_gluoncv_v1b(ours, path)
    _close(ours(x), expected, 1e-5)
    assert [o.shape[2:] for o in expected] == [(25, 33), (13, 17), (7, 9), (4, 5)]
    assert ours.out_channels == (256, 512, 1024, 2048) and ours.out_strides == (4, 8, 16, 32)
    assert 1 < np.abs(expected[-1]).max() < 1e3
    ours.hybridize()
    _close(ours(x), expected, 1e-5)
    # C4: the backbone to layer3, layer4 on its own; the same file through load_gluoncv_base
    c4 = get_backbone('resnet101_v1d', out_stages=(3,), norm_kwargs={'use_global_stats': True})
    load_gluoncv_base(c4, path)
    c4_map, = c4(x)
    assert c4.out_channels == (1024,) and c4.out_strides == (16,)
    _close([c4_map, c4.layer4(c4_map)], expected[2:], 1e-5)


def test_resnet101_v1d_layout_and_stages():
    net = get_backbone('resnet101_v1d')
    assert isinstance(net, ResNetV1b) and isinstance(BACKBONES['resnet101_v1d'](), ResNetV1b)
    assert store.short_hash('resnet101_v1d') == '1b2b825f'    # GluonCV's ImageNet file
    assert (net.num_layers, net.deep_stem, net.avg_down) == (101, True, True)
    stem = [(type(b).__name__, getattr(b, '_channels', None)) for b in net.conv1]
    assert stem == [('Conv2D', 32), ('BatchNorm', None), ('Activation', None),
                    ('Conv2D', 32), ('BatchNorm', None), ('Activation', None), ('Conv2D', 64)]
    assert [c._kwargs['stride'] for c in net.conv1[::3]] == [(2, 2), (1, 1), (1, 1)]
    down = net.layer3[0].downsample
    assert [type(b).__name__ for b in down] == ['AvgPool2D', 'Conv2D', 'BatchNorm']
    assert down[0]._kwargs['kernel'] == (2, 2) and down[0]._kwargs['pooling_convention'] == \
        'full' and not down[0]._kwargs['count_include_pad']
    assert down[1]._kwargs['stride'] == (1, 1) and net.layer3[0].conv2._kwargs['stride'] == (2, 2)
    assert net.layer1[0].downsample[0]._kwargs['kernel'] == (1, 1)   # layer1: stride 1
    assert [len(layer) for layer in net.layers] == [3, 4, 23, 3]
    assert len(norm_param_names(net)) == 4 * (2 + 1 + 3 * 33 + 4)
    keys = net._collect_params_with_prefix()  # pylint: disable=protected-access
    frozen = net.stage_params('stem', 'layer1')
    assert sorted(frozen.keys()) == sorted(
        net.prefix + k.replace('.', '_') for k in keys if k.startswith(('conv1.', 'bn1.',
                                                                         'layer1.')))
    assert net.prefix + 'conv1_6_weight' in frozen.keys()
    assert net.prefix + 'layer1_0_downsample_2_running_var' in frozen.keys()


def test_v1d_loader_lists_what_does_not_match(imagenet_v1d, tmp_path):
    arrays = read_params(imagenet_v1d[0])
    del arrays['conv1.3.weight']
    arrays['layer2.0.downsample.0.weight'] = arrays.pop('layer2.0.downsample.1.weight')
    broken = str(tmp_path / 'v1b_like.params')
    mx.nd.save(broken, arrays)
    net = get_backbone('resnet101_v1d')
    with pytest.raises(ValueError) as err:
        load_gluoncv_v1b(net, broken)
    message = str(err.value)
    for expected in ('v1b_like.params', 'ResNetV1b-101 with deep stem and avg_down',
                     'missing from the file (2): conv1.3.weight, layer2.0.downsample.1.weight',
                     'not in the network (1): layer2.0.downsample.0.weight'):
        assert expected in message
    with pytest.raises(RuntimeError):   # nothing was loaded
        net.bn1.gamma.data()


def _gluoncv_rcnn(name, x):
    mx.random.seed(0)
    if name == MOBILENET:
        net = gluoncv.model_zoo.get_model(name, pretrained_base=False, num_devices=1,
                                          rpn_test_post_nms=FEW, rcnn_max_dets=FEW)
    else:
        net = gluoncv.model_zoo.get_model(name, pretrained_base=False)
        net.rpn._test_post_nms = net._rpn_test_post_nms = FEW
    net.initialize()
    net(x)
    _randomize(net)
    _damp_residuals(net)
    return net


@pytest.fixture(scope='module')
def rcnn_file(tmp_path_factory):
    """``rcnn_file(name)``: (file, GluonCV network, input), the network built, randomized
    and saved once per name."""
    cache = {}

    def get(name):
        if name not in cache:
            x = _input((1, 3, 224, 288), 2)
            ref = _gluoncv_rcnn(name, x)
            path = str(tmp_path_factory.mktemp('rcnn') / ('%s.params' % name))
            ref.save_parameters(path)
            cache[name] = path, ref, x
        return cache[name]
    return get


def _ours(name, classes):
    """gluondet's FasterRCNN with GluonCV's architecture and settings of ``name``."""
    if name == C4:
        backbone = get_backbone('resnet101_v1d', out_stages=(3,),
                                norm_kwargs={'use_global_stats': True})
        return FasterRCNN(backbone, classes, **C4_COCO)
    box = nn.HybridSequential()
    if name == FPN_R101:
        backbone = get_backbone('resnet101_v1d', out_stages=(1, 2, 3, 4),
                                norm_kwargs={'use_global_stats': True})
        fpn = FPN(256, num_inputs=4)
        for _ in range(2):
            box.add(nn.Dense(1024, weight_initializer=mx.init.Normal(0.01)),
                    nn.Activation('relu'))
        return FasterRCNN(backbone, classes, fpn=fpn, box_features=box, **FPN_COCO)
    # GluonCV's mobilenet Mask R-CNN: trainable norm layers; the FPN's convolutions keep their
    # bias before its (symbol SyncBatchNorm: eps 1e-3) norms
    backbone = get_backbone('mobilenet1.0', out_stages=(1, 2, 3, 4))
    fpn = FPN(256, num_inputs=4, use_bias=True, norm_layer=nn.BatchNorm,
              norm_kwargs={'epsilon': 1e-3})
    box.add(nn.AvgPool2D(3, 2, 1), nn.Conv2D(256, 3, padding=1), nn.BatchNorm(),
            nn.Activation('relu'), nn.Dense(1024, weight_initializer=mx.init.Normal(0.01)),
            nn.Activation('relu'))
    return FasterRCNN(backbone, classes, fpn=fpn, box_features=box, **MOBILENET_MASK)


def _detection_arrays(path):
    """A GluonCV file's arrays less the mask head's (``mask.*``, MaskRCNN's)."""
    return {k: v for k, v in read_params(path).items() if not k.startswith('mask.')}


# a few rows of the table each file exercises, GluonCV key -> ours
SAMPLE_KEYS = {
    C4: {'features.0.3.weight': 'backbone.conv1.3.weight',
         'features.0.4.running_var': 'backbone.conv1.4.running_var',
         'features.1.gamma': 'backbone.bn1.gamma',
         'features.6.22.conv3.weight': 'backbone.layer3.22.conv3.weight',
         'top_features.0.0.downsample.2.beta': 'backbone.layer4.0.downsample.2.beta',
         'rpn.conv1.0.weight': 'rpn_head.conv1.0.weight'},
    FPN_R101: {'features.resnetv1d_conv1_weight': 'backbone.conv1.3.weight',
               'features.resnetv1d_batchnorm1_running_mean': 'backbone.conv1.4.running_mean',
               'features.resnetv1d_batchnorm2_gamma': 'backbone.bn1.gamma',
               'features.resnetv1d_down2_conv0_weight': 'backbone.layer2.0.downsample.1.weight',
               'features.resnetv1d_down4_batchnorm0_beta': 'backbone.layer4.0.downsample.2.beta',
               'features.resnetv1d_layers3_conv68_weight': 'backbone.layer3.22.conv3.weight',
               'features.P6_conv1_bias': 'fpn.p6.bias'},
    MOBILENET: {'features.mobilenet_conv0_weight': 'backbone.stem.conv.weight',
                'features.mobilenet_batchnorm5_running_var':
                    'backbone.blocks.2.depthwise.bn.running_var',
                'features.mobilenet_conv26_weight': 'backbone.blocks.12.pointwise.conv.weight',
                'features.P5_lat_bn_moving_mean': 'fpn.lateral_norms.3.running_mean',
                'features.P3_conv_lat_bias': 'fpn.laterals.1.bias',
                'box_features.2.running_var': 'box_features.2.running_var'},
}


@pytest.mark.parametrize('name', RCNN_NAMES)
def test_rcnn_file_maps_every_key_both_ways(name, rcnn_file):
    path, ref, _ = rcnn_file(name)
    arrays = _detection_arrays(path)
    net = _ours(name, ref.classes)
    table = rcnn_key_table(net)
    ours = set(net._collect_params_with_prefix())  # pylint: disable=protected-access
    assert set(table.values()) == ours and len(table) == len(ours) == len(arrays)
    assert table.items() >= SAMPLE_KEYS[name].items()
    converted = convert_faster_rcnn(arrays, net, path)
    assert set(converted) == ours
    fixed = [k for k in converted if k.startswith('fpn.') and k.endswith('.gamma')]
    assert len(fixed) == (9 if name == MOBILENET else 0)    # GluonCV's fix_gamma: ones
    assert all((converted[k].asnumpy() == 1).all() for k in fixed)
    originals = {id(v): k for k, v in arrays.items()}
    used = {originals.get(id(v)) for k, v in converted.items() if k not in fixed}
    assert None not in used and len(used) == len(arrays) - len(fixed)
    # one key gone, one foreign: both listed (with the mask head's keys, not MaskRCNN's here)
    arrays = read_params(path)
    del arrays['rpn.%sscore.bias' % ('' if name == C4 else 'rpn_head.')]
    arrays['features.extra_weight'] = mx.nd.zeros((1,))
    with pytest.raises(ValueError) as err:
        convert_faster_rcnn(arrays, net, path)
    message = str(err.value)
    assert ('network parameters not in the file (1): rpn_head.score.bias' in message
            and 'features.extra_weight' in message and name + '.params' in message)
    masks = len([k for k in arrays if k.startswith('mask.')])
    assert masks == (20 if name == MOBILENET else 0)
    assert 'file keys without a match (%d): features.extra_weight' % (masks + 1) in message


@pytest.mark.parametrize('name', RCNN_NAMES)
def test_rcnn_file_gives_gluoncv_features(name, rcnn_file, tmp_path):
    path, ref, x = rcnn_file(name)
    net = _ours(name, ref.classes)
    if name == MOBILENET:
        path = str(tmp_path / 'detection.params')
        mx.nd.save(path, _detection_arrays(rcnn_file(name)[0]))
    net.load_parameters(path)
    expected = ref.features(x)
    expected = [expected] if isinstance(expected, mx.nd.NDArray) else expected
    got = net.features(x)
    _close(got, expected, 1e-4)
    assert [m.shape[2:] for m in got] == ([(14, 18)] if name == C4 else
                                          [(56, 72), (28, 36), (14, 18), (7, 9), (4, 5)])
    assert all(np.abs(m.asnumpy()).max() > 0.1 for m in got)
    if name == C4:    # layer4 as the top features, here on the C4 map itself
        _close([net.top_features(got[0])], [ref.top_features(got[0])], 1e-4)
    # GluonCV's settings of that name
    assert (net.short, net.max_size, net.nms_thresh, net.post_nms, net.strides) == (
        ref.short, ref.max_size, ref.nms_thresh, ref.post_nms, tuple(np.ravel(ref._strides)))
    assert (net.roi_size, net.sampler.num_sample, net.proposal.min_size, net.proposal.clip) == (
        tuple(ref._roi_size), ref._num_sample, ref.rpn.region_proposer._min_size,
        ref.rpn.region_proposer._box_decoder._clip)


@pytest.fixture(scope='module')
def imagenet_mobilenet(tmp_path_factory):
    """(file, network): GluonCV's ImageNet mobilenet1.0 with random weights, saved."""
    net = gluoncv.model_zoo.mobilenet1_0(pretrained=False)
    net.initialize()
    net(mx.nd.zeros((1, 3, 64, 64)))
    _randomize(net)
    path = str(tmp_path_factory.mktemp('imagenet') / 'mobilenet1.0.params')
    net.save_parameters(path)
    return path, net


def test_mobilenet_fpn_stages_are_gluoncvs_taps(imagenet_mobilenet):
    """out_stages 1-4 are GluonCV's relu6, relu10, relu22, relu26 (the layers ending blocks
    2, 4, 10, 12 of its flat features: 3 stem layers, then 6 per block)."""
    path, theirs = imagenet_mobilenet
    x = _input((1, 3, 96, 128), 3)
    expected = [theirs.features[:3 + 6 * b + 6](x) for b in (2, 4, 10, 12)]
    ours = get_backbone('mobilenet1.0', out_stages=(1, 2, 3, 4))
    load_gluoncv_base(ours, path)
    _close(ours(x), expected, 1e-4)
    assert ours.out_channels == [128, 256, 512, 1024] and ours.out_strides == [4, 8, 16, 32]
    assert [m.shape[2] for m in expected] == [24, 12, 6, 3]
    same = get_backbone('mobilenet1.0', out_blocks=(2, 4, 10, 12))
    assert (same._out_blocks, same.out_channels) == (ours._out_blocks, ours.out_channels)
    short = get_backbone('mobilenet1.0', out_stages=(2,))     # blocks past 4 not built
    load_gluoncv_base(short, path)
    _close(short(x), expected[1:2], 1e-4)
    assert get_backbone('mobilenet1.0').out_strides == [16, 32]   # SSD's default blocks


def test_mobilenet_stage_params_for_freezing():
    net = get_backbone('mobilenet1.0', out_stages=(1, 2, 3, 4))
    params = net._collect_params_with_prefix()  # pylint: disable=protected-access
    structural = {p.name: k for k, p in params.items()}
    stages = {s: {structural[n] for n in net.stage_params(s).keys()}
              for s in ('stem', 'layer1', 'layer2', 'layer3', 'layer4')}
    assert sum(len(v) for v in stages.values()) == len(structural) == 5 * 27
    assert set.union(*stages.values()) == set(structural.values())
    assert {k.split('.')[0] for k in stages['stem']} == {'stem'}
    blocks = {s: sorted({int(k.split('.')[1]) for k in v})
              for s, v in stages.items() if s != 'stem'}
    assert blocks == {'layer1': [0, 1, 2], 'layer2': [3, 4], 'layer3': list(range(5, 11)),
                      'layer4': [11, 12]}
    # a FasterRCNN on it: everything trains with trainable norm, else the stem, layer1 and
    # every norm layer stay fixed
    def trained(trainable_norm):
        rcnn = FasterRCNN(net, ['a', 'b'], fpn=FPN(64), box_features=nn.Dense(16),
                          trainable_norm=trainable_norm, **FPN_COCO)
        return sorted(structural[n] for n in rcnn.collect_train_params().keys()
                      if n in structural)
    assert trained(True) == sorted(structural.values())
    assert trained(False) == sorted('blocks.%d.%s.conv.weight' % (i, part)
                                    for i in range(3, 13) for part in ('depthwise', 'pointwise'))
    with pytest.raises(ValueError, match="no stage 'layer5'"):
        net.stage_params('layer5')
    with pytest.raises(ValueError, match="stage 'layer4' .*11-12.* is not built"):
        get_backbone('mobilenet1.0', out_stages=(3,)).stage_params('layer4')


def test_mobilenet_bad_outputs_or_file_are_refused(imagenet_mobilenet, tmp_path):
    for kwargs in ({'out_stages': (5,)}, {'out_blocks': (4, 2)}, {'out_blocks': (13,)},
                   {'out_blocks': (2,), 'out_stages': (1,)}):
        with pytest.raises(ValueError, match='MobileNet'):
            get_backbone('mobilenet1.0', **kwargs)
    arrays = read_params(imagenet_mobilenet[0])
    del arrays['features.4.gamma']
    arrays['features.99.weight'] = mx.nd.zeros((1,))
    broken = str(tmp_path / 'broken.params')
    mx.nd.save(broken, arrays)
    net = get_backbone('mobilenet1.0', out_stages=(1,))
    with pytest.raises(ValueError) as err:
        load_gluoncv_base(net, broken)
    for expected in ('broken.params', 'file keys without a match (1): features.99.weight',
                     'backbone parameters not in the file (1): blocks.0.depthwise.bn.gamma'):
        assert expected in str(err.value)
    assert isinstance(net, MobileNet)
    with pytest.raises(TypeError, match='GluonCV has no C4 R-CNN on a MobileNet'):
        rcnn_key_table(FasterRCNN(net, ['a'], box_features=nn.Dense(4)))
    with pytest.raises(TypeError, match='no GluonCV ImageNet file loads into a bare VGGAtrous'):
        load_gluoncv_base(get_backbone('vgg16_atrous'), broken)
