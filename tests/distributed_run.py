"""One process of a distributed test run: ``python tests/distributed_run.py SPEC.json``,
started by ``horovodrun`` or ``gluondet launch`` (or alone, as the one-process reference).

SPEC: ``task`` (``ssd``, ``ssd_syncbn``, ``frcnn``, ``frcnn_syncbn``, ``retinanet_syncbn`` or
``toy``), ``config`` (TrainConfig fields),
``out`` (folder: each rank writes ``rank{r}.params`` with every parameter after training and
``rank{r}.json`` with its rank, world size and final metrics), optionally ``fault``
(``{"rank": r, "iteration": i, "kind": "stall" | "raise" | "kill"}``: at that step that rank
sleeps for ever, raises, or SIGKILLs itself).
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from gluondet.data import DemoDetection  # noqa: E402
from gluondet.data.batchify import Pad, PadImages, Tuple  # noqa: E402
from gluondet.engine import HookBase, TrainConfig, fit  # noqa: E402
from gluondet.nn import RPNTargetGenerator  # noqa: E402
from gluondet.tasks import FasterRCNNTask, SSDTask  # noqa: E402


def demo(train=32, val=8):
    root = os.environ.get('GLUONDET_TEST_DEMO', os.path.join(os.getcwd(), 'demo'))
    return (DemoDetection('train', num_images=train, image_size=128, seed=0, root=root),
            DemoDetection('val', num_images=val, image_size=128, seed=0, root=root))


SSD_SIZES = {'ssd': 128, 'ssd_syncbn': 256, 'ssd_bn': 256}


def make_task(name):
    if name in SSD_SIZES:
        train, val = demo()
        return SSDTask('ssd_300_mobilenet0.25_custom', train, val, SSD_SIZES[name],
                       pretrained_base=False,
                       model_kwargs={'norm_layer': 'syncbn'} if name == 'ssd_syncbn' else None)
    if name == 'frcnn':
        return DeterministicFasterRCNN()
    if name == 'retinanet_syncbn':
        from gluondet.tasks import RetinaNetTask
        train, val = demo(16, 4)
        return RetinaNetTask('retinanet_resnet18_v1b_custom', train, val, short=128,
                             max_size=128, pretrained_base=False, model_kwargs=dict(
                                 norm_layer='syncbn', fpn_channels=32, head_channels=32,
                                 head_layers=1))
    if name == 'frcnn_syncbn':             # --norm-layer syncbn: FPN, BatchNorm synchronized
        train, val = demo(8, 4)
        return FasterRCNNTask('faster_rcnn_fpn_syncbn_resnet18_v1b_custom', train, val,
                              short=128, max_size=128, pretrained_base=False,
                              model_kwargs={'norm_layer': 'syncbn'})
    if name == 'toy':
        from test_engine_toy import make_task as toy
        return toy()
    raise ValueError(name)


class DeterministicFasterRCNN(FasterRCNNTask):
    """Frozen BatchNorm, and samplers that keep every candidate (all the anchors of a
    64-pixel image; every proposal and label row, their count fixed by padding the labels
    to 8 rows): no random choice depends on how a batch is split."""

    def __init__(self):
        train, val = demo(16, 4)
        super().__init__('faster_rcnn_resnet18_v1b_custom', train, val, short=64, max_size=64,
                         pretrained_base=False, model_kwargs=dict(
                             norm_kwargs={'use_global_stats': True}, num_sample=108,
                             pos_ratio=107 / 108, rpn_train_pre_nms=200, rpn_train_post_nms=100))
        self.rpn_targets = RPNTargetGenerator(num_sample=1024)

    def build_net(self, ctx_list):
        net = super().build_net(ctx_list)
        self.train_batchify = Tuple(PadImages(self.multiple), Pad(pad_val=-1, min_length=8))
        return net


class Fault(HookBase):
    def __init__(self, rank, iteration, kind):
        self.rank, self.iteration, self.kind = rank, iteration, kind

    def before_step(self):
        if self.loop.runtime.rank != self.rank or self.loop.state.iteration != self.iteration:
            return
        print('fault: rank %d %s at iteration %d' % (self.rank, self.kind, self.iteration),
              flush=True)
        if self.kind == 'stall':
            time.sleep(3600)
        elif self.kind == 'raise':
            raise RuntimeError('a fault on purpose')
        else:
            os.kill(os.getpid(), signal.SIGKILL)


def main(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    hooks = [Fault(**spec['fault'])] if spec.get('fault') else []
    result = fit(make_task(spec['task']), TrainConfig(**spec['config']), hooks=hooks)
    os.makedirs(spec['out'], exist_ok=True)
    result.net.save_parameters(os.path.join(spec['out'], 'rank%d.params' % result.rank))
    with open(os.path.join(spec['out'], 'rank%d.json' % result.rank), 'w') as f:
        json.dump({'rank': result.rank, 'world_size': result.world_size,
                   'metrics': result.metrics, 'iteration': result.iteration}, f)


if __name__ == '__main__':
    main(sys.argv[1])
