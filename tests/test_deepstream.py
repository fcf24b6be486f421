"""gluondet export --gen-ds-config: DeepStream's nvinfer config and labels, checked against
DeepStream's documented keys and against the exported model itself."""
import configparser
import json
import logging
import os

import mxnet as mx
import numpy as np
import pytest

from gluondet.cli import main
from gluondet.deploy.deepstream import (CONFIG_FILE, LABELS_FILE, nvinfer_properties,
                                        write_deepstream_config)
from gluondet.model_zoo import get_model

onnx = pytest.importorskip('onnx')
from onnx import TensorProto, helper  # noqa: E402

# The keys of nvinfer's configuration file, as DeepStream documents them: the tables
# "Gst-nvinfer Property Group Supported Keys" and "Gst-nvinfer Class-attributes Group
# Supported Keys" of https://docs.nvidia.com/metropolis/deepstream/dev-guide/text/DS_plugin_gst-nvinfer.html
# (the same names as the CONFIG_GROUP_INFER_* macros of its gstnvinfer_property_parser.h,
# https://docs.nvidia.com/metropolis/deepstream/dev-guide/sdk-api/gstnvinfer__property__parser_8h.html).
DOCUMENTED_PROPERTY_KEYS = frozenset("""
    gie-unique-id process-mode interval labelfile-path gpu-id secondary-reinfer-interval
    output-tensor-meta enable-dla use-dla-core batch-size tensor-meta-pool-size network-mode
    model-engine-file int8-calib-file workspace-size output-blob-names is-classifier
    network-type force-implicit-batch-dim infer-dims output-io-formats layer-device-precision
    model-color-format net-scale-factor offsets mean-file maintain-aspect-ratio
    symmetric-padding scaling-filter scaling-compute-hw network-input-order
    input-tensor-from-meta custom-lib-path parse-bbox-func-name
    parse-bbox-instance-mask-func-name engine-create-func-name parse-classifier-func-name
    custom-network-config model-file proto-file uff-file uff-input-order input-dims
    uff-input-dims uff-input-blob-name tlt-encoded-model tlt-model-key onnx-file
    num-detected-classes enable-dbscan cluster-mode classifier-type classifier-threshold
    classifier-async-mode segmentation-threshold segmentation-output-order
    output-instance-mask input-object-min-width input-object-min-height
    input-object-max-width input-object-max-height operate-on-gie-id operate-on-class-ids
    filter-out-class-ids
""".split())
DOCUMENTED_CLASS_ATTRS_KEYS = frozenset("""
    threshold pre-cluster-threshold post-cluster-threshold eps group-threshold minBoxes
    dbscan-min-score roi-top-offset roi-bottom-offset detected-min-w detected-min-h
    detected-max-w detected-max-h border-color bg-color nms-iou-threshold topk
""".split())
# Documented values: network-mode 0 FP32, 1 INT8, 2 FP16; model-color-format 0 RGB;
# network-type 0 detector; cluster-mode 4 no clustering; infer-dims channel;height;width.
NETWORK = 'ssd_300_mobilenet0.25_custom'
CLASSES = ('cell', 'dog', 'traffic light')


def read_config(path):
    parser = configparser.ConfigParser(interpolation=None, comment_prefixes=('#',))
    parser.optionxform = str     # keys as written (minBoxes is mixed case)
    with open(path) as f:
        parser.read_file(f)
    return parser


def onnx_io(path):
    model = onnx.load(path)
    weights = {i.name for i in model.graph.initializer}
    (data,) = [i for i in model.graph.input if i.name not in weights]
    dims = [d.dim_value for d in data.type.tensor_type.shape.dim]
    meta = {p.key: json.loads(p.value) for p in model.metadata_props}
    return dims, [o.name for o in model.graph.output], meta


def assert_documented(config):
    assert config.sections() == ['property', 'class-attrs-all']
    assert set(config['property']) <= DOCUMENTED_PROPERTY_KEYS, \
        set(config['property']) - DOCUMENTED_PROPERTY_KEYS
    assert set(config['class-attrs-all']) <= DOCUMENTED_CLASS_ATTRS_KEYS


def assert_normalization(prop, mean, std):
    """nvinfer's ``scale * (x - offset)`` is gluondet's ``(x / 255 - mean) / std`` with the
    mean of the stds, and within the stds' spread of the exact per-channel input."""
    scale = float(prop['net-scale-factor'])
    offsets = [float(v) for v in prop['offsets'].split(';')]
    pixels = np.array([0, 1, 77, 128, 254, 255], np.float64)
    mean, std = np.array(mean), np.array(std)
    for c in range(3):
        ours = scale * (pixels - offsets[c])
        np.testing.assert_allclose(ours, (pixels / 255 - mean[c]) / std.mean(), rtol=1e-9,
                                   atol=1e-9)
        exact = (pixels / 255 - mean[c]) / std[c]
        np.testing.assert_allclose(ours, exact, rtol=abs(std[c] / std.mean() - 1) + 1e-9)


@pytest.fixture(scope='module')
def ssd_params(tmp_path_factory):
    """A small SSD's random weights, saved as a zoo name's ``--params``."""
    folder = tmp_path_factory.mktemp('ds_ssd')
    net = get_model(NETWORK, classes=CLASSES, pretrained_base=False)
    net.initialize()
    net(mx.nd.zeros((1, 3, 128, 128)))
    path = str(folder / 'ssd.params')
    net.save_parameters(path)
    return path


def test_export_gen_ds_config_writes_documented_keys_from_the_model(ssd_params, tmp_path,
                                                                    caplog):
    model = str(tmp_path / 'deploy' / 'ssd.onnx')
    with caplog.at_level(logging.WARNING, logger='gluondet'):
        assert main(['export', '--network', NETWORK, '--params', ssd_params, '--classes',
                     ','.join(CLASSES), '--data-shape', '96,128', '--format', 'onnx', '-o',
                     model, '--batch-size', '2', '--gen-ds-config']) == 0
    folder = os.path.dirname(model)
    assert sorted(os.listdir(folder)) == sorted(['ssd.onnx', CONFIG_FILE, LABELS_FILE])
    config = read_config(os.path.join(folder, CONFIG_FILE))
    assert_documented(config)
    prop = config['property']
    dims, outputs, meta = onnx_io(model)

    assert_normalization(prop, meta['mean'], meta['std'])
    assert 'mean of the stds' in caplog.text      # ImageNet's stds differ: one scale, warned
    assert prop['model-color-format'] == '0'      # RGB, as gluondet reads images
    assert [int(v) for v in prop['infer-dims'].split(';')] == dims[1:] == [3, 96, 128]
    assert int(prop['batch-size']) == dims[0] == 2
    assert prop['output-blob-names'].split(';') == outputs == ['ids', 'scores', 'boxes']
    assert int(prop['num-detected-classes']) == len(CLASSES)
    assert os.path.samefile(os.path.join(folder, prop['onnx-file']), model)
    with open(os.path.join(folder, prop['labelfile-path'])) as f:
        assert f.read().splitlines() == list(CLASSES) == meta['classes']
    assert (prop['network-mode'], prop['network-type'], prop['cluster-mode']) == ('0', '0', '4')
    assert prop['maintain-aspect-ratio'] == '0'   # SSD is stretched to its input
    assert 'symmetric-padding' not in prop and 'model-engine-file' not in prop
    assert 'int8-calib-file' not in prop
    assert 0 < float(config['class-attrs-all']['pre-cluster-threshold']) < 1


def test_gen_ds_config_is_refused_for_a_symbol(ssd_params, tmp_path, capsys):
    assert main(['export', '--network', NETWORK, '--params', ssd_params, '--classes',
                 ','.join(CLASSES), '--format', 'symbol', '-o', str(tmp_path / 'ssd'),
                 '--gen-ds-config']) == 1
    assert 'onnx and tensorrt formats' in capsys.readouterr().err
    assert os.listdir(str(tmp_path)) == []


def fake_model(path, preprocessing, batch='batch', height=64, width=96, classes=('a', 'b')):
    """An ONNX file with gluondet's inputs, outputs and metadata (an identity graph)."""
    nodes = [helper.make_node('Identity', ['data'], [name]) for name in ('ids', 'scores',
                                                                        'boxes')]
    graph = helper.make_graph(
        nodes, 'fake', [helper.make_tensor_value_info('data', TensorProto.FLOAT,
                                                      [batch, 3, height, width])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
         for n in ('ids', 'scores', 'boxes')])
    model = helper.make_model(graph)
    props = {'classes': list(classes), 'data_shape': [height, width], 'network': 'fake',
             'batch_size': None, 'preprocessing': preprocessing,
             'nms': {'score_thresh': 0.05}}
    helper.set_model_props(model, {k: json.dumps(v) for k, v in props.items()})
    onnx.save(model, path)
    return path


def test_keep_ratio_int8_engine_config(tmp_path, caplog):
    """A keep-ratio model keeps its ratio with right and bottom padding; an int8 engine
    names its calibration cache; a dynamic batch takes the batch given; equal stds need no
    warning."""
    spec = {'resize': 'keep_ratio', 'short': 64, 'max_size': 96, 'multiple': 32,
            'mean': [0.5, 0.4, 0.3], 'std': [0.25, 0.25, 0.25]}
    model = fake_model(str(tmp_path / 'retina.onnx'), spec)
    engine = str(tmp_path / 'retina.engine')
    cache = str(tmp_path / 'calib' / 'retina.cache')
    with caplog.at_level(logging.WARNING, logger='gluondet'):
        files = write_deepstream_config(model, engine, 'int8', cache, batch_size=4)
    assert files == [str(tmp_path / CONFIG_FILE), str(tmp_path / LABELS_FILE)]
    assert caplog.text == ''
    config = read_config(files[0])
    assert_documented(config)
    prop = config['property']
    assert 'NOTE' not in open(files[0]).read()
    assert_normalization(prop, spec['mean'], spec['std'])
    assert (prop['maintain-aspect-ratio'], prop['symmetric-padding']) == ('1', '0')
    assert (prop['network-mode'], prop['batch-size'], prop['infer-dims']) == ('1', '4', '3;64;96')
    assert prop['model-engine-file'] == 'retina.engine' and prop['onnx-file'] == 'retina.onnx'
    assert prop['int8-calib-file'] == os.path.join('calib', 'retina.cache')
    with open(files[1]) as f:
        assert f.read() == 'a\nb\n'


@pytest.mark.parametrize('precision, mode', [('fp32', 0), ('int8', 1), ('fp16', 2)])
def test_network_mode_follows_the_precision(tmp_path, precision, mode):
    spec = {'resize': 'fixed', 'data_shape': [64, 96], 'mean': [0.4] * 3, 'std': [0.2] * 3}
    model = onnx.load(fake_model(str(tmp_path / 'm.onnx'), spec, batch=1))
    properties, _, notes = nvinfer_properties(model, 'm.onnx', precision=precision)
    values = {key: value for key, value, _ in properties}
    assert values['network-mode'] == mode and values['batch-size'] == 1 and not notes
    assert 'int8-calib-file' not in values       # an int8 ONNX model carries its scales


def test_a_model_without_gluondet_metadata_is_refused(tmp_path):
    model = onnx.load(fake_model(str(tmp_path / 'm.onnx'), None))
    del model.metadata_props[:]
    with pytest.raises(ValueError, match='records no classes'):
        nvinfer_properties(model, 'm.onnx', source='m.onnx')


def test_mask_rcnn_config_is_instance_segmentation(tmp_path):
    """An exported Mask R-CNN: nvinfer's instance segmentation (network-type 3, instance
    masks, gluondet's paste threshold), its four outputs named."""
    from gluondet.deploy import export_onnx
    from gluondet.model_zoo import get_model
    net = get_model('mask_rcnn_fpn_resnet18_v1b_custom', classes=['a', 'b'],
                    pretrained_base=False, short=64, max_size=96)
    net.initialize()
    path = str(tmp_path / 'mask.onnx')
    export_onnx(net, path, (64, 96))
    files = write_deepstream_config(path)
    config = read_config(files[0])
    assert_documented(config)
    prop = config['property']
    assert (prop['network-type'], prop['output-instance-mask']) == ('3', '1')
    assert prop['output-blob-names'] == 'ids;scores;boxes;masks'
    assert float(prop['segmentation-threshold']) == 0.5
    assert 'parse-bbox-instance-mask-func-name' in open(files[0]).read()
