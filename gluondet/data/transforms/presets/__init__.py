"""GluonCV's test-time presets, ``gluoncv.data.transforms.presets``, for the detectors: each
module (:mod:`.ssd`, :mod:`.rcnn`, :mod:`.yolo`, :mod:`.center_net`) has GluonCV's
``load_test`` and ``transform_test``, with the same keywords and defaults, giving the same
arrays. So the code of GluonCV's tutorials runs with ``gluondet`` in place of ``gluoncv``::

    from gluondet import data
    x, img = data.transforms.presets.ssd.load_test('street.jpg', short=512)

``x`` is the network input, a ``1 x 3 x H x W`` float32 ``mx.nd.NDArray`` normalized with
``mean`` and ``std``; ``img`` the resized image, ``H x W x 3`` uint8 RGB numpy, to draw the
detections on. Given several images, both are lists. The training transforms of those
modules (``SSDDefaultTrainTransform`` ...) are not here: gluondet's tasks have their own.
"""
from . import center_net, rcnn, ssd, yolo

__all__ = ['center_net', 'rcnn', 'ssd', 'yolo']
