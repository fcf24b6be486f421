"""What ``gluondet export``, ``gluondet infer`` and ``gluondet evaluate`` do.

``infer`` and its output formats live in :mod:`gluondet.deploy.infer` (imported here).
"""
import json
import os

from ..data import DATASETS, COCODetection, resolve_dataset
from ..detections import MASKS
from ..data.preprocess import input_range
from ..files import remove_if_exists, writer
from ..metrics import COCODetectionMetric
from ..metrics.coco_eval import format_summary
from ..metrics.confusion import ConfusionMatrix
from ..metrics.evaluation import evaluate, evaluate_voc, voc_metric
from ..model_formats import FORMATS, SOURCES
from .calibration import CalibrationBatches
from .networks import apply_nms, load_network
from .openvino import save_openvino
from .postprocess import postprocess_from_metadata, postprocess_of
from .infer import infer, write_json
from .predictor import Predictor
from .sources import ModelSource, metadata_path, model_metadata
from .symbol import export_symbol
from .tensorrt import build_engine
from .views import wrap

__all__ = ['FORMATS', 'export_model', 'export_summary', 'infer', 'evaluate',
           'evaluate_model']

DYNAMIC_MAX_BATCH = 8   # largest batch of a dynamic-batch engine unless told


# ---------------------------------------------------------------- export

def _check_export(fmt, output, batch_size, dynamic_batch, precision, calibration):
    if fmt not in FORMATS:
        raise ValueError('format must be one of %s, got %r' % (', '.join(FORMATS), fmt))
    if batch_size is not None and batch_size < 1:
        raise ValueError('batch size must be positive, got %d' % batch_size)
    lower = output.lower()
    if fmt == 'symbol':
        if lower.endswith(('.json', '.params')):
            raise ValueError('a symbol export takes a path prefix (writes PREFIX-symbol.json, '
                             'PREFIX-0000.params, PREFIX-meta.json), got %s' % output)
        if batch_size is not None or dynamic_batch:
            raise ValueError('an MXNet symbol takes any batch: no batch size or dynamic batch')
    else:
        if not lower.endswith(SOURCES[fmt].extensions):
            raise ValueError("%s's file must end with %s, got %s"
                             % (SOURCES[fmt].name, ' or '.join(SOURCES[fmt].extensions), output))
        if fmt != 'tensorrt' and batch_size is not None and dynamic_batch:
            raise ValueError('an ONNX model has a fixed batch size or a dynamic batch, not both')
    images, batches, cache, method = calibration
    calibrating = any(v is not None for v in (images, batches, cache))
    if fmt == 'symbol' and (precision is not None or calibrating):
        raise ValueError('precision and calibration settings are for the onnx, openvino and '
                         'tensorrt formats')
    if fmt in ('onnx', 'openvino') and precision == 'fp16':
        raise ValueError('fp16 is for the tensorrt format: ONNX Runtime on the CPU has no fp16 '
                         'kernels (onnx and openvino take fp32 or int8)')
    if precision != 'int8' and (calibrating or method is not None):
        raise ValueError('calibration settings are for int8 precision')
    if fmt == 'tensorrt' and method is not None:
        raise ValueError('the calibration method is for the onnx and openvino formats: '
                         'TensorRT uses its entropy calibrator')


def export_model(network, output, fmt='onnx', params=None, pretrained=False, classes=None,
                 data_shape=None, batch_size=None, dynamic_batch=False, precision=None,
                 calibration_images=None, calibration_batches=None, calibration_cache=None,
                 calibration_method=None, gen_ds_config=False, nms=None, verbose=True,
                 with_nms=True):
    """Export a network as an MXNet symbol, an ONNX model, a TensorRT engine or an OpenVINO IR.

    Each artifact carries what :meth:`Predictor.from_model` needs to run it:
    the ONNX model in its metadata (an IR in its ``rt_info``), the symbol in
    ``PREFIX-meta.json``, the engine in the json of its stem (``model.engine`` ->
    ``model.json``, see :func:`~gluondet.deploy.sources.model_metadata`).

    Parameters
    ----------
    network : str
        A model zoo name, or a training output ``.params`` (its json beside).
    output : str
        Symbol: a path prefix. ONNX: a ``.onnx`` file. TensorRT: a ``.engine``
        (``.plan``, ``.trt``) file; the ONNX model it is built from is written
        beside it first (``model.engine`` -> ``model.onnx``).
    fmt : {'symbol', 'onnx', 'tensorrt', 'openvino'}
        OpenVINO: an IR ``.xml`` (its weights in the ``.bin`` beside), converted from the ONNX
        model (:func:`~gluondet.deploy.openvino.save_openvino`).
    params, pretrained, classes, data_shape
        See :func:`~gluondet.deploy.networks.load_network`. A keep-ratio network's
        (Faster R-CNN, RetinaNet) ONNX model and engine take any height and width up to
        ``max_size`` (rounded up to its multiple): each image at its own size, as the
        Gluon network; with ``data_shape`` they take that size only (each image resized
        to fit it and padded: its detections then differ from the network's). Its symbol
        takes any size.
    batch_size : int, optional
        ONNX and TensorRT: the fixed batch (default 1); with ``dynamic_batch``
        the largest batch of an engine (default 8). A symbol takes any batch.
    dynamic_batch : bool
        ONNX and TensorRT: take batches of any size (engines: up to ``batch_size``).
    precision : {'fp32', 'fp16', 'int8'}, optional
        Default fp32. TensorRT takes all three; ONNX and OpenVINO fp32 or int8 (ONNX
        Runtime's static quantization, :func:`~gluondet.deploy.quantize.quantize_onnx`).
    calibration_images, calibration_batches
        int8 only: a folder of images preprocessed as in validation, and how
        many batches to use (default all; batches of 8 for a dynamic batch).
    calibration_cache
        int8 only: a cache file (TensorRT's, or ONNX Runtime's activation ranges),
        reused if it exists (then no image is read), else written.
    calibration_method : {'minmax', 'percentile'}, optional
        ONNX and OpenVINO int8 only (default minmax); see
        :func:`~gluondet.deploy.quantize.quantize_onnx`.
    gen_ds_config : bool
        ONNX and TensorRT: also write DeepStream's ``nvinfer_config.txt`` and ``labels.txt``
        beside the model (:mod:`gluondet.deploy.deepstream`; for an engine, before it is
        built, so they are there even where it cannot be).
    nms : dict, optional
        Inference NMS of the exported graph (``score_thresh``, ``nms_thresh``, ``post_nms``,
        see :func:`~gluondet.deploy.networks.apply_nms`); default the network's.
    with_nms : bool
        False (``--no-nms``): the graph ends before the final NMS, with its candidates
        (scored, decoded, the top-k it takes), and the metadata says ``nms_applied: false``;
        the predictor runs the NMS on the host (:mod:`gluondet.deploy.nms`), by default with
        the settings recorded (``nms``), which gives the detections of the export with it.

    verbose : bool
        Print what was written (:func:`export_summary`).

    Returns
    -------
    list of str
        The files written.

    Raises
    ------
    ImportError
        For the tensorrt format without TensorRT and a GPU (after writing the ONNX model).
    """
    calibration = (calibration_images, calibration_batches, calibration_cache, calibration_method)
    if gen_ds_config and fmt in ('symbol', 'openvino'):
        raise ValueError('a DeepStream config is for the onnx and tensorrt formats (nvinfer '
                         'reads ONNX models and TensorRT engines)')
    if gen_ds_config and not with_nms:
        raise ValueError('--gen-ds-config is for a model with its NMS inside (its config has '
                         'no NMS of its own), not --no-nms')
    _check_export(fmt, output, batch_size, dynamic_batch, precision, calibration)
    net, info = load_network(network, params, pretrained, classes, data_shape)
    if nms:
        apply_nms(net, nms)
    net.postprocess.candidates = not with_nms     # a symbol's graph (ONNX: export_onnx's nms)
    shape, spec = info['data_shape'], info['preprocessing']
    describe = dict(preprocessing=spec, nms_applied=with_nms,  # a keep-ratio one's sizes
                    **{key: getattr(net, key) for key in ('short', 'max_size')
                       if getattr(net, key, None) is not None})
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    if fmt == 'symbol':     # the three files, or none
        meta = model_metadata(net, info['network'], shape, **describe)
        files = list(export_symbol(net, output, shape, with_files=[
            (writer(json.dumps(meta)), metadata_path(output))])) + [metadata_path(output)]
        return _summary(verbose, files, meta, ['batch', 3, 'height', 'width'])
    from . import export_onnx   # imports onnx, or says how to install it
    batch = batch_size or (DYNAMIC_MAX_BATCH if dynamic_batch and fmt == 'tensorrt' else 1)
    fixed = None if dynamic_batch else batch
    calibrator = None
    if precision == 'int8':     # before exporting: bad images or a missing cache fail first
        calibrator = CalibrationBatches(
            calibration_images, data_shape=shape[::-1],
            batch_size=DYNAMIC_MAX_BATCH if fixed is None and fmt == 'onnx' else batch,
            num_batches=calibration_batches, cache_path=calibration_cache,
            preprocessing=spec)
    # a keep-ratio network whose graph takes any size: each image at its own, as in Gluon
    dynamic_size = (spec['resize'] == 'keep_ratio' and data_shape is None
                    and postprocess_of(net).any_size)
    if dynamic_size:
        if spec['max_size'] is None:
            raise ValueError('%s resizes images without a max_size, so no size bounds its '
                             'input: give data_shape (--data-shape) for a fixed input' % network)
        shape = input_range(spec)[2]
    if spec['resize'] == 'keep_ratio':
        describe['fixed_input_size'] = not dynamic_size
    dims = ['batch' if fixed is None else fixed, 3] + (['height', 'width'] if dynamic_size
                                                       else list(shape))
    metadata = model_metadata(net, info['network'], shape, fixed, **describe)

    def write_onnx(path):
        export_onnx(net, path, shape, batch, dynamic_batch, dynamic_size, metadata=metadata,
                    nms=with_nms)

    if fmt in ('onnx', 'openvino'):     # an IR is converted from the ONNX model
        onnx_path = output if fmt == 'onnx' else output + '.tmp%d.onnx' % os.getpid()
        try:
            if precision != 'int8':
                write_onnx(onnx_path)
            else:
                from .quantize import quantize_onnx
                float_path = onnx_path + '.float%d.onnx' % os.getpid()
                try:
                    write_onnx(float_path)
                    quantize_onnx(float_path, onnx_path, calibrator,
                                  calibration_method or 'minmax')
                finally:
                    remove_if_exists(float_path)
            files = (save_openvino(onnx_path, output) if fmt == 'openvino' else [output]
                     + _deepstream(gen_ds_config, output, precision=precision, batch_size=batch))
        finally:
            if fmt == 'openvino':
                remove_if_exists(onnx_path)
        return _summary(verbose, files, dict(metadata, precision=precision or 'fp32'), dims)

    precision = precision or 'fp32'
    onnx_path = os.path.splitext(output)[0] + '.onnx'
    write_onnx(onnx_path)
    ds_files = _deepstream(gen_ds_config, onnx_path, output, precision, calibration_cache, batch)
    try:
        build_engine(onnx_path, output, precision, max_batch_size=batch,
                     dynamic_batch=dynamic_batch, calibrator=calibrator)
    except ImportError as err:
        raise ImportError('the ONNX model is written to %s%s, but the TensorRT engine cannot be '
                          'built here: %s' % (onnx_path, ' (and its DeepStream config beside '
                                              'it)' if ds_files else '', err)) from err
    meta = model_metadata(net, info['network'], shape, fixed, precision=precision,
                          max_batch_size=batch, **describe)
    write_json(metadata_path(output), meta)
    return _summary(verbose, [onnx_path, output, metadata_path(output)] + ds_files, meta, dims)


def export_summary(files, meta, dims):
    """What ``gluondet export`` prints: the files, the input, the classes, the
    post-processing.

    Parameters
    ----------
    files : list of str
    meta : dict
        The export's :func:`~gluondet.deploy.sources.model_metadata` (with ``precision``).
    dims : list
        The input's ``N, C, H, W``: sizes, or names of the dimensions left free.

    Returns
    -------
    str
        A few lines.
    """
    spec = meta['preprocessing']
    free = [name for name, dim in zip(('batch', 'channels', 'height', 'width'), dims)
            if not isinstance(dim, int)]
    if spec['resize'] == 'fixed':
        resize = 'each image resized to %d x %d' % tuple(spec['data_shape'])
    else:
        resize = ('each image resized keeping its aspect ratio (short side %d, long side at '
                  'most %s), %s' % (spec['short'], spec['max_size'],
                                    'padded at the bottom and right to a multiple of %d'
                                    % spec['multiple'] if 'height' in free else
                                    'made smaller if it does not fit the input, padded at the '
                                    'bottom and right to it'))
    if meta.get('fixed_input_size') is False:
        resize += ' (any size up to %d x %d)' % tuple(meta['data_shape'])
    nms = ', '.join('%s %s' % item for item in sorted(meta['nms'].items()))
    post = postprocess_from_metadata(meta, 'the exported model')
    return '\n'.join([
        'wrote %s%s' % (', '.join(files), ' (%s)' % meta['precision'] if 'precision' in meta
                        else ''),
        '  input: data, float32, %s (%s); %s, then (x / 255 - mean) / std, mean %s, std %s'
        % (' x '.join(str(d) for d in dims), 'dynamic: %s' % ', '.join(free) if free
           else 'fixed', resize, _numbers(spec['mean']), _numbers(spec['std'])),
        '  classes (%d): %s' % (len(meta['classes']), ', '.join(meta['classes'])),
        '  post-processing: inside the model, box decoding and %s (%s); outputs ids, scores '
        '(N x K x 1), boxes (N x K x 4: xmin, ymin, xmax, ymax in input pixels)%s, rows of -1 '
        'after the detections; the predictor of infer and evaluate scales the boxes to each '
        'image and clips them to it' % (
            'no NMS (%s)' % post.description if post is not None and not post.has_nms
            else 'NMS' if meta.get('nms_applied', True) else 'the candidates of the NMS, '
            'which the predictor runs (--no-nms)', nms,
            ''.join(', %s (N x K x grid: each detection\'s grid over its box, pasted into '
                    'the image by the predictor)' % name for name in meta.get('grid_fields', ()))
            )])


def _numbers(values):
    return '[%s]' % ', '.join('%g' % v for v in values)


def _summary(verbose, files, meta, dims):
    """Print the export's summary if ``verbose``; returns ``files``."""
    if verbose:
        print(export_summary(files, meta, dims))
    return files


def _deepstream(wanted, onnx_path, engine_path=None, precision=None, calibration_cache=None,
                batch_size=None):
    """DeepStream's config and labels beside the model if ``wanted`` (else no file)."""
    if not wanted:
        return []
    from .deepstream import write_deepstream_config
    # an ONNX int8 model is quantized (QDQ): its cache is ONNX Runtime's, not TensorRT's
    cache = calibration_cache if engine_path and precision == 'int8' else None
    return write_deepstream_config(onnx_path, engine_path, precision or 'fp32', cache,
                                   batch_size)


# ---------------------------------------------------------------- evaluate

def evaluate_model(model, dataset, dataset_root=None, split=None, annotation_file=None,
                   image_root=None, batch_size=None, progress=True, records=None,
                   class_mapping=None, iou_thresh=0.5, ap='11point', plots=None,
                   confusion_score=0.25, views=None, nms=None, **model_source):
    """Evaluate a model on a dataset and print the results.

    Prints the VOC07 mAP (IoU 0.5, 11-point; or ``iou_thresh`` and ``ap``) with each
    class's AP and, for COCO data, the 12 COCO box numbers; for a model with masks (Mask
    R-CNN) on COCO or demo data, the 12 COCO mask numbers too. With ``plots``, draws the
    pictures of :func:`gluondet.plots.evaluation_plots` from the same VOC metric.

    Parameters
    ----------
    model, **model_source
        A :class:`~gluondet.deploy.sources.ModelSource`, or its ``model`` and its other
        fields by keyword (``backend``, ``params``, ``pretrained``, ``data_shape``,
        ``classes``).
    dataset, dataset_root, split, annotation_file, image_root, records
        See :func:`gluondet.data.resolve_dataset` (the validation split by default, images
        without boxes kept); the dataset is labelled with the model's classes: COCO
        categories and KITTI types are matched to them by name.
    batch_size : int, optional
    progress : bool
    class_mapping : dict, optional
        kitti: KITTI type -> class, as the training's ``--class-mapping``.
    iou_thresh : float
        Least IoU of a match (0.5).
    ap : {'11point', 'area'}
        The VOC07 11-point AP (TAO's SAMPLE) or the area under the PR curve (INTEGRATE).
    plots : str, optional
        A folder for ``pr_curves.png``, ``confusion_matrix.png`` and ``ap_per_class.png``.
    confusion_score : float
        Least score of a detection counted in the confusion matrix.
    views : ViewOptions, optional
        Sliced inference and test-time augmentation (:mod:`gluondet.deploy.views`).
    nms : NMSOptions, optional
        The final NMS's options (:mod:`gluondet.deploy.nms`); default the model's.

    Returns
    -------
    dict
        ``mAP`` and ``AP/<class>`` (VOC07), and for COCO data ``coco`` (the 12
        numbers by name) and with masks ``coco_masks`` (the mask AP's 12); with ``plots``,
        ``plots``: ``{file: what it shows}`` (the APs drawn, the confusion matrix).
    """
    if dataset not in DATASETS:     # resolve_dataset's names, demo included
        raise ValueError('dataset must be one of %s, got %r' % (', '.join(DATASETS), dataset))
    if plots:
        from ..plots import require_matplotlib
        require_matplotlib()    # before the evaluation, not after it
    source = ModelSource.of(model, **model_source)
    predictor = wrap(Predictor.from_model(source, nms=nms), views, batch_size)
    masked = MASKS in predictor.grid_fields and dataset in ('coco', 'demo')   # a COCO truth
    data = resolve_dataset(dataset, dataset_root, split, predictor.classes, annotation_file,
                           image_root, records=records, class_mapping=class_mapping,
                           masks=masked and dataset == 'demo')
    coco = COCODetectionMetric(data, masks=masked) if masked or isinstance(
        data, COCODetection) else None
    voc = voc_metric(predictor.classes, iou_thresh, ap)
    confusion = (ConfusionMatrix(len(predictor.classes), iou_thresh, confusion_score)
                 if plots else None)
    result = evaluate_voc(predictor, data, batch_size, progress,
                          metrics=[m for m in (coco, confusion) if m is not None], voc=voc)
    print('%s mAP (IoU %g) of %s (%s) on %d images: %.4f'
          % ('VOC07' if ap == '11point' else 'VOC area', iou_thresh, source.model,
             predictor.backend, len(data), result['mAP']))
    width = max(len(name) for name in predictor.classes)
    for name in predictor.classes:
        print('  %-*s %.4f' % (width, name, result['AP/' + name]))
    if coco is not None:
        coco.get()
        result['coco'] = dict(coco.stats)
        print('COCO box metrics:\n' + format_summary(coco.stats))
        if masked:
            result['coco_masks'] = dict(coco.segm_stats)
            print('COCO mask metrics:\n' + format_summary(coco.segm_stats))
    if plots:
        from ..plots import evaluation_plots
        result['plots'] = evaluation_plots(voc, confusion, plots, '%s AP, IoU %g, %d images' % (
            'VOC07 11-point' if ap == '11point' else 'VOC area', iou_thresh, len(data)))
        print('pictures written: %s' % ', '.join(result['plots']))
    return result
