"""The detector table (gluondet/detectors.py): one row per detector, read by every place
that must know them."""
import pytest

from gluondet import cli as gluondet_cli, demo, detectors


def test_the_detectors_and_their_aliases():
    assert detectors.names() == ['ssd', 'faster_rcnn', 'retinanet', 'yolo3', 'center_net',
                                 'mask_rcnn']
    assert detectors.get('FRCNN').name == 'faster_rcnn' and detectors.get('ssd').display == 'SSD'
    assert detectors.of_network('retinanet_resnet18_v1b_custom').name == 'retinanet'
    assert detectors.of_network('yolo3_darknet53_voc').name == 'yolo3'
    assert detectors.get('YOLOv3').display == 'YOLOv3'
    assert detectors.of_network('center_net_resnet18_v1b_voc').name == 'center_net'
    assert detectors.get('CenterNet').display == 'CenterNet'
    for detector in detectors.all_detectors():
        module = detector.module()
        assert callable(module.main) and module.build_parser().parse_args([]) is not None
        if detector.demo is not None:
            assert demo.recipe_of(detector.name).network.startswith(detector.zoo_prefix)


def test_a_name_or_alias_is_registered_once_and_unknown_ones_are_named():
    with pytest.raises(ValueError, match="name 'ssd' is taken by ssd"):
        detectors.register(detectors.Family('ssd', 'SSD again', 'x', 'ssd_'))
    with pytest.raises(ValueError, match="name 'frcnn' is taken by faster_rcnn"):
        detectors.register(detectors.Family('frcnn2', 'F', 'x', 'f_', aliases=('frcnn',)))
    with pytest.raises(ValueError, match=r"unknown detector 'retinenet': one of ssd, "
                                         r"faster_rcnn, retinanet, yolo3, center_net, mask_rcnn "
                                         r"\(did you mean retinanet"):
        detectors.get('retinenet')
    with pytest.raises(ValueError, match='unknown features tensorrt'):
        detectors.Family('x', 'X', 'x', 'x_', features={'tensorrt'})
    assert detectors.names() == ['ssd', 'faster_rcnn', 'retinanet', 'yolo3', 'center_net',
                                 'mask_rcnn']


def test_commands_read_the_table(capsys):
    assert gluondet_cli.main(['train', 'cornernet', '--epochs', '1']) == 2
    assert "unknown detector 'cornernet'" in capsys.readouterr().err
    assert gluondet_cli.main(['demo', '--detector', 'faster_rcnn', '--dali']) == 1
    assert capsys.readouterr().err == ('gluondet demo: error: --dali: Faster R-CNN does not '
                                       'train with it\n')
    # an alias, as `gluondet train` takes it, names the recipe; a count of epochs is >= 1
    assert gluondet_cli.main(['demo', '--detector', 'CenterNet', '--dali']) == 1
    assert capsys.readouterr().err == ('gluondet demo: error: --dali: CenterNet does not '
                                       'train with it\n')
    with pytest.raises(SystemExit) as stopped:
        gluondet_cli.main(['demo', '--epochs', '0'])
    assert stopped.value.code == 2
    assert 'argument --epochs: expected an integer >= 1' in capsys.readouterr().err
