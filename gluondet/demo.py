"""The demo recipes: a small detector learns the synthetic shapes from scratch on a CPU in minutes.

`run_demo` trains a recipe's network on `DemoDetection` (1000 train images, no
pretrained weights), validates on the 200 val images with VOC07 mAP, draws its
detections on some val images, and prints the final mAP. ``make demo`` runs the SSD
recipe; ``gluondet demo --detector faster_rcnn`` (``retinanet``, ``yolo3``, ``center_net``)
the others.
``tests/test_demo_learning.py`` holds each to >= 0.9.

Each detector's recipe (``DEMO``) lives in its training command's module
(`gluondet.detectors`), with the measurements behind its choices.
"""
import collections
import os
import time

import mxnet as mx

from .data import DemoDetection
from .engine import TrainConfig, fit
from .visualize import draw_detections, image_grid, save_image

__all__ = ['Recipe', 'COMMON_SETTINGS', 'recipe_of', 'NUM_TRAIN', 'NUM_VAL', 'DATA_SEED',
           'run_demo', 'save_preview']

NUM_TRAIN, NUM_VAL = 1000, 200
DATA_SEED = 0
PREVIEW_FILE = 'demo_predictions.jpg'
PREVIEW_IMAGES = 8
PREVIEW_THRESHOLD = 0.5

Recipe = collections.namedtuple('Recipe', ['network', 'epochs', 'seed', 'make_task', 'settings',
                                           'masks'], defaults=[False])
Recipe.__doc__ = """A demo recipe: ``make_task(train, val, num_workers)`` builds the task of
``network``; ``settings`` are the `TrainConfig` fields besides epochs, seed and paths;
``masks``: the demo data carries the shapes' masks (Mask R-CNN's)."""


# What every recipe shares (a recipe's settings start from it).
COMMON_SETTINGS = dict(batch_size=8, optimizer='sgd', lr=0.04, momentum=0.9, lr_mode='cosine',
                       warmup_epochs=1, save_interval=0, log_interval=25)


def recipe_of(detector):
    """The demo `Recipe` of ``detector`` (a name of `gluondet.detectors`)."""
    from . import detectors
    recipe = detectors.get(detector).demo
    if recipe is None:
        raise ValueError('detector %s has no demo recipe' % detector)
    return recipe


def run_demo(output_dir='demo_out', detector='ssd', epochs=None, num_train=NUM_TRAIN,
             num_val=NUM_VAL, seed=None, num_workers=0, data_root=None, **settings):
    """Train a demo recipe, print its final val mAP, save a preview of its detections.

    Parameters
    ----------
    output_dir : str
        Receives the training files (``{network}_*``: log, metrics.jsonl, curves.png, best
        params, last checkpoint) and ``demo_predictions.jpg``.
    detector : str
        Whose recipe (a detector of `gluondet.detectors` with one).
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
    recipe = recipe_of(detector)
    epochs = recipe.epochs if epochs is None else epochs
    os.makedirs(output_dir, exist_ok=True)
    train = DemoDetection('train', num_train, seed=DATA_SEED, root=data_root, masks=recipe.masks)
    val = DemoDetection('val', num_val, seed=DATA_SEED, root=data_root, masks=recipe.masks)
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
    masks = ', mask AP %.4f, mask AP50 %.4f (COCO)' % (metrics['mask_AP'], metrics['mask_AP50']) \
        if 'mask_AP' in metrics else ''
    print('demo: VOC07 mAP %.4f on %d val images%s' % (metrics['mAP'], num_val, masks))
    return metrics


def save_preview(net, task, dataset, path, count=PREVIEW_IMAGES, threshold=PREVIEW_THRESHOLD):
    """Draw ``net``'s detections (score >= ``threshold``; masks filled) on the first images of
    ``dataset``.

    The detections come from ``task``'s predictor (its validation's); the grid of
    ``count`` images is saved to ``path``.
    """
    images = [dataset[i][0].asnumpy() for i in range(min(count, len(dataset)))]
    found = task.predictor(net, [mx.cpu()]).detect(images)
    drawn = [draw_detections(image, d, task.classes, threshold=threshold)
             for image, d in zip(images, found)]
    save_image(path, image_grid(drawn))
