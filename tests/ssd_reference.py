"""The SSD validation loop that `gluondet.metrics.evaluation.evaluate` replaced, kept as the
tests' reference: a fixed-size val loader and the net's boxes scaled back to original pixels."""
import mxnet as mx
from mxnet.gluon.data import DataLoader

from gluondet.data.batchify import Pad, Stack, Tuple
from gluondet.data.preprocess import SSDValTransform
from gluondet.engine import split_batch


def val_loader(task):
    """Batches ``(images, labels, sizes)`` of an `SSDTask`'s val data for `detect_batches`."""
    dataset = task._val.transform(SSDValTransform(task.width, task.height))
    return DataLoader(dataset, task.val_batch_size, shuffle=False, last_batch='keep',
                      batchify_fn=Tuple(Stack(), Pad(pad_val=-1), Stack()),
                      num_workers=task.num_workers)


def detect_batches(net, loader, ctx_list, input_size):
    """Yield ``(ids, scores, boxes, labels)`` per context part, boxes in original pixels.

    ``loader`` yields ``(images, labels, sizes)`` as `SSDValTransform` makes them;
    ``input_size`` is the network input ``(width, height)``.
    """
    width, height = input_size
    for batch in loader:
        for images, labels, sizes in split_batch(batch, ctx_list):
            ids, scores, boxes = net(images)
            scale = mx.nd.stack(sizes[:, 1] / width, sizes[:, 0] / height,
                                sizes[:, 1] / width, sizes[:, 0] / height, axis=1)
            valid = mx.nd.broadcast_like(ids >= 0, boxes)  # -1 padding rows stay -1
            boxes = mx.nd.where(valid, mx.nd.broadcast_mul(boxes, scale.expand_dims(1)), boxes)
            yield ids, scores, boxes, labels
