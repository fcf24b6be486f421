"""Exports keep the model's accuracy (issue 23): ``gluondet evaluate`` of a keep-ratio
detector's default ONNX export gives the Gluon model's mAP on real photos of both
orientations.

The photos are the cards test set's 7 landscape (960 x 540) and first 13 portrait (378 x
504) images. Each detector (Faster R-CNN FPN and RetinaNet, ResNet-18, short side 160, max
size 224) gets random weights made to detect (``detecting_random_weights``), saved as a
training output (``.params`` with its ``.json``). Against the cards' own labels such a
model's mAP is near 0, which compares little; so the photos are also labelled with the
Gluon model's own detections scoring above ``PSEUDO_SCORE``, where its mAP is high (0.85 to
1: detections cut to nothing at the image's edge count as false ones) and any change in an
export's detections costs mAP. An export at one landscape input
(``--data-shape``, each portrait photo squeezed into it, as exports were before) loses
mAP there: the comparison sees it.
"""
import json
import os

import mxnet as mx
import numpy as np
import pytest

from gluondet.cli import main
from gluondet.data.base import empty_label, read_image
from gluondet.data.coco import xyxy_to_coco
from gluondet.data.preprocess import padded_shape, preprocessing_of, val_transform
from gluondet.deploy import compare_detections, detecting_random_weights
from gluondet.deploy.commands import evaluate_model
from gluondet.deploy.predictor import Predictor
from gluondet.model_zoo import get_model

from export_checks import save_training_output

pytest.importorskip('onnxruntime')

SHORT, MAX_SIZE = 160, 224
PSEUDO_SCORE = 0.2
DETECTORS = {
    'faster_rcnn': ('faster_rcnn_fpn_resnet18_v1b_custom', {}),
    'retinanet': ('retinanet_resnet18_v1b_custom',
                  dict(fpn_channels=64, head_channels=64, head_layers=2, head_norm='group',
                       head_init='msra')),
}


def _cards_subset(cards, folder):
    """The COCO json of the chosen test photos: ``(its path, its content)``."""
    with open(os.path.join(cards, 'coco', 'instances_test.json')) as f:
        coco = json.load(f)
    landscape = [im for im in coco['images'] if im['width'] > im['height']]
    portrait = [im for im in coco['images'] if im['width'] < im['height']][:13]
    assert len(landscape) == 7 and len(portrait) == 13
    coco['images'] = landscape + portrait
    kept = {im['id'] for im in coco['images']}
    coco['annotations'] = [a for a in coco['annotations'] if a['image_id'] in kept]
    path = os.path.join(folder, 'cards.json')
    with open(path, 'w') as f:
        json.dump(coco, f)
    return path, coco


def _pseudo_labels(coco, detections, path):
    """``coco`` relabelled with ``detections`` (one per image, in order) scoring at least
    PSEUDO_SCORE, but those left with no area where the image's edge cut them."""
    annotations = []
    for image, found in zip(coco['images'], detections):
        for cls, box, score in zip(found.ids, xyxy_to_coco(found.boxes).tolist(), found.scores):
            if score >= PSEUDO_SCORE and min(box[2:]) > 1:
                annotations.append({'id': len(annotations) + 1, 'image_id': image['id'],
                                    'category_id': int(cls) + 1, 'bbox': box, 'iscrowd': 0,
                                    'area': box[2] * box[3]})
    with open(path, 'w') as f:
        json.dump(dict(coco, annotations=annotations), f)
    return len(annotations)


@pytest.fixture(scope='module', params=sorted(DETECTORS))
def model(request, cards_root, tmp_path_factory):
    """``(folder, params, subset json path, its content, image paths)``: random detecting
    weights of one detector saved as a training output."""
    folder = tmp_path_factory.mktemp(request.param)
    json_path, coco = _cards_subset(cards_root, str(folder))
    classes = [c['name'] for c in sorted(coco['categories'], key=lambda c: c['id'])]
    network, kwargs = DETECTORS[request.param]
    net = get_model(network, classes=classes, pretrained_base=False, short=SHORT,
                    max_size=MAX_SIZE, **kwargs)
    spec = preprocessing_of(net)
    paths = [os.path.join(cards_root, 'images', im['file_name']) for im in coco['images']]
    data = val_transform(spec)(read_image(paths[-1]).asnumpy(), empty_label())[0]
    x = np.zeros((1, 3) + padded_shape(spec, data.shape[1:]), np.float32)
    x[0, :, :data.shape[1], :data.shape[2]] = data      # a portrait photo, as the predictor
    detecting_random_weights(net, mx.nd.array(x))
    params = save_training_output(net, str(folder / 'model.params'), network, kwargs)
    return str(folder), params, json_path, coco, paths


@pytest.mark.slow(minutes=0.5)
def test_default_onnx_export_gives_the_gluon_map_on_photos_of_both_orientations(model, capsys):
    folder, params, json_path, coco, paths = model
    images = os.path.dirname(os.path.dirname(paths[0]))

    def mean_ap(model_path, labels):
        return evaluate_model(model_path, 'coco', annotation_file=labels, image_root=images,
                              progress=False)['mAP']

    gluon = Predictor.from_model(params)
    expected = gluon.detect([read_image(p).asnumpy() for p in paths])
    pseudo = os.path.join(folder, 'pseudo.json')
    assert _pseudo_labels(coco, expected, pseudo) >= 2 * len(paths)

    onnx_path = os.path.join(folder, 'model.onnx')
    assert main(['export', '--network', params, '-o', onnx_path]) == 0
    printed = capsys.readouterr().out
    assert 'wrote %s (fp32)' % onnx_path in printed
    assert '1 x 3 x height x width (dynamic: height, width)' in printed
    assert 'classes (6): ace, jack, king, nine, queen, ten' in printed
    assert 'inside the model, box decoding and NMS (' in printed
    exported = Predictor.from_model(onnx_path)
    assert exported.data_shape is None      # each photo at its own size
    comparison = compare_detections(expected, exported.detect([read_image(p).asnumpy()
                                                                for p in paths]))
    assert comparison.ok and comparison.compared >= 20 * len(paths), str(comparison)

    fixed_path = os.path.join(folder, 'landscape.onnx')
    landscape = padded_shape(gluon.preprocessing, (SHORT, MAX_SIZE))
    assert main(['export', '--network', params, '-o', fixed_path, '--data-shape',
                 '%d,%d' % landscape]) == 0
    labels = {'cards': json_path, 'pseudo': pseudo}
    maps = {name: {key: mean_ap(path, labels[key]) for key in labels}
            for name, path in (('gluon', params), ('onnx', onnx_path))}
    maps['landscape'] = {'pseudo': mean_ap(fixed_path, pseudo)}
    capsys.readouterr()
    print(maps)
    for key in labels:
        assert abs(maps['onnx'][key] - maps['gluon'][key]) <= 0.002
    assert maps['gluon']['pseudo'] > 0.8
    assert maps['landscape']['pseudo'] < maps['gluon']['pseudo'] - 0.1
