"""What every exported detector is, and how the export tests run one."""
import json

import numpy as np
import onnx
from mxnet import gluon

from gluondet.deploy import export_symbol
from gluondet.model_zoo import get_model_list


def sweep_names(prefix):
    """The zoo names starting with ``prefix`` an export sweep runs: one per network, its
    ``_coco`` name, else ``_voc``, else ``_custom`` (they differ in classes and sizes only;
    80 classes give NMS the most work)."""
    chosen = {}
    for name in get_model_list():
        if name.startswith(prefix):
            network, dataset = name.rsplit('_', 1)
            rank = ('custom', 'voc', 'coco').index(dataset)
            if rank >= chosen.get(network, (-1,))[0]:
                chosen[network] = (rank, name)
    return [name for _, name in chosen.values()]


def assert_symbol_round_trip(net, x, prefix, data_shape):
    """Export ``net`` as a symbol at ``prefix``; imported, it gives ``net``'s outputs on ``x``
    bit for bit. Returns those outputs (numpy)."""
    expected = [o.asnumpy() for o in net(x)]
    json_file, params_file = export_symbol(net, prefix, data_shape)
    imported = gluon.SymbolBlock.imports(json_file, ['data'], params_file)
    for got, want in zip(imported(x), expected):
        np.testing.assert_array_equal(got.asnumpy(), want)
    return expected


def run_onnx(path, x):
    """ONNX Runtime's outputs on ``x`` (NDArray or numpy), with every graph optimization."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])
    return session.run(None, {'data': x.asnumpy() if hasattr(x, 'asnumpy') else x})


def checked_detector(path, batch, size, rows):
    """Load an exported detector after checking what every export holds: the full ONNX
    check, opset 13 only, unique node names, one input ``data`` ``batch x 3 x size`` and
    the outputs ``ids``, ``scores``, ``boxes`` of ``rows`` rows (``batch`` ``'batch'`` if
    dynamic). Returns the model and its metadata, decoded."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert [o.version for o in model.opset_import if o.domain in ('', 'ai.onnx')] == [13]
    names = [node.name for node in model.graph.node]
    assert all(names) and len(set(names)) == len(names)
    assert [i.name for i in model.graph.input] == ['data']

    def dims(value):
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
    assert dims(model.graph.input[0]) == [batch, 3] + list(size)
    assert [(o.name, dims(o)) for o in model.graph.output] == [
        ('ids', [batch, rows, 1]), ('scores', [batch, rows, 1]), ('boxes', [batch, rows, 4])]
    return model, {p.key: json.loads(p.value) for p in model.metadata_props}


def by_class_and_box(ids, scores, boxes):
    """Detections sorted by class, then box (xmin, ymin, xmax, ymax): an order that float
    noise in nearly equal scores cannot swap, to compare two runtimes' rows."""
    order = np.lexsort(tuple(boxes.T[::-1]) + (ids,))
    return ids[order], scores[order], boxes[order]


def save_training_output(net, path, network, model_kwargs=None):
    """Save ``net``'s weights to ``path`` (a ``.params`` file) with the json a training writes
    beside them (network, classes, a keep-ratio network's sizes, the architecture's
    arguments), so that ``gluondet export``, ``infer`` and ``evaluate`` load it as they load
    a training's output."""
    net.save_parameters(path)
    meta = {'network': network, 'classes': list(net.classes),
            'model_kwargs': dict(model_kwargs or {})}
    for key in ('short', 'max_size'):
        if getattr(net, key, None) is not None:
            meta[key] = getattr(net, key)
    with open(path[:-len('.params')] + '.json', 'w') as f:
        json.dump({'meta': meta}, f)
    return path
