"""Detection building blocks as HybridBlocks: anchors, box coding, matching, targets (SSD,
RetinaNet, YOLOv3, CenterNet), NMS, and the parts of two-stage detectors (RPN, ROI features,
R-CNN targets, FPN)."""
from .anchors import (GridAnchorGenerator, SSDAnchorGenerator, grid_anchors,
                      retina_anchor_shapes, ssd_anchor_shapes, ssd_anchors)
from .boxops import batch_take, pairwise_iou
from .center_net_target import CenterNetTargetGenerator
from .coder import BoxCenterDecoder, BoxCenterEncoder, center_to_corner, corner_to_center
from .fpn import FPN
from .mask_target import MaskTargetGenerator
from .matcher import BipartiteMatcher, CompositeMatcher, MaximumMatcher
from .nms import LevelTopKNMS, MultiClassNMS, PerClassNMS, top_candidates
from .rcnn_target import RCNNTargetGenerator, RCNNTargetSampler, RPNTargetGenerator
from .roi import ROIExtractor, fpn_levels, roi_rows
from .rpn import RPNAnchorGenerator, RPNHead, RPNProposal, rpn_base_anchors
from .sync_bn import SyncBatchNorm, sync_norm_layer
from .target import AnchorTargetGenerator, SSDTargetGenerator
from .yolo_target import YOLOV3DynamicTarget, YOLOV3TargetGenerator, yolo3_feature_sizes

__all__ = ['GridAnchorGenerator', 'SSDAnchorGenerator', 'grid_anchors', 'retina_anchor_shapes',
           'ssd_anchor_shapes', 'ssd_anchors', 'AnchorTargetGenerator', 'LevelTopKNMS',
           'top_candidates', 'SyncBatchNorm', 'sync_norm_layer',
           'BoxCenterEncoder', 'BoxCenterDecoder', 'corner_to_center', 'center_to_corner',
           'BipartiteMatcher', 'MaximumMatcher', 'CompositeMatcher',
           'MultiClassNMS', 'PerClassNMS', 'SSDTargetGenerator',
           'batch_take', 'pairwise_iou', 'FPN', 'ROIExtractor', 'fpn_levels', 'roi_rows',
           'RPNAnchorGenerator', 'RPNHead', 'RPNProposal', 'rpn_base_anchors',
           'RPNTargetGenerator', 'RCNNTargetSampler', 'RCNNTargetGenerator',
           'YOLOV3TargetGenerator', 'YOLOV3DynamicTarget', 'yolo3_feature_sizes',
           'CenterNetTargetGenerator', 'MaskTargetGenerator']
