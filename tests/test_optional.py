"""A package imported where it is used, when it is missing, is one line naming the extra that
installs it (``sys.modules[name] = None`` stands in for "not installed", in a subprocess)."""
import json
import subprocess
import sys

import pytest

from gluondet import optional

from conftest import ROOT

EVERY_INSTALL = "pip install 'gluondet[cpu]' (or 'gluondet[cu112]'), which installs %s"

# what needs each package: code that imports it, and the line it must end with
CASES = {
    'onnx': ('from gluondet.deploy import export_onnx',
             'ONNX export needs onnx, which is not installed: ' + EVERY_INSTALL % 'onnx'),
    'onnxruntime': ('from gluondet.deploy.runners import ONNXRuntimeRunner\n'
                    'ONNXRuntimeRunner("model.onnx")',
                    'the onnxruntime backend needs onnxruntime, which is not installed: '
                    + EVERY_INSTALL % 'onnxruntime'),
    'matplotlib': ('from gluondet.plots import require_matplotlib\nrequire_matplotlib()',
                   'drawing needs matplotlib, which is not installed: '
                   + EVERY_INSTALL % 'matplotlib'),
    'tensorboardX': ('import os, tempfile\nfrom gluondet.engine.logging import Reporter\n'
                     'folder = tempfile.mkdtemp()\n'
                     'Reporter(os.path.join(folder, "run"), logdir=folder).start_metrics()',
                     'TensorBoard logging (--logdir) needs tensorboardX, which is not '
                     'installed: ' + EVERY_INSTALL % 'tensorboardX'),
    'horovod': ('from gluondet.engine import TrainConfig\n'
                'from gluondet.engine.distributed import check_launch\n'
                'check_launch(TrainConfig(gpus="", horovod=True))',
                "pip install 'gluondet[horovod]' with HOROVOD_WITH_MXNET=1"),
    'nvidia.dali': ('from gluondet.data.dali import require_dali\nrequire_dali()',
                    "pip install 'gluondet[dali]'"),
    'tensorrt': ('from gluondet.deploy.calibration import _import_tensorrt\n_import_tensorrt()',
                 "TensorRT is needed for this: pip install 'gluondet[tensorrt]' on a machine "
                 'with an NVIDIA GPU'),
    'cuda': ('from gluondet.deploy.calibration import _import_cudart\n_import_cudart()',
             "pip install 'gluondet[tensorrt]' on a machine with an NVIDIA GPU"),
    'openvino': ('from gluondet.deploy.openvino import OpenVINORunner\n'
                 'OpenVINORunner("model.xml")',
                 "the openvino backend needs openvino, which is not installed: "
                 "pip install 'gluondet[openvino]'"),
    'pycocotools': ('from types import SimpleNamespace\nfrom gluondet.data import COCODetection\n'
                    'COCODetection.coco.fget(SimpleNamespace(_coco=None, annotation_file="x"))',
                    "COCODetection.coco needs pycocotools, which is not installed: "
                    "pip install 'gluondet[test]'"),
}

RUN = '''
import json, sys
missing = %r
for name in missing:
    sys.modules[name] = None
messages = {}
for name, code in %r.items():
    try:
        exec(code, {})
    except (ImportError, ValueError) as err:
        messages[name] = str(err)
print(json.dumps(messages))
'''


def _messages(missing, cases):
    done = subprocess.run([sys.executable, '-c', RUN % (missing, cases)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_every_optional_package_has_a_case():
    assert set(CASES) | {'ml_dtypes'} == set(optional.PACKAGES)


def test_a_missing_package_names_the_extra_that_installs_it():
    messages = _messages(list(CASES), {name: code for name, (code, _) in CASES.items()})
    for name, (_, expected) in CASES.items():
        assert expected in messages.get(name, ''), (name, messages.get(name))
        assert '\n' not in messages[name]


def test_a_package_missing_under_another_is_named():
    """ONNX Runtime's quantization imports ml_dtypes, which onnxruntime does not require."""
    code = ('from gluondet.deploy.quantize import quantize_onnx\n'
            'quantize_onnx("float.onnx", "int8.onnx", None)')
    assert _messages(['ml_dtypes'], {'int8': code}) == {
        'int8': 'int8 quantization needs ml_dtypes, which is not installed: '
                + EVERY_INSTALL % 'ml_dtypes'}


def test_gluondet_export_without_onnx_is_one_line(tmp_path):
    """The command of issue 23: ``gluondet export`` to ONNX, where onnx is missing."""
    code = ('import sys\nsys.modules["onnx"] = None\n'
            'import mxnet as mx\nfrom gluondet.cli import main\n'
            'from gluondet.model_zoo import get_model\n'
            'net = get_model("ssd_300_mobilenet0.25_voc", pretrained_base=False)\n'
            'net.initialize()\nnet(mx.nd.zeros((1, 3, 300, 300)))\n'
            'net.save_parameters("ssd.params")\n'
            'sys.exit(main(["export", "--network", "ssd_300_mobilenet0.25_voc", "--params", '
            '"ssd.params", "-o", "ssd.onnx"]))')
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=300, cwd=str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.strip() == ('gluondet export: error: ONNX export needs onnx, which is not '
                                   'installed: ' + EVERY_INSTALL % 'onnx')
    assert not (tmp_path / 'ssd.onnx').exists()


@pytest.mark.parametrize('module', ['onnx.helper', 'nvidia.dali.fn', 'horovod.mxnet'])
def test_a_submodule_belongs_to_its_package(module):
    assert optional.install_hint(module) == optional.install_hint(module.rpartition('.')[0])
