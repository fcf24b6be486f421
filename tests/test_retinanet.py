"""RetinaNet: the zoo, its anchors and heads, focal loss, targets with an ignore band, the
per-level post-processing against a numpy reference, and the task on the engine."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd

from gluondet.losses import FocalLoss, RetinaNetLoss
from gluondet.model_zoo import get_model, get_model_list
from gluondet.model_zoo.retinanet import RetinaNet
from gluondet.nn import AnchorTargetGenerator, LevelTopKNMS, retina_anchor_shapes

NAMES = [n for n in get_model_list() if n.startswith('retinanet_')]


def test_zoo_names():
    backbones = ('resnet18_v1b', 'resnet34_v1b', 'resnet50_v1b', 'resnet101_v1b',
                 'mobilenet1.0')
    assert sorted(NAMES) == sorted('retinanet_%s_%s' % (b, d) for b in backbones
                                   for d in ('voc', 'coco', 'custom'))
    assert len(get_model('retinanet_resnet50_v1b_coco', pretrained_base=False).classes) == 80
    assert len(get_model('retinanet_mobilenet1.0_voc', pretrained_base=False).classes) == 20
    with pytest.raises(ValueError, match='classes'):
        get_model('retinanet_resnet18_v1b_custom', pretrained_base=False)


def test_anchor_shapes_are_the_papers():
    shapes = np.array(retina_anchor_shapes(8))
    assert shapes.shape == (9, 2)
    areas = shapes[:, 0] * shapes[:, 1]
    np.testing.assert_allclose(np.sqrt(areas), np.repeat([32, 32 * 2 ** (1 / 3),
                                                          32 * 2 ** (2 / 3)], 3), rtol=1e-6)
    np.testing.assert_allclose(shapes[:3, 1] / shapes[:3, 0], [0.5, 1, 2], rtol=1e-6)


@pytest.fixture(scope='module')
def small_net():
    net = get_model('retinanet_resnet18_v1b_custom', classes=['a', 'b'], pretrained_base=False)
    net.initialize()
    return net


def test_structure_heads_prior_and_outputs(small_net):
    net = small_net
    x = mx.nd.random.uniform(shape=(2, 3, 128, 192))
    with autograd.train_mode():
        cls_preds, box_preds, anchors = net(x)
    cells = sum((128 // s) * (192 // s) for s in (8, 16, 32, 64)) + 1 * 2   # P7 1 x 2
    assert cls_preds.shape == (2, cells * 9, 2) and box_preds.shape == (2, cells * 9, 4)
    assert anchors.shape == (1, cells * 9, 4)
    # the first anchor: centre (4, 4) of the first P3 cell, 32 px area, ratio 0.5 (h / w)
    np.testing.assert_allclose(anchors[0, 0].asnumpy(), [4, 4, 32 * 2 ** 0.5, 32 / 2 ** 0.5],
                               rtol=1e-5)
    # prior 0.01 on every class logit's bias; 4 conv 3x3 of 256 + ReLU per head
    bias = net.class_predictors[0].bias.data().asnumpy()
    np.testing.assert_allclose(1 / (1 + np.exp(-bias)), 0.01, rtol=1e-5)
    convs = list(net.class_head.convs)
    assert len(convs) == 4 and all(c._channels == 256 and c._kwargs['kernel'] == (3, 3)
                                   for c in convs)
    ids, scores, boxes = net(x)
    assert ids.shape == (2, 100, 1) and scores.shape == (2, 100, 1) and boxes.shape == (2, 100, 4)
    # at the prior no anchor reaches the 0.05 threshold: every row is padding
    assert (ids.asnumpy() == -1).all()


def test_head_norms_batch_per_level_and_group_shared():
    x = mx.nd.array(np.random.RandomState(0).uniform(-2, 2, (2, 3, 128, 128)))
    for norm, count in (('batch', 4 * 5), ('group', 4)):
        net = get_model('retinanet_resnet18_v1b_custom', classes=['a'], pretrained_base=False,
                        head_channels=32, head_norm=norm)
        net.initialize()
        assert len(net.class_head.norms) == count and len(net.box_head.norms) == count
        with autograd.record():
            cls_preds = net(x)[0]
        cls_preds.backward()    # MXNet's CPU BatchNorm updates its running statistics here
        assert np.isfinite(cls_preds.asnumpy()).all()
        if norm == 'batch':
            # each level's BatchNorm saw only its own level: five different running means
            means = [bn.running_mean.data().asnumpy() for bn in net.class_head.norms[:5]]
            assert all(not np.allclose(means[0], m) for m in means[1:])
    with pytest.raises(ValueError, match='head_norm'):
        get_model('retinanet_resnet18_v1b_custom', classes=['a'], pretrained_base=False,
                  head_norm='layer')


def test_reset_class_reuses_named_rows(small_net):
    net = get_model('retinanet_resnet18_v1b_custom', classes=['a', 'b'], pretrained_base=False)
    net.initialize()
    net(mx.nd.zeros((1, 3, 128, 128)))
    old = net.class_predictors[0].weight.data().asnumpy().reshape(9, 2, -1)
    net.reset_class(['b', 'c', 'a'], reuse_weights=['a', 'b'])
    new = net.class_predictors[0].weight.data().asnumpy().reshape(9, 3, -1)
    np.testing.assert_array_equal(new[:, 0], old[:, 1])
    np.testing.assert_array_equal(new[:, 2], old[:, 0])
    assert net(mx.nd.zeros((1, 3, 128, 128)))[0].shape == (1, 100, 1)
    assert net.classes == ('b', 'c', 'a')


def _focal_reference(x, t, alpha, gamma):
    p = 1 / (1 + np.exp(-x))
    pt = np.where(t == 1, p, 1 - p)
    at = 1 if alpha < 0 else np.where(t == 1, alpha, 1 - alpha)
    return -at * (1 - pt) ** gamma * np.log(pt)


@pytest.mark.parametrize('alpha, gamma', [(0.25, 2.0), (0.5, 0.0), (0.75, 1.5), (-1, 2.0)])
def test_focal_loss_is_the_papers_formula(alpha, gamma):
    rng = np.random.RandomState(0)
    x = rng.uniform(-8, 8, (4, 50, 3)).astype(np.float64)
    t = (rng.uniform(size=x.shape) > 0.7).astype(np.float64)
    got = FocalLoss(alpha, gamma)(mx.nd.array(x, dtype='float64'),
                                  mx.nd.array(t, dtype='float64')).asnumpy()
    np.testing.assert_allclose(got, _focal_reference(x, t, alpha, gamma), rtol=1e-6, atol=1e-12)
    # float32, logits far out: finite, no log(0)
    far = FocalLoss(alpha, gamma)(mx.nd.array([[-100., 100.]]), mx.nd.array([[1., 0.]]))
    assert np.isfinite(far.asnumpy()).all()


@pytest.mark.parametrize('alpha, gamma', [(0.25, 2.0), (-1, 1.0), (0.75, 1.5)])
def test_focal_loss_gradient_is_the_papers(alpha, gamma):
    """d FL / d x: (1 - p)^g (g p log p - (1 - p)) for a positive, p^g (p - g (1 - p)
    log(1 - p)) for a negative, times alpha_t."""
    rng = np.random.RandomState(0)
    x = rng.uniform(-8, 8, (3, 40, 2))
    t = (rng.uniform(size=x.shape) > 0.7).astype(np.float64)
    logits = mx.nd.array(x, dtype='float64')
    logits.attach_grad()
    with mx.autograd.record():
        loss = FocalLoss(alpha, gamma)(logits, mx.nd.array(t, dtype='float64'))
    loss.backward()
    p = 1 / (1 + np.exp(-x))
    pos = (1 - p) ** gamma * (gamma * p * np.log(p) - (1 - p))
    neg = p ** gamma * (p - gamma * (1 - p) * np.log(1 - p))
    at = 1 if alpha < 0 else np.where(t == 1, alpha, 1 - alpha)
    np.testing.assert_allclose(logits.grad.asnumpy(), at * np.where(t == 1, pos, neg),
                               rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize('alpha', [0.25, -1])
def test_retinanet_loss_normalizes_by_positives_over_contexts_and_ignores(alpha):
    rng = np.random.RandomState(1)
    cls = [mx.nd.array(rng.normal(size=(2, 6, 3))) for _ in range(2)]
    box = [mx.nd.array(rng.normal(size=(2, 6, 4))) for _ in range(2)]
    cls_t = [mx.nd.array([[0, 1, -1, 3, 0, 0], [0, 0, 0, 0, 0, 0]]),
             mx.nd.array([[2, 0, 0, 0, -1, 0], [0, 0, 1, 0, 0, 0]])]
    box_t = [mx.nd.array(rng.normal(size=(2, 6, 4))) for _ in range(2)]
    weights = (1., 2., 0.5)
    out = RetinaNetLoss(alpha=alpha, class_weights=weights, loc_weight=2.0)(cls, box, cls_t,
                                                                           box_t)
    positives = 4
    for k in range(2):
        c, t = cls[k].asnumpy(), cls_t[k].asnumpy()
        onehot = np.zeros_like(c)
        for (i, j), v in np.ndenumerate(t):
            if v > 0:
                onehot[i, j, int(v) - 1] = 1
        focal = _focal_reference(c, onehot, alpha, 2.0) * (t >= 0)[..., None] * np.array(weights)
        np.testing.assert_allclose(out['loss_cls'][k].asnumpy(), focal.sum(axis=(1, 2)) / positives,
                                   rtol=1e-5)
        diff = np.abs(box[k].asnumpy() - box_t[k].asnumpy())
        l1 = np.where(diff > 0.11, diff - 0.055, 0.5 / 0.11 * diff ** 2) * (t > 0)[..., None]
        np.testing.assert_allclose(out['loss_box'][k].asnumpy(),
                                   2.0 * l1.sum(axis=(1, 2)) / positives, rtol=1e-5)


def test_targets_ignore_the_band_between_04_and_05():
    # anchors (center format) 10 px squares; one ground truth; IoUs 1, 0.45, 0.2, 0
    anchors = mx.nd.array([[[5, 5, 10, 10], [5, 5, 10, 10 / 0.45], [5, 5, 10, 50],
                            [100, 100, 10, 10]]])
    gt = mx.nd.array([[[0, 0, 10, 10], [-1, -1, -1, -1]]])
    ids = mx.nd.array([[[1], [-1]]])
    cls_t, box_t = AnchorTargetGenerator(0.5, (1, 1, 1, 1), ignore_thresh=0.4)(anchors, gt, ids)
    np.testing.assert_array_equal(cls_t.asnumpy(), [[2, -1, 0, 0]])
    assert (box_t.asnumpy()[0, 1:] == 0).all()
    plain, _ = AnchorTargetGenerator(0.5, (1, 1, 1, 1))(anchors, gt, ids)
    np.testing.assert_array_equal(plain.asnumpy(), [[2, 0, 0, 0]])


def _iou(a, b):
    w = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0


def _level_nms_reference(probs, boxes, thresh, nms_thresh, topk, post):
    """Per level: the topk (class, anchor) scores above thresh; then NMS per class; post best."""
    cands = []
    for p, b in zip(probs, boxes):
        flat = [(p[a, c], c, a) for c in range(p.shape[1]) for a in range(p.shape[0])
                if p[a, c] > thresh]
        flat.sort(key=lambda v: -v[0])
        cands += [(s, c, b[a]) for s, c, a in flat[:topk]]
    cands.sort(key=lambda v: -v[0])
    kept = []
    for s, c, box in cands:
        if all(k[1] != c or _iou(k[2], box) <= nms_thresh for k in kept):
            kept.append((s, c, box))
    return kept[:post]


def test_level_topk_nms_matches_a_reference():
    rng = np.random.RandomState(3)
    sizes, classes = (40, 12, 3), 3
    probs = [rng.uniform(0, 1, (1, n, classes)).astype(np.float32) for n in sizes]
    centers = [rng.uniform(0, 60, (1, n, 2)) for n in sizes]
    boxes = [np.concatenate([c - 10, c + rng.uniform(5, 20, c.shape)], -1).astype(np.float32)
             for c in centers]
    block = LevelTopKNMS(score_thresh=0.3, nms_thresh=0.5, nms_topk=20, post_nms=30)
    ids, scores, out_boxes = block(*[mx.nd.array(v) for v in probs + boxes])
    want = _level_nms_reference([p[0] for p in probs], [b[0] for b in boxes], 0.3, 0.5, 20, 30)
    got = [(s, int(c), b) for s, c, b in zip(scores[0, :, 0].asnumpy(), ids[0, :, 0].asnumpy(),
                                             out_boxes[0].asnumpy()) if c >= 0]
    assert len(got) == len(want) > 10
    for (s, c, b), (ws, wc, wb) in zip(got, want):
        assert c == wc and abs(s - ws) < 1e-6
        np.testing.assert_allclose(b, wb, rtol=1e-6)


def test_hybridized_equals_imperative_and_is_a_singlestage_detector():
    from gluondet.deploy import detecting_random_weights
    net = get_model('retinanet_mobilenet1.0_custom', classes=['a', 'b'], pretrained_base=False)
    x = mx.nd.array(np.random.RandomState(0).uniform(-2, 2, (2, 3, 128, 128)))
    detecting_random_weights(net, x)
    assert isinstance(net, RetinaNet)
    want = [o.asnumpy() for o in net(x)]
    assert (want[0] >= 0).sum() > 50
    net.hybridize(static_alloc=True, static_shape=True)
    for got, expected in zip(net(x), want):
        np.testing.assert_allclose(got.asnumpy(), expected, rtol=1e-5, atol=1e-4)


def _task(**kwargs):
    from gluondet.data import DemoDetection
    from gluondet.tasks import RetinaNetTask
    train = DemoDetection('train', num_images=4, image_size=96)
    return RetinaNetTask('retinanet_resnet18_v1b_custom', train, train, short=96, max_size=128,
                         **kwargs)


def test_freeze_bn_and_blocks_choose_the_trainable_parameters():
    task = _task(pretrained_base=False, freeze_blocks=(0, 1))
    net = task.build_net([mx.cpu()])
    names = set(task.train_params(net))
    backbone = net.features.backbone
    assert not names & set(backbone.stage_params('stem', 'layer1'))
    assert set(backbone.stage_params('layer2')) <= names      # BatchNorm too: from scratch
    assert set(net.class_head.collect_params()) <= names
    frozen = _task(pretrained_base=False, freeze_bn=True)
    net = frozen.build_net([mx.cpu()])
    names = set(frozen.train_params(net))
    from gluondet.model_zoo.detector import norm_param_names
    norms = set(norm_param_names(net.features.backbone))
    assert norms and not names & norms
    assert all(bn._kwargs['use_global_stats'] for bn in _batchnorms(net.features.backbone))
    trained = _task(pretrained_base=False, freeze_bn=False)
    net = trained.build_net([mx.cpu()])
    assert set(norm_param_names(net.features.backbone)) <= set(trained.train_params(net))
    assert not any(bn._kwargs['use_global_stats'] for bn in _batchnorms(net.features.backbone))
    with pytest.raises(ValueError, match='blocks are 0'):
        _task(freeze_blocks=(5,))


def _batchnorms(block):
    found = []
    block.apply(lambda b: found.append(b) if isinstance(b, mx.gluon.nn.BatchNorm) else None)
    return found


def test_l1_regularizer_is_a_loss_term_of_the_trainable_conv_weights():
    from gluondet.data.batchify import Pad, PadImages, Tuple
    task = _task(pretrained_base=False, l1=1e-3, freeze_blocks=(0,))
    net = task.build_net([mx.cpu()])
    params = task.train_params(net)
    train = task.train_dataset()
    batch = Tuple(PadImages(128), Pad(pad_val=-1))([train[0], train[1]])
    with autograd.record():
        losses = task.losses(net, [batch])
    assert sorted(losses) == ['loss_box', 'loss_cls', 'loss_reg']
    want = 1e-3 * sum(float(np.abs(p.data().asnumpy()).sum()) for name, p in params.items()
                      if name.endswith('weight') and len(p.shape) == 4)
    assert abs(float(losses['loss_reg'][0].asscalar()) - want) < 1e-4 * want
    stem = net.features.backbone.conv1.weight.name
    assert stem not in params


def test_fine_tune_starts_from_a_trained_model_and_renews_the_class_head(tmp_path):
    from gluondet.data import DemoDetection
    from gluondet.engine import TrainConfig, fit
    from gluondet.tasks import RetinaNetTask
    train = DemoDetection('train', num_images=4, image_size=96)
    kwargs = dict(short=96, max_size=128, pretrained_base=False,
                  model_kwargs=dict(head_channels=32))
    first = RetinaNetTask('retinanet_resnet18_v1b_custom', train, train, **kwargs)
    config = TrainConfig(batch_size=2, num_workers=0, epochs=1, lr=0.01, save_interval=0,
                         val_interval=1, log_interval=1, save_prefix=str(tmp_path / 'a'))
    trained = fit(first, config).net
    params = str(tmp_path / 'a_best.params')
    # the same classes: every weight is the trained one
    again = RetinaNetTask('retinanet_resnet18_v1b_custom', train, train, fine_tune=params,
                          **dict(kwargs, model_kwargs={}))   # the json says head_channels
    net = again.build_net([mx.cpu()])
    mine = net._collect_params_with_prefix()   # structural names: the prefixes' counters differ
    for name, p in trained._collect_params_with_prefix().items():
        np.testing.assert_array_equal(p.data().asnumpy(), mine[name].data().asnumpy())
    # other classes: the shared ones keep their class rows, the box head stays
    classes = ('star', 'circle', 'hexagon')
    other = RetinaNetTask('retinanet_resnet18_v1b_custom', train, train, classes=classes,
                          fine_tune=params, **kwargs)
    net = other.build_net([mx.cpu()])
    assert net.classes == classes
    old = trained.class_predictors[0].weight.data().asnumpy().reshape(9, 5, -1)
    new = net.class_predictors[0].weight.data().asnumpy().reshape(9, 3, -1)
    star, circle = train.classes.index('star'), train.classes.index('circle')
    np.testing.assert_array_equal(new[:, 0], old[:, star])
    np.testing.assert_array_equal(new[:, 1], old[:, circle])
    np.testing.assert_array_equal(net.box_predictors[0].weight.data().asnumpy(),
                                  trained.box_predictors[0].weight.data().asnumpy())
    with pytest.raises(ValueError, match='no such file'):
        RetinaNetTask('retinanet_resnet18_v1b_custom', train, train,
                      fine_tune=str(tmp_path / 'none.params'))
