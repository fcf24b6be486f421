"""YOLOv3's training targets, as GluonCV makes them: the assignment of the ground truths in
numpy (data workers), the ignore mask and the class targets on the device.

Prediction rows follow the network's order: outputs from the coarsest stride to the finest,
then feature row, column, anchor.
"""
import numpy as np
from mxnet import gluon

from .boxops import pairwise_iou

__all__ = ['YOLOV3TargetGenerator', 'YOLOV3DynamicTarget', 'yolo3_feature_sizes']


def yolo3_feature_sizes(height, width, strides):
    """``[(rows, columns)]`` of each output for an input of ``height x width``: ``ceil(size /
    stride)``, what stride-2 3x3 convolutions with padding 1 give (the input size of any
    multiple of 32 divides exactly)."""
    return [(-(-height // s), -(-width // s)) for s in strides]


class YOLOV3TargetGenerator:
    """The targets that do not depend on the predictions (GluonCV's prefetch targets).

    Each ground truth is assigned to one prediction: of all anchors of all outputs, the one
    whose box, centered on the ground truth's, has the highest IoU with it (the first on ties);
    in that anchor's output, the cell holding the ground truth's center. A later ground truth
    assigned to the same prediction replaces an earlier one. With ``anchor_iou_thresh`` (YOLOv4's
    ``iou_thresh``, 0.213 in its darknet configs) every other anchor of IoU above it is
    assigned the ground truth too, in its own output. Numpy only, so it runs in the
    data workers; every float follows GluonCV's arithmetic, so the targets equal its own.
    Classes travel as ids (one number per prediction instead of GluonCV's one-hot rows);
    :class:`YOLOV3DynamicTarget` expands them on the device.

    Parameters
    ----------
    anchors : 3 sequences of 6 numbers
        Anchor widths and heights in input pixels, ``(w0, h0, w1, h1, w2, h2)`` per output,
        in the outputs' order (the network's ``anchors``).
    strides : 3 ints
        Stride of each output, in the same order (the network's ``strides``).
    anchor_iou_thresh : float, optional
        Also assign the anchors of IoU above it (None: the best anchor only, GluonCV's).

    Call
    ----
    ``generator(height, width, boxes, ids, mix_ratio=None)`` with the input size, ``boxes`` ``M
    x 4`` corner boxes in input pixels, ``ids`` ``M`` class ids and, after mixup, ``mix_ratio``
    ``M`` weights of the boxes. Rows with a negative id or coordinate are padding and skipped
    (GluonCV stops at the first such row). Returns float32 arrays of ``N`` rows, ``N`` the
    number of predictions (3 per cell of every output); where a ground truth is assigned (and
    its mix ratio is positive, else all as unassigned):

    - objectness ``N x 1``: 1, or the box's mix ratio (else 0);
    - center ``N x 2``: the center's position inside its cell, 0..1 (target of the sigmoid);
    - scale ``N x 2``: ``log(max(box size, 1) / anchor size)``;
    - weight ``N x 2``: ``2 - box area / image area`` (small boxes count more), else 0;
    - class id ``N x 1``: the box's class (else -1).
    """

    def __init__(self, anchors, strides, anchor_iou_thresh=None):
        self.anchors = np.asarray(anchors, dtype=np.float32).reshape(len(strides), -1, 2)
        self.strides = tuple(int(s) for s in strides)
        self.anchor_iou_thresh = anchor_iou_thresh

    def __call__(self, height, width, boxes, ids, mix_ratio=None):
        num_anchors = self.anchors.shape[1]
        sizes = yolo3_feature_sizes(height, width, self.strides)
        cells = [rows * cols for rows, cols in sizes]
        first_row = np.cumsum([0] + cells) * num_anchors
        n = first_row[-1]
        objectness, class_id = np.zeros((n, 1), np.float32), np.full((n, 1), -1, np.float32)
        center, scale, weight = (np.zeros((n, 2), np.float32) for _ in range(3))

        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        ids = np.asarray(ids, dtype=np.float32).reshape(-1)
        ratio = (np.ones(len(ids), np.float32) if mix_ratio is None
                 else np.asarray(mix_ratio, dtype=np.float32).reshape(-1))
        keep = (boxes >= 0).all(axis=1) & (ids >= 0)
        boxes, ids, ratio = boxes[keep], ids[keep], ratio[keep]
        box_w, box_h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
        center_x = boxes[:, 0] + box_w * np.float32(0.5)
        center_y = boxes[:, 1] + box_h * np.float32(0.5)
        for m, match in self._assignments(box_w, box_h):
            layer, anchor = divmod(int(match), num_anchors)
            rows, cols = sizes[layer]
            # float64 from here, as GluonCV's numpy scalars (float32 / int)
            pos_x = np.float64(center_x[m]) / width * cols
            pos_y = np.float64(center_y[m]) / height * rows
            cell = int(pos_y) * cols + int(pos_x)   # a center on the right edge: next row's first
            if cell >= cells[layer]:                # a center on the bottom edge: none
                continue
            row = first_row[layer] + cell * num_anchors + anchor
            center[row] = pos_x - int(pos_x), pos_y - int(pos_y)
            scale[row] = [self._log_ratio(size, self.anchors[layer, anchor, k])
                          for k, size in enumerate((box_w[m], box_h[m]))]
            weight[row] = 2.0 - box_w[m] * box_h[m] / width / height
            objectness[row], class_id[row] = ratio[m], ids[m]
        # GluonCV keeps an assignment's targets only where its objectness is positive
        assigned = objectness > 0
        for target in (center, scale, weight):
            target *= assigned
        class_id[~assigned] = -1
        return objectness, center, scale, weight, class_id

    def _assignments(self, box_w, box_h):
        """``(box, anchor)`` pairs, the anchor an index over all outputs' anchors: each box's
        anchor shape of highest IoU with it, both centered at the origin (float32 as MXNet's
        ``box_iou``), then those above ``anchor_iou_thresh``."""
        anchors = self.anchors.reshape(-1, 2)
        inter = (np.minimum(box_w[:, None], anchors[None, :, 0]) *
                 np.minimum(box_h[:, None], anchors[None, :, 1]))
        union = (anchors[:, 0] * anchors[:, 1])[None, :] + (box_w * box_h)[:, None] - inter
        iou = inter / union
        best = iou.argmax(axis=1)
        pairs = list(enumerate(best))
        if self.anchor_iou_thresh is not None:
            pairs += [(m, k) for m, k in zip(*np.nonzero(iou > self.anchor_iou_thresh))
                      if k != best[m]]
        return pairs

    @staticmethod
    def _log_ratio(size, anchor):
        """``log(max(size, 1) / anchor)``: in float32 for a size from 1, else in float64 (the
        int 1 makes GluonCV's numpy scalar arithmetic float64)."""
        if size >= 1:
            return np.log(size / anchor)
        return np.log(1 / np.float64(anchor))


class YOLOV3DynamicTarget(gluon.HybridBlock):
    """The targets made on the device: GluonCV's ignore mask and class targets.

    A prediction not assigned to a ground truth whose box has an IoU above
    ``ignore_iou_thresh`` with a ground truth of its image is ignored (objectness -1) rather
    than a negative (0). The class targets of an assigned prediction are one-hot, or with
    ``label_smooth`` (``s = min(1 / C, 1 / 40)``) ``1 - s`` for its class and ``s`` for the
    others; only assigned predictions have a class loss.

    Parameters
    ----------
    ignore_iou_thresh : float
        GluonCV's 0.7.
    label_smooth : bool
        GluonCV's ``--label-smooth``.

    Inputs: ``box_preds`` ``B x N x 4`` predicted corner boxes in input pixels, ``class_pred``
    ``B x N x C`` (only its shape is read), ``gt_boxes`` ``B x M x 4`` (padding rows -1),
    ``objectness`` and ``class_id`` ``B x N x 1`` from `YOLOV3TargetGenerator`.

    Outputs: ``objectness`` ``B x N x 1``, the objectness where positive, else 0 or -1
    (ignored); ``class_targets`` ``B x N x C``; ``class_mask`` ``B x N x 1``, 1 where assigned.
    """

    def __init__(self, ignore_iou_thresh=0.7, label_smooth=False, **kwargs):
        super().__init__(**kwargs)
        self._thresh = ignore_iou_thresh
        self._label_smooth = label_smooth

    def hybrid_forward(self, F, box_preds, class_pred, gt_boxes, objectness, class_id):
        # Targets carry no gradient: cut here, the backward pass skips the IoU of every
        # prediction with every ground truth (MXNet computes it, in zeros, when only the
        # outputs are cut: 3% of a YOLOv3 step on CPUs).
        best = pairwise_iou(F, F.stop_gradient(box_preds), gt_boxes).max(axis=-1, keepdims=True)
        objectness = F.where(objectness > 0, objectness, -(best > self._thresh))
        classes = F.contrib.arange_like(class_pred, axis=-1).reshape((1, 1, -1))
        one_hot = F.broadcast_equal(class_id, classes)
        if self._label_smooth:
            count = F.shape_array(class_pred).slice_axis(axis=0, begin=-1, end=None)
            off = (1 / F.maximum(F.cast(count, 'float32'), 40)).reshape((1, 1, 1))
            one_hot = F.where(one_hot, F.broadcast_like(1 - off, one_hot),
                              F.broadcast_like(off, one_hot))
        return objectness, one_hot, class_id >= 0
