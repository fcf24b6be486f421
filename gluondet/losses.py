"""Detection losses."""
import mxnet as mx
from mxnet import gluon, nd

from .collectives import process_share
from .nn.yolo_target import YOLOV3DynamicTarget

__all__ = ['SSDMultiBoxLoss', 'FocalLoss', 'RetinaNetLoss', 'RCNNLoss', 'MaskLoss', 'YOLOV3Loss',
           'YOLOV3LossTerms', 'CenterNetLoss', 'heatmap_focal_loss', 'masked_l1_loss',
           'smooth_l1']


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def smooth_l1(diff, rho):
    """Huber / smooth L1 of ``diff``: ``|d| - rho / 2`` beyond ``rho``, ``d^2 / (2 rho)`` within;
    ``rho`` 0: L1, ``|d|``."""
    diff = nd.abs(diff)
    if rho == 0:
        return diff
    return nd.where(diff > rho, diff - 0.5 * rho, (0.5 / rho) * nd.square(diff))


def sigmoid_bce(F, logits, targets):
    """Sigmoid binary cross-entropy of ``logits`` against ``targets`` (0..1), element by
    element, stable for large logits."""
    return F.relu(logits) - logits * targets + F.Activation(-F.abs(logits), act_type='softrelu')


def _box_loss(pred, target, pos, rho):
    """Smooth L1 (``rho`` 0: L1) of ``pred - target`` where ``pos``, ``B x A x 4``, 0 elsewhere."""
    loss = smooth_l1(pred.reshape_like(target) - target, rho)
    pos = nd.broadcast_like(pos.expand_dims(-1), loss)
    return nd.where(pos, loss, nd.zeros_like(loss))


def _total(values):
    """A normalizer: the sum of per-context counts, on the first one's context, at least 1;
    in distributed training the whole batch's count per process (`collectives.process_share`)."""
    total = sum(v.as_in_context(values[0].context) for v in values)
    return nd.maximum(process_share(total), 1)


def _positives(target, background):
    """Per image of ``B x A`` class targets its positive anchors, or ``background`` for an
    image without."""
    count = (target > 0).sum(axis=1)
    if not background:
        return count
    return nd.where(count > 0, count, nd.ones_like(count) * background)


class SSDMultiBoxLoss(gluon.Block):
    r"""SSD loss: softmax cross-entropy with hard-negative mining + smooth L1.

    For every image the negatives (class target 0) with the highest
    cross-entropy are kept, ``negative_mining_ratio`` times as many as the
    image's positives; the others do not count. An image without positives (a
    background image) keeps its ``background_negatives`` hardest negatives and
    counts as ``background_negatives / negative_mining_ratio`` positives in
    the normalizer below, so it weighs as an image with that many positives
    (GluonCV's loss, ``background_negatives=0``, learns nothing from it). The
    box loss is smooth L1 (``rho`` the L1/L2 transition) over the positives.
    Both are summed per image and divided by the number of positives over all
    images of all contexts (at least 1), so the result does not depend on how
    a batch is split over devices.

    Parameters
    ----------
    negative_mining_ratio : float
        Hard negatives per positive.
    rho : float
        Smooth L1 transition point.
    lambd : float
        Weight of the box loss in the sum: ``cls + lambd * box``.
    background_negatives : int
        Hard negatives kept in an image without positives.

    Inputs (each an NDArray or a list over contexts)
    ------------------------------------------------
    cls_pred : ``B x A x (C + 1)`` logits.
    box_pred : ``B x A x 4`` encoded box offsets.
    cls_target : ``B x A``, 0 background, ``k + 1`` class ``k``, -1 ignored.
    box_target : ``B x A x 4``.

    Outputs
    -------
    sum_losses, cls_losses, box_losses : lists (one per context) of ``B`` arrays.
    """

    def __init__(self, negative_mining_ratio=3, rho=1.0, lambd=1.0, background_negatives=0,
                 **kwargs):
        super().__init__(**kwargs)
        self._ratio = max(0, negative_mining_ratio)
        self._rho = rho
        self._lambd = lambd
        self._background = max(0, background_negatives)

    def forward(self, cls_pred, box_pred, cls_target, box_target):
        cls_pred, box_pred, cls_target, box_target = [
            _as_list(x) for x in (cls_pred, box_pred, cls_target, box_target)]
        background = self._background / self._ratio if self._ratio else 0
        total = _total([_positives(ct, background).sum() for ct in cls_target])
        sum_losses, cls_losses, box_losses = [], [], []
        for cp, bp, ct, bt in zip(cls_pred, box_pred, cls_target, box_target):
            norm = total.as_in_context(cp.context)
            cls_loss = nd.broadcast_div(self._cls_loss(cp, ct).sum(axis=1), norm)
            box_loss = nd.broadcast_div(_box_loss(bp, bt, ct > 0, self._rho).sum(axis=(1, 2)),
                                        norm)
            cls_losses.append(cls_loss)
            box_losses.append(box_loss)
            sum_losses.append(cls_loss + self._lambd * box_loss)
        return sum_losses, cls_losses, box_losses

    def _cls_loss(self, pred, target):
        """Cross-entropy of positives and hard negatives, ``B x A``, 0 elsewhere."""
        loss = -nd.pick(nd.log_softmax(pred, axis=-1), target, axis=-1)
        pos = target > 0
        neg = target == 0
        count = pos.sum(axis=1)
        num_neg = nd.where(count > 0, count * self._ratio,
                           nd.ones_like(count) * self._background)
        neg_loss = nd.where(neg, loss, nd.ones_like(loss) * -1)
        ranked = nd.sort(neg_loss, axis=1, is_ascend=False)
        last = nd.clip(num_neg - 1, 0, loss.shape[1] - 1)
        cutoff = nd.pick(ranked, last, axis=1, keepdims=True)
        hard = neg * nd.broadcast_greater_equal(neg_loss, cutoff) * (num_neg > 0).expand_dims(1)
        return nd.where(pos + hard > 0, loss, nd.zeros_like(loss))



class FocalLoss(gluon.HybridBlock):
    r"""Sigmoid focal loss (Lin et al. 2017, arXiv:1708.02002), element by element.

    .. math:: FL = -\alpha_t (1 - p_t)^\gamma \log(p_t), \quad
              p_t = p \text{ if } t = 1 \text{ else } 1 - p, \quad
              \alpha_t = \alpha \text{ if } t = 1 \text{ else } 1 - \alpha

    with ``p = sigmoid(logit)``. With ``s = 1`` for a positive and -1 for a negative and
    ``m = -s x``: ``1 - p_t = sigmoid(m)`` and ``-log(p_t) = softplus(m)``, so no probability of
    0 or 1 gives an infinite loss, and the gradient has the closed form
    ``-s alpha_t (1 - p_t)^gamma (gamma p_t softplus(m) + 1 - p_t)``: the operator
    (``gluondet_focal_loss``) computes both in a few passes over its input (anchors x
    classes: large) where MXNet's autograd took five times as long through the elementwise
    ops' backward.

    Parameters
    ----------
    alpha : float
        Weight of the positives (0.25); negative: no weighting.
    gamma : float
        Focusing exponent (2).

    Inputs: ``logits`` and ``targets`` (0 or 1) of one shape. Output: the loss, same shape.
    """

    def __init__(self, alpha=0.25, gamma=2.0, **kwargs):
        super().__init__(**kwargs)
        self.alpha, self.gamma = alpha, gamma

    def hybrid_forward(self, F, logits, targets):
        if self.alpha < 0:
            weights = F.ones_like(targets)
        else:
            weights = (1 - self.alpha) + (2 * self.alpha - 1) * targets
        return self.from_signs(F, logits, 1 - 2 * targets, weights)

    def from_signs(self, F, logits, negated_signs, weights):
        """The loss from ``-s`` (-1 positive, 1 negative) and the weight of each element
        (``alpha_t`` times any other factor), both of the shape of ``logits``."""
        return F.Custom(logits, negated_signs, weights, gamma=self.gamma, op_type=FOCAL_LOSS)


FOCAL_LOSS = 'gluondet_focal_loss'


class _FocalLoss(mx.operator.CustomOp):
    """``w (1 - p_t)^gamma softplus(m)`` and its closed-form gradient (`FocalLoss`)."""

    def __init__(self, gamma):
        super().__init__()
        self.gamma = gamma

    def _parts(self, logits, negated_signs):
        minus_z = nd.elemwise_mul(logits, negated_signs)
        not_p = nd.Activation(minus_z, act_type='sigmoid')
        focus = nd.square(not_p) if self.gamma == 2 else nd.power(not_p, self.gamma)
        return not_p, focus, nd.Activation(minus_z, act_type='softrelu')

    def forward(self, is_train, req, in_data, out_data, aux):
        _, focus, minus_log_p = self._parts(in_data[0], in_data[1])
        self.assign(out_data[0], req[0],
                    nd.elemwise_mul(nd.elemwise_mul(focus, minus_log_p), in_data[2]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        logits, negated_signs, weights = in_data
        not_p, focus, minus_log_p = self._parts(logits, negated_signs)
        inner = nd.elemwise_mul(1 - not_p, minus_log_p) * self.gamma + not_p
        scale = nd.elemwise_mul(nd.elemwise_mul(weights, negated_signs), out_grad[0])
        self.assign(in_grad[0], req[0], nd.elemwise_mul(nd.elemwise_mul(focus, inner), scale))
        for k in (1, 2):
            self.assign(in_grad[k], req[k], nd.zeros_like(in_data[k]))


@mx.operator.register(FOCAL_LOSS)
class _FocalLossProp(mx.operator.CustomOpProp):
    """``F.Custom(logits, negated_signs, weights, gamma=g, op_type=FOCAL_LOSS)``: the loss
    of each element; only ``logits`` gets a gradient."""

    def __init__(self, gamma):
        super().__init__(need_top_grad=True)
        self.gamma = float(gamma)

    def list_arguments(self):
        return ['logits', 'negated_signs', 'weights']

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def infer_type(self, in_type):
        return in_type, [in_type[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _FocalLoss(self.gamma)


class RetinaNetLoss(gluon.Block):
    r"""RetinaNet's loss: sigmoid focal loss over every anchor not ignored + box regression
    over the positives, both divided by the number of positive anchors of the whole batch
    (over all contexts, at least 1), where an image without positives (a background image)
    counts as ``background_positives``.

    Parameters
    ----------
    alpha, gamma : float
        Of :class:`FocalLoss`.
    rho : float
        Smooth L1 transition (ODTK's 0.11); 0 for L1.
    loc_weight : float
        Factor of the box loss (TAO's ``loc_loss_weight``).
    class_weights : sequence of float or None
        Factor of each foreground class's focal loss (TAO's class weighting).
    background_positives : int
        The positives a background image counts as in the normalizer. 0 (ODTK's): a batch of
        background images only is divided by 1, so its focal loss over every anchor weighs
        as much as that of a batch with one positive anchor, up to hundreds of times a usual
        batch's (which collapsed training on the cards; docs/benchmarks.md).

    Inputs (lists over contexts): ``cls_pred`` ``B x A x C`` logits, ``box_pred`` ``B x A
    x 4``, ``cls_target`` ``B x A`` (0 background, ``k + 1`` class ``k``, -1 ignored),
    ``box_target`` ``B x A x 4``.

    Outputs: ``{'loss_cls': [per-context B-vector], 'loss_box': [...]}``.
    """

    def __init__(self, alpha=0.25, gamma=2.0, rho=0.11, loc_weight=1.0, class_weights=None,
                 background_positives=0, **kwargs):
        super().__init__(**kwargs)
        self.focal = FocalLoss(alpha, gamma)
        self._background_positives = background_positives
        self._rho, self._loc_weight = rho, loc_weight
        self._class_weights = None if class_weights is None else tuple(class_weights)

    def forward(self, cls_pred, box_pred, cls_target, box_target):
        cls_pred, box_pred, cls_target, box_target = [
            _as_list(x) for x in (cls_pred, box_pred, cls_target, box_target)]
        total = _total([_positives(ct, self._background_positives).sum() for ct in cls_target])
        out = {'loss_cls': [], 'loss_box': []}
        for cp, bp, ct, bt in zip(cls_pred, box_pred, cls_target, box_target):
            norm = total.as_in_context(cp.context)
            num_classes = cp.shape[-1]
            if self._class_weights is not None and len(self._class_weights) != num_classes:
                raise ValueError('RetinaNetLoss: %d class weights for %d classes'
                                 % (len(self._class_weights), num_classes))
            focal = self.focal
            fg = ct - 1                           # -1 (background) and -2 (ignored): no class
            signs = nd.one_hot(fg, num_classes, on_value=-1, off_value=1, dtype=cp.dtype)
            # alpha_t from the signs (-1: alpha, 1: 1 - alpha): a second one_hot costs 10x more
            scale, shift = (0, 1) if focal.alpha < 0 else ((1 - 2 * focal.alpha) / 2, 0.5)
            kept = (ct >= 0).astype(cp.dtype, copy=False).expand_dims(-1)
            weights = nd.broadcast_mul(signs * scale + shift, kept)
            if self._class_weights is not None:
                weights = nd.broadcast_mul(weights, nd.array(
                    self._class_weights, ctx=cp.context, dtype=cp.dtype).reshape((1, 1, -1)))
            loss = focal.from_signs(nd, cp, signs, weights)
            # a sum as a product with ones: MXNet's CPU reduction is several times slower
            ones = nd.ones((num_classes * loss.shape[1],), ctx=cp.context, dtype=cp.dtype)
            out['loss_cls'].append(nd.broadcast_div(
                nd.dot(loss.reshape((loss.shape[0], -1)), ones), norm))
            box = _box_loss(bp, bt, ct > 0, self._rho).sum(axis=(1, 2))
            out['loss_box'].append(nd.broadcast_div(box, norm) * self._loc_weight)
        return out



class RCNNLoss(gluon.Block):
    r"""The four losses of Faster R-CNN, as GluonCV's training computes them.

    - RPN objectness: sigmoid cross-entropy over the sampled anchors (target >= 0).
    - RPN boxes: smooth L1 (``rpn_rho``, GluonCV 1/9) over the positive anchors.
    - R-CNN classes: softmax cross-entropy over the sampled proposals (target >= 0).
    - R-CNN boxes: smooth L1 (``rcnn_rho``, GluonCV 1) of the positives' own class.

    Each is a sum divided by the number of samples of its stage (anchors or
    proposals with target >= 0) over all images of all contexts, as GluonCV
    divides by the samples of its device: equal on one device, independent of
    how a batch is split on several.

    Inputs (lists over contexts): ``rpn_score`` ``B x A x 1`` logits,
    ``rpn_box`` ``B x A x 4``, ``rpn_cls_target`` ``B x A`` (1 / 0 / -1),
    ``rpn_box_target``, ``rpn_box_mask`` ``B x A x 4``, ``cls_pred`` ``B x S x
    (C + 1)``, ``box_pred`` ``B x P x 4``, ``cls_target`` ``B x S``,
    ``box_target``, ``box_mask`` ``B x P x 4``.

    Outputs: ``{name: [per-context B-vector]}`` with names ``loss_rpn_obj``,
    ``loss_rpn_box``, ``loss_cls``, ``loss_box``.
    """

    def __init__(self, rpn_rho=1. / 9, rcnn_rho=1., **kwargs):
        super().__init__(**kwargs)
        self._rpn_rho = rpn_rho
        self._rcnn_rho = rcnn_rho

    def forward(self, rpn_score, rpn_box, rpn_cls_target, rpn_box_target, rpn_box_mask,
                cls_pred, box_pred, cls_target, box_target, box_mask):
        rpn_total = _total([(t >= 0).sum() for t in rpn_cls_target])
        rcnn_total = _total([(t >= 0).sum() for t in cls_target])
        out = {'loss_rpn_obj': [], 'loss_rpn_box': [], 'loss_cls': [], 'loss_box': []}
        for parts in zip(rpn_score, rpn_box, rpn_cls_target, rpn_box_target, rpn_box_mask,
                         cls_pred, box_pred, cls_target, box_target, box_mask):
            (score, box, cls_t, box_t, box_m, cpred, bpred, ccls_t, cbox_t, cbox_m) = parts
            ctx = score.context
            rpn_norm, rcnn_norm = rpn_total.as_in_context(ctx), rcnn_total.as_in_context(ctx)
            score = score.reshape((0, -1))
            bce = sigmoid_bce(nd, score, nd.relu(cls_t))
            bce = nd.where(cls_t >= 0, bce, nd.zeros_like(bce))
            out['loss_rpn_obj'].append(nd.broadcast_div(bce.sum(axis=1), rpn_norm))
            rpn_l1 = smooth_l1(box - box_t, self._rpn_rho) * box_m
            out['loss_rpn_box'].append(nd.broadcast_div(rpn_l1.sum(axis=(1, 2)), rpn_norm))
            ce = -nd.pick(nd.log_softmax(cpred, axis=-1), nd.relu(ccls_t), axis=-1)
            ce = nd.where(ccls_t >= 0, ce, nd.zeros_like(ce))
            out['loss_cls'].append(nd.broadcast_div(ce.sum(axis=1), rcnn_norm))
            rcnn_l1 = smooth_l1(bpred - cbox_t, self._rcnn_rho) * cbox_m
            out['loss_box'].append(nd.broadcast_div(rcnn_l1.sum(axis=(1, 2)), rcnn_norm))
        return out


class MaskLoss(gluon.Block):
    """Mask R-CNN's mask loss as GluonCV's training computes it: sigmoid cross-entropy of each
    positive region's mask logits (for its own class) against its target mask, summed and
    divided by the positives' mask pixels over all images of all contexts (GluonCV: of its
    device; equal on one).

    Inputs (lists over contexts): ``mask_pred`` ``B x P x M x M`` logits, ``mask_target``
    ``B x P x M x M`` in ``[0, 1]``, ``positive`` ``B x P`` (1 for a positive region).
    Output ``{'loss_mask': [per-context B-vector]}``.
    """

    def forward(self, mask_pred, mask_target, positive):
        pixels = mask_pred[0].shape[2] * mask_pred[0].shape[3]
        total = _total([p.sum() * pixels for p in positive])
        out = []
        for pred, target, pos in zip(mask_pred, mask_target, positive):
            bce = sigmoid_bce(nd, pred, target) * pos.reshape((0, 0, 1, 1))
            out.append(nd.broadcast_div(bce.sum(axis=(1, 2, 3)),
                                        total.as_in_context(pred.context)))
        return {'loss_mask': out}


YOLOV3_LOSS_NAMES = ('loss_obj', 'loss_center', 'loss_scale', 'loss_cls')


class YOLOV3LossTerms(gluon.HybridBlock):
    r"""GluonCV's four YOLOv3 losses of each image, sums over its predictions.

    - objectness: sigmoid cross-entropy against 1 for the assigned predictions (weighted by
      their mix ratio), 0 for the others, except those ignored by
      :class:`~gluondet.nn.YOLOV3DynamicTarget`;
    - center: sigmoid cross-entropy of the center logits against the position in the cell;
    - scale: L1 of the log-scales;
    - class: sigmoid cross-entropy of each class logit;

    the last three over the assigned predictions only, the first two weighted by ``2 - box
    area / image area`` and all by the mix ratio. These are GluonCV's ``YOLOV3Loss`` values
    (means over the elements times their number, as GluonCV computes them).

    Parameters
    ----------
    ignore_iou_thresh : float
        Of :class:`~gluondet.nn.YOLOV3DynamicTarget` (GluonCV's 0.7).
    label_smooth : bool
        Of :class:`~gluondet.nn.YOLOV3DynamicTarget` (GluonCV's ``--label-smooth``).

    Inputs: the network's training outputs ``box_preds`` ``B x N x 4``, ``raw_centers``,
    ``raw_scales`` ``B x N x 2``, ``objness`` ``B x N x 1``, ``class_pred`` ``B x N x C``;
    ``gt_boxes`` ``B x M x 4`` (padding rows -1); the five targets of
    :class:`~gluondet.nn.YOLOV3TargetGenerator`, batched (``B x N x ...``).

    Outputs: ``obj, center, scale, cls``, each a ``B`` vector.
    """

    def __init__(self, ignore_iou_thresh=0.7, label_smooth=False, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.targets = YOLOV3DynamicTarget(ignore_iou_thresh, label_smooth)

    def hybrid_forward(self, F, box_preds, raw_centers, raw_scales, objness, class_pred,
                       gt_boxes, obj_t, center_t, scale_t, weight_t, class_id):
        obj_t, class_t, class_mask = [F.stop_gradient(t) for t in self.targets(
            box_preds, class_pred, gt_boxes, obj_t, class_id)]
        positive = obj_t > 0
        obj_loss = sigmoid_bce(F, objness, F.where(positive, F.ones_like(obj_t), obj_t))
        obj_loss = obj_loss * F.where(positive, obj_t, obj_t >= 0)
        weight_t = F.broadcast_mul(weight_t, obj_t)
        center_loss = sigmoid_bce(F, raw_centers, center_t) * weight_t
        scale_loss = F.abs(raw_scales - scale_t) * weight_t
        cls_loss = F.broadcast_mul(sigmoid_bce(F, class_pred, class_t), class_mask * obj_t)
        return tuple(_image_sums(F, x) for x in (obj_loss, center_loss, scale_loss, cls_loss))


def _image_sums(F, x):
    """The sum over each image's elements of ``B x ...``, as GluonCV's mean times count."""
    count = F.cast(F.shape_array(x).slice_axis(axis=0, begin=1, end=None).prod(), 'float32')
    return F.broadcast_mul(F.mean(x, axis=0, exclude=True), count)


class YOLOV3Loss(gluon.Block):
    r"""YOLOv3's losses (:class:`YOLOV3LossTerms`) of every image divided by the number of
    images of the whole batch (over all contexts and processes): the gradient of their sum is
    GluonCV's (which sums over the images and divides by the batch size in
    ``trainer.step``).

    Inputs (lists over contexts): ``outputs``, the network's training outputs ``(box_preds,
    raw_centers, raw_scales, objness, class_pred)``; ``gt_boxes`` ``B x M x 4``; ``targets``,
    the five batched targets of :class:`~gluondet.nn.YOLOV3TargetGenerator`.

    Parameters: those of :class:`YOLOV3LossTerms`.

    Outputs: ``{'loss_obj', 'loss_center', 'loss_scale', 'loss_cls': [per-context B-vector]}``.
    """

    def __init__(self, ignore_iou_thresh=0.7, label_smooth=False, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.terms = YOLOV3LossTerms(ignore_iou_thresh, label_smooth)

    def forward(self, outputs, gt_boxes, targets):
        images = _total([nd.array([len(boxes)], ctx=boxes.context) for boxes in gt_boxes])
        out = {name: [] for name in YOLOV3_LOSS_NAMES}
        for output, boxes, target in zip(outputs, gt_boxes, targets):
            norm = images.as_in_context(boxes.context)
            for name, term in zip(YOLOV3_LOSS_NAMES, self.terms(*output, boxes, *target)):
                out[name].append(nd.broadcast_div(term, norm))
        return out


def heatmap_focal_loss(F, pred, label, eps=1e-6):
    r"""CenterNet's focal loss of each image's heatmap (GluonCV's ``HeatmapFocalLoss`` with
    ``from_logits=True`` before its division): over the cells of label 1 (the peaks)
    :math:`-(1 - p)^2 \log p`, over the others :math:`-(1 - y)^4 p^2 \log(1 - p)`.

    ``pred`` (probabilities, the network clips them to ``[1e-4, 1 - 1e-4]``) is clipped to
    ``[eps, 1 - eps]`` so that a 0 or 1 gives no infinity (a no-op on the network's outputs).

    Returns ``(loss, peaks)``: each a ``B`` vector, the sums over the image's cells.
    """
    pred = F.clip(pred, eps, 1 - eps)
    peaks = label == 1
    pos = F.log(pred) * F.square(1 - pred) * peaks
    neg = F.log(1 - pred) * F.square(pred) * F.square(F.square(1 - label)) * (label < 1)
    return -F.sum(pos + neg, axis=0, exclude=True), F.sum(peaks, axis=0, exclude=True)


def masked_l1_loss(F, pred, label, mask):
    """The L1 loss of each image where ``mask`` is 1 (GluonCV's ``MaskedL1Loss`` before its
    division): returns ``(loss, count)``, ``B`` vectors, the sum of ``|pred - label| * mask``
    and of ``mask`` over the image's elements."""
    loss = F.abs(F.broadcast_mul(pred - label, mask))
    return F.sum(loss, axis=0, exclude=True), F.sum(mask, axis=0, exclude=True)


CENTER_NET_LOSS_NAMES = ('loss_heatmap', 'loss_wh', 'loss_center')


class CenterNetLoss(gluon.Block):
    r"""CenterNet's three losses, as GluonCV's training: the heatmap focal loss
    (`heatmap_focal_loss`) divided by the number of peaks, the L1 losses of the sizes and of
    the center offsets (`masked_l1_loss`) divided by the number of mask elements (2 per
    object), times ``wh_weight`` and ``center_reg_weight``. Each count is that of the whole
    batch over all contexts (and processes), at least 1: on one device GluonCV's values; on
    several, independent of how the batch is split (GluonCV divides each device's sum by its
    own count and averages the devices).

    Parameters
    ----------
    wh_weight : float
        GluonCV's ``--wh-weight`` (0.1).
    center_reg_weight : float
        GluonCV's ``--center-reg-weight`` (1).

    Inputs (lists over contexts): ``outputs``, the network's training outputs ``(heatmap B x C
    x H x W, wh B x 2 x H x W, center_reg B x 2 x H x W)``; ``targets``, the five batched
    targets of :class:`~gluondet.nn.CenterNetTargetGenerator` ``(heatmap, wh_target, wh_mask,
    center_reg, center_reg_mask)``.

    Outputs: ``{'loss_heatmap', 'loss_wh', 'loss_center': [per-context B-vector]}``.
    """

    def __init__(self, wh_weight=0.1, center_reg_weight=1.0, **kwargs):
        super().__init__(**kwargs)
        self._weights = (1.0, wh_weight, center_reg_weight)

    def forward(self, outputs, targets):
        terms = []
        for (heatmap, wh, reg), (heatmap_t, wh_t, wh_mask, reg_t, reg_mask) in zip(outputs,
                                                                                  targets):
            terms.append((heatmap_focal_loss(nd, heatmap, heatmap_t),
                          masked_l1_loss(nd, wh, wh_t, wh_mask),
                          masked_l1_loss(nd, reg, reg_t, reg_mask)))
        out = {name: [] for name in CENTER_NET_LOSS_NAMES}
        for k, (name, weight) in enumerate(zip(CENTER_NET_LOSS_NAMES, self._weights)):
            total = _total([parts[k][1].sum() for parts in terms])
            for parts in terms:
                loss = parts[k][0]
                norm = total.as_in_context(loss.context)
                out[name].append(nd.broadcast_div(loss, norm) * weight)
        return out
