"""RetinaNet bound to the training engine (see the task contract in `gluondet.engine`)."""
from mxnet import nd

from ..losses import RetinaNetLoss
from ..model_zoo.backbones import ResNetV1b
from ..model_zoo.backbones.resnet_v1b import STAGES
from ..model_zoo.detector import norm_param_names, params_except
from ..nn import AnchorTargetGenerator
from .base import KeepRatioTask, dense_targets

__all__ = ['RetinaNetTask']

# What a background image (no object) counts as in the focal loss's normalizer, the positive
# anchors of the whole batch: about an object's (31 a card at 256 px on the cards recipe).
# ODTK's 0 divides a batch of background images by 1: training on the cards with 10%
# background images collapsed (docs/benchmarks.md).
BACKGROUND_POSITIVES = 16


class RetinaNetTask(KeepRatioTask):
    """RetinaNet: one network name, a train and a val dataset.

    Parameters
    ----------
    network : str
        A model zoo name, e.g. ``retinanet_resnet18_v1b_custom``.
    train_dataset, val_dataset : DetectionDataset
    short, max_size : int, optional
        Image resizing (default: the network's; ODTK's ``--resize`` 800 and
        ``--max-size`` 1333 for COCO); ``short`` may be a ``(low, high)`` range
        (ODTK's ``--jitter``), validation using ``low``.
    fg_iou, bg_iou : float
        Anchors with IoU >= ``fg_iou`` learn their best ground truth, those under
        ``bg_iou`` are background, the band between is ignored (0.5 and 0.4). Each
        ground truth also takes its best anchor, so no box goes unlearned (as
        torchvision and detectron2; ODTK leaves such boxes out).
    focal_alpha, focal_gamma, box_rho, loc_weight, class_weights
        The loss, see :class:`~gluondet.losses.RetinaNetLoss` (``box_rho`` 0.11 as ODTK;
        0 for L1).
    freeze_bn : bool or None
        True: the backbone's BatchNorm uses its global statistics and its gamma and beta
        do not train (ODTK's frozen BatchNorm); False: it trains with batch statistics
        (TAO's default); None: frozen with a pretrained base, trained from scratch.
    freeze_blocks : sequence of int
        Backbone stages that do not train, TAO's ``freeze_blocks``: 0 the stem, 1-4 the
        ResNet stages.
    l1 : float
        Weight of an L1 penalty on the weights of the trainable convolutions (TAO's L1
        regularizer), the loss ``loss_reg``; 0: none.
    **kwargs
        ``classes``, ``pretrained_base``, ``model_kwargs``, ``val_batch_size``,
        ``num_workers``: see :class:`~gluondet.tasks.base.KeepRatioTask`.
    """

    name = 'retinanet'

    def __init__(self, network, train_dataset, val_dataset, fg_iou=0.5, bg_iou=0.4,
                 focal_alpha=0.25, focal_gamma=2.0, box_rho=0.11, loc_weight=1.0,
                 class_weights=None, freeze_bn=None, freeze_blocks=(), l1=0.0, **kwargs):
        super().__init__(network, train_dataset, val_dataset, **kwargs)
        if freeze_bn is not None and 'norm_layer' not in self.model_kwargs:
            self.model_kwargs.setdefault('norm_kwargs', {'use_global_stats': bool(freeze_bn)})
        self.freeze_bn = self.pretrained_base if freeze_bn is None else freeze_bn
        self.freeze_blocks = tuple(sorted(set(freeze_blocks)))
        bad = [b for b in self.freeze_blocks if not 0 <= b < len(STAGES)]
        if bad:
            raise ValueError('freeze_blocks: %s; the blocks are 0 (stem) to %d'
                             % (bad, len(STAGES) - 1))
        self.l1 = l1
        self._penalized = []
        self.fg_iou, self.bg_iou = fg_iou, bg_iou
        self.targets = None
        self.loss = RetinaNetLoss(focal_alpha, focal_gamma, box_rho, loc_weight, class_weights,
                                  background_positives=BACKGROUND_POSITIVES)

    def build_net(self, ctx_list):
        net = super().build_net(ctx_list)
        self.targets = AnchorTargetGenerator(self.fg_iou, net.box_decoder.stds, self.bg_iou)
        return net

    def train_params(self, net):
        """All parameters but the frozen blocks' and, with ``freeze_bn``, the backbone's
        norm layers'."""
        backbone = net.features.backbone
        frozen = set()
        if self.freeze_blocks:
            if not isinstance(backbone, ResNetV1b):
                raise ValueError('freeze_blocks needs a ResNet backbone, not %s'
                                 % type(backbone).__name__)
            frozen |= set(backbone.stage_params(*[STAGES[b] for b in self.freeze_blocks]))
        if self.freeze_bn:
            frozen |= set(norm_param_names(backbone))
        train = params_except(net, frozen)
        self._penalized = [p for name, p in train.items()
                           if name.endswith('weight') and len(p.shape) == 4] if self.l1 else []
        return train

    def train_dataset(self):
        return self._train.transform(self.train_transform())

    def dali_train_data(self, sampler, config, runtime):
        """The training batches read by DALI (``config.dali``): `RCNNTrainTransform` and
        the padding to the net's multiple there
        (:class:`~gluondet.data.dali.KeepRatioDaliAugment`)."""
        from ..data import dali
        if self.augment is not None:
            raise ValueError('--dali does not run auto_augment; train without one of them')
        augment = dali.KeepRatioDaliAugment(self.short, self.max_size, self.multiple)
        return dali.DaliTrainData(augment, self._train, sampler, config.seed,
                                  config.num_workers, dali.dali_device(runtime.ctx))

    def losses(self, net, parts):
        losses = self.loss(*dense_targets(net, parts, self.targets))
        if self.l1:
            # each context's copy of the weights gets its share: their gradients are summed
            losses['loss_reg'] = [
                nd.add_n(*[nd.abs(p.data(part[0].context)).sum() for p in self._penalized])
                * (self.l1 / len(parts)) for part in parts]
        return losses
