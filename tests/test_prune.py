"""gluondet prune (NVIDIA TAO's prune): the criteria, the channel groups read from each
detector's graph, exactness at threshold 0, and a pruned model that runs, rebuilds from its
two files, exports to ONNX with parity and retrains through the scripts' --pruned-model."""
import importlib
import json
import os

import mxnet as mx
from mxnet import gluon
import numpy as np
import pytest

from gluondet.errors import UserError
from gluondet import cli
from gluondet.data.demo import DEMO_CLASSES
from gluondet.deploy import compare_detections, detecting_random_weights
from gluondet.deploy.networks import load_network
from gluondet.deploy.predictor import Predictor
from gluondet.deploy.symbol import ssd_body
from gluondet.engine.checkpoint import save_params
from gluondet.model_zoo import get_model
from gluondet.model_zoo.pruned import apply_channels, named_blocks
from gluondet.tasks.base import check_pruned_model
from gluondet.tools.prune import (AGNOSTIC, count_macs, count_params, filter_scores,
                                  kept_count, prune_model, trace_channels)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# family -> (zoo name, input (height, width), the task's meta beyond name and classes,
#            the training script and its network flags)
FAMILIES = {
    'ssd_mobilenet': ('ssd_300_mobilenet0.25_custom', (128, 128),
                      {'task': 'ssd', 'data_shape': [128, 128], 'steps': None},
                      'train_ssd.py', ['--network', 'mobilenet0.25', '--data-shape', '128']),
    'ssd_resnet': ('ssd_512_resnet50_v1_custom', (128, 128),
                   {'task': 'ssd', 'data_shape': [128, 128], 'steps': None},
                   'train_ssd.py', ['--network', 'resnet50_v1', '--data-shape', '128']),
    'retinanet': ('retinanet_resnet18_v1b_custom', (128, 128),
                  {'task': 'retinanet', 'short': 128, 'max_size': 128},
                  'train_retinanet.py', ['--network', 'resnet18_v1b', '--resize', '128',
                                         '--max-size', '128']),
    'faster_rcnn': ('faster_rcnn_fpn_resnet18_v1b_custom', (128, 160),
                    {'task': 'faster_rcnn', 'short': 128, 'max_size': 160},
                    'train_faster_rcnn.py', ['--network', 'resnet18_v1b', '--use-fpn',
                                             '--image-short', '128', '--image-max-size',
                                             '160']),
}
SMALL = 0.01    # filters scaled by this fall under the 0.1 threshold


def _scale(param, index, factor):
    if param is not None:
        value = param.data().asnumpy()
        value[index] *= factor
        param.set_data(mx.nd.array(value))


def _refit_ssd(net, x):
    """Box offsets of an SSD within 4 again (as `detecting_random_weights` leaves them):
    its boxes grow exponentially with the offsets, and ONNX and MXNet round huge ones apart."""
    body = gluon.SymbolBlock(ssd_body(net, x.shape[2:])[0], mx.sym.var('data'),
                             params=net.collect_params())
    box_preds = body(x)[1].asnumpy()
    factor = min(1 / box_preds.std(), 4 / np.abs(box_preds).max())
    for conv in net.box_predictors:
        conv.weight.set_data(conv.weight.data() * float(factor))
        conv.bias.set_data(conv.bias.data() * float(factor))


def _trained_like(name, shape, meta, folder, seed=0):
    """A training output of ``name`` with random weights that detect, in which a quarter of
    the channels of each prunable group of 16 or more are almost off (filters and biases
    scaled by SMALL, their norm layers' gamma too and beta 0), so pruning them changes the
    detections little; returns ``(params path, input batch)``."""
    net = get_model(name, classes=list(DEMO_CLASSES), pretrained_base=False)
    x = mx.nd.array(np.random.RandomState(seed).uniform(-2, 2, (1, 3) + shape))
    detecting_random_weights(net, x, seed)
    rng = np.random.RandomState(seed)
    graph = trace_channels(net, shape)
    groups = graph.groups
    for root in sorted({groups.find(p) for p in graph.producers}):
        members = [p for p in graph.producers if groups.find(p) == root]
        width = graph.blocks[members[0]].weight.shape[0]
        if groups.is_frozen(root) or width < 16:
            continue
        index = rng.choice(width, width // 4, replace=False)
        followers = [p for p, uses in graph.followers.items()
                     if any(u not in (None, AGNOSTIC) and groups.find(u) == root for u in uses)]
        for path in members + followers:
            block = graph.blocks[path]
            if hasattr(block, 'weight'):
                _scale(block.weight, index, SMALL)
                _scale(block.bias, index, SMALL)
            else:
                _scale(block.gamma, index, SMALL)
                _scale(block.beta, index, 0.)
    if hasattr(net, 'box_predictors') and not hasattr(net, 'box_head'):
        _refit_ssd(net, x)
    path = os.path.join(folder, 'model_best.params')
    save_params(net, path, {'meta': dict(meta, network=name, classes=list(DEMO_CLASSES))})
    return path, x


@pytest.fixture(scope='module', params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    """``(family, params, x, the unpruned network loaded as a user would, its outputs)``."""
    name, shape, meta, _, _ = FAMILIES[request.param]
    folder = str(tmp_path_factory.mktemp(request.param))
    params, x = _trained_like(name, shape, meta, folder)
    net, _ = load_network(params)
    return request.param, params, x, net, [o.asnumpy() for o in net(x)]


def _outputs(params, x):
    net, _ = load_network(params)
    return net, [o.asnumpy() for o in net(x)]


# ---------------------------------------------------------------- the criteria (TAO's)

def test_scores_are_l2_norms_normalized_per_layer():
    weight = np.array([[3., 4.], [0., 1.], [0., 0.]])        # norms 5, 1, 0
    np.testing.assert_allclose(filter_scores(weight, 'max'), [1, 0.2, 0])
    np.testing.assert_allclose(filter_scores(weight, 'L2'), np.array([5, 1, 0]) / 26 ** .5 * 3)
    with pytest.raises(ValueError, match='normalizer'):
        filter_scores(weight, 'mean')


@pytest.mark.parametrize('above, total, min_filters, granularity, expected', [
    (5, 64, 16, 8, 16), (17, 64, 16, 8, 24), (40, 64, 16, 8, 40), (63, 64, 16, 8, 64),
    (0, 8, 16, 8, 8), (3, 10, 1, 4, 4), (9, 10, 1, 4, 10), (0, 10, 1, 1, 1)])
def test_kept_count_respects_minimum_and_granularity(above, total, min_filters, granularity,
                                                     expected):
    scores = np.r_[np.ones(above), np.zeros(total - above)]
    assert kept_count(scores, 0.5, min_filters, granularity) == expected


# ---------------------------------------------------------------- every detector

def test_threshold_zero_changes_no_output(family, tmp_path):
    _, params, x, _, expected = family
    result = prune_model(params, str(tmp_path / 'p0'), threshold=0.0, log=lambda _: None)
    assert result['channels'] == {} and result['params_after'] == result['params_before']
    _, got = _outputs(result['params'], x)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    check_pruned_model(result['params'])     # pruned nothing: still a model to retrain


def test_pruned_model_runs_rebuilds_exports_with_parity(family, tmp_path):
    key, params, x, net, _ = family
    result = prune_model(params, str(tmp_path / 'pruned.params'), threshold=0.1, min_filters=8,
                         granularity=4, log=lambda _: None)
    channels = result['channels']
    assert channels and result['params_after'] < 0.9 * result['params_before']
    with open(result['json']) as f:
        described = json.load(f)
    assert described['meta']['pruned'] == {'channels': channels}
    assert described['prune']['pruning_threshold'] == 0.1

    # rebuilt from the two files alone: sizes as the table says, -nf and -g respected
    pruned, got = _outputs(result['params'], x)
    original = named_blocks(net)
    for path, counts in channels.items():
        before = original[path]
        width = (before.weight if hasattr(before, 'weight') else before.gamma).shape[0]
        assert counts['channels'] <= width
        assert counts['channels'] == width or (counts['channels'] % 4 == 0
                                               and counts['channels'] >= min(8, width))
    assert [o.shape for o in got] == [o.shape for o in net(x)]
    assert count_params(pruned) == result['params_after']
    assert count_macs(pruned, x.shape[2:]) < count_macs(net, x.shape[2:])

    # layers whose outputs are added (residual blocks, FPN) end with one width per group
    graph = trace_channels(pruned, x.shape[2:])
    widths = {}
    for path, block in graph.producers.items():
        widths.setdefault(graph.groups.find(path), set()).add(block.weight.shape[0])
    assert all(len(w) == 1 for w in widths.values())
    if key != 'ssd_mobilenet':
        assert max(sum(1 for p in graph.producers if graph.groups.find(p) == root)
                   for root in widths) >= 3

    # the prediction layers keep their outputs
    predictors = [p for p in original if p.startswith(('class_predictor', 'box_predictor'))
                  and hasattr(original[p], 'weight') or p in ('rpn_head.score', 'rpn_head.loc')]
    assert predictors
    for path in predictors:
        if path in channels:
            assert channels[path]['channels'] == original[path].weight.shape[0]

    # ONNX export of the pruned model (gluondet export's path) gives the same detections
    onnx = pytest.importorskip('onnx')  # noqa: F841
    pytest.importorskip('onnxruntime')
    from export_checks import run_onnx
    from gluondet.deploy.commands import export_model
    path = str(tmp_path / 'pruned.onnx')
    export_model(result['params'], path)
    comparison = compare_detections(pruned(x), run_onnx(path, x))
    assert comparison.ok and comparison.compared >= 10, str(comparison)


def _script(name):
    return importlib.import_module('gluondet.train.' + name[len('train_'):-len('.py')])


def test_pruned_model_retrains_through_the_script_flag(family, tmp_path, monkeypatch):
    key, params, x, _, _ = family
    result = prune_model(params, str(tmp_path / 'pruned'), threshold=0.1, min_filters=8,
                         granularity=4, log=lambda _: None)
    monkeypatch.setenv('GLUONDET_HOME', str(tmp_path / 'home'))
    from gluondet.data import demo
    monkeypatch.setitem(demo.DEFAULT_NUM_IMAGES, 'train', 4)
    monkeypatch.setitem(demo.DEFAULT_NUM_IMAGES, 'val', 2)
    _, _, _, script, network = FAMILIES[key]
    prefix = str(tmp_path / 'run_')
    argv = network + ['--dataset', 'demo', '--gpus', '', '--batch-size', '2',
                      '-j', '0', '--lr', '0.001', '--lr-decay-epoch', '10', '--val-interval',
                      '1', '--save-prefix', prefix, '--no-pretrained-base', '--pruned-model',
                      result['params'], '--log-interval', '1']
    if script == 'train_faster_rcnn.py':
        argv += ['--lr-warmup', '-1']
    fit = _script(script).main(argv + ['--epochs', '1'])
    assert fit.iteration == 2
    manifest, = [p for p in os.listdir(str(tmp_path)) if p.endswith('_last.json')]
    with open(str(tmp_path / manifest)) as f:
        assert json.load(f)['meta']['pruned'] == {'channels': result['channels']}
    best, = [p for p in os.listdir(str(tmp_path)) if p.endswith('_best.params')]
    retrained = Predictor.from_model(str(tmp_path / best))      # rebuilds the pruned widths
    assert retrained.classes == DEMO_CLASSES
    # the run resumes (same flags): the checkpoint's weights fit the pruned network
    resumed = _script(script).main(argv + ['--epochs', '2', '--resume', 'auto'])
    assert resumed.iteration == 4
    # and without --pruned-model: the checkpoint's meta.pruned rebuilds the network
    flag = argv.index('--pruned-model')
    again = _script(script).main(argv[:flag] + argv[flag + 2:] + ['--epochs', '3', '--resume',
                                                                  'auto'])
    assert again.iteration == 6


# ---------------------------------------------------------------- options and errors

@pytest.fixture(scope='module')
def ssd(tmp_path_factory):
    name, shape, meta, _, _ = FAMILIES['ssd_mobilenet']
    folder = str(tmp_path_factory.mktemp('ssd_options'))
    params, x = _trained_like(name, shape, meta, folder, seed=3)
    return params, x


@pytest.mark.parametrize('normalizer', ['max', 'L2'])
@pytest.mark.parametrize('equalization', ['union', 'intersection', 'arithmetic_mean',
                                          'geometric_mean'])
def test_every_criterion_gives_a_model_that_runs(ssd, tmp_path, normalizer, equalization):
    params, x = ssd
    result = prune_model(params, str(tmp_path / 'p'), normalizer, equalization, 0.5, 4, 2,
                         log=lambda _: None)
    assert all(c['channels'] % 2 == 0 or c['channels'] < 4 for c in result['channels'].values())
    net, _ = load_network(result['params'])
    assert net(x)[0].shape == (1, 100, 1)


def test_excluded_layers_keep_their_filters(ssd, tmp_path):
    params, _ = ssd
    net, _ = load_network(params)
    first = prune_model(params, str(tmp_path / 'all'), threshold=0.1, min_filters=4,
                        granularity=2, log=lambda _: None)['channels']
    targets = [p for p in sorted(first) if p.endswith('pointwise.conv')][:2]
    kept = prune_model(params, str(tmp_path / 'kept'), threshold=0.1, min_filters=4,
                       granularity=2, excluded=targets, log=lambda _: None)['channels']
    for path in targets:
        assert path not in kept or 'channels' not in kept[path] or \
            kept[path]['channels'] == named_blocks(net)[path].weight.shape[0]
        bn = path[:-len('conv')] + 'bn'
        assert bn not in kept
    assert len(kept) < len(first)


def test_pruning_a_pruned_model_merges_the_tables(ssd, tmp_path):
    params, x = ssd
    once = prune_model(params, str(tmp_path / 'once'), threshold=0.1, min_filters=4,
                       granularity=1, log=lambda _: None)
    twice = prune_model(once['params'], str(tmp_path / 'twice'), threshold=0.9, min_filters=4,
                        granularity=1, log=lambda _: None)
    with open(twice['json']) as f:
        table = json.load(f)['meta']['pruned']['channels']
    assert set(once['channels']) <= set(table) and twice['params_after'] < once['params_after']
    net, _ = load_network(twice['params'])
    assert net(x)[0].shape == (1, 100, 1)


def test_cli_prune_writes_a_model_export_and_predict_take(ssd, tmp_path, capsys):
    params, _ = ssd
    out = str(tmp_path / 'cli_pruned')
    assert cli.main(['prune', '-m', params, '-o', out, '-n', 'max', '-eq', 'union', '-pth',
                     '0.1', '-nf', '8', '-g', '8', '-el', '-k', 'tlt_encode']) == 0
    assert 'pruning ratio' in capsys.readouterr().out
    assert Predictor.from_model(out + '.params').classes == DEMO_CLASSES
    assert cli.main(['export', '--network', out + '.params', '--format', 'symbol', '-o',
                     str(tmp_path / 'sym')]) == 0


def _error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1] if err else ''


def test_bad_input_is_one_line(ssd, tmp_path, capsys):
    params, _ = ssd
    bare = str(tmp_path / 'bare.params')
    with open(params, 'rb') as src, open(bare, 'wb') as dst:
        dst.write(src.read())
    out = str(tmp_path / 'x')
    assert cli.main(['prune', '-m', bare, '-o', out]) == 1
    line = _error_line(capsys)
    assert line.startswith('gluondet prune: error:') and 'bare.json' in line
    assert cli.main(['prune', '-m', params, '-o', out, '-el', 'backbone.nope']) == 1
    assert 'not a convolution' in _error_line(capsys)
    assert cli.main(['prune', '-m', str(tmp_path / 'missing.params'), '-o', out]) == 1
    assert 'not found' in _error_line(capsys)
    assert cli.main(['prune', '-m', params, '-o', params]) == 1
    assert 'overwrite' in _error_line(capsys)
    assert cli.main(['prune', '-m', params, '-o', out, '-eq', 'mean']) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gluondet prune: error: equalization criterion (-eq) must be one of union, "
                   "intersection, arithmetic_mean, geometric_mean, got 'mean'"]
    assert cli.main(['prune', '-m', params, '-o', out, '-n', 'L1']) == 1
    assert 'normalizer (-n) must be one of max, L2' in _error_line(capsys)
    assert not os.path.exists(out + '.params')


def test_script_refuses_a_model_that_is_not_pruned(ssd, tmp_path):
    params, _ = ssd
    with pytest.raises(UserError, match='--pruned-model: .* is not a pruned model'):
        _script('train_ssd.py').main(['--network', 'mobilenet0.25', '--dataset', 'demo',
                                      '--gpus', '', '--pruned-model', params])


def test_apply_channels_refuses_what_it_cannot_resize():
    net = get_model('ssd_300_mobilenet0.25_custom', classes=['a'], pretrained_base=False)
    with pytest.raises(ValueError, match='not a layer'):
        apply_channels(net, {'features.nope': {'channels': 4}})
    with pytest.raises(ValueError, match='positive ints'):
        apply_channels(net, {'features.backbone.stem.conv': {'channels': 0}})


def test_faster_rcnn_c4_prunes_its_top_features(tmp_path):
    """C4: layer4 runs on the pooled regions, then global pooling, a reshape and the dense
    predictors, whose inputs follow layer4's pruned residual group."""
    name = 'faster_rcnn_resnet18_v1b_custom'
    net = get_model(name, classes=['a', 'b'], pretrained_base=False)
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(np.random.RandomState(0).uniform(-2, 2, (1, 3, 128, 160)))
    net(x)
    rng = np.random.RandomState(0)
    for param in net.collect_params().values():
        if param.name.endswith('weight') and len(param.shape) == 4:
            _scale(param, rng.choice(param.shape[0], param.shape[0] // 2, replace=False), SMALL)
    params = str(tmp_path / 'c4_best.params')
    save_params(net, params, {'meta': {'task': 'faster_rcnn', 'network': name,
                                       'classes': ['a', 'b'], 'short': 128, 'max_size': 160}})
    result = prune_model(params, str(tmp_path / 'c4_pruned'), threshold=0.1, min_filters=8,
                         granularity=8, log=lambda _: None)
    channels = result['channels']
    layer4 = channels['backbone.layer4.1.conv2']['channels']
    assert layer4 < 512 and channels['backbone.layer4.0.downsample.0']['channels'] == layer4
    assert channels['class_predictor'] == {'channels': 3, 'in_channels': layer4}
    pruned, _ = load_network(result['params'])
    assert [o.shape for o in pruned(x)] == [o.shape for o in net(x)]
