"""The demo recipes: a small detector learns the synthetic shapes from scratch on a CPU in minutes.

`run_demo` trains a recipe's network on `DemoDetection` (1000 train images, no
pretrained weights), validates on the 200 val images with VOC07 mAP, draws its
detections on some val images, and prints the final mAP. ``make demo`` runs the SSD
recipe; ``gluondet demo --detector faster_rcnn`` and ``--detector retinanet`` the others.
``tests/test_demo_learning.py`` holds each to >= 0.9.

The SSD recipe (``ssd_160_mobilenet0.5_custom``, 20 epochs, about six minutes on two
cores, mAP 0.96). Each choice measured on the demo data, 2 CPU cores:

- The network has a stride-8 map and anchors about three strides wide, so every
  object overlaps several anchors with IoU >= 0.5. GluonCV's
  ``ssd_300_mobilenet0.25`` gave a median of one such anchor per object (a
  fifth of the objects had none) and reached mAP 0.26 in 10 epochs at 256 px.
- Width 0.5 learns far faster per epoch than width 0.25 (0.77 against 0.48
  after 10 epochs), and 160 px costs 40% of 256 px while 128 px loses
  accuracy (0.70 against 0.91).
- Batch 8 beats batch 16 at the same epochs; lr 0.04 with cosine decay learns
  fastest, 0.06 is unstable early. The demo objects already come in every
  size and place, so the zoom-out and crop augmentation only slows learning.
- 20 epochs, not 12: at 12 the same seed ended at 0.931 on one CPU and 0.881 on
  another (float rounding differs between CPUs and sends training elsewhere);
  at 20 seeds 1 and 3 end at 0.962 and 0.952, clear of 0.9.

The Faster R-CNN recipe (``faster_rcnn_fpn_resnet18_v1b_custom``, 5 epochs at 128 px,
about seven minutes, mAP 0.92). Measured (batch 8, lr 0.04 cosine, BatchNorm with batch
statistics, first epochs on a loaded machine):

- At 160 px with the zoo's anchors (32 to 512 px) and 64 samples a quarter positive,
  3 epochs gave mAP 0.48; anchors of 16 to 256 px (most demo objects are under 32 px
  there: with 32 px anchors their best IoU is under the RPN's 0.3, so they get no
  positive anchor) gave 0.55.
- At 128 px with those anchors and half of the 64 samples positive, an 8-epoch cosine
  run passed 0.9 after its 4th epoch (0.54, 0.82, 0.92, 0.95, 0.95 after epochs 2-6)
  at 85 s an epoch on idle cores.
- 4 epochs (0.75) or 32 samples (0.87 after 5) are not enough. A step is 0.63 s since ROI
  Align trains with the sparse backward on CPUs (0.85 s with MXNet's), 80 s an epoch.

The RetinaNet recipe (``retinanet_resnet18_v1b_custom``, 8 epochs at 128 px, about six
minutes, mAP 0.92). Measured at 128 px, batch 8, BatchNorm with batch statistics:

- The paper's heads (no normalization, N(0, 0.01) weights) leave the class loss at its prior
  for epochs; He-initialized ones reached 0.15 after 2 epochs at lr 0.01 and diverged at
  0.02. Normalized heads take lr 0.04: after 6 epochs 0.66 with a BatchNorm per level,
  0.80 with GroupNorm.
- The classes, not the boxes, were the limit then: boxes were found (97% of the objects at
  IoU 0.5) and the mAP barely changed from IoU 0.3 to 0.5, but triangles and stars had AP
  0.72 and 0.74. Focal loss gamma 1 with alpha 0.5 (the pair the paper's table gives for
  gamma 1) pushes the other classes' scores down harder than gamma 2: 0.87 after 6 epochs.
- A pyramid of 128 channels and heads of 64 take 0.44 s a step against 0.69 (256 and 128)
  and learn as fast per epoch (57 s an epoch): after 7 epochs 0.898 (0.863 with half an
  epoch of warmup, 0.873 at lr 0.06), after 8 0.918 (AP 0.87 to 0.95 per class).
- Two conv layers a head instead of four learn faster still and cost 10% less (51 s an
  epoch, another training on the other core): 0.929 after 7 epochs, 0.938 after 8 (AP 0.91
  to 0.98 per class). With the focal loss's closed-form gradient (same loss, other float
  rounding) 44 s an epoch and 0.922 after 8.
"""
import collections
import os
import time

import mxnet as mx

from .data import DemoDetection
from .engine import TrainConfig, fit
from .tasks import FasterRCNNTask, RetinaNetTask, SSDTask
from .visualize import draw_boxes, image_grid, save_image

__all__ = ['Recipe', 'RECIPES', 'NUM_TRAIN', 'NUM_VAL', 'DATA_SEED', 'NETWORK', 'EPOCHS', 'SEED',
           'run_demo', 'save_preview']

NUM_TRAIN, NUM_VAL = 1000, 200
DATA_SEED = 0
PREVIEW_FILE = 'demo_predictions.jpg'
PREVIEW_IMAGES = 8
PREVIEW_THRESHOLD = 0.5

Recipe = collections.namedtuple('Recipe', ['network', 'epochs', 'seed', 'make_task', 'settings'])
Recipe.__doc__ = """A demo recipe: ``make_task(train, val, num_workers)`` builds the task of
``network``; ``settings`` are the `TrainConfig` fields besides epochs, seed and paths."""


def _ssd_task(train, val, num_workers):
    return SSDTask('ssd_160_mobilenet0.5_custom', train, val, 160, pretrained_base=False,
                   zoom=False, num_workers=num_workers)


def _rcnn_task(train, val, num_workers):
    return FasterRCNNTask(
        'faster_rcnn_fpn_resnet18_v1b_custom', train, val, short=128, max_size=256,
        pretrained_base=False, num_workers=num_workers,
        model_kwargs=dict(anchor_sizes=(16, 32, 64, 128, 256), num_sample=64, pos_ratio=0.5,
                          rpn_train_pre_nms=1000, rpn_train_post_nms=300))


def _retinanet_task(train, val, num_workers):
    return RetinaNetTask(
        'retinanet_resnet18_v1b_custom', train, val, short=128, max_size=256,
        pretrained_base=False, num_workers=num_workers, focal_alpha=0.5, focal_gamma=1.0,
        model_kwargs=dict(anchor_base=2, fpn_channels=128, head_channels=64, head_layers=2,
                          head_norm='group', head_init='msra'))


_COMMON = dict(batch_size=8, optimizer='sgd', lr=0.04, momentum=0.9, lr_mode='cosine',
               warmup_epochs=1, save_interval=0, log_interval=25)
RECIPES = {
    'ssd': Recipe('ssd_160_mobilenet0.5_custom', 20, 1, _ssd_task,
                  dict(_COMMON, wd=5e-4, val_interval=3)),
    'faster_rcnn': Recipe('faster_rcnn_fpn_resnet18_v1b_custom', 5, 1, _rcnn_task,
                          dict(_COMMON, wd=1e-4, warmup_epochs=0.5, val_interval=5)),
    'retinanet': Recipe('retinanet_resnet18_v1b_custom', 8, 1, _retinanet_task,
                        dict(_COMMON, wd=1e-4, val_interval=8)),
}
NETWORK, EPOCHS, SEED = RECIPES['ssd'].network, RECIPES['ssd'].epochs, RECIPES['ssd'].seed


def run_demo(output_dir='demo_out', detector='ssd', epochs=None, num_train=NUM_TRAIN,
             num_val=NUM_VAL, seed=None, num_workers=0, data_root=None, **settings):
    """Train a demo recipe, print its final val mAP, save a preview of its detections.

    Parameters
    ----------
    output_dir : str
        Receives the training files (``{network}_*``: log, metrics.jsonl, curves.png, best
        params, last checkpoint) and ``demo_predictions.jpg``.
    detector : {'ssd', 'faster_rcnn', 'retinanet'}
        The recipe (`RECIPES`).
    epochs, seed : int, optional
        Default: the recipe's (its learning rate follows a cosine over the epochs).
    num_train, num_val : int
        Demo images to train and validate on.
    num_workers : int
        Data loader worker processes (0, loading in the training process, is
        the fastest on two cores).
    data_root : str, optional
        Cache folder of the demo images.
    **settings
        `TrainConfig` fields over the recipe's, e.g. ``amp=True`` or ``dali=True``.

    Returns
    -------
    dict
        The last validation: ``mAP`` and ``AP/<class>`` for each class.
    """
    if detector not in RECIPES:
        raise ValueError('detector must be one of %s, got %r' % (', '.join(RECIPES), detector))
    recipe = RECIPES[detector]
    epochs = recipe.epochs if epochs is None else epochs
    os.makedirs(output_dir, exist_ok=True)
    train = DemoDetection('train', num_train, seed=DATA_SEED, root=data_root)
    val = DemoDetection('val', num_val, seed=DATA_SEED, root=data_root)
    task = recipe.make_task(train, val, num_workers)
    config = TrainConfig.from_dict(dict(
        recipe.settings, **settings, epochs=epochs, seed=recipe.seed if seed is None else seed,
        num_workers=num_workers, gpus='', save_prefix=os.path.join(output_dir, recipe.network)),
        source='the %s demo recipe' % detector)
    start = time.time()
    result = fit(task, config)
    minutes = (time.time() - start) / 60
    preview = os.path.join(output_dir, PREVIEW_FILE)
    save_preview(result.net, task, val, preview)
    metrics = dict(result.metrics)
    print('demo: %s trained from scratch for %d epochs in %.1f min; detections drawn in %s'
          % (recipe.network, epochs, minutes, preview))
    print('demo: VOC07 mAP %.4f on %d val images' % (metrics['mAP'], num_val))
    return metrics


def save_preview(net, task, dataset, path, count=PREVIEW_IMAGES, threshold=PREVIEW_THRESHOLD):
    """Draw ``net``'s detections (score >= ``threshold``) on the first images of ``dataset``.

    The detections come from ``task``'s predictor (its validation's); the grid of
    ``count`` images is saved to ``path``.
    """
    images = [dataset[i][0].asnumpy() for i in range(min(count, len(dataset)))]
    found = task.predictor(net, [mx.cpu()]).detect(images)
    drawn = [draw_boxes(image, d.boxes, d.ids, d.scores, task.classes, threshold=threshold)
             for image, d in zip(images, found)]
    save_image(path, image_grid(drawn))
