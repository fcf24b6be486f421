"""A detection confusion matrix: what each ground truth was detected as, and the rest.

In each image, the detections scoring at least ``score_thresh`` are paired one to one
with ground truths of IoU ``>= iou_thresh`` (the IoU of :class:`VOCMApMetric`: integer
pixel boxes, ``xmax`` and ``ymax`` inclusive). Pairs of the same class are taken first,
then pairs of different classes among what is left; each round by descending IoU (equal
IoUs: higher score first), a pair taken when neither side is yet. So the diagonal counts
the detections that find their own class, off the diagonal a detection of the wrong
class on a ground truth no right one found.

``matrix[p, t]`` for ``p, t < C`` (the classes): detections of class ``p`` on a ground
truth of class ``t``. The last row and column are the background: ``matrix[C, t]`` the
misses (ground truths of class ``t`` paired with no detection), ``matrix[p, C]`` the false
detections (detections of class ``p`` paired with no ground truth); ``matrix[C, C]`` is 0.
Difficult ground truths, and detections paired with them, are not counted (as the VOC
metric ignores them).
"""
import numpy as np

from ._inputs import detection_batches
from .voc import _pair_iou

__all__ = ['ConfusionMatrix', 'match_detections']

DEFAULT_SCORE_THRESH = 0.25     # Ultralytics' confusion-matrix confidence


class ConfusionMatrix:
    """Counts detections against ground truths by class (see the module docstring).

    Parameters
    ----------
    num_classes : int
    iou_thresh : float, default 0.5
        Least IoU of a pair.
    score_thresh : float, default 0.25
        Detections scoring less are left out.

    Attributes
    ----------
    matrix : numpy.ndarray
        ``(num_classes + 1) x (num_classes + 1)`` int64 counts, rows predicted, columns
        true, background last.
    num_images : int
    """

    def __init__(self, num_classes, iou_thresh=0.5, score_thresh=DEFAULT_SCORE_THRESH):
        if num_classes < 1:
            raise ValueError('num_classes must be positive, got %r' % (num_classes,))
        self.num_classes = int(num_classes)
        self.iou_thresh = iou_thresh
        self.score_thresh = score_thresh
        self.reset()

    def reset(self):
        self.matrix = np.zeros((self.num_classes + 1,) * 2, np.int64)
        self.num_images = 0

    def get(self):
        """A copy of `matrix`."""
        return self.matrix.copy()

    def update(self, pred_bboxes, pred_labels, pred_scores,
               gt_bboxes, gt_labels, gt_difficults=None):
        """Add a batch; the arguments are those of :meth:`VOCMApMetric.update`."""
        for batch in detection_batches(pred_bboxes, pred_labels, pred_scores, gt_bboxes,
                                       gt_labels, gt_difficults):
            self._add_batch(*batch)

    def _add_batch(self, boxes, labels, scores, gt_boxes, gt_labels, difficult):
        for i in range(boxes.shape[0]):
            det = (labels[i] >= 0) & (scores[i] >= self.score_thresh)
            gt = gt_labels[i] >= 0
            self._add_image(boxes[i][det], labels[i][det].astype(np.int64), scores[i][det],
                            gt_boxes[i][gt], gt_labels[i][gt].astype(np.int64),
                            difficult[i][gt])
        self.num_images += boxes.shape[0]

    def _add_image(self, boxes, labels, scores, gt_boxes, gt_labels, difficult):
        for name, ids in (('pred_labels', labels), ('gt_labels', gt_labels)):
            if ids.size and ids.max() >= self.num_classes:
                raise ValueError('%s: class id %d, but the matrix has %d classes'
                                 % (name, ids.max(), self.num_classes))
        paired = match_detections(boxes, labels, scores, gt_boxes, gt_labels, self.iou_thresh)
        background = self.num_classes
        hit = paired >= 0
        counted = hit.copy()
        counted[hit] = ~difficult[paired[hit]]
        np.add.at(self.matrix, (labels[counted], gt_labels[paired[counted]]), 1)
        np.add.at(self.matrix[:, background], labels[~hit], 1)
        missed = np.ones(len(gt_labels), bool)
        missed[paired[hit]] = False
        np.add.at(self.matrix[background], gt_labels[missed & ~difficult], 1)


def match_detections(boxes, labels, scores, gt_boxes, gt_labels, iou_thresh=0.5):
    """The ground truth each detection of one image is paired with (-1: none).

    Parameters
    ----------
    boxes : numpy.ndarray
        ``N x 4`` detected boxes, ``labels`` and ``scores`` their N classes and scores.
    gt_boxes : numpy.ndarray
        ``M x 4`` ground-truth boxes, ``gt_labels`` their M classes.
    iou_thresh : float

    Returns
    -------
    numpy.ndarray
        N indices into the ground truths; pairing as the module docstring says.
    """
    num, num_gt = len(boxes), len(gt_boxes)
    paired = np.full(num, -1, np.int64)
    if not num or not num_gt:
        return paired
    rows, cols = np.repeat(np.arange(num), num_gt), np.tile(np.arange(num_gt), num)
    iou = _pair_iou(_inclusive(boxes)[rows], _inclusive(gt_boxes)[cols]).reshape(num, num_gt)
    same = labels[:, None] == gt_labels[None, :]
    taken = np.zeros(num_gt, bool)
    for wanted in (same, ~same):
        det, gt = np.nonzero(wanted & (iou >= iou_thresh))
        for k in np.lexsort((-scores[det], -iou[det, gt])):
            if paired[det[k]] < 0 and not taken[gt[k]]:
                paired[det[k]] = gt[k]
                taken[gt[k]] = True
    return paired


def _inclusive(boxes):
    """Integer pixel boxes with ``xmax``, ``ymax`` made exclusive, as the VOC metric's IoU."""
    boxes = np.array(boxes, np.float64).reshape(-1, 4)
    boxes[:, 2:] += 1
    return boxes
