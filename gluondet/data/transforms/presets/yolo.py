"""GluonCV's YOLO preset (``gluoncv.data.transforms.presets.yolo``): the test-time
loading and transform of its YOLOv3 tutorials, shorter side 416 by default; with
``stride`` the sides are rounded to its multiples."""
from .. import IMAGENET_MEAN, IMAGENET_STD
from . import _common

__all__ = ['load_test', 'transform_test']


def transform_test(imgs, short=416, max_size=1024, stride=1, mean=IMAGENET_MEAN,
                   std=IMAGENET_STD):
    """Resize and normalize image(s) already read: see
    :func:`gluondet.data.transforms.presets._common.transform_test` for the keywords and
    returns. ``stride`` rounds both sides to its multiples (YOLOv3: 32)."""
    return _common.transform_test(imgs, short, max_size, stride, mean, std)


def load_test(filenames, short=416, max_size=1024, stride=1, mean=IMAGENET_MEAN,
              std=IMAGENET_STD):
    """Read image file(s) (RGB, with ``mx.image.imread``), then :func:`transform_test`
    with the same keywords and returns."""
    return transform_test(_common.read(filenames), short, max_size, stride, mean, std)
