"""gluondet benchmark: the table, the json record, and one-line errors (exit code 1, as
every gluondet command)."""
import importlib.util
import json
import os

import pytest

from gluondet import threads
from gluondet.cli import main
from gluondet.deploy.benchmark import parse_batch_sizes, statistics, time_runs

NETWORK = 'ssd_300_mobilenet0.25_voc'   # the smallest zoo detector, at a small input below
FAST = ['--data-shape', '128', '--warmup', '1', '--iters', '3']


def _check_stats(row, batch_size, iterations):
    ms = row['latency_ms']
    assert row['batch_size'] == batch_size and row['iterations'] == iterations
    assert 0 < ms['min'] <= ms['p50'] <= ms['p90'] <= ms['p99'] <= ms['max']
    assert ms['min'] <= ms['mean'] <= ms['max']
    assert row['throughput'] == pytest.approx(batch_size * 1000 / ms['mean'], rel=1e-9)


@pytest.mark.parametrize('backend', ['mxnet', 'onnxruntime'])
def test_benchmark_prints_a_table_and_writes_json(backend, tmp_path, capsys):
    if backend == 'onnxruntime':
        pytest.importorskip('onnxruntime')
        pytest.importorskip('onnx')
    output = tmp_path / 'out' / 'bench.json'
    count = threads.mxnet_threads()     # MXNet is imported: its count can only be repeated
    assert main(['benchmark', '-m', NETWORK, '--backend', backend, '--batch-sizes', '1,2',
                 '--threads', str(count), '--output', str(output)] + FAST) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith('%s on %s (weights: random' % (NETWORK, backend))
    assert lines[1].split() == ['batch', 'runs', 'mean', 'ms', 'p50', 'ms', 'p90', 'ms', 'p99',
                                'ms', 'images/s']
    assert [line.split()[:2] for line in lines[2:4]] == [['1', '3'], ['2', '3']]
    assert os.listdir(output.parent) == ['bench.json']     # no temporary file left

    record = json.loads(output.read_text())
    assert record['format'] == 'gluondet-benchmark' and record['model'] == NETWORK
    assert record['backend'] == backend and record['batch_sizes'] == [1, 2]
    assert record['threads'] == count and record['warmup'] == 1 and record['iters'] == 3
    assert record['input_shape'] == [3, 128, 128] and record['weights'] == 'random'
    assert record['exported'] == (None if backend == 'mxnet' else 'onnx (dynamic batch)')
    assert 'NMS within each class' in record['timed']     # SSD's post-processing
    assert ('(MXNet synchronized)' in record['timed']) == (backend == 'mxnet')
    for row, size in zip(record['results'], (1, 2)):
        _check_stats(row, size, 3)
    assert record['machine']['cores'] >= 1 and record['machine']['cpu']
    assert record['versions']['mxnet'] and record['versions']['gluondet']
    if backend == 'onnxruntime':
        assert record['versions']['onnxruntime']


def test_time_runs_and_statistics():
    calls = []
    times = time_runs(lambda batch: calls.append(batch) or (batch,), 'batch', warmup=2,
                      iters=None, seconds=0.02)
    assert len(times) >= 1 and len(calls) == len(times) + 2
    assert len(time_runs(lambda batch: (batch,), 0, warmup=0, iters=4)) == 4
    row = statistics([0.010, 0.020, 0.030, 0.040], 8)
    assert row['latency_ms']['mean'] == pytest.approx(25)
    assert row['latency_ms']['p50'] == pytest.approx(25)
    _check_stats(row, 8, 4)
    assert row['throughput'] == pytest.approx(320)
    assert parse_batch_sizes(' 1, 8') == [1, 8]


@pytest.mark.parametrize('argv, message', [
    (['-m', 'ssd_300_mobilenet0.25_vocx'], "unknown model 'ssd_300_mobilenet0.25_vocx'"),
    (['-m', NETWORK, '--batch-sizes', '1,x'], 'batch sizes must be positive integers'),
    (['-m', NETWORK, '--batch-sizes', '0'], 'batch sizes must be positive integers'),
    (['-m', NETWORK, '--batch-sizes', '2,2'], 'batch sizes must be positive integers'),
    (['-m', NETWORK, '--iters', '0'], 'iters must be a positive number'),
    (['-m', os.path.join('nowhere', 'model.onnx')], 'model file not found'),
    (['-m', NETWORK, '--backend', 'tensorrt'], 'TensorRT is needed'),
    (['-m', NETWORK, '--threads', 'OTHER'], 'MXNet was imported with'),
])
def test_bad_input_is_one_line_and_exit_code_1(argv, message, capsys):
    if 'tensorrt' in argv and importlib.util.find_spec('tensorrt') is not None:
        pytest.skip('TensorRT is installed here')
    if 'OTHER' in argv:     # MXNet is imported (with its count): another cannot be set now
        argv = argv[:-1] + [str(threads.mxnet_threads() + 1)]
    assert main(['benchmark'] + FAST + argv) == 1
    out, err = capsys.readouterr()
    assert out == ''
    assert len(err.splitlines()) == 1, err
    assert err.startswith('gluondet benchmark: error: ' + message), err
