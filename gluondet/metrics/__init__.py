"""Detection metrics: Pascal VOC mAP (VOC07 11-point, area) and COCO (pycocotools' numbers), a
confusion matrix by class, and the one evaluation loop of a predictor over a dataset
(:mod:`gluondet.metrics.evaluation`)."""
from .coco import COCODetectionMetric
from .coco_eval import STAT_NAMES, coco_evaluate
from .confusion import ConfusionMatrix
from .evaluation import evaluate, evaluate_voc07, voc_result
from .voc import VOC07MApMetric, VOCMApMetric

__all__ = ['VOCMApMetric', 'VOC07MApMetric', 'COCODetectionMetric', 'ConfusionMatrix',
           'coco_evaluate', 'STAT_NAMES', 'evaluate', 'evaluate_voc07', 'voc_result']
