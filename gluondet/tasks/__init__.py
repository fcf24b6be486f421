"""Tasks bind a detector to the engine: network, transforms, batchify, losses, validation."""
from .center_net import CenterNetTask
from .faster_rcnn import FasterRCNNTask
from .retinanet import RetinaNetTask
from .ssd import SSDTask
from .yolo3 import YOLO3Task

__all__ = ['CenterNetTask', 'FasterRCNNTask', 'RetinaNetTask', 'SSDTask', 'YOLO3Task']
