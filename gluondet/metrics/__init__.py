"""Detection metrics: Pascal VOC mAP (VOC07 11-point, area) and COCO (pycocotools-compatible)."""
from .voc import VOC07MApMetric, VOCMApMetric

__all__ = ['VOCMApMetric', 'VOC07MApMetric']
