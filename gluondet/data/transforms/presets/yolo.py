"""GluonCV's YOLO preset (``gluoncv.data.transforms.presets.yolo``): the test-time
loading and transform of its YOLOv3 tutorials, shorter side 416 by default; with
``stride`` the sides are rounded to its multiples."""
from .. import IMAGENET_MEAN, IMAGENET_STD
from . import _common

__all__ = ['load_test', 'transform_test']


def transform_test(imgs, short=416, max_size=1024, stride=1, mean=IMAGENET_MEAN,
                   std=IMAGENET_STD):
    """Resize and normalize image(s) already read.

    Parameters
    ----------
    imgs : mx.nd.NDArray or numpy.ndarray (H x W x 3, RGB 0-255), or a list of them
    short : int, default 416
        Length the shorter side is resized to, keeping the aspect ratio.
    max_size : int, default 1024
        Cap on the longer side: an image that would exceed it is resized so that its longer
        side is ``max_size`` (rounded down to a multiple of ``stride``).
    stride : int, default 1
        Both sides are rounded to multiples of ``stride`` (YOLOv3: 32); 1 leaves them as
        they are.
    mean, std : sequence of floats (one, or one per channel), default ImageNet's RGB
        ``(x / 255 - mean) / std`` normalizes the network input.

    Returns
    -------
    tensor : mx.nd.NDArray, 1 x 3 x H x W float32
        The network input.
    image : numpy.ndarray, H x W x 3 uint8
        The resized image, to draw the detections on.
    Given a list of two or more images, two lists (``zip`` pairs them); a list of one
    gives one pair, as in GluonCV.
    """
    return _common.transform_test(imgs, short, max_size, stride, mean, std)


def load_test(filenames, short=416, max_size=1024, stride=1, mean=IMAGENET_MEAN,
              std=IMAGENET_STD):
    """Read image file(s) (RGB, with ``mx.image.imread``), then :func:`transform_test`
    with the same keywords and returns."""
    return transform_test(_common.read(filenames), short, max_size, stride, mean, std)
