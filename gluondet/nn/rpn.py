"""Region proposal network parts: anchors, the head, and the proposal layer."""
import numpy as np
from mxnet import autograd, gluon, init
from mxnet.gluon import nn

__all__ = ['rpn_base_anchors', 'RPNAnchorGenerator', 'RPNHead', 'RPNProposal']


def rpn_base_anchors(stride, sizes, ratios):
    """The anchors of one feature-map cell at the origin, in Faster R-CNN's order.

    For each ratio (height / width) the ``stride x stride`` reference window
    keeps its area with rounded sides ``w = round(sqrt(stride^2 / ratio))``,
    ``h = round(w * ratio)``; each such window is then scaled by ``size /
    stride`` for every size, about the window's centre ``(stride - 1) / 2``.
    Corners follow the inclusive-pixel convention (``xmax = xmin + w - 1``).
    These are the anchors of the original Faster R-CNN code, which GluonCV
    keeps; its pretrained RPNs expect exactly them.

    Parameters
    ----------
    stride : int
        Feature stride in input pixels.
    sizes : sequence of float
        Anchor sides (square root of the area) in pixels.
    ratios : sequence of float
        Height / width ratios.

    Returns
    -------
    numpy.ndarray
        float64 ``(len(ratios) * len(sizes)) x 4`` corner boxes, ratio-major.
    """
    centre = (stride - 1) / 2.0
    rows = []
    for ratio in ratios:
        width = np.round(np.sqrt(stride * stride / ratio))
        height = np.round(width * ratio)
        for size in sizes:
            w, h = width * size / stride, height * size / stride
            rows.append([centre - (w - 1) / 2, centre - (h - 1) / 2,
                         centre + (w - 1) / 2, centre + (h - 1) / 2])
    return np.array(rows, dtype=np.float64)


class RPNAnchorGenerator(gluon.HybridBlock):
    """The anchors of one RPN feature map, precomputed and cropped to the map.

    Parameters
    ----------
    stride : int
        Feature stride in input pixels.
    sizes : sequence of float
        Anchor sides in pixels (GluonCV: ``base_size * scales``).
    ratios : sequence of float
        Height / width ratios.
    alloc_size : (int, int)
        Largest feature map (H, W) the anchors are precomputed for.

    Input: a feature map ``B x C x H x W``. Output: ``1 x (H * W * A) x 4``
    corner anchors in input pixels, row-major over cells, then anchors.
    """

    def __init__(self, stride, sizes, ratios, alloc_size=(128, 128), **kwargs):
        super().__init__(**kwargs)
        base = rpn_base_anchors(stride, sizes, ratios)
        height, width = alloc_size
        shift_x, shift_y = np.meshgrid(np.arange(width) * stride, np.arange(height) * stride)
        shifts = np.stack([shift_x, shift_y, shift_x, shift_y], axis=-1)      # H x W x 4
        anchors = shifts[:, :, None, :] + base[None, None]                  # H x W x A x 4
        self._num_anchors = len(base)
        self.stride = stride
        self.anchors = self.params.get_constant(
            'anchors', anchors.reshape(1, 1, height, width, -1).astype(np.float32))

    @property
    def num_anchors(self):
        """Anchors per feature-map cell."""
        return self._num_anchors

    def hybrid_forward(self, F, x, anchors):
        return F.slice_like(anchors, x, axes=(2, 3)).reshape((1, -1, 4))


class RPNHead(gluon.HybridBlock):
    """3x3 convolution + ReLU, then per-anchor objectness logits and box offsets.

    Parameters
    ----------
    channels : int
        Channels of the 3x3 convolution.
    num_anchors : int
        Anchors per cell.

    Input ``B x C x H x W``. Outputs: ``scores`` ``B x (H * W * A) x 1`` logits and
    ``offsets`` ``B x (H * W * A) x 4``, in the anchor generator's order.
    """

    def __init__(self, channels, num_anchors, **kwargs):
        super().__init__(**kwargs)
        weight = init.Normal(0.01)
        with self.name_scope():
            self.conv1 = nn.HybridSequential()
            self.conv1.add(nn.Conv2D(channels, 3, 1, 1, weight_initializer=weight),
                           nn.Activation('relu'))
            self.score = nn.Conv2D(num_anchors, 1, weight_initializer=weight)
            self.loc = nn.Conv2D(num_anchors * 4, 1, weight_initializer=weight)

    def hybrid_forward(self, F, x):
        x = self.conv1(x)
        scores = self.score(x).transpose((0, 2, 3, 1)).reshape((0, -1, 1))
        offsets = self.loc(x).transpose((0, 2, 3, 1)).reshape((0, -1, 4))
        return scores, offsets


class RPNProposal(gluon.HybridBlock):
    """Proposals from anchors, objectness and offsets: decode, clip, drop small, NMS.

    Offsets are decoded against the anchors (center coding, stds 1, log-size
    offsets clipped at ``clip``), boxes are clipped to the padded input
    ``[0, W] x [0, H]``, boxes narrower or lower than ``min_size`` (inclusive
    pixels, ``xmax - xmin + 1``) get score -1, then the ``pre_nms`` best over
    all levels go through class-agnostic NMS at ``nms_thresh`` and the
    ``post_nms`` best are kept (rows of -1 when fewer survive, or when there are
    fewer anchors). Gradients do not flow through proposals.

    Parameters
    ----------
    nms_thresh : float
    train_pre_nms, train_post_nms, test_pre_nms, test_post_nms : int
        Candidates before and proposals after NMS, in training and inference.
    min_size : float
    clip : float or None
        Largest log-size offset (GluonCV's COCO models: 4.14).

    Inputs: ``image`` (only its shape is used: ``B x 3 x H x W``), then per
    level ``anchors`` ``1 x N_l x 4`` (corner), ``scores`` ``B x N_l x 1``
    logits, ``offsets`` ``B x N_l x 4``, flattened as one list: anchors of all
    levels, then scores, then offsets. Outputs: ``scores`` ``B x P x 1``
    (sigmoid) and ``boxes`` ``B x P x 4`` corner boxes, best first.
    """

    def __init__(self, nms_thresh=0.7, train_pre_nms=12000, train_post_nms=2000,
                 test_pre_nms=6000, test_post_nms=300, min_size=16, clip=None, **kwargs):
        super().__init__(**kwargs)
        self.nms_thresh = nms_thresh
        self.train_pre_nms, self.train_post_nms = max(1, train_pre_nms), max(1, train_post_nms)
        self.test_pre_nms, self.test_post_nms = max(1, test_pre_nms), max(1, test_post_nms)
        self.min_size = min_size
        self.clip = -1 if clip is None else clip

    def counts(self, training):
        """``(pre_nms, post_nms)`` of training or inference; post never exceeds pre."""
        if training:
            return self.train_pre_nms, min(self.train_post_nms, self.train_pre_nms)
        return self.test_pre_nms, min(self.test_post_nms, self.test_pre_nms)

    def hybrid_forward(self, F, image, *levels):
        num = len(levels) // 3
        anchors, scores, offsets = levels[:num], levels[num:2 * num], levels[2 * num:]
        pre_nms, post_nms = self.counts(autograd.is_training())
        with autograd.pause():
            candidates = [self._candidates(F, image, a, F.stop_gradient(s), F.stop_gradient(o))
                          for a, s, o in zip(anchors, scores, offsets)]
            # -1 rows so that small images, with fewer anchors than post_nms, still give post_nms
            filler = F.broadcast_axis(F.slice_axis(candidates[0], axis=1, begin=0, end=1) * 0 - 1,
                                      axis=1, size=post_nms)
            candidates = F.concat(*(candidates + [filler]), dim=1)
            kept = F.contrib.box_nms(candidates, overlap_thresh=self.nms_thresh, topk=pre_nms,
                                     coord_start=1, score_index=0, id_index=-1,
                                     force_suppress=True)
            kept = F.slice_axis(kept, axis=1, begin=0, end=post_nms)
        return (F.slice_axis(kept, axis=-1, begin=0, end=1),
                F.slice_axis(kept, axis=-1, begin=1, end=None))

    def _candidates(self, F, image, anchors, scores, offsets):
        """``B x N x 5`` rows ``(score, box)``; score -1 for boxes under ``min_size``."""
        boxes = F.contrib.box_decode(offsets, anchors, 1.0, 1.0, 1.0, 1.0, clip=self.clip,
                                     format='corner')
        size = F.slice_axis(F.shape_array(image), axis=0, begin=2, end=None)   # H, W
        limit = F.cast(F.tile(F.reverse(size, axis=0), reps=(2,)), 'float32').reshape((1, 1, 4))
        boxes = F.broadcast_minimum(F.maximum(boxes, 0.0), limit)
        xmin, ymin, xmax, ymax = F.split(boxes, axis=-1, num_outputs=4)
        small = ((xmax - xmin + 1) < self.min_size) + ((ymax - ymin + 1) < self.min_size)
        scores = F.where(small, F.ones_like(scores) * -1, F.sigmoid(scores))
        boxes = F.where(F.broadcast_like(small, boxes), F.ones_like(boxes) * -1, boxes)
        return F.concat(scores, boxes, dim=-1)
