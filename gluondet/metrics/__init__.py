"""Detection metrics: Pascal VOC mAP (VOC07 11-point, area) and COCO (pycocotools' numbers)."""
from .coco import COCODetectionMetric
from .coco_eval import STAT_NAMES, coco_evaluate
from .voc import VOC07MApMetric, VOCMApMetric

__all__ = ['VOCMApMetric', 'VOC07MApMetric', 'COCODetectionMetric', 'coco_evaluate',
           'STAT_NAMES']
