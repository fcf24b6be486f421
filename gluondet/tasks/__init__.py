"""Tasks bind a detector to the engine: network, transforms, batchify, losses, validation."""
from .faster_rcnn import FasterRCNNTask
from .retinanet import RetinaNetTask
from .ssd import SSDTask

__all__ = ['FasterRCNNTask', 'RetinaNetTask', 'SSDTask']
