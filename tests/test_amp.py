"""Mixed precision (`gluondet.engine.precision`): bfloat16 on this CPU, the loss scaler, resume
and export. MXNet's ``amp.init`` changes the whole process, so AMP runs in subprocesses."""
import json
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

from gluondet.errors import UserError
from mxnet import gluon

from gluondet.engine.hooks import NonFiniteLossError
from gluondet.engine.precision import GradientScaler, amp_dtype

from script_runs import SMALL_NETWORKS, run_cpu_command

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

pytestmark = pytest.mark.skipif(
    not mx.runtime.Features().is_enabled('MKLDNN'), reason='bfloat16 needs MXNet with oneDNN')


def _python(code, cwd, timeout=900):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get('PYTHONPATH', '')]))
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         cwd=str(cwd), env=env, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _params_with_grads(*grads):
    params = []
    for i, grad in enumerate(grads):
        p = gluon.Parameter('p%d' % i, shape=(len(grad),))
        p.initialize(ctx=mx.cpu())
        p.grad()[:] = np.asarray(grad, dtype='float32')
        params.append(p)
    return params


def test_dtype_follows_the_devices():
    assert amp_dtype([mx.cpu()]) == 'bfloat16'
    assert amp_dtype([mx.gpu(0), mx.gpu(1)]) == 'float16'


def test_float16_scaler_skips_overflows_and_keeps_its_state():
    scaler = GradientScaler(fixed=False)
    assert scaler.loss_scale == 2. ** 16
    assert not scaler.has_overflow(_params_with_grads([1., 2.], [3.]))
    assert scaler.has_overflow(_params_with_grads([1., np.inf], [3.]))
    assert scaler.has_overflow(_params_with_grads([np.nan], [3.]))
    scaler.has_overflow(_params_with_grads([1.]))      # the halvings apply from the next step
    assert scaler.loss_scale == 2. ** 14 and scaler.skipped == 2
    state = json.loads(json.dumps(scaler.state_dict()))
    other = GradientScaler(fixed=False)
    other.load_state_dict(state)
    assert other.state_dict() == scaler.state_dict()
    assert other.loss_scale == 2. ** 14 and other._unskipped == 1


def test_bfloat16_scale_stays_1_and_a_bad_gradient_stops_training():
    scaler = GradientScaler(fixed=True)
    for _ in range(3):
        assert not scaler.has_overflow(_params_with_grads([1e30, -1e30]))
    assert scaler.loss_scale == 1.0 and scaler._next_loss_scale == 1.0
    scaler._unskipped = scaler._scale_seq_len - 1     # the growth step keeps it at 1
    scaler.has_overflow(_params_with_grads([1.]))
    assert scaler.loss_scale == 1.0 and scaler._next_loss_scale == 1.0
    with pytest.raises(NonFiniteLossError, match='p1'):
        scaler.has_overflow(_params_with_grads([1.], [np.nan]))


_RESUME = '''
import json
from gluondet.engine import TrainConfig
from gluondet.engine.testing import check_resume
config = TrainConfig(batch_size=4, num_workers=0, epochs=2, lr=0.01, lr_decay_epoch=(1,),
                     log_interval=2, save_interval=0, val_interval=0, checkpoint_interval=3,
                     seed=7, hybridize=True, amp=True)
report = check_resume('test_ssd_task:make_task', config, 'work', pythonpath=[%r])
print(json.dumps(report))
'''


@pytest.mark.slow
def test_bfloat16_training_resumes_exactly_after_kill(tmp_path):
    """The SSD task in bfloat16: kill -9 in epoch 2 and resume ends where the straight run
    does; the checkpoint holds the loss scaler."""
    (tmp_path / 'work').mkdir()
    report = json.loads(_python(_RESUME % HERE, tmp_path).strip().splitlines()[-1])
    assert report['params_diff'] == 0 and report['states_diff'] == 0, report
    with open(tmp_path / 'work' / 'resumed' / 'run_last.json') as f:
        manifest = json.load(f)
    assert manifest['config']['amp'] is True
    assert manifest['hooks']['AMPHook'] == {'loss_scale': 1.0, 'next_loss_scale': 1.0,
                                            'unskipped': manifest['iteration'], 'skipped': 0,
                                            'dtype': 'bfloat16'}


_TRAIN_THEN_EXPORT = '''
import numpy as np
from gluondet.engine import TrainConfig, fit
from gluondet.engine.precision import amp_active
from gluondet.deploy.symbol import check_float32_process
from test_ssd_task import make_task
task = make_task()
config = TrainConfig(batch_size=4, num_workers=0, epochs=1, lr=0.01, lr_decay_epoch=(),
                     save_interval=1, val_interval=1, seed=1, save_prefix='bf16/ssd', amp=True)
result = fit(task, config)
assert amp_active() == 'bfloat16'
# the weights stay float32; the graph ran bfloat16 convolutions
assert {p.data().dtype for p in result.net.collect_params().values()} == {np.float32}
try:
    check_float32_process('export')
except RuntimeError as err:
    print('refused:', err)
'''


@pytest.mark.slow
def test_a_bfloat16_trained_model_exports_float32_with_onnx_parity(tmp_path):
    """Trained with AMP, the weights are float32; the training process refuses to export
    (its graph would hold AMP's casts); `gluondet export` in a new process gives a float32
    ONNX model with the Gluon net's detections."""
    out = _python(_TRAIN_THEN_EXPORT, tmp_path)
    assert 'refused: export: AMP (bfloat16)' in out, out
    params = str(tmp_path / 'bf16' / 'ssd_best.params')
    onnx = pytest.importorskip('onnx')
    pytest.importorskip('onnxruntime')
    from gluondet.deploy import compare_detections, load_network
    from export_checks import run_onnx
    path = str(tmp_path / 'ssd.onnx')
    export = subprocess.run([sys.executable, '-m', 'gluondet', 'export', '--network', params,
                             '-o', path], capture_output=True, text=True, timeout=600)
    assert export.returncode == 0, export.stderr[-3000:]
    model = onnx.load(path)
    low = {onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT16}
    assert not {i.data_type for i in model.graph.initializer} & low
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [onnx.TensorProto.FLOAT]
    net, _ = load_network(params)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = mx.nd.array(np.random.RandomState(0).uniform(-2, 2, shape))
    result = compare_detections(net(x), run_onnx(path, x), min_score=0.01)
    assert result.ok and result.compared >= 10, str(result)


@pytest.mark.slow
@pytest.mark.parametrize('script', sorted(SMALL_NETWORKS))
def test_each_script_trains_an_epoch_with_amp_on_cpu(tmp_path, script):
    name, extra = SMALL_NETWORKS[script]
    _, log = run_cpu_command(os.path.join(ROOT, 'scripts', script),
                             ['--dataset', 'demo', '--gpus', '', '--epochs', '1', '--amp',
                              '--no-pretrained-base', '-j', '0'] + extra, tmp_path, name)
    assert 'AMP: bfloat16 operators on cpu(0)' in log
    assert 'amp=True' in log


def test_amp_with_dist_async_is_refused_before_any_data_is_read(monkeypatch):
    import argparse
    from gluondet.train import flags
    monkeypatch.setattr(flags, 'check_launch', lambda args: None)    # as if under gluondet launch
    args = argparse.Namespace(amp=True, kv_store='dist_async', horovod=False, gpus='',
                              save_prefix='')
    with pytest.raises(UserError, match='--amp checks the gradients .* use dist_sync'):
        flags.check_args(args)
