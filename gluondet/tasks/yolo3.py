"""YOLOv3 bound to the training engine (see the task contract in `gluondet.engine`)."""
import numpy as np

from ..data.mixup import MixupDetection
from ..data.multiscale import SizedTransform
from ..data.preprocess import fixed_size
from ..data.yolo_transforms import YOLO3TrainTransform, yolo3_train_batchify
from ..losses import YOLOV3Loss
from ..nn import YOLOV3TargetGenerator
from .base import DetectionTask

__all__ = ['YOLO3Task', 'RANDOM_SHAPES']

# GluonCV's train_yolo3.py: every 10 batches a size of 320 to 608 px in steps of 32
RANDOM_SHAPES = tuple(range(320, 609, 32))


class YOLO3Task(DetectionTask):
    """YOLOv3: one network name, a train and a val dataset.

    Parameters
    ----------
    network : str
        A model zoo name, e.g. ``yolo3_darknet53_voc``.
    train_dataset, val_dataset : DetectionDataset
    data_shape : int or (width, height)
        The input size of validation, and of training without ``random_shapes``.
    random_shapes : sequence of int, optional
        Multi-scale training: every 10 batches an input size of these (GluonCV's
        :data:`RANDOM_SHAPES` by default); None or empty trains at ``data_shape``
        (``--no-random-shape``).
    label_smooth : bool
        GluonCV's ``--label-smooth`` (class targets ``1 - eps`` and ``eps``,
        ``eps = min(1 / classes, 1 / 40)``).
    zoom : bool
        Train with the zoom-out and crop (see `YOLO3TrainTransform`).
    ignore_iou_thresh : float
        Predictions overlapping a ground truth by more than this are neither object nor
        background (GluonCV's 0.7).
    anchor_iou_thresh : float, optional
        Also assign each ground truth to the anchors of IoU above it (YOLOv4's ``iou_thresh``;
        None: the best anchor only, GluonCV's); see `YOLOV3TargetGenerator`.
    **kwargs
        ``classes``, ``pretrained_base``, ``model_kwargs``, ``val_batch_size``,
        ``num_workers``, ``fine_tune``, ``pruned_model``: see
        :class:`~gluondet.tasks.base.DetectionTask`.

    Mixup (``config.mixup``) blends pairs of images with a ratio drawn from Beta(1.5, 1.5),
    each box weighted by its image's share, as GluonCV's ``--mixup``.
    """

    name = 'yolo3'
    supports_mixup = True

    def __init__(self, network, train_dataset, val_dataset, data_shape=416,
                 random_shapes=RANDOM_SHAPES, label_smooth=False, zoom=True,
                 ignore_iou_thresh=0.7, anchor_iou_thresh=None, val_batch_size=8, **kwargs):
        super().__init__(network, train_dataset, val_dataset, val_batch_size=val_batch_size,
                         **kwargs)
        self.width, self.height = ((data_shape, data_shape) if np.isscalar(data_shape)
                                   else tuple(data_shape))
        self.train_sizes = tuple(random_shapes) if random_shapes else None
        self.zoom = zoom
        self.loss = YOLOV3Loss(ignore_iou_thresh, label_smooth)
        self.targets = None
        self.anchor_iou_thresh = anchor_iou_thresh
        self.train_batchify = yolo3_train_batchify(5)

    def meta(self):
        return self._meta(data_shape=[self.height, self.width])

    def build_net(self, ctx_list):
        net = self._get_model(ctx_list)
        self.targets = YOLOV3TargetGenerator(net.anchors, net.strides, self.anchor_iou_thresh)
        return self._place(net, ctx_list)

    def train_transform(self):
        return YOLO3TrainTransform(self.width, self.height, targets=self.targets, zoom=self.zoom)

    def train_dataset(self):
        dataset = self._train
        if len(dataset) > 1:     # mixes only when the engine's SampleIndex says so
            dataset = MixupDetection(dataset)
        return SizedTransform(dataset, self.train_transform())

    def losses(self, net, parts):
        outputs, boxes, targets = [], [], []
        for part in parts:
            outputs.append(net(part[0]))
            targets.append(part[1:-1])
            boxes.append(part[-1])
        return self.loss(outputs, boxes, targets)

    def preprocessing(self, net):
        """The fixed size it validates at."""
        return fixed_size((self.height, self.width))
