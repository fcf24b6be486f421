"""Mask R-CNN bound to the training engine: Faster R-CNN's task with masks in its batches."""
from mxnet import autograd

from ..data.batchify import Pad, PadImages, PadMasks, Tuple
from ..data.rcnn_transforms import MaskRCNNTrainTransform
from ..losses import MaskLoss
from ..metrics.coco import COCODetectionMetric
from ..metrics.evaluation import evaluate_voc07
from ..nn import MaskTargetGenerator
from .faster_rcnn import FasterRCNNTask


class MaskRCNNTask(FasterRCNNTask):
    """Mask R-CNN: :class:`FasterRCNNTask`'s parameters; the train dataset's items carry
    their masks (``(image, label, masks)``: a dataset made with ``masks=True``).

    A training batch is ``(images, sizes, masks, labels)``, the masks ``B x G x H x W`` at
    the images' padded size. The losses are Faster R-CNN's four and ``loss_mask``
    (:class:`~gluondet.losses.MaskLoss`) of the positive regions' masks against the
    ground truth pooled on them (:class:`~gluondet.nn.MaskTargetGenerator`). No mixup:
    GluonCV's Mask R-CNN has none.
    """

    supports_mixup = False
    name = 'mask_rcnn'
    #: The validation's COCO numbers of the boxes and masks, reported beside VOC07's mAP
    COCO_RESULTS = {'bbox_AP': ('stats', 'AP'), 'mask_AP': ('segm_stats', 'AP'),
                    'mask_AP50': ('segm_stats', 'AP50')}

    def __init__(self, network, train_dataset, val_dataset, **kwargs):
        if kwargs.get('auto_augment') is not None:
            raise ValueError('Mask R-CNN: auto_augment does not move masks; train without it')
        super().__init__(network, train_dataset, val_dataset, **kwargs)
        self.mask_loss = MaskLoss()
        self.mask_targets = None

    def build_net(self, ctx_list):
        net = super().build_net(ctx_list)
        self.mask_targets = MaskTargetGenerator(net.mask_size)
        self.train_batchify = Tuple(PadImages(self.multiple), PadMasks(self.multiple),
                                    Pad(pad_val=-1))     # of _MasksBeforeLabels's items
        return net

    def train_transform(self):
        return MaskRCNNTrainTransform(self.short, self.max_size, augment=self.augment)

    def train_dataset(self):
        return self._train.transform(_MasksBeforeLabels(self.train_transform()))

    def validate(self, net, ctx_list, group=None):
        """VOC07 mAP of the boxes, and COCO AP of the boxes and masks (``bbox_AP``,
        ``mask_AP``, ``mask_AP50``: pycocotools' numbers) against the val dataset's COCO
        ground truth (its json, or ``coco_ground_truth()``), in one pass."""
        coco = COCODetectionMetric(self._val, masks=True)
        result = evaluate_voc07(self.predictor(net, ctx_list), self._val, self.val_batch_size,
                                num_workers=self.num_workers, metrics=[coco], group=group)
        coco.get()
        for name, (table, key) in self.COCO_RESULTS.items():
            result[name] = getattr(coco, table)[key]
        return result

    def losses(self, net, parts):
        forwards, masks = [], ([], [], [])
        for part in parts:
            columns, (mask_preds, rois, matches), weight = self._forward(net, part)
            with autograd.pause():
                targets = self.mask_targets(rois, matches, part[2])
            for column, value in zip(masks, (mask_preds, targets, columns[-1][:, :, 0])):
                column.append(value)
            forwards.append((columns, weight))
        losses = self._weighted(self.loss(*zip(*(f[0] for f in forwards))),
                                [f[1] for f in forwards])
        losses.update(self.mask_loss(*masks))
        return losses


class _MasksBeforeLabels:
    """The train transform's ``(image, label, masks)`` as ``(image, masks, label)``: batches
    keep their labels last, as every task's."""

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, *item):
        image, label, masks = self.transform(*item)
        return image, masks, label
