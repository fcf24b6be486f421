"""The json beside a .params file (gluondet.metadata): the engine's description is read; any
other json there (results a user named after the model) is ignored with a warning."""
import json
import logging

import mxnet as mx
import pytest

from gluondet.cli import main
from gluondet.metadata import training_meta
from gluondet.model_zoo import get_model


def test_only_the_description_the_engine_writes_is_read(tmp_path, caplog):
    params = str(tmp_path / 'model.params')
    beside = tmp_path / 'model.json'
    assert training_meta(params) is None                   # no json
    beside.write_text(json.dumps({'meta': {'network': 'ssd_300_vgg16_atrous_voc'}}))
    assert training_meta(params) == {'network': 'ssd_300_vgg16_atrous_voc'}
    for foreign in ([{'image_id': 1, 'bbox': [0, 0, 1, 1]}], {'images': []}):
        beside.write_text(json.dumps(foreign))
        with caplog.at_level(logging.WARNING, 'gluondet'):
            assert training_meta(params) is None
        assert ('%s is not the description gluondet writes beside model.params (no "meta"): '
                'ignored' % beside) in caplog.text
    beside.write_text('{"meta": ')
    with pytest.raises(ValueError, match='params description .*model.json is not valid JSON'):
        training_meta(params)
    beside.write_text(json.dumps({'meta': {'classes': ['a']}}))
    with pytest.raises(ValueError, match='does not describe a network'):
        training_meta(params)


def test_export_beside_results_named_after_the_model(tmp_path, caplog):
    name = 'ssd_160_mobilenet0.5_custom'
    net = get_model(name, classes=['a', 'b'], pretrained_base=False)
    net.initialize()
    net(mx.nd.zeros((1, 3, 160, 160)))
    params = str(tmp_path / 'model.params')
    net.save_parameters(params)
    (tmp_path / 'model.json').write_text('[]')           # infer --output model.json, say
    assert main(['export', '--model', name, '--params', params, '--classes', 'a,b',
                 '--data-shape', '160', '--format', 'onnx',
                 '--output', str(tmp_path / 'model.onnx')]) == 0
    assert (tmp_path / 'model.onnx').is_file() and 'is not the description' in caplog.text
