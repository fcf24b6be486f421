"""RetinaNet bound to the training engine (see the task contract in `gluondet.engine`)."""
from ..losses import RetinaNetLoss
from ..nn import AnchorTargetGenerator
from .base import KeepRatioTask, dense_targets

__all__ = ['RetinaNetTask']


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
    **kwargs
        ``classes``, ``pretrained_base``, ``model_kwargs``, ``val_batch_size``,
        ``num_workers``: see :class:`~gluondet.tasks.base.KeepRatioTask`.
    """

    name = 'retinanet'

    def __init__(self, network, train_dataset, val_dataset, fg_iou=0.5, bg_iou=0.4,
                 focal_alpha=0.25, focal_gamma=2.0, box_rho=0.11, loc_weight=1.0,
                 class_weights=None, **kwargs):
        super().__init__(network, train_dataset, val_dataset, **kwargs)
        self.fg_iou, self.bg_iou = fg_iou, bg_iou
        self.targets = None
        self.loss = RetinaNetLoss(focal_alpha, focal_gamma, box_rho, loc_weight, class_weights)

    def build_net(self, ctx_list):
        net = super().build_net(ctx_list)
        self.targets = AnchorTargetGenerator(self.fg_iou, net.box_decoder.stds, self.bg_iou)
        return net

    def train_dataset(self):
        return self._train.transform(self.train_transform())

    def losses(self, net, parts):
        return self.loss(*dense_targets(net, parts, self.targets))
