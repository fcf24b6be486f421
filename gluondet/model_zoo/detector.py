"""What every detector of the zoo shares: classes, a retrace on mode switch, reset_class helpers,
the zoo builders of ``{arch}_{dataset}`` and ``{arch}_custom``."""
import os
import warnings

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn

from . import gluoncv_compat, registry

__all__ = ['DetectionNet', 'reuse_mapping', 'initialized_ctx', 'norm_param_names', 'params_except',
           'dataset_builder', 'custom_builder', 'register_presets']


class DetectionNet(gluon.HybridBlock):
    """Base of the zoo's detectors.

    A hybridized detector's graph differs between training (raw predictions
    and what its losses need) and inference (``ids, scores, boxes``), and
    may take other inputs; the cached graph is dropped when the mode changes.

    Parameters
    ----------
    classes : sequence of str
        Foreground class names.
    """

    gluoncv_format = None
    # What inference does after the network body, as deploy exports it: a kind of
    # gluondet.deploy.postprocess.KINDS ('softmax_nms', 'sigmoid_topk_nms', 'rcnn', 'yolo3'); a
    # detector sets its own, and deploy refuses a network without a known one.
    postprocess_kind = None

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

    # The inference NMS settings live in the ``postprocess`` block (see ``set_nms``).
    @property
    def nms_thresh(self):
        """IoU threshold of the inference NMS (see ``set_nms``)."""
        return self.postprocess.nms_thresh

    @property
    def nms_topk(self):
        """Candidates (per class for R-CNN) entering the inference NMS."""
        return self.postprocess.nms_topk

    @property
    def post_nms(self):
        """Detections returned by inference."""
        return self.postprocess.post_nms

    def set_nms(self, nms_thresh=0.45, nms_topk=400, post_nms=100):
        """Set the non-maximum suppression of inference (the ``postprocess`` block's; the
        defaults are GluonCV's SSD and YOLOv3 ones, a subclass may have its own).

        Parameters
        ----------
        nms_thresh : float
            IoU threshold; outside (0, 1) disables NMS (all candidates returned).
        nms_topk : int
            Best candidates entering NMS, -1 for all.
        post_nms : int
            Detections returned, -1 for all.
        """
        self._clear_cached_op()
        self.postprocess.nms_thresh = nms_thresh
        self.postprocess.nms_topk = nms_topk
        self.postprocess.post_nms = post_nms

    def load_parameters(self, filename, ctx=None, allow_missing=False, ignore_extra=False,
                        cast_dtype=False, dtype_source='current'):
        """Load a gluondet or GluonCV 0.10 ``.params`` file of this network.

        A GluonCV file (its names differ) is recognized and renamed by the subclass's
        ``gluoncv_format`` (None: GluonCV has no such network), a pair ``(is_its_file(arrays),
        convert(arrays, net, source))``
        (:mod:`gluondet.model_zoo.gluoncv_compat`, :mod:`~gluondet.model_zoo.gluoncv_rcnn`);
        every parameter must match, or ValueError lists what did not. Arguments as
        ``Block.load_parameters``.
        """
        arrays = gluoncv_compat.read_params(filename)
        if self.gluoncv_format is not None:
            is_gluoncv, convert = self.gluoncv_format
            if is_gluoncv(arrays):
                arrays = convert(arrays, self, filename)
        gluoncv_compat.load_arrays(self, arrays, filename, ctx, allow_missing, ignore_extra,
                                   cast_dtype, dtype_source)

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


def params_except(block, frozen):
    """``block``'s ``ParameterDict`` without the parameters named in ``frozen``."""
    params = block.collect_params()
    kept = gluon.ParameterDict(params.prefix)
    kept.update({name: p for name, p in params.items() if name not in frozen})
    return kept


def norm_param_names(block):
    """Full names of the parameters of every norm layer under ``block``."""
    found = []

    def visit(child):
        if isinstance(child, (nn.BatchNorm, nn.InstanceNorm, nn.LayerNorm, nn.GroupNorm)):
            found.extend(child.collect_params())
        for grandchild in child._children.values():  # pylint: disable=protected-access
            visit(grandchild)
    visit(block)
    return found


def dataset_builder(build, arch, dataset, classes, family):
    """The zoo builder of ``{arch}_{dataset}``: fixed classes, published weights.

    ``build(arch, classes, dataset, pretrained_base, ctx, root, **kwargs)`` makes the
    network; ``family`` names the detector in the docstring (``'SSD'``).
    """
    name = '%s_%s' % (arch, dataset)

    def builder(pretrained=False, pretrained_base=True, ctx=mx.cpu(),
                root=os.path.join('~', '.mxnet', 'models'), **kwargs):
        if 'classes' in kwargs:
            raise TypeError('%s has fixed classes; use %s_custom(classes=...) or net.reset_class()'
                            % (name, arch))
        net = build(arch, classes, dataset, pretrained_base and not pretrained, ctx, root,
                    **kwargs)
        if pretrained:
            net.load_parameters(registry.weights_file(name, root), ctx=ctx)
        return net

    builder.__name__ = builder.__qualname__ = name.replace('.', '_')
    builder.__doc__ = '%s %s for %s (%d classes); see ``get_model``.' % (
        family, arch, dataset.upper(), len(classes))
    return builder


def custom_builder(build, arch, family):
    """The zoo builder of ``{arch}_custom``: ``classes=`` given, optionally ``transfer=``."""
    name = arch + '_custom'

    def builder(classes=None, pretrained=False, pretrained_base=True, ctx=mx.cpu(),
                root=os.path.join('~', '.mxnet', 'models'), transfer=None, **kwargs):
        if not classes:
            raise ValueError('%s needs classes=[...], the foreground class names' % name)
        if pretrained:
            warnings.warn('%s: custom models have no pretrained weights; pretrained ignored'
                          % name)
        if transfer is None:
            return build(arch, classes, 'custom', pretrained_base, ctx, root, **kwargs)
        net = registry.get_model('%s_%s' % (arch, transfer), pretrained=True, ctx=ctx, root=root,
                                 **kwargs)
        net.reset_class(classes, reuse_weights=[c for c in classes if c in net.classes])
        return net

    builder.__name__ = builder.__qualname__ = name.replace('.', '_')
    builder.__doc__ = ('%s %s for your classes (``classes=``); ``transfer="voc"|"coco"`` '
                       'starts from those weights, keeping the classes they share.'
                       % (family, arch))
    return builder


def register_presets(archs, build, family):
    """Register ``{arch}_{dataset}`` for every dataset of every preset of ``archs``.

    ``archs`` maps an arch to ``{'backbone': name, 'datasets': {dataset: options}}``,
    each ``options`` holding at least ``short`` and ``max_size`` (the registered data
    shape; of a multi-scale ``(low, high)`` short, ``high``); ``voc`` and ``coco`` get
    those classes and published weights (unless the spec says ``'published': False``),
    ``custom`` takes ``classes=``. ``build`` and ``family`` as :func:`dataset_builder`.
    """
    for arch, spec in archs.items():
        for dataset, options in spec['datasets'].items():
            short = options['short']      # GluonCV evaluates a multi-scale net at its high end
            shape = (short if isinstance(short, int) else short[-1], options['max_size'])
            if dataset == 'custom':
                registry.register_model(arch + '_custom', None, shape, spec['backbone'],
                                        'custom', has_weights=False)(
                    custom_builder(build, arch, family))
            else:
                classes = {'voc': registry.VOC_CLASSES, 'coco': registry.COCO_CLASSES}[dataset]
                registry.register_model('%s_%s' % (arch, dataset), classes, shape,
                                        spec['backbone'], dataset,
                                        has_weights=spec.get('published', True))(
                    dataset_builder(build, arch, dataset, classes, family))
