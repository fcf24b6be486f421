"""Detection datasets: VOC, COCO, KITTI, MXNet RecordIO records and the built-in demo set, and
:func:`resolve_dataset`, which turns the dataset flags of the scripts and commands into one.

Every dataset yields ``(image, label)``: ``image`` an ``mx.nd.NDArray`` H x W x 3
uint8 RGB, ``label`` a float32 numpy array N x 6 ``[xmin, ymin, xmax, ymax,
class_id, difficult]``; built with ``masks=True`` (COCO, records, demo), ``(image, label,
masks)`` with an :class:`~gluondet.data.instance_masks.InstanceMasks` of one mask per label
row. Transforms live in :mod:`gluondet.data.transforms`.
"""
from .base import DatasetError, DatasetReport, DetectionDataset
from .coco import COCODetection
from .demo import DemoDetection
from .instance_masks import InstanceMasks
from .kitti import KITTIDetection, write_kitti
from .record import RecordDetection
from .resolve import DATASETS, datasets_from_flags, resolve_dataset
from .voc import VOCDetection
# GluonCV's data.transforms.presets.ssd.load_test ...; imported here, not by transforms,
# which the presets import
from .transforms import presets as _presets  # noqa: F401

__all__ = ['COCODetection', 'DATASETS', 'DatasetError', 'DatasetReport', 'DemoDetection',
           'DetectionDataset', 'InstanceMasks', 'KITTIDetection', 'RecordDetection',
           'VOCDetection',
           'resolve_dataset', 'datasets_from_flags', 'write_kitti']
