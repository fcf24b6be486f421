"""Tasks bind a detector to the engine: network, transforms, batchify, losses, validation."""
from .center_net import CenterNetTask
from .faster_rcnn import FasterRCNNTask
from .mask_rcnn import MaskRCNNTask
from .retinanet import RetinaNetTask
from .ssd import SSDTask
from .yolo3 import YOLO3Task

__all__ = ['CenterNetTask', 'FasterRCNNTask', 'MaskRCNNTask', 'RetinaNetTask', 'SSDTask',
           'YOLO3Task']
