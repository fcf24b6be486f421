"""The one evaluation loop: a predictor over a dataset, into metrics.

The validation of training (every task's ``validate``) and ``gluondet evaluate`` (every
backend: Gluon, symbol, ONNX Runtime, TensorRT) call :func:`evaluate` with a
:class:`gluondet.deploy.Predictor`, so a number printed during training is the number
the deployed model gets. The loop knows the predictor only by what it does (this module
imports nothing of ``deploy``): ``transform`` (its validation preprocessing,
``(image, label) -> (data, label, original size)``), ``batch_size(n)``,
``detect_samples(samples)`` (one :class:`~gluondet.deploy.Detections` per sample, in
original pixels) and ``backend``.
"""
import numpy as np
from mxnet.gluon.data import DataLoader
from tqdm import tqdm

from ..helper_signals import end_loader_workers

from .voc import VOC07MApMetric, VOCMApMetric

__all__ = ['evaluate', 'evaluate_voc', 'evaluate_voc07', 'voc_metric', 'voc_result', 'AP_MODES']

AP_MODES = ('11point', 'area')      # VOC07's 11 recall points; the area under the PR curve


def _batches(dataset, starts, size, num_workers):
    """Lists of the ``size`` items of ``dataset`` from each of ``starts``, in that order."""
    indices = [list(range(s, min(s + size, len(dataset)))) for s in starts]
    if num_workers > 0:
        loader = DataLoader(dataset, batch_sampler=indices, batchify_fn=list,
                            num_workers=num_workers)
        try:
            yield from loader
        finally:      # also when the caller stops early (a signal abandons a validation)
            end_loader_workers(loader)
        return
    for batch in indices:     # a DataLoader would only add a gc.collect()
        yield [dataset[i] for i in batch]


def evaluate(predictor, dataset, metrics, batch_size=None, progress=False, num_workers=0,
             group=None):
    """Run ``predictor`` on every item of ``dataset`` and update each metric with it.

    Parameters
    ----------
    predictor : Predictor
    dataset : DetectionDataset
        Items ``(image, label)``, label ``N x 6`` in the image's pixels, class
        ids in the predictor's classes.
    metrics : list
        Metrics with GluonCV's ``update(pred_bboxes, pred_labels, pred_scores,
        gt_bboxes, gt_labels, gt_difficults)``, updated one image at a time in
        the dataset's order.
    batch_size : int, optional
        See :meth:`Predictor.batch_size`.
    progress : bool
        Show a progress bar.
    num_workers : int
        Processes reading and preprocessing images (0: in this process).
    group : Runtime, optional
        The processes of a distributed training (``rank``, ``world_size``,
        ``allgather(obj)``, ``beat(what)``), all calling this at once: each
        predicts every ``world_size``-th batch, the detections are gathered, and every
        process updates the metrics with all of them in the dataset's order, batched as
        one process would (the metrics equal one process's on the same weights).
    """
    size = predictor.batch_size(batch_size)
    data = dataset.transform(_ImageAndLabel(predictor.transform))
    masked = any(getattr(metric, 'masks', False) for metric in metrics)
    starts = range(0, len(dataset), size)
    rank, world = (0, 1) if group is None else (group.rank, group.world_size)
    mine = starts[rank::world]
    results = []
    with tqdm(total=len(dataset), disable=not progress, unit='image',
              desc='evaluate (%s)' % predictor.backend) as bar:
        for b, samples in enumerate(_batches(data, mine, size, num_workers)):
            pairs = [(_with_segmentations(detections, original) if masked else detections,
                      label) for detections, (_, label, original)
                     in zip(predictor.detect_samples(samples), samples)]
            if world == 1:
                _update(metrics, pairs)
            else:
                results.append(pairs)
                group.beat('validation: batch %d of %d' % (b + 1, len(mine)))
            bar.update(len(samples))
    if world > 1:
        gathered = group.allgather(results)
        for b in range(len(starts)):
            _update(metrics, gathered[b % world][b // world])


class _ImageAndLabel:
    """The predictor's transform of an item's image and label (the masks of a dataset that
    has them stay out: a metric reads its ground truth from the dataset)."""

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, image, label, *masks):
        return self.transform(image, label)


def _with_segmentations(detections, size):
    """The detections with their ``masks`` (grids over their boxes) as ``segmentation``, the
    COCO RLE of each mask pasted into the ``[height, width]`` original image (what is
    gathered from the processes of a distributed validation is those, not the grids)."""
    height, width = (int(v) for v in size)
    rles = np.empty(len(detections), object)
    rles[:] = detections.segmentations((width, height))
    return detections.replace(masks=None, segmentation=rles)


def _update(metrics, pairs):
    for detections, label in pairs:
        label = label[None]
        for metric in metrics:
            extra = ({'pred_masks': [detections.segmentation]} if getattr(metric, 'masks', False)
                     else {})
            metric.update(detections.boxes[None], detections.ids[None],
                          detections.scores[None], label[:, :, :4], label[:, :, 4:5],
                          label[:, :, 5:6], **extra)


def voc_result(metric):
    """``{'AP/<class>': AP, ..., 'mAP': mean}`` of a VOC metric with class names."""
    names, values = metric.get()
    result = {'AP/' + name: float(value) for name, value in zip(names[:-1], values[:-1])}
    result['mAP'] = float(values[-1])
    return result


def evaluate_voc07(predictor, dataset, batch_size=None, progress=False, num_workers=0,
                   metrics=(), group=None):
    """VOC07 mAP (IoU 0.5, 11-point) of ``predictor`` on ``dataset``, by :func:`evaluate`.

    ``metrics`` are more metrics updated in the same pass. Returns :func:`voc_result`.
    """
    return evaluate_voc(predictor, dataset, batch_size, progress, num_workers, metrics, group)


def voc_metric(classes, iou_thresh=0.5, ap='11point'):
    """The VOC metric of `evaluate_voc`: ``ap`` '11point' (VOC07, TAO's SAMPLE) or 'area'
    (the area under the PR curve, VOC2010+, TAO's INTEGRATE) at ``iou_thresh``."""
    if ap not in AP_MODES:
        raise ValueError('ap must be one of %s, got %r' % (', '.join(AP_MODES), ap))
    metric = VOC07MApMetric if ap == '11point' else VOCMApMetric
    return metric(iou_thresh=iou_thresh, class_names=classes)


def evaluate_voc(predictor, dataset, batch_size=None, progress=False, num_workers=0,
                 metrics=(), group=None, iou_thresh=0.5, ap='11point', voc=None):
    """VOC mAP at ``iou_thresh`` with ``ap`` (see `voc_metric`); otherwise `evaluate_voc07`.

    ``voc`` is the VOC metric to fill (default a new `voc_metric` of the predictor's
    classes), for a caller that reads more of it afterwards (its curves)."""
    if voc is None:
        voc = voc_metric(predictor.classes, iou_thresh, ap)
    evaluate(predictor, dataset, [voc] + list(metrics), batch_size, progress, num_workers,
             group)
    return voc_result(voc)
