"""The model zoo: networks by GluonCV-style name.

>>> from gluondet.model_zoo import get_model
>>> net = get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False)
>>> net.initialize()
"""
from . import center_net, faster_rcnn, mask_rcnn, retinanet, ssd, yolo3  # noqa: F401  (register)
from .registry import (COCO_CLASSES, VOC_CLASSES, ModelInfo, get_model, get_model_info,
                       get_model_list, register_model)
from .odtk import load_odtk
from .ssd import SSD

__all__ = ['get_model', 'get_model_list', 'get_model_info', 'register_model', 'ModelInfo',
           'SSD', 'VOC_CLASSES', 'COCO_CLASSES', 'load_odtk']
