"""Detection building blocks as HybridBlocks: anchors, box coding, matching, targets, NMS."""
from .anchors import SSDAnchorGenerator, ssd_anchor_shapes, ssd_anchors
from .coder import BoxCenterDecoder, BoxCenterEncoder, center_to_corner, corner_to_center
from .matcher import BipartiteMatcher, CompositeMatcher, MaximumMatcher
from .nms import MultiClassNMS
from .target import SSDTargetGenerator

__all__ = ['SSDAnchorGenerator', 'ssd_anchor_shapes', 'ssd_anchors',
           'BoxCenterEncoder', 'BoxCenterDecoder', 'corner_to_center', 'center_to_corner',
           'BipartiteMatcher', 'MaximumMatcher', 'CompositeMatcher',
           'MultiClassNMS', 'SSDTargetGenerator']
