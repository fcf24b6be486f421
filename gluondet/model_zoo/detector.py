"""What every detector of the zoo shares: classes, a retrace on mode switch, reset_class helpers."""
import warnings

from mxnet import autograd, gluon

__all__ = ['Detector', 'reuse_mapping', 'initialized_ctx']


class Detector(gluon.HybridBlock):
    """Base of the zoo's detectors.

    A hybridized detector's graph differs between training (raw predictions
    and what its losses need) and inference (``ids, scores, boxes``), and
    may take other inputs; the cached graph is dropped when the mode changes.

    Parameters
    ----------
    classes : sequence of str
        Foreground class names.
    """

    def __init__(self, classes, **kwargs):
        super().__init__(**kwargs)
        self.classes = tuple(classes)
        if not self.classes:
            raise ValueError('%s needs at least one class' % type(self).__name__)
        self._traced_training = None

    @property
    def num_classes(self):
        """Number of foreground classes."""
        return len(self.classes)

    def forward(self, x, *args):
        training = autograd.is_training()
        if training != self._traced_training:
            self._clear_cached_op()
            self._traced_training = training
        return super().forward(x, *args)


def reuse_mapping(reuse_weights, old_classes, new_classes):
    """``{new index: old index}`` from GluonCV's ``reset_class(reuse_weights=)`` forms.

    ``reuse_weights`` is None, a list of class names kept by both, or a dict
    ``{new: old}`` of names or indices.
    """
    if reuse_weights is None:
        return {}
    if isinstance(reuse_weights, (list, tuple)):
        mapping = {}
        for name in reuse_weights:
            if name in old_classes and name in new_classes:
                mapping[new_classes.index(name)] = old_classes.index(name)
            else:
                warnings.warn('reset_class: %r is not in both the old classes %s and the new %s'
                              % (name, old_classes, new_classes))
        return mapping
    if not isinstance(reuse_weights, dict):
        raise TypeError('reset_class: reuse_weights must be a dict, a list or None, not %s'
                        % type(reuse_weights).__name__)
    return {_class_index(k, new_classes, 'new'): _class_index(v, old_classes, 'old')
            for k, v in reuse_weights.items()}


def _class_index(key, classes, which):
    if isinstance(key, str):
        if key not in classes:
            raise ValueError('reset_class: %r is not among the %s classes %s'
                             % (key, which, classes))
        return classes.index(key)
    if not 0 <= key < len(classes):
        raise ValueError('reset_class: index %r is out of range for the %d %s classes'
                         % (key, len(classes), which))
    return int(key)


def initialized_ctx(block):
    """The contexts of ``block.weight``, or None while it is not initialized."""
    try:
        return block.weight.list_ctx()
    except RuntimeError:
        return None
