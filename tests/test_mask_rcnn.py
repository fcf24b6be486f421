"""Mask R-CNN: the zoo's names and GluonCV's settings, GluonCV checkpoint parity (detections and
masks) on a real photo, any batch size, training outputs, reset_class."""
import os

import numpy as np
import pytest
import mxnet as mx
from mxnet import autograd

import gluoncv

from gluondet.model_zoo import get_model, get_model_list
from gluondet.model_zoo.store import MODEL_SHA1

C4 = ['mask_rcnn_resnet18_v1b_coco', 'mask_rcnn_resnet50_v1b_coco',
      'mask_rcnn_resnet101_v1d_coco']
FPN = ['mask_rcnn_fpn_resnet18_v1b_coco', 'mask_rcnn_fpn_resnet50_v1b_coco',
       'mask_rcnn_fpn_resnet101_v1d_coco']
SYNCBN = ['mask_rcnn_fpn_syncbn_resnet18_v1b_coco', 'mask_rcnn_fpn_syncbn_mobilenet1_0_coco']
GLUONCV_NAMES = C4 + FPN + SYNCBN
PUBLISHED = C4 + FPN


def _ours(name):
    """gluondet's name of GluonCV's (``mobilenet1_0`` is ``mobilenet1.0`` in the zoo)."""
    return name.replace('mobilenet1_0', 'mobilenet1.0')


def test_zoo_has_gluoncvs_names_and_their_published_files():
    names = set(get_model_list())
    assert {_ours(n) for n in GLUONCV_NAMES} | {'custom_mask_rcnn_fpn'} <= names
    assert {n for n in MODEL_SHA1 if n.startswith('mask_rcnn')} == set(PUBLISHED)


@pytest.mark.parametrize('name', GLUONCV_NAMES)
def test_settings_equal_gluoncvs(name):
    ref = gluoncv.model_zoo.get_model(name, pretrained_base=False)
    net = get_model(_ours(name), pretrained_base=False)
    assert (net.short, net.max_size) == (ref.short, ref.max_size)
    assert (net.nms_thresh, net.nms_topk, net.post_nms) == (
        ref.nms_thresh, ref.nms_topk, ref.post_nms)
    assert net.proposal.counts(False) == (ref.rpn._test_pre_nms, ref.rpn._test_post_nms)
    assert net.proposal.counts(True)[1] == ref.rpn._train_post_nms
    assert net.proposal.min_size == ref.rpn.region_proposer._min_size
    assert (net.sampler.num_sample, net.sampler.max_pos) == (ref._num_sample,
                                                             ref.sampler._max_pos)
    assert net.roi_size == tuple(ref._roi_size)
    assert net.mask_size == tuple(ref._target_roi_size)
    assert net.rcnn_max_dets == ref._rcnn_max_dets
    assert net.box_decoder.clip == ref.box_decoder._clip
    assert net.proposal.clip == ref.rpn.region_proposer._box_decoder._clip


@pytest.fixture
def masked_gluoncv_roialign(monkeypatch):
    """GluonCV's FPN pools other levels' ROIs with batch index -1, which MXNet's CPU ROIAlign
    leaves uninitialized (see tests/test_faster_rcnn.py): the reference pools them all and
    zeroes them, as GPUs do."""
    original = mx.nd.contrib.ROIAlign

    def masked(data, rois, *args, **kwargs):
        out = original(data, mx.nd.concat(mx.nd.relu(rois[:, :1]), rois[:, 1:], dim=1),
                       *args, **kwargs)
        return mx.nd.where(rois[:, 0] >= 0, out, mx.nd.zeros_like(out))
    monkeypatch.setattr(mx.nd.contrib, 'ROIAlign', masked)


def _photo(bccd_root, height, width):
    image = mx.image.imread(os.path.join(bccd_root, 'BCCD', 'JPEGImages',
                                         'BloodImage_00001.jpg'))
    x = mx.nd.image.normalize(mx.nd.image.to_tensor(mx.image.imresize(image, width, height)),
                              mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    return x.expand_dims(0)


def _gluoncv_and_ours(name, x, tmp_path, detections=100, proposals=200):
    """GluonCV's net (random weights, confident varied classes) and ours loaded from its file,
    both keeping ``proposals`` test proposals and masking the best ``detections``."""
    mx.random.seed(3)
    ref = gluoncv.model_zoo.get_model(name, pretrained_base=False)
    ref.rpn._test_post_nms = ref._rpn_test_post_nms = proposals
    ref._rcnn_max_dets = detections
    ref.initialize()
    ref(x)
    for p in ref.class_predictor.collect_params().values():
        p.set_data(mx.nd.random.normal(0, 0.05, p.shape))
    for key, p in ref.mask.collect_params().items():     # masks far from 0.5 and varied
        if key.endswith(('running_var', 'gamma')):
            p.set_data(mx.nd.random.uniform(0.5, 1.5, p.shape))
        elif key.endswith(('running_mean', 'beta')):
            p.set_data(mx.nd.random.normal(0, 0.1, p.shape))
        elif key.startswith(ref.mask.mask.prefix):
            p.set_data(mx.nd.random.normal(0, 0.5, p.shape))
    path = str(tmp_path / 'gluoncv.params')
    ref.save_parameters(path)
    net = get_model(_ours(name), pretrained_base=False, rcnn_max_dets=detections,
                    rpn_test_post_nms=proposals)
    net.load_parameters(path)
    net.hybridize()
    return ref, net


def _assert_same_detections_and_masks(expected, result):
    ids, scores, boxes, masks = (o.asnumpy() for o in expected)
    ours = [o.asnumpy() for o in result]
    valid = ids[0, :, 0] >= 0
    assert valid.sum() > 20
    assert ours[3].shape == masks.shape
    np.testing.assert_array_equal(ours[0][0, valid], ids[0, valid])
    np.testing.assert_allclose(ours[1][0, valid], scores[0, valid], atol=1e-4)
    np.testing.assert_allclose(ours[2][0, valid], boxes[0, valid], atol=1e-2)
    np.testing.assert_allclose(ours[3][0, valid], masks[0, valid], atol=1e-4)
    assert masks[0, valid].std() > 0.02       # masks that differ, not one constant


@pytest.mark.parametrize('name', GLUONCV_NAMES)
def test_gluoncv_params_give_gluoncvs_detections_and_masks_on_a_photo(
        name, bccd_root, tmp_path, masked_gluoncv_roialign):
    x = _photo(bccd_root, 320, 416)
    # C4 runs layer4 on each masked detection: fewer of them
    counts = (40, 100) if name in C4 else (100, 200)
    ref, net = _gluoncv_and_ours(name, x, tmp_path, *counts)
    _assert_same_detections_and_masks(ref(x), net(x))


def test_pasted_like_gluoncvs_evaluation_on_a_photos_detections(bccd_root, tmp_path,
                                                                  masked_gluoncv_roialign):
    """gluondet.masks.paste of the network's masks on its boxes is GluonCV's fill, the paste
    of its Mask R-CNN evaluation, on the detections of a photo (boxes crossing its border
    included)."""
    from gluoncv.data.transforms.mask import fill
    from gluondet.masks import paste
    x = _photo(bccd_root, 320, 416)
    ref, _ = _gluoncv_and_ours('mask_rcnn_fpn_resnet18_v1b_coco', x, tmp_path)
    ids, scores, boxes, masks = (o.asnumpy()[0] for o in ref(x))
    valid = ids[:, 0] >= 0
    boxes, masks = boxes[valid], masks[valid]
    assert ((boxes[:, 2] > 415) | (boxes[:, 3] > 319) | (boxes.min(1) < 0)).any()
    ours = paste(masks, boxes, (416, 320))
    theirs = fill(masks, boxes, (416, 320))
    np.testing.assert_array_equal(ours, np.asarray(theirs))
    assert (ours.reshape(len(ours), -1).max(axis=1) > 0).sum() > 20     # masks, not blanks


def test_a_batch_gives_each_images_detections_and_masks(bccd_root):
    mx.random.seed(1)
    net = get_model('mask_rcnn_fpn_resnet18_v1b_custom', classes=['a', 'b', 'c'],
                    pretrained_base=False)
    net.initialize()
    photo = _photo(bccd_root, 256, 320)
    x = mx.nd.concat(photo, photo[:, :, ::-1], dim=0)
    net.hybridize()
    batch = [o.asnumpy() for o in net(x)]
    for b in range(2):
        alone = [o.asnumpy() for o in net(x[b:b + 1])]
        for got, want in zip(batch, alone):
            np.testing.assert_allclose(got[b:b + 1], want, atol=1e-5)


@pytest.mark.parametrize('name', ['mask_rcnn_fpn_resnet18_v1b_custom',
                                  'mask_rcnn_resnet18_v1b_custom'])
def test_training_outputs_pick_each_positives_own_class(name):
    mx.random.seed(0)
    net = get_model(name, classes=['a', 'b', 'c'], pretrained_base=False)
    net.initialize()
    x = mx.nd.random.uniform(-1, 1, shape=(2, 3, 192, 256))
    gt = mx.nd.array([[[10, 10, 100, 100], [50, 60, 200, 180]],
                      [[20, 20, 80, 90], [-1, -1, -1, -1]]])
    gt_ids = mx.nd.array([[[0], [2]], [[1], [-1]]])
    net.hybridize()
    with autograd.train_mode():
        out = net(x, gt, gt_ids)
    box_masks, mask_preds, rois, matches = out[7], out[8], out[9], out[10]
    num_pos = net.sampler.max_pos
    assert mask_preds.shape == (2, num_pos) + net.mask_size
    assert rois.shape == (2, num_pos, 4) and matches.shape == (2, num_pos)
    positive = box_masks.asnumpy()[:, :, 0] > 0
    assert positive[0].sum() >= 2 and positive[1].sum() >= 1
    # the positives' boxes overlap their matched ground truth by IoU >= 0.5
    from gluondet.bbox import bbox_iou
    for b in range(2):
        for k in np.flatnonzero(positive[b]):
            m = int(matches[b, k].asscalar())
            iou = bbox_iou(rois[b, k:k + 1].asnumpy(), gt[b, m:m + 1].asnumpy())[0, 0]
            assert iou >= 0.5


def test_reset_class_keeps_the_mask_maps_of_kept_classes():
    net = get_model('mask_rcnn_fpn_resnet18_v1b_custom', classes=['a', 'b', 'c'],
                    pretrained_base=False)
    net.initialize()
    net(mx.nd.zeros((1, 3, 128, 128)))
    old = net.mask.mask.weight.data().asnumpy()
    net.reset_class(['c', 'z'], reuse_weights=['c'])
    new = net.mask.mask.weight.data().asnumpy()
    assert new.shape[0] == 2
    np.testing.assert_array_equal(new[0], old[2])
    ids, scores, boxes, masks = net(mx.nd.zeros((1, 3, 128, 128)))
    assert masks.shape[2:] == net.mask_size and ids.asnumpy().max() < 2


def test_custom_mask_rcnn_fpn_takes_gluoncvs_keywords():
    kwargs = dict(classes=['a', 'b'], base_network_name='resnet18_v1b', num_fpn_filters=64,
                  num_box_head_dense_filters=256, base_size=16, scales=(2, 4, 8, 16, 32),
                  num_fcn_convs=2, min_stage=2, max_stage=6, target_roi_scale=2,
                  per_device_batch_size=2, max_num_gt=100, short=512, max_size=640,
                  rpn_channel=256)
    ref = gluoncv.model_zoo.get_model('custom_mask_rcnn_fpn', pretrained_base=False,
                                      roi_size=(14, 14), strides=(4, 8, 16, 32, 64),
                                      alloc_size=(384, 384), **kwargs)
    net = get_model('custom_mask_rcnn_fpn', pretrained_base=False, **kwargs)
    ref.initialize()
    net.initialize()
    x = mx.nd.zeros((1, 3, 128, 160))
    ref(x)
    net(x)
    assert net.mask_size == tuple(ref._target_roi_size) == (28, 28)
    assert (net.short, net.max_size) == (ref.short, ref.max_size)
    theirs = {k: v.shape for k, v in ref._collect_params_with_prefix().items()
              if not k.startswith('features.')}
    ours = {k: v.shape for k, v in net._collect_params_with_prefix().items()
            if not k.startswith(('backbone.', 'fpn.'))}
    renamed = {k.replace('rpn_head.', 'rpn.rpn_head.').replace('anchor_generators.',
                                                               'rpn.anchor_generator.'): v
               for k, v in ours.items()}
    assert renamed == theirs
    with pytest.raises(ValueError, match='target_roi_scale must be 2'):
        get_model('custom_mask_rcnn_fpn', pretrained_base=False, classes=['a'],
                  target_roi_scale=1)
