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
from mxnet.gluon.data import DataLoader
from tqdm import tqdm

from .voc import VOC07MApMetric

__all__ = ['evaluate', 'evaluate_voc07', 'voc_result']


def _batches(dataset, size, num_workers):
    """Lists of ``size`` items of ``dataset`` in order (the last may be shorter)."""
    if num_workers > 0:
        yield from DataLoader(dataset, size, shuffle=False, last_batch='keep', batchify_fn=list,
                              num_workers=num_workers)
        return
    for start in range(0, len(dataset), size):     # a DataLoader would only add a gc.collect()
        yield [dataset[i] for i in range(start, min(start + size, len(dataset)))]


def evaluate(predictor, dataset, metrics, batch_size=None, progress=False, num_workers=0):
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
    """
    size = predictor.batch_size(batch_size)
    batches = _batches(dataset.transform(predictor.transform), size, num_workers)
    with tqdm(total=len(dataset), disable=not progress, unit='image',
              desc='evaluate (%s)' % predictor.backend) as bar:
        for samples in batches:
            for detections, (_, label, _) in zip(predictor.detect_samples(samples), samples):
                label = label[None]
                for metric in metrics:
                    metric.update(detections.boxes[None], detections.ids[None],
                                  detections.scores[None], label[:, :, :4], label[:, :, 4:5],
                                  label[:, :, 5:6])
            bar.update(len(samples))


def voc_result(metric):
    """``{'AP/<class>': AP, ..., 'mAP': mean}`` of a VOC metric with class names."""
    names, values = metric.get()
    result = {'AP/' + name: float(value) for name, value in zip(names[:-1], values[:-1])}
    result['mAP'] = float(values[-1])
    return result


def evaluate_voc07(predictor, dataset, batch_size=None, progress=False, num_workers=0,
                   metrics=()):
    """VOC07 mAP (IoU 0.5, 11-point) of ``predictor`` on ``dataset``, by :func:`evaluate`.

    ``metrics`` are more metrics updated in the same pass. Returns :func:`voc_result`.
    """
    voc = VOC07MApMetric(iou_thresh=0.5, class_names=predictor.classes)
    evaluate(predictor, dataset, [voc] + list(metrics), batch_size, progress, num_workers)
    return voc_result(voc)
