"""GluonCV's CenterNet preset (``gluoncv.data.transforms.presets.center_net``):
the test-time loading and transform of its CenterNet tutorial,
``load_test(filename, short=512)``, keeping the aspect ratio."""
from .. import IMAGENET_MEAN, IMAGENET_STD
from . import _common

__all__ = ['load_test', 'transform_test']


def transform_test(imgs, short, max_size=1024, mean=IMAGENET_MEAN,
                   std=IMAGENET_STD):
    """Resize and normalize image(s) already read: see
    :func:`gluondet.data.transforms.presets._common.transform_test` for the keywords and
    returns."""
    return _common.transform_test(imgs, short, max_size, 1, mean, std)


def load_test(filenames, short, max_size=1024, mean=IMAGENET_MEAN,
              std=IMAGENET_STD):
    """Read image file(s) (RGB, with ``mx.image.imread``), then :func:`transform_test`
    with the same keywords and returns."""
    return transform_test(_common.read(filenames), short, max_size, mean, std)
