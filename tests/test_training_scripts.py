"""What the three training scripts share: their command lines."""
import importlib
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {'train_ssd': 'mobilenet1.0', 'train_faster_rcnn': 'resnet18_v1b',
           'train_retinanet': 'resnet18_v1b'}


def _script(name):
    return importlib.import_module('gluondet.train.' + name[len('train_'):])


@pytest.mark.parametrize('name', sorted(SCRIPTS))
def test_backbone_is_the_network_flag_that_horovodrun_lets_through(name, capsys):
    """horovodrun 0.28.1 stops at ``--network`` (an ambiguous prefix of its own options)."""
    script = _script(name)
    network = SCRIPTS[name]
    assert script.parse_args(['--backbone', network]).network == network
    assert script.parse_args(['--network', network]).network == network
    with pytest.raises(SystemExit):
        script.parse_args(['--help'])
    assert '--network NETWORK, --backbone NETWORK' in capsys.readouterr().out
