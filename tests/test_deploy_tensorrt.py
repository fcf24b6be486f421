"""gluondet.deploy.tensorrt and .calibration: everything short of building an engine, on CPU.

Calibration batches (shapes, order, the validation preprocessing exactly,
skipped images, the dropped last batch), the calibration cache, argument and
ONNX checks that run before tensorrt is imported, and the calibrator's
control flow against stand-in tensorrt / cuda modules. The one test that
builds and runs an engine needs tensorrt and a GPU and is skipped here.
"""
import ctypes
import os
import sys
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from gluondet.data.base import read_image
from gluondet.detections import OUTPUT_NAMES
from gluondet.deploy import calibration as cal
from gluondet.deploy import tensorrt as gt
from gluondet.tasks.ssd import SSDValTransform

import tensorrt_stand_in

WIDTH, HEIGHT = 48, 32   # not square, so a swapped width/height shows


def _write_image(path, h, w, seed):
    rgb = np.random.RandomState(seed).randint(0, 256, (h, w, 3)).astype(np.uint8)
    assert cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    return str(path)


@pytest.fixture
def images(tmp_path):
    """Seven images, some larger and some smaller than the input size (both interpolations)."""
    sizes = [(60, 80), (20, 30), (32, 48), (100, 40), (25, 90), (64, 64), (31, 47)]
    folder = tmp_path / 'images'
    folder.mkdir()
    exts = ['.jpg', '.png']
    return [_write_image(folder / ('im%d%s' % (i, exts[i % 2])), h, w, i)
            for i, (h, w) in enumerate(sizes)]


def _expected(path):
    return SSDValTransform(WIDTH, HEIGHT)(read_image(path), np.zeros((0, 6), np.float32))[0]


def _onnx_model(path, batch=None, size=(HEIGHT, WIDTH)):
    """A tiny model with one NCHW input and outputs ids, scores, boxes (batch None: dynamic)."""
    from onnx import TensorProto, helper, save

    n = 'batch' if batch is None else batch
    shape = [n, 3, size[0], size[1]]
    data = helper.make_tensor_value_info('data', TensorProto.FLOAT, shape)
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
               for name in OUTPUT_NAMES]
    nodes = [helper.make_node('Abs', ['data'], ['ids'], name='abs0'),
             helper.make_node('Relu', ['data'], ['scores'], name='relu1'),
             helper.make_node('Neg', ['data'], ['boxes'], name='neg2')]
    graph = helper.make_graph(nodes, 'tiny', [data], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])
    model.ir_version = 8
    save(model, str(path))
    return str(path)


@pytest.fixture
def no_tensorrt(monkeypatch):
    """Make ``import tensorrt`` fail here, even on a machine that has it."""
    monkeypatch.setitem(sys.modules, 'tensorrt', None)


# ---------------------------------------------------------------- calibration batches

def test_batches_shape_dtype_contiguity_and_partial_batch_dropped(images):
    batches = cal.CalibrationBatches(images, (WIDTH, HEIGHT), batch_size=3)
    out = list(batches)
    assert len(out) == 2 and batches.num_yielded == 2 and batches.dropped == 1
    for batch in out:
        assert batch.shape == (3, 3, HEIGHT, WIDTH) == batches.shape
        assert batch.dtype == np.float32 and batch.flags['C_CONTIGUOUS']
    assert out[0] is not out[1]        # a new array per batch: holding one is safe
    assert batches.skipped == []


def test_batches_are_exactly_the_validation_preprocessing(images):
    out = np.concatenate(list(cal.CalibrationBatches(images, (WIDTH, HEIGHT), batch_size=2)))
    assert len(out) == 6
    for sample, path in zip(out, images):
        np.testing.assert_array_equal(sample, _expected(path))


def test_num_batches_stops_reading(images, monkeypatch):
    read = []
    monkeypatch.setattr(cal, 'read_image', lambda path: read.append(path) or read_image(path))
    batches = cal.CalibrationBatches(images, (WIDTH, HEIGHT), batch_size=2, num_batches=2)
    assert len(list(batches)) == 2 and batches.num_yielded == 2
    assert read == images[:4]


def test_unreadable_images_are_skipped_with_a_warning_and_counted(images, tmp_path):
    not_image = tmp_path / 'notes.jpg'
    not_image.write_text('not an image')
    truncated = tmp_path / 'cut.jpg'
    truncated.write_bytes(open(images[0], 'rb').read()[:200])
    missing = str(tmp_path / 'missing.png')
    paths = [images[0], str(not_image), images[1], str(truncated), missing, images[2]]
    batches = cal.CalibrationBatches(paths, (WIDTH, HEIGHT), batch_size=3)
    with pytest.warns(UserWarning) as record:
        (batch,) = list(batches)
    messages = ' '.join(str(w.message) for w in record)
    for name in ('notes.jpg', 'cut.jpg', 'missing.png'):
        assert name in messages
    assert [p for p, _ in batches.skipped] == [str(not_image), str(truncated), missing]
    for sample, path in zip(batch, images[:3]):
        np.testing.assert_array_equal(sample, _expected(path))


def test_too_few_readable_images_raise(images, tmp_path):
    bad = tmp_path / 'bad.jpg'
    bad.write_text('x')
    batches = cal.CalibrationBatches(images[:2] + [str(bad)], (WIDTH, HEIGHT), batch_size=3)
    expected = r'2 of 3 images readable \(1 skipped\), batch_size is 3'
    with pytest.warns(UserWarning, match='bad.jpg'), pytest.raises(ValueError, match=expected):
        list(batches)


def test_folder_of_images_sorted_and_filtered(images):
    folder = os.path.dirname(images[0])
    open(os.path.join(folder, 'labels.txt'), 'w').close()
    batches = cal.CalibrationBatches(folder, WIDTH, batch_size=1)
    assert batches.paths == sorted(images) and batches.shape == (1, 3, WIDTH, WIDTH)


def test_custom_preprocess_shape_is_checked(images):
    batches = cal.CalibrationBatches(images, (WIDTH, HEIGHT), batch_size=2,
                                     preprocess=lambda image: np.zeros((3, WIDTH, HEIGHT)))
    with pytest.raises(ValueError, match=r'im0\.jpg: preprocessing gave shape \(3, 48, 32\)'):
        list(batches)


@pytest.mark.parametrize('kwargs, match', [
    (dict(batch_size=0), 'batch_size must be a positive integer'),
    (dict(batch_size=True), 'batch_size must be a positive integer'),
    (dict(num_batches=0), 'num_batches must be a positive integer'),
    (dict(data_shape=None), 'need data_shape'),
    (dict(data_shape=(48, 0)), 'data_shape must be'),
])
def test_batches_argument_checks(images, kwargs, match):
    args = dict(images=images, data_shape=(WIDTH, HEIGHT), batch_size=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        cal.CalibrationBatches(**args)


def test_images_must_be_a_list_or_an_image_folder(tmp_path, images):
    with pytest.raises(ValueError, match='is not a folder'):
        cal.CalibrationBatches(images[0], (WIDTH, HEIGHT))
    (tmp_path / 'labels').mkdir()
    (tmp_path / 'labels' / 'a.xml').write_text('<annotation/>')
    with pytest.raises(ValueError, match='no image files'):
        cal.CalibrationBatches(str(tmp_path / 'labels'), (WIDTH, HEIGHT))


# ---------------------------------------------------------------- calibration cache

def test_cache_read_write_and_reuse_without_images(images, tmp_path):
    cache = str(tmp_path / 'calib.cache')
    batches = cal.CalibrationBatches(images, (WIDTH, HEIGHT), cache_path=cache)
    assert batches.read_cache() is None
    batches.write_cache(memoryview(b'TRT-8601-EntropyCalibration2\ndata: 3c010a14\n'))
    assert batches.read_cache() == b'TRT-8601-EntropyCalibration2\ndata: 3c010a14\n'
    assert sorted(os.listdir(tmp_path)) == ['calib.cache', 'images']   # no temporary file left
    reuse = cal.CalibrationBatches(cache_path=cache)                    # no images needed
    assert reuse.read_cache() == batches.read_cache() and reuse.shape is None
    with pytest.raises(ValueError, match='cache .* was missing or refused'):
        list(reuse)      # TensorRT asks for batches only if it refuses the cache


def test_no_images_and_no_cache_is_refused(tmp_path):
    with pytest.raises(ValueError, match='needs images, or an existing calibration cache'):
        cal.CalibrationBatches(cache_path=str(tmp_path / 'absent.cache'))
    empty = tmp_path / 'empty.cache'
    empty.write_bytes(b'')
    with pytest.raises(ValueError, match='no calibration cache at .*empty.cache'):
        cal.CalibrationBatches(cache_path=str(empty))
    with pytest.raises(ValueError, match='no cache_path'):
        cal.CalibrationBatches([])


def test_cache_write_is_atomic(tmp_path, monkeypatch):
    cache = tmp_path / 'calib.cache'
    cache.write_bytes(b'old')
    batches = cal.CalibrationBatches(cache_path=str(cache))

    def fail(src, dst):
        raise OSError('disk full')
    monkeypatch.setattr(os, 'replace', fail)
    with pytest.raises(OSError, match='disk full'):
        batches.write_cache(b'new')
    assert cache.read_bytes() == b'old' and os.listdir(tmp_path) == ['calib.cache']


# ---------------------------------------------------------------- calibrator (stand-in tensorrt)

@pytest.fixture
def fake_gpu(monkeypatch):
    return tensorrt_stand_in.install(monkeypatch)


def test_calibrator_feeds_batches_to_the_device_then_stops(images, tmp_path, fake_gpu):
    batches = cal.CalibrationBatches(images, (WIDTH, HEIGHT), batch_size=3,
                                     cache_path=str(tmp_path / 'c.cache'))
    calibrator = cal.make_calibrator(batches)
    assert calibrator.base_initialized and calibrator.get_batch_size() == 3
    assert calibrator.read_calibration_cache() is None
    expected = list(cal.CalibrationBatches(images, (WIDTH, HEIGHT), batch_size=3))
    for batch in expected:
        (ptr,) = calibrator.get_batch(['data'])
        on_device = np.frombuffer(ctypes.string_at(ptr, batch.nbytes), np.float32)
        np.testing.assert_array_equal(on_device.reshape(batch.shape), batch)
    assert calibrator.get_batch(['data']) is None and calibrator.error is None
    calibrator.write_calibration_cache(b'scales')
    assert calibrator.read_calibration_cache() == b'scales'
    calibrator.close()
    assert fake_gpu.freed == [ptr]


def test_calibrator_keeps_errors_for_build_engine(images, fake_gpu):
    batches = cal.CalibrationBatches(images[:1], (WIDTH, HEIGHT), batch_size=2)
    calibrator = cal.make_calibrator(batches)
    assert calibrator.get_batch(['data']) is None
    assert isinstance(calibrator.error, ValueError) and 'no full calibration batch' in str(
        calibrator.error)


def test_calibrator_refused_where_tensorrt_dropped_it(images, fake_gpu):
    del sys.modules['tensorrt'].IInt8EntropyCalibrator2
    sys.modules['tensorrt'].__version__ = '11.0.0'
    with pytest.raises(RuntimeError, match='removed in TensorRT 11'):
        cal.make_calibrator(cal.CalibrationBatches(images, (WIDTH, HEIGHT)))


# ---------------------------------------------------------------- build checks, no tensorrt

@pytest.fixture
def onnx_static(tmp_path):
    return _onnx_model(tmp_path / 'static.onnx', batch=1)


@pytest.fixture
def onnx_dynamic(tmp_path):
    return _onnx_model(tmp_path / 'dynamic.onnx')


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(precision='FP16'), ValueError, "precision must be one of 'fp32', 'fp16', 'int8'"),
    (dict(precision='bf16'), ValueError, 'precision must be one of'),
    (dict(max_batch_size=0), ValueError, 'max_batch_size must be a positive integer'),
    (dict(max_batch_size=2.0), ValueError, 'max_batch_size must be a positive integer'),
    (dict(opt_batch_size=1), ValueError, 'opt_batch_size is for dynamic_batch=True'),
    (dict(dynamic_batch=True, max_batch_size=4, opt_batch_size=8), ValueError,
     'opt_batch_size 8 is above max_batch_size 4'),
    (dict(workspace_mb=0), ValueError, 'workspace_mb must be a positive integer'),
    (dict(precision='int8'), ValueError, "precision='int8' needs calibrator=CalibrationBatches"),
    (dict(precision='int8', calibrator='images/'), TypeError, 'must be a CalibrationBatches'),
])
def test_build_argument_checks_come_before_the_import(onnx_dynamic, tmp_path, no_tensorrt,
                                                      kwargs, error, match):
    with pytest.raises(error, match=match):
        gt.build_engine(onnx_dynamic, str(tmp_path / 'model.engine'), **kwargs)


def test_build_path_checks(onnx_static, tmp_path, no_tensorrt):
    with pytest.raises(FileNotFoundError, match='ONNX model not found'):
        gt.build_engine(str(tmp_path / 'absent.onnx'), str(tmp_path / 'm.engine'))
    with pytest.raises(ValueError, match='existing folder'):
        gt.build_engine(onnx_static, str(tmp_path / 'no' / 'm.engine'))
    with pytest.raises(ValueError, match='existing folder'):
        gt.build_engine(onnx_static, str(tmp_path))
    with pytest.raises(ValueError, match='overwrite the ONNX model'):
        gt.build_engine(onnx_static, onnx_static)
    not_onnx = tmp_path / 'bad.onnx'
    not_onnx.write_bytes(b'\x00garbage')
    with pytest.raises(ValueError, match='not a readable ONNX model'):
        gt.build_engine(str(not_onnx), str(tmp_path / 'm.engine'))


def test_calibrator_checks(onnx_static, images, tmp_path, no_tensorrt):
    engine = str(tmp_path / 'm.engine')
    cache = tmp_path / 'c.cache'
    cache.write_bytes(b'scales')
    from_cache = cal.CalibrationBatches(cache_path=str(cache))
    with pytest.raises(ValueError, match="only used with precision='int8', not 'fp16'"):
        gt.build_engine(onnx_static, engine, precision='fp16', calibrator=from_cache)
    cache.unlink()   # the cache went away after the calibrator was made
    with pytest.raises(ValueError, match='no calibration cache at'):
        gt.build_engine(onnx_static, engine, precision='int8', calibrator=from_cache)
    wrong_size = cal.CalibrationBatches(images, (HEIGHT, WIDTH), batch_size=1)
    with pytest.raises(ValueError, match=r'N x 3x48x32 but the model input is N x 3x32x48: give '
                                         r'CalibrationBatches data_shape=\(48, 32\)'):
        gt.build_engine(onnx_static, engine, precision='int8', calibrator=wrong_size)
    wrong_batch = cal.CalibrationBatches(images, (WIDTH, HEIGHT), batch_size=4)
    with pytest.raises(ValueError, match='fixed batch of 1: calibrate with batch_size=1, not 4'):
        gt.build_engine(onnx_static, engine, precision='int8', calibrator=wrong_batch)


def test_batch_size_against_the_onnx_input(onnx_static, onnx_dynamic, tmp_path, no_tensorrt):
    engine = str(tmp_path / 'm.engine')
    with pytest.raises(ValueError, match='fixed batch of 1: export it with dynamic_batch=True'):
        gt.build_engine(onnx_static, engine, dynamic_batch=True, max_batch_size=8)
    with pytest.raises(ValueError, match='fixed batch of 1 but max_batch_size is 8: pass '
                                         'max_batch_size=1'):
        gt.build_engine(onnx_static, engine, max_batch_size=8)
    two_inputs = tmp_path / 'two.onnx'
    _onnx_model(two_inputs)
    import onnx
    model = onnx.load(str(two_inputs))
    model.graph.input.append(onnx.helper.make_tensor_value_info('extra', 1, [1]))
    onnx.save(model, str(two_inputs))
    with pytest.raises(ValueError, match=r"2 inputs \['data', 'extra'\]"):
        gt.build_engine(str(two_inputs), engine)


def test_batch_plan_profiles(onnx_static, onnx_dynamic, images):
    static, dynamic = gt.read_onnx_input(onnx_static), gt.read_onnx_input(onnx_dynamic)
    assert static == ('data', (1, 3, HEIGHT, WIDTH),
                      [('abs0', 'Abs'), ('relu1', 'Relu'), ('neg2', 'Neg')])
    assert dynamic.shape == (-1, 3, HEIGHT, WIDTH)
    chw = (3, HEIGHT, WIDTH)
    assert gt._batch_plan(static, False, 1, None, None) == (None, None)
    assert gt._batch_plan(dynamic, True, 8, 4, None) == (
        ((1,) + chw, (4,) + chw, (8,) + chw), None)
    assert gt._batch_plan(dynamic, True, 8, None, None)[0][1] == (8,) + chw
    assert gt._batch_plan(dynamic, False, 2, None, None) == (((2,) + chw,) * 3, None)
    calib = cal.CalibrationBatches(images, (WIDTH, HEIGHT), batch_size=5)
    assert gt._batch_plan(dynamic, True, 8, None, calib)[1] == (5,) + chw


def test_missing_tensorrt_error_names_the_install(onnx_static, tmp_path, no_tensorrt):
    with pytest.raises(ImportError) as err:
        gt.build_engine(onnx_static, str(tmp_path / 'm.engine'))
    assert "pip install 'gluondet[tensorrt]'" in str(err.value) and 'NVIDIA GPU' in str(err.value)
    assert not os.path.exists(tmp_path / 'm.engine')
    engine = tmp_path / 'm.engine'
    engine.write_bytes(b'plan')
    with pytest.raises(ImportError, match=r"pip install 'gluondet\[tensorrt\]'"):
        gt.TensorRTRunner(str(engine))
    with pytest.raises(FileNotFoundError, match='engine not found'):
        gt.TensorRTRunner(str(tmp_path / 'absent.engine'))


def test_tensorrt_absent_on_this_machine():
    """Without monkeypatching: where tensorrt is really missing, the same clear error."""
    try:
        import tensorrt  # noqa: F401
    except (ImportError, OSError):
        with pytest.raises(ImportError, match='NVIDIA GPU'):
            cal._import_tensorrt()
    else:
        pytest.skip('tensorrt is installed here')


def test_old_tensorrt_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, 'tensorrt', SimpleNamespace(__version__='8.2.5.1'))
    with pytest.raises(ImportError, match='needs TensorRT >= 8.5, found 8.2.5.1'):
        cal._import_tensorrt()


# ---------------------------------------------------------------- platform, parser, batch checks

def test_platform_without_fast_fp16_or_int8_is_refused():
    trt = SimpleNamespace(__version__='10.3.0', BuilderFlag=SimpleNamespace(FP16=0, INT8=1))
    slow = SimpleNamespace(platform_has_fast_fp16=False, platform_has_fast_int8=False)
    gt._check_platform(trt, slow, 'fp32')
    for precision in ('fp16', 'int8'):
        with pytest.raises(RuntimeError, match="no fast %s: build precision='fp32'" % precision):
            gt._check_platform(trt, slow, precision)
    fast = SimpleNamespace(platform_has_fast_fp16=True, platform_has_fast_int8=True)
    gt._check_platform(trt, fast, 'int8')
    trt11 = SimpleNamespace(__version__='11.0.0', BuilderFlag=SimpleNamespace())
    with pytest.raises(RuntimeError, match='no BuilderFlag.FP16'):
        gt._check_platform(trt11, fast, 'fp16')


def test_parser_errors_name_the_nodes(onnx_static):
    nodes = gt.read_onnx_input(onnx_static).nodes

    def error(node, desc):
        return SimpleNamespace(node=lambda: node, desc=lambda: desc)
    errors = [error(1, 'Relu: unsupported here'), error(-1, 'bad opset')]
    parser = SimpleNamespace(num_errors=2, get_error=lambda i: errors[i])
    assert gt._parser_errors(parser, 'm.onnx', nodes) == (
        "TensorRT cannot parse m.onnx:\n"
        "  node 1 'relu1' (Relu): Relu: unsupported here\n"
        "  graph: bad opset")


def test_runner_batch_checks():
    fixed, dynamic = ((1, 3, 32, 48), (8, 3, 32, 48)), ((1, 3, 32, 32), (8, 3, 64, 96))
    gt._check_batch((4, 3, 32, 48), *fixed)
    with pytest.raises(ValueError, match=r'batches of 1 to 8 \(its optimization profile\), got 9'):
        gt._check_batch((9, 3, 32, 48), *fixed)
    with pytest.raises(ValueError, match=r'batches of exactly 1 \(fixed shape\), got 2'):
        gt._check_batch((2, 3, 32, 48), (1, 3, 32, 48), (1, 3, 32, 48))
    with pytest.raises(ValueError, match=r'shape \(1, 3, 48, 32\) does not fit .* N x 3x32x48$'):
        gt._check_batch((1, 3, 48, 32), *fixed)
    with pytest.raises(ValueError, match='does not fit'):
        gt._check_batch((3, 32, 48), *fixed)
    gt._check_batch((2, 3, 64, 32), *dynamic)     # a dynamic height and width: any in range
    with pytest.raises(ValueError, match=r'shape \(1, 3, 96, 64\) does not fit the engine input '
                                         r'N x from 3x32x32 to 3x64x96 \(its optimization'):
        gt._check_batch((1, 3, 96, 64), *dynamic)


# ---------------------------------------------------------------- on a GPU machine

def test_build_and_run_tiny_fp32_engine(tmp_path):
    pytest.importorskip('tensorrt', reason='needs TensorRT and an NVIDIA GPU '
                                           '(pip install tensorrt cuda-python)')
    pytest.importorskip('cuda', reason='needs cuda-python for device buffers')
    onnx_path = _onnx_model(tmp_path / 'tiny.onnx')
    engine = gt.build_engine(onnx_path, str(tmp_path / 'tiny.engine'), max_batch_size=4,
                             dynamic_batch=True, opt_batch_size=2, workspace_mb=64)
    batch = np.random.RandomState(0).randn(3, 3, HEIGHT, WIDTH).astype(np.float32)
    with gt.TensorRTRunner(engine) as runner:
        assert runner.batch_range == (1, 4) and runner.input_shape == (3, HEIGHT, WIDTH)
        ids, scores, boxes = runner(batch)
        with pytest.raises(ValueError, match='batches of 1 to 4'):
            runner(np.zeros((5, 3, HEIGHT, WIDTH), np.float32))
    np.testing.assert_allclose(ids, np.abs(batch), rtol=1e-6)
    np.testing.assert_allclose(scores, np.maximum(batch, 0), rtol=1e-6)
    np.testing.assert_allclose(boxes, -batch, rtol=1e-6)
