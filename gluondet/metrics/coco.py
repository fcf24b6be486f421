"""COCO detection metric for validation loops, with GluonCV's interface.

Detections are collected in ``update`` (one row per box, in the dataset's
image order), turned into COCO results (json category ids, ``x, y, w, h``
boxes in original-image pixels, with masks their RLEs) and scored in ``get`` by
:func:`~gluondet.metrics.coco_eval.coco_evaluate`'s engine, whose numbers are
pycocotools'.
"""
import datetime
import json
import os
import warnings

import mxnet as mx
import numpy as np

from ..bbox import bbox_xyxy_to_xywh
from ..masks import encode, to_rle
from ._inputs import as_batches, as_numpy, batch_boxes, batch_values
from .coco_eval import (IOU_THRESHOLDS, coco_evaluate, evaluate_boxes, format_summary,
                        load_ground_truth, object_array, summarize)

__all__ = ['COCODetectionMetric', 'coco_evaluate']


class COCODetectionMetric(mx.metric.EvalMetric):
    """COCO box AP over a validation dataset, as GluonCV's ``COCODetectionMetric``; with
    ``masks``, mask AP too.

    Parameters
    ----------
    dataset : gluondet.data.COCODetection or similar
        Needs ``annotation_file`` (the COCO json path, or the loaded dict) or
        ``coco_ground_truth()`` (the dict: :class:`~gluondet.data.DemoDetection`'s),
        ``image_ids`` (COCO image id of each item, in the order ``update`` sees them),
        ``contiguous_id_to_json`` (dict or list: class id -> json category
        id) and ``classes``; ``image_size(idx) -> (width, height)`` if it has
        one, else sizes come from the json.
    save_prefix : str, optional
        Write the COCO results to ``save_prefix[_time].json`` at each ``get``.
    use_time : bool, default True
        Append the date and time to the file name.
    cleanup : bool, default False
        Remove the results file once it has been evaluated.
    score_thresh : float, default 0.05
        Detections scoring lower are dropped.
    data_shape : (height, width), optional
        The network input size, when boxes are in that frame: they are scaled
        to each original image.
    post_affine : callable, optional
        ``fn(orig_w, orig_h, out_w, out_h) -> 2 x 3`` matrix applied to the
        box corners instead of the scaling (needs ``data_shape``).
    masks : bool, default False
        ``update`` takes each detection's mask (``pred_masks``) and ``get`` reports mask
        AP (pycocotools' ``iouType='segm'``) after box AP.

    Boxes are written back as GluonCV writes them, ``[xmin, ymin, xmax - xmin +
    1, ymax - ymin + 1]``: the inverse of ``COCODetection``'s reading. The results carry
    boxes, so their masks' areas (for the area ranges) are their boxes', as pycocotools
    takes them from such results.
    """

    def __init__(self, dataset, save_prefix=None, use_time=True, cleanup=False,
                 score_thresh=0.05, data_shape=None, post_affine=None, masks=False):
        super().__init__('COCOMeanAP')
        self.dataset = dataset
        self._gt = load_ground_truth(getattr(dataset, 'annotation_file', None)
                                     or dataset.coco_ground_truth())
        self._image_ids = list(dataset.image_ids)
        self._json_ids = _json_category_table(dataset.contiguous_id_to_json)
        self._score_thresh = score_thresh
        self._data_shape = _check_data_shape(data_shape)
        if post_affine is not None and self._data_shape is None:
            raise ValueError('post_affine needs data_shape (the network input height, width)')
        self._post_affine = post_affine
        self._cleanup = cleanup
        self._filename = None
        if save_prefix is not None:
            stamp = datetime.datetime.now().strftime('_%Y_%m_%d_%H_%M_%S') if use_time else ''
            self._filename = os.path.abspath(os.path.expanduser(save_prefix) + stamp + '.json')
            folder = os.path.dirname(self._filename)
            if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
                raise ValueError('cannot write COCO results to %s: folder missing or not '
                                 'writable' % self._filename)
        self.masks = bool(masks)
        self.stats = self.segm_stats = None

    def reset(self):
        """Forget all detections."""
        self._current = 0
        self._rows = []  # per batch: image index, x, y, w, h, score, json category id
        self._segms = []  # per batch: the RLEs of its rows (with masks)

    def update(self, pred_bboxes, pred_labels, pred_scores, *args, pred_masks=None, **kwargs):
        """Add the detections of the next images of the dataset.

        Parameters
        ----------
        pred_bboxes : mx.nd.NDArray or numpy.ndarray, or a list of them
            ``B x N x 4`` boxes ``xmin, ymin, xmax, ymax`` (in the
            ``data_shape`` frame if given, else in original pixels).
        pred_labels : array, ``B x N`` or ``B x N x 1``
            Class ids; negative rows are padding.
        pred_scores : array, ``B x N`` or ``B x N x 1``
            Confidences.
        pred_masks : sequence, keyword only
            With ``masks``: per image of the batch (a list, or a ``B x N x H x W``
            array), the ``N`` detections' masks: an ``N x H x W`` array of full-image
            masks in original pixels (nonzero inside, as :func:`gluondet.masks.paste`
            gives) or a list (or object array) of ``N`` COCO RLEs; padding rows
            included. With per-device lists of boxes, a list of those, one per device.

        Further arguments (ground truths) are accepted and ignored: the
        ground truth comes from the json.
        """
        batches = as_batches(pred_bboxes, pred_labels, pred_scores)
        mask_batches = self._mask_batches(pred_masks, isinstance(pred_bboxes, (list, tuple)),
                                          len(batches))
        for (boxes, labels, scores), batch_masks in zip(batches, mask_batches):
            boxes = batch_boxes(boxes, 'pred_bboxes').astype(np.float64)
            labels = batch_values(labels, boxes.shape[:2], 'pred_labels')
            scores = batch_values(scores, boxes.shape[:2], 'pred_scores')
            first = self._current
            if first + len(boxes) > len(self._image_ids):
                raise ValueError('update() got more images (%d) than the dataset has (%d)'
                                 % (first + len(boxes), len(self._image_ids)))
            keep = self._kept(labels, scores)
            if batch_masks is not None:
                self._segms.append(self._rles(first, batch_masks, keep))
            boxes = self._to_original(boxes, first)
            self._current += len(boxes)
            self._rows.append(self._result_rows(first, boxes, labels, scores, keep))

    def _mask_batches(self, pred_masks, per_device, count):
        """Each batch's masks (None for each without ``masks``)."""
        if not self.masks:
            if pred_masks is not None:
                raise ValueError('update() got pred_masks, but the metric was made without '
                                 'masks=True')
            return [None] * count
        if pred_masks is None:
            raise ValueError('the metric was made with masks=True: update() needs pred_masks')
        batches = list(pred_masks) if per_device else [pred_masks]
        if len(batches) != count:
            raise ValueError('pred_masks has %d device entries for %d batches of boxes'
                             % (len(batches), count))
        return batches

    def _rles(self, first, batch_masks, keep):
        """RLEs of the kept detections of images ``first...`` (their rows' order)."""
        if len(batch_masks) != len(keep):
            raise ValueError('pred_masks holds %d images, the boxes %d'
                             % (len(batch_masks), len(keep)))
        rles = []
        for b, image_masks in enumerate(batch_masks):
            width, height = self._image_size(first + b)
            index, name = np.flatnonzero(keep[b]), 'pred_masks[%d]' % b
            listed = isinstance(image_masks, (list, tuple)) or (
                isinstance(image_masks, np.ndarray) and image_masks.dtype == object)
            if listed and all(isinstance(m, dict) for m in image_masks):
                if len(image_masks) != keep.shape[1]:
                    raise ValueError('%s: %d RLEs for %d boxes (one mask per box, padding '
                                     'included)' % (name, len(image_masks), keep.shape[1]))
                rles += [to_rle(image_masks[i], height, width, '%s[%d]' % (name, i))
                         for i in index]
                continue
            array = as_numpy(image_masks)
            if array.ndim != 3 or len(array) != keep.shape[1]:
                raise ValueError('%s: one mask per box (padding included): N x H x W with N = '
                                 '%d, got shape %s' % (name, keep.shape[1], array.shape))
            if array.shape[1:] != (height, width):
                raise ValueError('%s: %d x %d x %d masks, but image %r is %d x %d (height x '
                                 'width): masks cover the whole original image' % (
                                     name, *array.shape, self._image_ids[first + b], height,
                                     width))
            rles += encode(array[index])
        return rles

    def _to_original(self, boxes, first):
        """Boxes of images ``first...`` in their original pixels."""
        if self._data_shape is None:
            return boxes
        height, width = self._data_shape
        out = boxes.copy()
        for i in range(len(boxes)):
            orig_w, orig_h = self._image_size(first + i)
            if self._post_affine is not None:
                matrix = np.asarray(self._post_affine(orig_w, orig_h, width, height))
                corners = boxes[i].reshape(-1, 2) @ matrix[:, :2].T + matrix[:, 2]
                out[i] = corners.reshape(-1, 4)
            else:
                out[i] *= [orig_w / width, orig_h / height, orig_w / width, orig_h / height]
        return out

    def _image_size(self, idx):
        if hasattr(self.dataset, 'image_size'):
            return self.dataset.image_size(idx)
        entry = self._gt.image_entry(self._image_ids[idx])
        if 'width' not in entry or 'height' not in entry:
            raise ValueError('%s: image %r has no width/height, needed to rescale boxes from '
                             'data_shape' % (self._gt.source, self._image_ids[idx]))
        return entry['width'], entry['height']

    def _kept(self, labels, scores):
        """B x N: the detections kept (classes with a json category, scores high enough)."""
        labels = labels.astype(np.int64)
        known = (labels >= 0) & (labels < len(self._json_ids))
        known[known] = np.not_equal(self._json_ids[labels[known]], None)
        return known & (scores >= self._score_thresh)

    def _result_rows(self, first, boxes, labels, scores, keep):
        """N x 7 ``[image index, x, y, w, h, score, class id]`` of the kept detections."""
        labels = labels.astype(np.int64)
        image, index = np.nonzero(keep)
        return np.column_stack([image + first, bbox_xyxy_to_xywh(boxes[keep], offset=1),
                                scores[keep], labels[image, index]])

    def get(self):
        """Evaluate everything seen since ``reset``.

        Returns
        -------
        names : list of str
            GluonCV's: a summary title, the class names, the mean AP title. With
            ``masks``: for ``bbox`` then ``segm``, a summary title, ``<type>/<class>``
            and ``'<type> AP'``.
        values : list of str
            The pycocotools summary text, each class's AP@[.5:.95] and the
            mean, in percent with one decimal. The 12 numbers are in
            ``self.stats`` (a dict) afterwards, those of masks in ``self.segm_stats``.
        """
        if self._current != len(self._image_ids):
            warnings.warn('Recorded %d out of %d validation images, incomplete results'
                          % (self._current, len(self._image_ids)))
        detections = self._detections()
        if self._filename is not None:
            _write_results(self._filename, detections)
        results = [('bbox', evaluate_boxes(self._gt, detections))]
        if self.masks:
            results.append(('segm', evaluate_boxes(self._gt, detections, 'segm')))
        if self._filename is not None and self._cleanup:
            os.remove(self._filename)
        self.stats = summarize(*results[0][1][:2])
        if not self.masks:
            return self._report(results[0][1], self.stats, '~~~~ Summary metrics ~~~~\n', '',
                                '~~~~ MeanAP @ IoU=[{:.2f},{:.2f}] ~~~~\n'.format(
                                    IOU_THRESHOLDS[0], IOU_THRESHOLDS[-1]))
        self.segm_stats = summarize(*results[1][1][:2])
        names, values = [], []
        for (iou_type, result), stats in zip(results, (self.stats, self.segm_stats)):
            part = self._report(result, stats, '~~~~ Summary %s metrics ~~~~\n' % iou_type,
                                iou_type + '/', iou_type + ' AP')
            names += part[0]
            values += part[1]
        return names, values

    def _report(self, result, stats, title, prefix, mean_title):
        """Names and values of one evaluation: summary, per-class AP, mean AP."""
        precision, _, category_ids = result
        names, values = [title], [format_summary(stats)]
        for class_id, name in enumerate(self.dataset.classes):
            names.append(prefix + name)
            values.append('{:.1f}'.format(100 * _class_ap(precision, category_ids,
                                                          self._json_id(class_id))))
        names.append(mean_title)
        values.append('{:.1f}'.format(100 * stats['AP']))
        return names, values

    def _json_id(self, class_id):
        return self._json_ids[class_id] if class_id < len(self._json_ids) else None

    def _detections(self):
        """The collected rows as columns for the evaluator (ids as the json writes them)."""
        rows = np.concatenate(self._rows) if self._rows else np.zeros((0, 7))
        columns = {'image_id': object_array(self._image_ids)[rows[:, 0].astype(np.int64)],
                   'category_id': self._json_ids[rows[:, 6].astype(np.int64)],
                   'bbox': rows[:, 1:5], 'score': rows[:, 5]}
        if self.masks:
            columns['segmentation'] = object_array([r for part in self._segms for r in part])
        return columns


def _json_category_table(mapping):
    """Object array: class id -> json category id (an int or str as the json writes it;
    None where the class has none)."""
    if isinstance(mapping, dict):
        return object_array([mapping.get(i) for i in range(max(mapping, default=-1) + 1)])
    return object_array([None if json_id == -1 else json_id for json_id in mapping])


def _check_data_shape(data_shape):
    if not data_shape:
        return None
    if not isinstance(data_shape, (tuple, list)) or len(data_shape) != 2:
        raise ValueError('data_shape must be None or (height, width), got %r' % (data_shape,))
    return tuple(data_shape)


def _class_ap(precision, category_ids, json_id):
    """AP@[.5:.95] of one category (area all, 100 detections); NaN if it has none."""
    where = np.flatnonzero(category_ids == json_id)
    if not len(where):
        return float('nan')
    values = precision[:, :, where[0], 0, -1]
    values = values[values > -1]
    return float(np.mean(values)) if values.size else float('nan')


def _write_results(path, detections):
    """Write COCO results json atomically."""
    results = [{'image_id': image_id, 'category_id': category_id,
                'bbox': [float(v) for v in bbox], 'score': float(score)}
               for image_id, category_id, bbox, score in zip(
                   detections['image_id'].tolist(), detections['category_id'].tolist(),
                   detections['bbox'], detections['score'])]
    for result, rle in zip(results, detections.get('segmentation', ())):
        result['segmentation'] = rle
    tmp = '%s.tmp%d' % (path, os.getpid())
    with open(tmp, 'w') as f:
        json.dump(results, f)
    os.replace(tmp, path)
