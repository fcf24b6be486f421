"""The skeleton SSD and RetinaNet share: feature maps -> per-map predictions and anchors ->
(training) raw predictions for the targets and losses, (inference) decoding and NMS."""
import mxnet as mx
from mxnet import autograd
from mxnet.gluon import nn

from .detector import DetectionNet, initialized_ctx, reuse_mapping

__all__ = ['SingleStageDetector', 'reuse_rows']


def _flat(F, pred, width):
    """``B x (A * width) x H x W`` -> ``B x (H * W * A) x width``, cells then anchors."""
    return F.transpose(pred, (0, 2, 3, 1)).reshape((0, -1, width))


class SingleStageDetector(DetectionNet):
    """Base of the single-stage detectors: a subclass builds, under its name scope,

    - ``features``: input -> list of maps;
    - ``anchor_generators``: one per map (:class:`~gluondet.nn.GridAnchorGenerator`);
    - ``class_predictors``, ``box_predictors``: the final convolutions (one per map, or
      one shared by all maps), used by its :meth:`predict`;
    - ``box_decoder`` and ``postprocess``;

    and defines :meth:`predict` (raw maps of one level), :meth:`detect` (inference) and
    :meth:`_class_predictor` (a fresh final class convolution, for :meth:`reset_class`).
    ``background`` says whether the class outputs have a background column first
    (SSD's softmax) or not (RetinaNet's sigmoids).

    Outputs
    -------
    Training (``autograd.is_training()``): ``cls_preds`` ``B x A x (C + background)``
    logits, ``box_preds`` ``B x A x 4`` encoded offsets, ``anchors`` ``1 x A x 4``
    (center format, input pixels), all maps concatenated, cells then anchors.
    Inference: ``ids``, ``scores`` ``B x K x 1`` and ``boxes`` ``B x K x 4``
    (``xmin, ymin, xmax, ymax`` in input pixels), sorted by score, padded with -1.
    """

    background = True

    @property
    def class_width(self):
        """Class outputs per anchor."""
        return self.num_classes + int(self.background)

    def predict(self, F, level, feature):
        """``(class map, box map)`` of the map ``feature`` (number ``level``)."""
        raise NotImplementedError

    def detect(self, F, cls_preds, box_preds, anchors):
        """Inference output from per-map lists of flat predictions and anchors."""
        raise NotImplementedError

    def _class_predictor(self, channels, in_channels, prefix):
        raise NotImplementedError

    def hybrid_forward(self, F, x):
        maps = self.features(x)
        cls_preds, box_preds, anchors = [], [], []
        for level, feature in enumerate(maps):
            cls_map, box_map = self.predict(F, level, feature)
            cls_preds.append(_flat(F, cls_map, self.class_width))
            box_preds.append(_flat(F, box_map, 4))
            anchors.append(self.anchor_generators[level](feature))
        if autograd.is_training():
            return (F.concat(*cls_preds, dim=1), F.concat(*box_preds, dim=1),
                    F.concat(*anchors, dim=1))
        return self.detect(F, cls_preds, box_preds, anchors)

    def reset_class(self, classes, reuse_weights=None):
        """Replace the classes and the class predictors.

        Parameters
        ----------
        classes : sequence of str
            The new foreground classes.
        reuse_weights : dict or list or None
            Which new classes start from the weights of an old one:
            ``{new: old}`` with class names or indices (``{'person': 14}``),
            or a list of names kept by both (see
            :func:`~gluondet.model_zoo.detector.reuse_mapping`). The background
            weights are then reused too. Other new classes start from a fresh
            initialization.
        """
        old_classes = self.classes
        old_width = self.class_width
        self.classes = tuple(classes)
        mapping = reuse_mapping(reuse_weights, old_classes, self.classes)
        self._clear_cached_op()
        predictors = nn.HybridSequential(prefix=self.class_predictors.prefix)
        for old in self.class_predictors:
            num_anchors = old._channels // old_width   # pylint: disable=protected-access
            new = self._class_predictor(num_anchors * self.class_width, old.weight.shape[1],
                                        old.prefix)
            offset = int(self.background)
            pairs = [(0, 0)] * offset + [(n + offset, o + offset) for n, o in mapping.items()]
            reuse_rows(old, new, pairs if mapping else [], old_width, self.class_width)
            predictors.add(new)
        self.class_predictors = predictors


def reuse_rows(old, new, pairs, old_width, new_width):
    """Initialize the predictor ``new`` where ``old`` is (if it is initialized) and copy
    from ``old`` the rows ``pairs`` ``(new, old)`` of every anchor, weight and bias (rows per
    anchor: ``old_width`` and ``new_width``); no pairs: ``new`` starts anew. ValueError when
    rows are asked of an ``old`` holding no weights."""
    ctx = initialized_ctx(old)
    if pairs and (ctx is None or 0 in old.weight.shape):
        raise ValueError('reset_class: reuse_weights needs the old predictors to hold weights '
                         '(load or run the network first)')
    if ctx is not None:
        new.initialize(ctx=ctx)
    if not pairs:
        return
    for old_param, new_param in ((old.weight, new.weight), (old.bias, new.bias)):
        src = old_param.data().asnumpy()
        dst = new_param.data().asnumpy()
        for anchor in range(dst.shape[0] // new_width):
            for n, o in pairs:
                dst[anchor * new_width + n] = src[anchor * old_width + o]
        new_param.set_data(mx.nd.array(dst, dtype=dst.dtype))
