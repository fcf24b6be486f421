"""Pascal VOC detection mAP: area under the PR curve and the VOC2007 11-point AP.

The numbers are GluonCV 0.10.5's (``gluoncv.utils.metrics.voc_detection``):
boxes are integer pixels, so 1 is added to ``xmax`` and ``ymax`` before the
IoU; a detection takes the ground truth of highest IoU among all of its class
in its image, matched or not; it is a true positive when that IoU is
``>= iou_thresh``, the ground truth is not difficult and no higher-scoring
detection of the same image took it first. Detections on a difficult ground
truth are ignored, and difficult ground truths are not counted as positives.

``update`` keeps the valid rows of each batch; once a few thousand detections
are waiting they are matched together with array operations (small enough to
stay in cache), leaving only class, score and outcome per detection for ``get``.

Equal scores are ordered as GluonCV orders them (numpy's sorts included), so
even quantized scores give its numbers.
"""
import warnings
from typing import NamedTuple

import mxnet as mx
import numpy as np

from ._inputs import detection_batches
from ._pairs import chunks, pairs

__all__ = ['VOCMApMetric', 'VOC07MApMetric', 'ClassCurve']

_FLUSH_ROWS = 1 << 12  # detections waiting before they are matched
_VOC07_RECALLS = np.arange(0., 1.1, 0.1)  # the 11 recall points, exactly as GluonCV builds them


class ClassCurve(NamedTuple):
    """One class's precision-recall curve and AP (`VOCMApMetric.curves`)."""

    recall: np.ndarray
    precision: np.ndarray
    ap: float
    num_gt: int


class VOCMApMetric(mx.metric.EvalMetric):
    """Mean average precision over classes, as the area under the PR curve.

    Parameters
    ----------
    iou_thresh : float, default 0.5
        A detection needs IoU ``>= iou_thresh`` with a ground truth to match it.
    class_names : list of str, optional
        With names, ``get()`` returns per-class APs then ``'mAP'``; without,
        it returns ``('VOCMeanAP', mAP)`` as GluonCV does.
    """

    def __init__(self, iou_thresh=0.5, class_names=None):
        if class_names is not None:
            if not isinstance(class_names, (list, tuple)) or \
                    not all(isinstance(name, str) for name in class_names):
                raise TypeError('class_names must be a list or tuple of str, got %r'
                                % (class_names,))
            class_names = tuple(class_names)
        self.iou_thresh = iou_thresh
        self.class_names = class_names
        super().__init__('VOCMeanAP')
        if class_names is not None:
            self.name = list(class_names) + ['mAP']

    def reset(self):
        """Forget every image seen so far."""
        self._num_images = 0
        self._waiting = []      # per batch: (detection rows, ground-truth rows) of _valid_rows
        self._waiting_rows = 0
        self._done = []         # per flush: label, score, outcome (1 TP, 0 FP, -1 ignored)
        self._gt_labels = []    # per batch: label and difficult flag of each ground truth

    def update(self, pred_bboxes, pred_labels, pred_scores,
               gt_bboxes, gt_labels, gt_difficults=None):
        """Add a batch of detections and ground truths.

        Parameters
        ----------
        pred_bboxes : mx.nd.NDArray or numpy.ndarray, or a list of them
            ``B x N x 4`` detected boxes ``xmin, ymin, xmax, ymax``.
        pred_labels : array, ``B x N`` or ``B x N x 1``
            Class ids; rows with a negative id are padding.
        pred_scores : array, ``B x N`` or ``B x N x 1``
            Confidences.
        gt_bboxes : array, ``B x M x 4``
            Ground-truth boxes.
        gt_labels : array, ``B x M`` or ``B x M x 1``
            Ground-truth class ids; negative rows are padding.
        gt_difficults : array, ``B x M`` or ``B x M x 1``, optional
            Non-zero marks a difficult ground truth.

        A list of arrays holds one batch per device (GluonCV's split batches).
        """
        for batch in detection_batches(pred_bboxes, pred_labels, pred_scores, gt_bboxes,
                                       gt_labels, gt_difficults):
            self._add_batch(*batch)

    def _add_batch(self, boxes, labels, scores, gt_boxes, gt_labels, difficult):
        dets = _valid_rows(self._num_images, labels, scores, boxes)
        gts = _valid_rows(self._num_images, gt_labels, difficult, gt_boxes)
        self._num_images += boxes.shape[0]
        self._waiting.append((dets, gts))
        self._gt_labels.append(gts[1:3])
        self._waiting_rows += len(dets[0])
        if self._waiting_rows >= _FLUSH_ROWS:
            self._flush()

    def _flush(self):
        """Match the waiting detections (whole images) against their ground truths."""
        if not self._waiting:
            return
        dets, gts = zip(*self._waiting)
        self._done.append(_match_images(_concat(dets), _concat(gts), self.iou_thresh))
        self._waiting, self._waiting_rows = [], 0

    def get(self):
        """Return the APs.

        Returns
        -------
        names : list of str (or str without ``class_names``)
            Class names then ``'mAP'``.
        values : list of float (or float)
            AP of each class, NaN for a class without non-difficult ground
            truth; the mean over classes with an AP last. Classes up to the
            largest id seen count towards the mean, named or not.
        """
        aps = self._class_aps()
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', RuntimeWarning)  # all-NaN mean is NaN
            mean_ap = float(np.nanmean(aps)) if len(aps) else float('nan')
        if self.class_names is None:
            return self.name, mean_ap
        values = [float(aps[i]) if i < len(aps) else float('nan')
                  for i in range(len(self.class_names))]
        return list(self.name), values + [mean_ap]

    def curves(self):
        """The precision-recall curve of every class, from which `get` computes its AP.

        Returns
        -------
        list of ClassCurve
            One per class id from 0 to the largest seen (to ``len(class_names)`` at least
            with names): ``recall`` and ``precision`` after each of the class's detections
            by descending score (empty without non-difficult ground truth), ``ap`` as
            `get` returns it (NaN without non-difficult ground truth) and ``num_gt`` (its
            non-difficult ground truths).
        """
        curves = self._class_curves()
        empty = ClassCurve(np.zeros(0), np.zeros(0), float('nan'), 0)
        return curves + [empty] * (len(self.class_names or ()) - len(curves))

    def _class_aps(self):
        """AP of every class id from 0 to the largest seen (NaN where undefined)."""
        return np.array([curve.ap for curve in self._class_curves()], dtype=np.float64)

    def _class_curves(self):
        """`ClassCurve` of every class id from 0 to the largest seen."""
        self._flush()
        label, score, match = _concat(self._done, empty=(np.int64, np.float32, np.int8))
        gt_label, difficult = _concat(self._gt_labels, empty=(np.int64, bool))
        num_classes = int(max(label.max(initial=-1), gt_label.max(initial=-1))) + 1
        # flushes are sorted by class then image: a stable sort keeps image order in a class
        order = np.argsort(label, kind='stable')
        label, score, match = label[order], score[order], match[order]
        n_pos = np.bincount(gt_label[~difficult], minlength=num_classes)
        bounds = np.searchsorted(label, np.arange(num_classes + 1))
        curves = []
        for c in range(num_classes):
            if not n_pos[c]:
                curves.append(ClassCurve(np.zeros(0), np.zeros(0), float('nan'), 0))
                continue
            lo, hi = bounds[c], bounds[c + 1]
            rec, prec = _recall_precision(score[lo:hi], match[lo:hi], n_pos[c])
            curves.append(ClassCurve(rec, prec, float(self._average_precision(rec, prec)),
                                     int(n_pos[c])))
        return curves

    def _average_precision(self, rec, prec):
        """Area under the PR curve with precision made monotone from the right."""
        mrec = np.concatenate(([0.], rec, [1.]))
        mpre = np.concatenate(([0.], np.nan_to_num(prec), [0.]))
        mpre = np.maximum.accumulate(mpre[::-1])[::-1]
        steps = np.flatnonzero(mrec[1:] != mrec[:-1])
        return np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1])


class VOC07MApMetric(VOCMApMetric):
    """Mean average precision with the PASCAL VOC2007 11-point AP.

    Parameters are those of :class:`VOCMApMetric`.
    """

    def _average_precision(self, rec, prec):
        """Mean of the best precision at recall >= 0, 0.1, ..., 1."""
        best = np.maximum.accumulate(np.nan_to_num(prec)[::-1])[::-1]
        ap = 0.
        for i in np.searchsorted(rec, _VOC07_RECALLS, side='left'):
            ap += (best[i] if i < len(best) else 0.) / 11.
        return ap


def _valid_rows(first_image, labels, values, boxes):
    """Image index, int label, value and pixel box of each non-padding row."""
    valid = labels >= 0
    boxes = boxes[valid]  # a copy
    if boxes.dtype.kind != 'f':
        boxes = boxes.astype(np.float64)
    boxes[:, 2:] += 1  # integer pixel boxes: xmax, ymax are inclusive
    return np.nonzero(valid)[0] + first_image, labels[valid].astype(np.int64), values[valid], boxes


def _concat(parts, empty=()):
    """Join tuples of arrays column by column; without parts, empty arrays of ``empty`` dtypes."""
    if not parts:
        return tuple(np.zeros(0, dtype) for dtype in empty)
    return tuple(np.concatenate(column) for column in zip(*parts))


def _match_images(dets, gts, iou_thresh):
    """Outcome of every detection of some whole images.

    Returns label, score and outcome (1, 0, -1) sorted by class, image, then
    descending score, in GluonCV's order (see :func:`_group_order`).
    """
    img, label, score, boxes = dets
    gt_img, gt_label, difficult, gt_boxes = gts
    num_classes = int(max(label.max(initial=0), gt_label.max(initial=0))) + 1
    local = img - img.min(initial=0)
    order = _group_order(label * (local.max(initial=0) + 1) + local, score)
    img, label, score, boxes = img[order], label[order], score[order], boxes[order]
    match = _match(img * num_classes + label, boxes,
                   gt_img * num_classes + gt_label, gt_boxes, difficult, iou_thresh)
    return label, score, match


def _group_order(group, score):
    """Sort by group, then descending score as GluonCV's ``score.argsort()[::-1]``.

    numpy sorts up to 16 values stably, so equal scores come later-first; a
    longer group holding equal scores is sorted by numpy's quicksort itself.
    """
    order = np.argsort(score, kind='stable')[::-1]
    small = group.astype(np.min_scalar_type(group.max(initial=0)))  # 16 bits: radix sort
    order = order[np.argsort(small[order], kind='stable')]
    sorted_group, sorted_score = group[order], score[order]
    starts = np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])
    ends = np.r_[starts[1:], len(order)]
    tied = (sorted_group[1:] == sorted_group[:-1]) & (sorted_score[1:] == sorted_score[:-1])
    runs = np.unique(np.searchsorted(starts, np.flatnonzero(tied), side='right') - 1)
    for lo, hi in zip(starts[runs], ends[runs]):
        if hi - lo > 16:
            arrival = np.sort(order[lo:hi])
            order[lo:hi] = arrival[score[arrival].argsort()[::-1]]
    return order


def _match(key, boxes, gt_key, gt_boxes, difficult, iou_thresh):
    """1 (true positive), 0 (false positive) or -1 (ignored) for each detection.

    ``key`` identifies (image, class); detections come grouped by key and by
    descending score inside a group, so the first detection to reach a ground
    truth takes it.
    """
    gt_order = np.argsort(gt_key, kind='stable')
    gt_key, gt_boxes, difficult = gt_key[gt_order], gt_boxes[gt_order], difficult[gt_order]
    start = np.searchsorted(gt_key, key, side='left')
    count = np.searchsorted(gt_key, key, side='right') - start
    best = np.full(len(key), -1)
    for lo, hi in chunks(count):
        best[lo:hi] = _best_gt(boxes[lo:hi], gt_boxes, start[lo:hi], count[lo:hi], iou_thresh)
    match = np.zeros(len(key), dtype=np.int8)
    hit = np.flatnonzero(best >= 0)
    taken = best[hit]
    first = np.unique(taken, return_index=True)[1]
    match[hit[first]] = 1
    match[hit[difficult[taken]]] = -1
    return match


def _best_gt(boxes, gt_boxes, start, count, iou_thresh):
    """Index of each detection's ground truth of highest IoU, -1 if below the threshold.

    Detection ``i`` is compared with ``gt_boxes[start[i]:start[i] + count[i]]``;
    the first of equal IoUs wins, and a NaN IoU wins as numpy's argmax has it.
    """
    best = np.full(len(count), -1)
    if not count.any():
        return best
    rows, cols, seg = pairs(start, count)
    iou = _pair_iou(boxes[rows], gt_boxes[cols])
    has = count > 0
    peak = np.maximum.reduceat(iou, seg[has])
    is_peak = (iou == np.repeat(peak, count[has])) | np.isnan(iou)
    pos = np.flatnonzero(is_peak)
    pos = pos[np.r_[True, rows[pos[1:]] != rows[pos[:-1]]]]
    ok = ~(peak < iou_thresh)
    best[rows[pos[ok]]] = cols[pos[ok]]
    return best


def _pair_iou(a, b):
    """IoU of ``a[i]`` with ``b[i]``, computed as GluonCV's ``bbox_iou`` (offset 0)."""
    top_left = np.maximum(a[:, :2], b[:, :2])
    bottom_right = np.minimum(a[:, 2:], b[:, 2:])
    size = bottom_right - top_left
    inter = size[:, 0] * size[:, 1] * (top_left < bottom_right).all(axis=1)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    with np.errstate(divide='ignore', invalid='ignore'):
        return inter / (area_a + area_b - inter)


def _recall_precision(score, match, n_pos):
    """Cumulative recall and precision of one class, best score first."""
    match = match[score.argsort()[::-1]]
    tp = np.cumsum(match == 1)
    fp = np.cumsum(match == 0)
    with np.errstate(divide='ignore', invalid='ignore'):
        prec = tp / (fp + tp)
    return tp / n_pos, prec
