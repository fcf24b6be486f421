"""Pair the detections of two runs of a detector (Gluon, ONNX, ...) and report the worst gaps,
and give a detector random weights that detect, to check an export without trained weights."""
from collections import namedtuple

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

from ..nn.roi import roi_rows
from .postprocess import by_kind, postprocess_of
from .symbol import ssd_body

__all__ = ['DetectionComparison', 'compare_detections', 'MaskComparison', 'compare_masks',
           'MaskAgreement', 'mask_agreement', 'detecting_random_weights', 'DETECTING']

#: {post-processing kind: ``(net, x, class_std, max_gap)``, scaling its predictors for
#: `detecting_random_weights`} (:mod:`gluondet.deploy.postprocess`)
DETECTING = {}


class DetectionComparison(namedtuple('DetectionComparison', [
        'compared', 'missing_in_a', 'missing_in_b', 'max_score_diff', 'max_box_diff',
        'score_tol', 'box_tol'])):
    """What :func:`compare_detections` found.

    compared : pairs with at least one side scoring ``>= min_score``.
    missing_in_a, missing_in_b : detections scoring ``>= min_score`` in one output with
    no detection of the same class left to pair in the other.
    max_score_diff, max_box_diff : largest ``|score difference|`` and largest box
    coordinate difference (pixels) over the compared pairs (0 when none).
    score_tol, box_tol : the tolerances ``ok`` checks.
    """

    __slots__ = ()

    @property
    def ok(self):
        """Nothing missing and every compared pair within the tolerances."""
        return (not self.missing_in_a and not self.missing_in_b
                and self.max_score_diff <= self.score_tol and self.max_box_diff <= self.box_tol)

    def __str__(self):
        return ('%d detections compared, %d missing in a, %d missing in b, max score diff %.3g '
                '(tol %.3g), max box diff %.3g px (tol %.3g)' % (
                    self.compared, self.missing_in_a, self.missing_in_b, self.max_score_diff,
                    self.score_tol, self.max_box_diff, self.box_tol))


def _as_numpy(outputs):
    if len(outputs) and hasattr(outputs[0], 'boxes'):    # one Detections per image
        k = max(1, max(len(d.ids) for d in outputs))
        ids, scores, boxes = (np.full((len(outputs), k, n), -1.) for n in (1, 1, 4))
        for i, d in enumerate(outputs):
            n = len(d.ids)
            ids[i, :n, 0], scores[i, :n, 0], boxes[i, :n] = d.ids, d.scores, d.boxes
        return ids[..., 0], scores[..., 0], boxes
    ids, scores, boxes = (np.asarray(o.asnumpy() if hasattr(o, 'asnumpy') else o, np.float64)
                          for o in outputs)
    batch = ids.shape[0]
    return ids.reshape(batch, -1), scores.reshape(batch, -1), boxes.reshape(batch, -1, 4)


def compare_detections(a, b, min_score=0.05, score_tol=1e-4, box_tol=1e-2):
    """Pair two detectors' outputs on the same batch and measure their differences.

    Within each image and class, detections are paired greedily, closest first
    (distance: the larger of score difference / ``score_tol`` and largest box
    coordinate difference / ``box_tol``). Every detection scoring ``>= min_score`` in
    either output must be paired; its pair's differences are what is reported.

    Parameters
    ----------
    a, b : (ids, scores, boxes) or list of Detections
        Detector outputs (NDArray or numpy): ``B x K x 1``, ``B x K x 1``, ``B x K x 4``,
        rows with a negative id ignored; ``K`` may differ between ``a`` and ``b``. Or
        the :class:`~gluondet.deploy.predictor.Detections` of each image.
    min_score : float
        Detections below this score need no partner.
    score_tol, box_tol : float
        Tolerances of :attr:`DetectionComparison.ok`.

    Returns
    -------
    DetectionComparison
    """
    return _paired(a, b, min_score, score_tol, box_tol)[0]


def _paired(a, b, min_score, score_tol, box_tol):
    """:func:`compare_detections`' result, and its compared pairs ``(image, row in a, row
    in b)``."""
    a, b = _as_numpy(a), _as_numpy(b)
    if a[0].shape[0] != b[0].shape[0]:
        raise ValueError('compare_detections: batches of %d and %d images'
                         % (a[0].shape[0], b[0].shape[0]))
    pairs = []
    missing_a = missing_b = 0
    max_score = max_box = 0.0
    for image in range(a[0].shape[0]):
        ids_a, ids_b = a[0][image], b[0][image]
        for cls in np.union1d(ids_a[ids_a >= 0], ids_b[ids_b >= 0]):
            ia, ib = np.flatnonzero(ids_a == cls), np.flatnonzero(ids_b == cls)
            score_a, score_b = a[1][image, ia], b[1][image, ib]
            score_diff = np.abs(score_a[:, None] - score_b[None, :])
            box_diff = np.abs(a[2][image, ia][:, None] - b[2][image, ib][None, :]).max(
                axis=-1, initial=0)
            cost = np.maximum(score_diff / score_tol, box_diff / box_tol)
            free_a = np.ones(len(ia), bool)
            free_b = np.ones(len(ib), bool)
            for flat in np.argsort(cost, axis=None, kind='stable'):
                i, j = divmod(int(flat), len(ib))
                if not (free_a[i] and free_b[j]):
                    continue
                free_a[i] = free_b[j] = False
                if score_a[i] >= min_score or score_b[j] >= min_score:
                    pairs.append((image, ia[i], ib[j]))
                    max_score = max(max_score, score_diff[i, j])
                    max_box = max(max_box, box_diff[i, j])
            missing_in_b = int(np.sum(free_a & (score_a >= min_score)))
            missing_in_a = int(np.sum(free_b & (score_b >= min_score)))
            missing_b += missing_in_b
            missing_a += missing_in_a
    result = DetectionComparison(len(pairs), missing_a, missing_b, float(max_score),
                                 float(max_box), score_tol, box_tol)
    return result, pairs


class MaskComparison(namedtuple('MaskComparison', [
        'detections', 'max_mask_diff', 'mean_iou', 'min_iou', 'mask_tol'])):
    """What :func:`compare_masks` found.

    detections : the :class:`DetectionComparison` of the two outputs (whose compared pairs'
    masks are compared).
    max_mask_diff : largest ``|probability difference|`` over the pairs' ``M x M`` masks.
    mean_iou, min_iou : IoU of the pairs' masks pasted into the input
    (:func:`gluondet.masks.paste`, at the threshold), their mean and the least (1 without
    pairs; two empty masks agree: 1).
    mask_tol : the tolerance ``ok`` checks.
    """

    __slots__ = ()

    @property
    def ok(self):
        """The detections are ``ok`` and every pair's masks within ``mask_tol``."""
        return self.detections.ok and self.max_mask_diff <= self.mask_tol

    def __str__(self):
        return '%s; masks: max diff %.3g (tol %.3g), IoU mean %.4f, min %.4f' % (
            self.detections, self.max_mask_diff, self.mask_tol, self.mean_iou, self.min_iou)


def compare_masks(a, b, image_size, min_score=0.05, score_tol=1e-4, box_tol=1e-2,
                  mask_tol=1e-4, threshold=0.5):
    """Pair two Mask R-CNN outputs as :func:`compare_detections` does and compare the
    pairs' masks.

    Parameters
    ----------
    a, b : (ids, scores, boxes, masks)
        Outputs of a batch (NDArray or numpy), ``masks`` ``B x K x M x M`` probabilities
        over each box (input pixels).
    image_size : (int, int)
        ``(width, height)`` of the input, where the masks are pasted for their IoU.
    min_score, score_tol, box_tol
        As :func:`compare_detections`.
    mask_tol : float
        Tolerance of :attr:`MaskComparison.ok` on the probabilities.
    threshold : float
        Pasted masks are where the probability is above it.

    Returns
    -------
    MaskComparison
    """
    detections, pairs = _paired(a[:3], b[:3], min_score, score_tol, box_tol)
    max_diff, ious = _mask_pairs(a, b, pairs, image_size, threshold)
    ious = ious if len(ious) else [1.0]
    return MaskComparison(detections, max_diff, float(np.mean(ious)), float(np.min(ious)),
                          mask_tol)


class MaskAgreement(namedtuple('MaskAgreement', [
        'reference', 'matched', 'mean_box_iou', 'mean_iou', 'min_iou'])):
    """What :func:`mask_agreement` found.

    reference : the reference detections scoring ``>= min_score``.
    matched : those with a detection of their class in the other output at a box IoU of
    ``iou_thresh`` or more.
    mean_box_iou : the matched pairs' mean box IoU.
    mean_iou, min_iou : their masks' IoU pasted into the input, mean and least (1 without
    pairs).
    """

    __slots__ = ()

    def __str__(self):
        return ('%d of %d reference detections matched (box IoU mean %.4f); masks: IoU mean '
                '%.4f, min %.4f' % (self.matched, self.reference, self.mean_box_iou,
                                    self.mean_iou, self.min_iou))


def mask_agreement(reference, other, image_size, min_score=0.3, iou_thresh=0.5, threshold=0.5):
    """How far another run of a Mask R-CNN (an int8 model) agrees with a reference run
    (the float network), where their detections differ beyond :func:`compare_masks`'
    tolerances: each reference detection scoring ``>= min_score``, best first, is matched
    to the other's unmatched detection of its class with the largest box IoU, if at least
    ``iou_thresh``; the matched pairs' masks are pasted into the input (``image_size``,
    ``(width, height)``; kept above ``threshold``) and compared by IoU.

    Parameters
    ----------
    reference, other : (ids, scores, boxes, masks)
        As :func:`compare_masks`' outputs.

    Returns
    -------
    MaskAgreement
    """
    (ids_r, scores_r, boxes_r), (ids_o, _, boxes_o) = (_as_numpy(o[:3]) for o in (reference,
                                                                                  other))
    pairs, box_ious = [], []
    for image in range(ids_r.shape[0]):
        free = ids_o[image] >= 0
        for row in np.argsort(-scores_r[image], kind='stable'):
            if ids_r[image, row] < 0 or scores_r[image, row] < min_score:
                continue
            candidates = np.flatnonzero(free & (ids_o[image] == ids_r[image, row]))
            if not len(candidates):
                continue
            ious = _box_iou(boxes_r[image, row], boxes_o[image, candidates])
            best = int(np.argmax(ious))
            if ious[best] >= iou_thresh:
                free[candidates[best]] = False
                pairs.append((image, row, candidates[best]))
                box_ious.append(ious[best])
    count = int(sum((ids_r >= 0).ravel() & (scores_r >= min_score).ravel()))
    ious = _mask_pairs(reference, other, pairs, image_size, threshold)[1]
    ious = ious if len(ious) else [1.0]
    return MaskAgreement(count, len(pairs), float(np.mean(box_ious or [1.0])),
                         float(np.mean(ious)), float(np.min(ious)))


def _box_iou(box, boxes):
    """IoU of one corner box with ``N x 4`` boxes (areas without the +1)."""
    low, high = np.maximum(box[:2], boxes[:, :2]), np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=1)
    areas = np.prod(np.clip(boxes[:, 2:] - boxes[:, :2], 0, None), axis=1)
    union = np.prod(np.clip(box[2:] - box[:2], 0, None)) + areas - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def _mask_pairs(a, b, pairs, image_size, threshold):
    """Largest probability difference of the ``(image, row in a, row in b)`` pairs'
    masks, and the IoU of each pair's masks pasted into the input."""
    from ..masks import paste
    (_, _, boxes_a), (_, _, boxes_b) = _as_numpy(a[:3]), _as_numpy(b[:3])
    masks_a, masks_b = (np.asarray(m.asnumpy() if hasattr(m, 'asnumpy') else m, np.float32)
                        for m in (a[3], b[3]))
    max_diff, ious = 0.0, []
    for start in range(0, len(pairs), 32):      # 32 pasted pairs at once bound the memory
        image, rows_a, rows_b = np.array(pairs[start:start + 32]).reshape(-1, 3).T
        one, other = masks_a[image, rows_a], masks_b[image, rows_b]
        max_diff = max(max_diff, float(np.abs(one - other).max()))
        pasted = [paste(m, boxes[image, rows].astype(np.float32), image_size, threshold)
                  .reshape(len(image), -1) for m, boxes, rows in ((one, boxes_a, rows_a),
                                                                  (other, boxes_b, rows_b))]
        inter = (pasted[0] & pasted[1]).sum(axis=1)
        union = (pasted[0] | pasted[1]).sum(axis=1)
        ious.extend(np.where(union > 0, inter / np.maximum(union, 1), 1.0))
    return max_diff, np.array(ious)


def detecting_random_weights(net, x, seed=0, class_std=2.0, max_gap=6.0):
    """Initialize a detector with random weights that give many overlapping detections on ``x``.

    Random weights alone give degenerate features and a handful of huge boxes, which
    compare nothing. Here each BatchNorm's statistics become the mean square of its
    input on ``x[:1]`` (mean 0, layer after layer), with a random gamma and a beta of 1
    (with beta 0 the random network amplifies float32 rounding about 1000x, in MXNet
    and ONNX Runtime alike). The predictors are then scaled to logits of std
    ``class_std`` and box offsets of std 1 (at most 4: boxes near their anchors).

    The logits of an anchor stay within ``max_gap`` of its best one (scores below
    about 0.998): nearer 1, float32 scores of neighbouring anchors differ by the few
    ulps by which two runtimes' softmax roundings differ, and the two can then order
    them, hence resolve their overlap in NMS, differently.

    How the predictors are scaled is the post-processing kind's
    (:data:`DETECTING`): :func:`softmax_detecting`,
    :func:`sigmoid_detecting`, :func:`rcnn_detecting`, :func:`mask_rcnn_detecting`,
    :func:`yolo3_detecting`, :func:`center_net_detecting`.

    Parameters
    ----------
    net : DetectionNet (:mod:`gluondet.model_zoo`)
        Of a ``postprocess_kind`` deploy knows; not initialized yet; not hybridized.
    x : NDArray
        A normalized input batch at the network's data shape.
    seed : int
        Seeds MXNet's and numpy's draws: the same weights whatever ran before.
    """
    fit = DETECTING[postprocess_of(net).kind]     # an unknown kind fails first
    mx.random.seed(seed)
    net.initialize()
    rng = np.random.RandomState(seed)

    def set_statistics(block, inputs):
        mean_square = (inputs[0] ** 2).mean(axis=(0, 2, 3))
        block.running_mean.set_data(mx.nd.zeros_like(mean_square))
        block.running_var.set_data(mean_square)
        block.beta.set_data(mx.nd.ones_like(mean_square))
        block.gamma.set_data(mx.nd.array(rng.uniform(0.5, 1.5, mean_square.shape)))

    net(x[:1])  # shapes of the deferred parameters
    hooks = []
    net.apply(lambda block: hooks.append(block.register_forward_pre_hook(set_statistics))
              if isinstance(block, nn.BatchNorm) else None)
    net(x[:1])
    for hook in hooks:
        hook.detach()

    fit(net, x, class_std, max_gap)


@by_kind(DETECTING, 'softmax_nms')
def softmax_detecting(net, x, class_std, max_gap):
    """The ``softmax_nms`` part of :func:`detecting_random_weights` (SSD's): logits of std
    ``class_std``, an anchor's within ``max_gap`` of its best; box offsets of std 1, at most 4.
    """
    symbol = ssd_body(net, x.shape[2:])[0]
    cls_preds, box_preds = (o.asnumpy() for o in gluon.SymbolBlock(
        symbol, mx.sym.var('data', dtype='float32'), params=net.collect_params())(x))
    top2 = np.sort(cls_preds, axis=-1)[..., -2:]
    class_factor = min(class_std / cls_preds.std(), max_gap / (top2[..., 1] - top2[..., 0]).max())
    box_factor = min(1 / box_preds.std(), 4 / np.abs(box_preds).max())
    for predictors, factor in ((net.class_predictors, class_factor),
                               (net.box_predictors, box_factor)):
        for conv in predictors:
            conv.weight.set_data(conv.weight.data() * float(factor))
            conv.bias.set_data(conv.bias.data() * float(factor))


def _fit(layer, outputs, std, largest=None, gap=None):
    """Rescale a dense or convolution layer: its ``outputs`` (``samples x units``) become
    ``factor * (outputs - their mean per unit)``, of standard deviation ``std``, or less
    to keep every value within ``largest`` of 0 and the two largest of a sample within
    ``gap``."""
    mean = outputs.mean(axis=0)
    centered = outputs - mean
    factor = std / centered.std()
    if largest is not None:
        factor = min(factor, largest / np.abs(centered).max())
    if gap is not None:
        top2 = np.sort(centered, axis=-1)[:, -2:]
        factor = min(factor, gap / (top2[:, 1] - top2[:, 0]).max())
    layer.weight.set_data(layer.weight.data() * float(factor))
    layer.bias.set_data((layer.bias.data() - mx.nd.array(mean, ctx=layer.bias.data().context))
                        * float(factor))


@by_kind(DETECTING, 'sigmoid_topk_nms')
def sigmoid_detecting(net, x, class_std, max_gap):
    """The ``sigmoid_topk_nms`` part of :func:`detecting_random_weights` (RetinaNet's).

    The heads' convolutions get He (MSRA) initial weights, so their outputs keep the scale
    of the pyramid's (the paper's N(0, 0.01) shrinks them a hundredfold, and rescaling
    such outputs amplifies float32 rounding); then the predictors are scaled as a Faster
    R-CNN's: class logits centred 2 below 0 (a sigmoid of 0.12), of std ``class_std``, at
    most ``max_gap`` from that centre; box offsets of std 0.5, at most 2.
    """
    for head in (net.class_head, net.box_head):
        for conv in head.convs:
            conv.weight.set_data(mx.nd.random.normal(
                0, float(np.sqrt(2. / np.prod(conv.weight.shape[1:]))), conv.weight.shape))
    with autograd.predict_mode():
        maps = net.features(x)
        for head, predictor, std, largest in (
                (net.class_head, net.class_predictors[0], class_std, max_gap),
                (net.box_head, net.box_predictors[0], 0.5, 2)):
            towers = [head.tower(mx.nd, feature, level) for level, feature in enumerate(maps)]
            outputs = np.concatenate([predictor(t).transpose((0, 2, 3, 1)).reshape(
                (-1, predictor.weight.shape[0])).asnumpy() for t in towers])
            _fit(predictor, outputs, std, largest)
        bias = net.class_predictors[0].bias
        bias.set_data(bias.data() - 2)


@by_kind(DETECTING, 'rcnn')
def rcnn_detecting(net, x, class_std, max_gap):
    """The ``rcnn`` part of :func:`detecting_random_weights` (Faster R-CNN's).

    Random regions look alike, so their logits differ mostly by class: every output of
    the RPN's and the R-CNN's predictors is centred on its mean before scaling (the RPN
    to objectness logits of std ``class_std``, at most ``max_gap / 2`` from 0, and
    offsets of std 0.25, at most 1: proposals near their anchors; the class predictor
    as SSD's, measured on the regions the RPN then proposes; box offsets of std 1, at
    most 4).
    """
    head = net.rpn_head
    num_anchors = net.anchor_generators[0].num_anchors
    with autograd.predict_mode():
        maps = net.features(x)
        scores, offsets = (mx.nd.concat(*parts, dim=1).asnumpy()
                           for parts in zip(*[head(feature) for feature in maps]))
        _fit(head.score, scores.reshape(-1, num_anchors), class_std, max_gap / 2)
        _fit(head.loc, offsets.reshape(-1, 4 * num_anchors), 0.25, 1)
        scores, offsets = zip(*[head(feature) for feature in maps])
        anchors = [generate(feature) for feature, generate in zip(maps, net.anchor_generators)]
        _, proposals = net.proposal(x, *(anchors + list(scores) + list(offsets)))
        pooled = net.roi_extractor(roi_rows(mx.nd, proposals),
                                   *maps[:len(net.roi_extractor.strides)])
        box_feat = net.box_head(mx.nd, pooled)
        _fit(net.class_predictor, net.class_predictor(box_feat).asnumpy(), class_std,
             gap=max_gap)
        _fit(net.box_predictor, net.box_predictor(box_feat).asnumpy(), 1, 4)


@by_kind(DETECTING, 'mask_rcnn')
def mask_rcnn_detecting(net, x, class_std, max_gap):
    """The ``mask_rcnn`` part of :func:`detecting_random_weights` (Mask R-CNN's):
    :func:`rcnn_detecting`, then the mask predictor's logits on the detections centred on
    their mean (per class) and scaled to std ``class_std``, at most ``max_gap / 2`` from 0:
    masks of probabilities between about 0.05 and 0.95 (none all 0 or all 1, and none
    saturated, where a runtime's rounding would not show)."""
    rcnn_detecting(net, x, class_std, max_gap)
    predictor = net.mask.mask
    found = []
    hook = predictor.register_forward_hook(lambda block, inputs, out: found.append(out))
    with autograd.predict_mode():
        net(x)
    hook.detach()
    logits = found[0].transpose((0, 2, 3, 1)).reshape((-1, predictor.weight.shape[0]))
    _fit(predictor, logits.asnumpy(), class_std, max_gap / 2)


@by_kind(DETECTING, 'yolo3')
def yolo3_detecting(net, x, class_std, max_gap):
    """The ``yolo3`` part of :func:`detecting_random_weights` (YOLOv3's, GluonCV's network
    too: it reads only ``yolo_outputs[i].prediction``).

    Each output row of the prediction layers is centred on its mean over ``x`` and scaled:
    center offsets to std 1, log-scales to std 0.3 (at most 1: boxes near their anchors),
    objectness logits to std ``class_std`` and class logits to std ``class_std`` centred
    1 below 0, each at most ``max_gap / 2`` from its centre (so that scores, products of two
    sigmoids, stay below about 0.95 and runtimes' roundings order them alike).
    """
    found = {}
    hooks = [output.prediction.register_forward_hook(
        lambda block, inputs, out: found.setdefault(block.name, out))
        for output in net.yolo_outputs]
    with autograd.predict_mode():
        net(x)
    for hook in hooks:
        hook.detach()
    for output in net.yolo_outputs:
        conv = output.prediction
        rows = found[conv.name].transpose((1, 0, 2, 3)).reshape((0, -1)).asnumpy()
        width = len(rows) // output.anchors.shape[2]      # rows per anchor
        # 0, 1: center; 2, 3: log-scale; 4: objectness; 5: a class
        kind = np.minimum(np.arange(len(rows)) % width, 5)
        std = np.array([1, 1, 0.3, 0.3, class_std, class_std])[kind]
        largest = np.array([4, 4, 1, 1, max_gap / 2, max_gap / 2])[kind]
        mean = rows.mean(axis=1)
        centered = rows - mean[:, None]
        factor = np.minimum(std / centered.std(axis=1), largest / np.abs(centered).max(axis=1))
        shift = np.where(kind == 5, -1.0, 0.0)
        weight = conv.weight.data()
        conv.weight.set_data(weight * mx.nd.array(factor.reshape(-1, 1, 1, 1),
                                                  ctx=weight.context))
        conv.bias.set_data(mx.nd.array((conv.bias.data().asnumpy() - mean) * factor + shift,
                                       ctx=weight.context))


@by_kind(DETECTING, 'center_net')
def center_net_detecting(net, x, class_std, max_gap):
    """The ``center_net`` part of :func:`detecting_random_weights` (CenterNet's).

    The last convolution of each head is centred on its mean over ``x`` and scaled: heatmap
    logits to std ``class_std`` centred 1 below 0, at most ``max_gap / 2`` from it (scores
    up to about 0.9: many peaks, none saturated, whose sigmoid would tie neighbours); sizes
    to std 2 cells around 6 (at least 1); offsets to std 0.2 around 0.5.
    """
    found = {}
    hooks = [head[-1].register_forward_hook(
        lambda block, inputs, out: found.setdefault(block.name, out)) for head in net.heads]
    with autograd.predict_mode():
        net(x)
    for hook in hooks:
        hook.detach()
    for head, std, largest, centre in ((net.heads[0], class_std, max_gap / 2, -1.0),
                                       (net.heads[1], 2, 5, 6.0), (net.heads[2], 0.2, 0.5, 0.5)):
        conv = head[-1]
        outputs = found[conv.name].transpose((0, 2, 3, 1)).reshape((-1, conv.weight.shape[0]))
        _fit(conv, outputs.asnumpy(), std, largest)
        conv.bias.set_data(conv.bias.data() + centre)
