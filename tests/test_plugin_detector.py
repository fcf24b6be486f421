"""A detector is its own files plus its registrations (issue 24): a small single-stage
detector defined in this file alone (its network with its own head, its task, its training
command), registered in the model zoo and the detector table with a post-processing kind
deploy has, trains an epoch of the demo data through the engine, validates, resumes,
appears in ``gluondet train --help``, trains by ``gluondet train tiny``, exports to ONNX
with the Gluon network's detections, and ``gluondet evaluate`` takes the exported model.
No library file knows of it."""
import logging
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet.gluon import nn

from gluondet import cli as gluondet_cli, detectors
from gluondet.data import transforms as T
from gluondet.data.batchify import Pad, Stack, Tuple
from gluondet.data.preprocess import fixed_size
from gluondet.engine import fit
from gluondet.losses import SSDMultiBoxLoss
from gluondet.model_zoo import get_model
from gluondet.model_zoo import registry
from gluondet.model_zoo.single_stage import SingleStageDetector
from gluondet.nn import BoxCenterDecoder, MultiClassNMS, SSDAnchorGenerator, SSDTargetGenerator
from gluondet.tasks.base import DetectionTask, dense_targets
from gluondet.train import common, config, flags

NETWORK = 'tiny_64_custom'
SIZE = 64


# --- the network: two conv stages, one head shared by both maps ---

class TinyDetector(SingleStageDetector):
    """Maps of stride 8 and 16, three anchors a cell, one 3x3 head shared by both maps;
    SSD's softmax post-processing (``postprocess_kind``, a kind deploy knows)."""

    postprocess_kind = 'softmax_nms'

    def __init__(self, classes, channels=16, **kwargs):
        super().__init__(classes, **kwargs)
        with self.name_scope():
            self.features = _TinyFeatures(channels)
            self.anchor_generators = nn.HybridSequential()
            for size, step in ((16, 8), (32, 16)):
                self.anchor_generators.add(SSDAnchorGenerator((size, size * 1.5), [1, 2], step,
                                                              (16, 16)))
            anchors = self.anchor_generators[0].num_anchors
            self.class_predictors = nn.HybridSequential()
            self.class_predictors.add(self._class_predictor(anchors * self.class_width,
                                                            channels, 'cls_'))
            self.box_predictors = nn.HybridSequential()
            self.box_predictors.add(nn.Conv2D(anchors * 4, 3, padding=1, in_channels=channels))
            self.box_decoder = BoxCenterDecoder((0.1, 0.1, 0.2, 0.2))
            self.postprocess = MultiClassNMS(0.01, 0.45, 100, 50)

    def predict(self, F, level, feature):
        return self.class_predictors[0](feature), self.box_predictors[0](feature)

    def detect(self, F, cls_preds, box_preds, anchors):
        boxes = self.box_decoder(F.concat(*box_preds, dim=1), F.concat(*anchors, dim=1))
        return self.postprocess(F.softmax(F.concat(*cls_preds, dim=1), axis=-1), boxes)

    def _class_predictor(self, channels, in_channels, prefix):
        return nn.Conv2D(channels, 3, padding=1, in_channels=in_channels, prefix=prefix)

    def set_nms(self, nms_thresh=0.45, nms_topk=100, post_nms=50):
        super().set_nms(nms_thresh, nms_topk, post_nms)


class _TinyFeatures(nn.HybridBlock):
    """Three stride-2 convolutions to the stride-8 map, one more to the stride-16 one."""

    def __init__(self, channels):
        super().__init__()
        with self.name_scope():
            self.stages = nn.HybridSequential()
            for convs in (3, 1):
                stage = nn.HybridSequential()
                for _ in range(convs):
                    stage.add(nn.Conv2D(channels, 3, strides=2, padding=1), nn.BatchNorm(),
                              nn.Activation('relu'))
                self.stages.add(stage)

    def hybrid_forward(self, F, x):
        first = self.stages[0](x)
        return [first, self.stages[1](first)]


def tiny_64_custom(classes=None, pretrained=False, pretrained_base=False, ctx=mx.cpu(),
                   root=None, **kwargs):
    """The zoo builder."""
    if not classes:
        raise ValueError('%s needs classes=[...]' % NETWORK)
    return TinyDetector(classes, **kwargs)


# --- the task: SSD's targets and losses (the library's parts) on its network ---

class TinyTask(DetectionTask):
    name = 'tiny'

    def __init__(self, train_dataset, val_dataset, **kwargs):
        super().__init__(NETWORK, train_dataset, val_dataset, pretrained_base=False, **kwargs)
        self.targets = SSDTargetGenerator(iou_thresh=0.5, stds=(0.1, 0.1, 0.2, 0.2))
        self.loss = SSDMultiBoxLoss()
        self.train_batchify = Tuple(Stack(), Pad(pad_val=-1))

    def meta(self):
        return self._meta(data_shape=[SIZE, SIZE])

    def build_net(self, ctx_list):
        return self._place(self._get_model(ctx_list), ctx_list)

    def train_dataset(self):
        def transform(image, label):
            image, label = T.resize(image, label, (SIZE, SIZE))
            image, label, _ = T.random_flip(image, label)
            return T.normalize(image, T.IMAGENET_MEAN, T.IMAGENET_STD), label
        return self._train.transform(transform)

    def losses(self, net, parts):
        _, cls_losses, box_losses = self.loss(*dense_targets(net, parts, self.targets))
        return {'loss_cls': cls_losses, 'loss_box': box_losses}

    def preprocessing(self, net):
        return fixed_size((SIZE, SIZE))


# --- its training command (this module is the table row's entry module) ---

def build_parser():
    parser = flags.parser('Train the tiny detector.')
    flags.add_training_args(parser, scale_out=())
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    flags.check_args(args)
    train, val = common.build_datasets(args)
    task = TinyTask(train, val, val_batch_size=8)
    result = fit(task, config.train_config(args, args.save_prefix + NETWORK))
    common.print_final(result)
    return result


DEMO = None


# --- the registrations, undone after each test (other tests read the tables) ---

@pytest.fixture()
def registered(monkeypatch, tmp_path):
    registry.register_model(NETWORK, None, (SIZE, SIZE), 'none', 'custom',
                            has_weights=False)(tiny_64_custom)
    detectors.register(detectors.Family('tiny', 'Tiny', __name__, 'tiny_'))
    from gluondet.data import demo
    monkeypatch.setitem(demo.DEFAULT_NUM_IMAGES, 'train', 16)
    monkeypatch.setitem(demo.DEFAULT_NUM_IMAGES, 'val', 8)
    monkeypatch.setenv('GLUONDET_HOME', str(tmp_path / 'home'))
    monkeypatch.chdir(tmp_path)
    yield
    del registry._REGISTRY[NETWORK]               # pylint: disable=protected-access
    del detectors._TABLE['tiny']                  # pylint: disable=protected-access


FLAGS = ['--dataset', 'demo', '--gpus', '', '-j', '0', '--batch-size', '8', '--lr', '0.02',
         '--lr-decay-epoch', '10', '--log-interval', '1', '--save-prefix', 'run/']


def test_a_detector_in_one_file_trains_resumes_exports_and_evaluates(registered, tmp_path,
                                                                      capsys):
    # the table shows it; gluondet train tiny runs its command through the engine
    with pytest.raises(SystemExit):
        gluondet_cli.main(['train', '--help'])
    assert 'tiny (Tiny)' in ' '.join(capsys.readouterr().out.split())
    assert gluondet_cli.main(['train', 'tiny'] + FLAGS + ['--epochs', '1']) == 0
    out = capsys.readouterr().out
    assert 'final: ' in out and 'mAP=' in out                       # it validated
    prefix = str(tmp_path / 'run' / NETWORK)
    assert os.path.exists(prefix + '_last.json') and os.path.exists(prefix + '_best.params')

    # it resumes: a second epoch from the first's checkpoint
    result = main(FLAGS + ['--epochs', '2', '--resume', 'auto'])
    assert (result.epoch, result.iteration) == (2, 4)
    with open(prefix + '_train.log') as f:
        assert 'Resumed from run/%s_last.json: epoch 1, batch 0, iteration 2' % NETWORK in (
            f.read())

    # ONNX export with the Gluon network's detections, through the deploy table's kind
    onnx_path = str(tmp_path / 'tiny.onnx')
    from export_checks import run_onnx
    from gluondet.deploy.compare import compare_detections, detecting_random_weights
    from gluondet.data import DemoDetection
    net = get_model(NETWORK, classes=DemoDetection.CLASSES)
    x = mx.nd.array(np.random.RandomState(0).uniform(-2, 2, (1, 3, SIZE, SIZE)))
    detecting_random_weights(net, x)          # many detections to compare, not a few
    net.save_parameters(prefix + '_best.params')      # the training's json stays beside
    assert gluondet_cli.main(['export', '--network', prefix + '_best.params', '-o',
                              onnx_path]) == 0
    comparison = compare_detections(net(x), run_onnx(onnx_path, x))
    assert comparison.ok and comparison.compared >= 20, str(comparison)

    # gluondet evaluate takes the exported model, on the demo's validation data
    capsys.readouterr()
    assert gluondet_cli.main(['evaluate', '--model', onnx_path, '--dataset', 'demo']) == 0
    assert 'VOC07 mAP (IoU 0.5) of %s (onnxruntime) on 8 images' % onnx_path in (
        capsys.readouterr().out)


def test_it_builds_from_the_zoo_and_keeps_the_library_unaware(registered):
    net = get_model(NETWORK, classes=['a', 'b'])
    net.initialize()
    ids, scores, boxes = net(mx.nd.zeros((1, 3, SIZE, SIZE)))
    assert boxes.shape == (1, 50, 4)
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'gluondet')
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith('.py'):
                with open(os.path.join(folder, name), encoding='utf-8') as f:
                    assert 'tiny_64' not in f.read(), name
