"""Turn the arguments of a metric's ``update`` into per-batch numpy arrays.

GluonCV's metrics take a batch as ``B x N x 4`` boxes with ``B x N`` (or
``B x N x 1``) labels and scores padded with -1, or a list of such batches
(one per device). A 2-D box array is taken as a batch of one image.
"""
import numpy as np


def as_numpy(array):
    """Return an mx.nd.NDArray (or anything array-like) as a numpy array."""
    if hasattr(array, 'asnumpy'):
        return array.asnumpy()
    return np.asarray(array)


def as_batches(*arrays):
    """Pair up the per-device pieces of several update arguments.

    Parameters
    ----------
    *arrays : array or list of arrays or None
        Each argument is one array (a whole batch) or a list/tuple of arrays
        (one batch per device); ``None`` (or a list holding ``None``) stands
        for an argument that was not given.

    Returns
    -------
    list of tuple
        One tuple per batch, holding each argument's piece (or ``None``).
    """
    lengths = {len(a) for a in arrays if isinstance(a, (list, tuple))}
    if not lengths:
        return [arrays]
    if len(lengths) > 1:
        raise ValueError('update() got lists of different lengths %s: pass one array '
                         'or one list entry per device for every argument' % sorted(lengths))
    count = lengths.pop()
    pieces = []
    for array in arrays:
        if isinstance(array, (list, tuple)):
            pieces.append(array)
        elif array is None:
            pieces.append([None] * count)
        else:
            raise ValueError('update() got a list for some arguments and a single array '
                             '(shape %s) for another: pass all as lists or none'
                             % (np.shape(as_numpy(array)),))
    return list(zip(*pieces))


def batch_boxes(boxes, name):
    """``boxes`` as a ``B x N x 4`` array (a 2-D ``N x 4`` array is one image)."""
    boxes = as_numpy(boxes)
    if boxes.ndim == 2:
        boxes = boxes[None]
    if boxes.ndim != 3 or boxes.shape[2] < 4:
        raise ValueError('%s must have shape B x N x 4 (or N x 4 for one image), got %s'
                         % (name, boxes.shape))
    return boxes[:, :, :4]


def batch_values(values, shape, name):
    """``values`` (labels, scores, flags) reshaped to ``shape`` = ``(B, N)``."""
    values = as_numpy(values)
    if values.size != shape[0] * shape[1]:
        raise ValueError('%s has shape %s but the boxes are %d x %d: expected B x N or '
                         'B x N x 1' % (name, values.shape, shape[0], shape[1]))
    return values.reshape(shape)


def detection_batches(pred_bboxes, pred_labels, pred_scores, gt_bboxes, gt_labels,
                      gt_difficults=None):
    """The batches of a VOC-style ``update``'s arguments, checked, one tuple each:
    ``(boxes B x N x 4, labels B x N, scores B x N, gt_boxes B x M x 4, gt_labels B x M,
    difficult B x M bool)``."""
    for batch in as_batches(pred_bboxes, pred_labels, pred_scores, gt_bboxes, gt_labels,
                            gt_difficults):
        boxes = batch_boxes(batch[0], 'pred_bboxes')
        shape = boxes.shape[:2]
        labels = batch_values(batch[1], shape, 'pred_labels')
        scores = batch_values(batch[2], shape, 'pred_scores')
        gt_boxes = batch_boxes(batch[3], 'gt_bboxes')
        if gt_boxes.shape[0] != shape[0]:
            raise ValueError('pred_bboxes hold %d images but gt_bboxes %d'
                             % (shape[0], gt_boxes.shape[0]))
        gt_shape = gt_boxes.shape[:2]
        gt_labels = batch_values(batch[4], gt_shape, 'gt_labels')
        difficult = (np.zeros(gt_shape, dtype=bool) if batch[5] is None else
                     batch_values(batch[5], gt_shape, 'gt_difficults') != 0)
        yield boxes, labels, scores, gt_boxes, gt_labels, difficult
