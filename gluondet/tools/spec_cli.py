"""TAO's command lines over gluondet: ``gluondet train -e SPEC -r DIR``, ``gluondet evaluate -e
SPEC -m MODEL`` and ``gluondet inference -e SPEC -m MODEL -i DIR -o DIR`` (`gluondet.cli`
adds these flags to its commands and calls here).

``-k KEY`` is accepted everywhere and ignored with a notice (gluondet models are not
encrypted). Evaluation and inference take from the spec what TAO's do: the validation data,
``eval_config`` (batch size, IoU, SAMPLE or INTEGRATE AP) and ``nms_config`` (applied to a
Gluon model, a training output ``.params``; an exported model keeps the NMS it was exported
with).
"""
import dataclasses
import os
import shutil
import sys
import tempfile

from ..dataset_flags import DEFAULT_ROOT
from . import spec as specs

__all__ = ['add_spec_arguments', 'add_train_arguments', 'train', 'evaluate', 'inference',
           'add_inference_arguments', 'export_nms']

KEY_NOTICE = '-k: ignored (gluondet models are not encrypted)'


def _note(command, text):
    print('gluondet %s: %s' % (command, text), file=sys.stderr)


def add_spec_arguments(parser, required=False):
    add = parser.add_argument
    add('-e', '--experiment-spec', '--experiment_spec', '--experiment_spec_file',
        dest='experiment_spec', required=required,
        help='experiment spec: a gluondet .yaml/.json spec (the training flags) or a TAO '
             'RetinaNet spec (protobuf text); docs/tao.md')
    add('-k', '--key', help='accepted for TAO command lines and ignored')


def add_train_arguments(parser):
    add_spec_arguments(parser, required=True)
    add = parser.add_argument
    add('-r', '--results-dir', '--results_dir', dest='results_dir', required=True,
        help='checkpoints, logs, the curves picture (*_curves.png: losses, learning rate, '
             "validation mAP by epoch) and resolved_spec.json (every flag's final value) go "
             'here')
    add('--gpus', type=int, help="TAO's: train on this many GPUs (default: a TAO spec on the "
                                 "first GPU if there is one, else the CPU; a gluondet spec: its "
                                 'own gpus)')
    add('--gpu-index', '--gpu_index', dest='gpu_index', type=int, nargs='+',
        help="TAO's: the GPUs to train on")
    add('--use-amp', '--use_amp', dest='use_amp', action='store_true',
        help="TAO's: mixed precision (the scripts' --amp)")
    add('overrides', nargs='*', metavar='-- FLAG',
        help="after '--': more flags of the detector's training script, over the spec's")


def train(args):
    if args.key:
        _note('train', KEY_NOTICE)
    try:
        script, argv = specs.prepare(args.experiment_spec, args.results_dir, args.overrides,
                                     gpus=args.gpus, gpu_index=args.gpu_index,
                                     amp=args.use_amp, log=lambda line: _note('train', line))
    except (ValueError, OSError) as err:    # SpecError and ProtoTextError are ValueErrors
        return specs.main_error('train', err)
    script.main(argv)       # the script's own errors exit as they do from its command line
    return 0


def _spec_settings(path, command, data_dir=None):
    """``(dataset keywords, evaluation settings)`` of a spec for ``evaluate`` (the validation
    data linked under ``data_dir``) or ``inference`` (no ``data_dir``, no data)."""
    detector, values, translation = specs.load_spec(path, data_dir, make_data=False)
    if translation is None:
        return (specs.eval_dataset(detector, values) if data_dir else None), {}
    for line in translation.warnings:
        if 'eval_config' in line or 'nms_config' in line:
            _note(command, 'warning: ' + line)
    if data_dir is None:
        return None, translation.evaluation
    source = translation.data['val'][0]
    if translation.data['kind'] == 'rec':
        dataset = dict(dataset='rec', records=values['val_rec'])
    elif translation.data['kind'] == 'coco':
        dataset = dict(dataset='coco', annotation_file=source['annotation_file'],
                       image_root=source['image_directory_path'])
    else:
        from . import tao
        tao.link_kitti(translation, os.path.join(data_dir, 'tao_data'))
        dataset = dict(dataset='kitti', dataset_root=os.path.join(data_dir, 'tao_data'),
                       split='val', class_mapping=values.get('class_mapping'))
    return dataset, translation.evaluation


def _model(model, nms, command):
    """``model``, or for a training output ``.params`` and NMS settings the network with
    them applied (an exported model keeps its own NMS, with a notice)."""
    if not nms:
        return model
    if not model.lower().endswith('.params'):
        _note(command, 'note: nms_config applies to Gluon models (.params); %s keeps the NMS '
              'it was exported with' % model)
        return model
    from ..deploy.networks import apply_nms, load_network
    return apply_nms(load_network(model)[0], nms)


def export_nms(path):
    """The ``nms_config`` of a spec (``{}`` for none, or a gluondet spec), for ``gluondet
    export -e``: the exported graph carries the NMS."""
    return _spec_settings(path, 'export')[1].get('nms') or {}


def evaluate(args, source):
    """``gluondet evaluate -e SPEC -m MODEL``: the spec's validation data and settings;
    ``source`` is the ModelSource of the command's model flags."""
    from ..deploy import commands as infer
    from ..deploy.views import view_options
    if args.key:
        _note('evaluate', KEY_NOTICE)
    given = [flag for flag, value in (
        ('--dataset', args.dataset), ('--val-split', args.val_split),
        ('--val-json', args.val_json), ('--image-root', args.image_root),
        ('--val-rec', args.val_rec), ('--class-mapping', args.class_mapping),
        ('--dataset-root', args.dataset_root != DEFAULT_ROOT)) if value]
    if given:
        return specs.main_error('evaluate', '-e takes the data from the spec: no %s'
                                % ', '.join(given))
    data_dir = tempfile.mkdtemp(prefix='gluondet_eval_')
    try:
        dataset, settings = _spec_settings(args.experiment_spec, 'evaluate', data_dir)
        model = _model(args.model, settings.get('nms'), 'evaluate')
        if not isinstance(model, str):
            print('%s with the spec\'s nms_config: %s' % (args.model, settings['nms']))
        infer.evaluate_model(
            model=dataclasses.replace(source, model=model),
            batch_size=args.batch_size or settings.get('batch_size'),
            iou_thresh=getattr(args, 'iou_thresh', None) or settings.get('iou_thresh', 0.5),
            ap=getattr(args, 'ap', None) or settings.get('ap', '11point'),
            plots=getattr(args, 'plots', None),
            confusion_score=getattr(args, 'confusion_score', 0.25),
            views=view_options(args), **dataset)
        return 0
    except (ValueError, OSError) as err:
        return specs.main_error('evaluate', err)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def add_inference_arguments(parser):
    add_spec_arguments(parser, required=True)
    add = parser.add_argument
    add('-m', '--model', '--model_path', dest='model', required=True,
        help='a training output PREFIX_best.params (its json beside), a symbol prefix, a .onnx '
             'or a TensorRT engine (as gluondet infer --model)')
    add('-i', '--image-dir', '--image_dir', dest='image_dir', required=True,
        help='an image file or a folder of images')
    add('-o', '--out-image-dir', '--out_image_dir', dest='out_image_dir',
        help='folder for the images with their boxes drawn, and detections.json (COCO results)')
    add('-l', '--out-label-dir', '--out_label_dir', dest='out_label_dir',
        help='folder for one KITTI label file per image')
    add('-r', '--results-dir', '--results_dir', dest='results_dir',
        help="TAO 5's layout: RESULTS_DIR/images_annotated and RESULTS_DIR/labels (for -o and "
             '-l not given)')
    add('-t', '--threshold', type=float, default=0.3,
        help='least score of a detection drawn and written')
    add('-b', '--batch-size', '--batch_size', dest='batch_size', type=int,
        help="images per batch (default: the spec's eval_config batch_size, else 8)")


def inference(args):
    """``gluondet inference``: TAO's inference, our ``infer`` with the spec's settings."""
    from ..deploy import commands as infer
    if args.key:
        _note('inference', KEY_NOTICE)
    images, labels = args.out_image_dir, args.out_label_dir
    if args.results_dir:
        images = images or os.path.join(args.results_dir, 'images_annotated')
        labels = labels or os.path.join(args.results_dir, 'labels')
    if not images:
        return specs.main_error('inference', 'give -o (images drawn) or -r (results folder)')
    try:
        _, settings = _spec_settings(args.experiment_spec, 'inference')
        model = _model(args.model, settings.get('nms'), 'inference')
        infer.infer(
            model=model, images=args.image_dir,
            output=os.path.join(images, 'detections.json'),
            batch_size=args.batch_size or settings.get('batch_size'), kitti_labels=labels,
            visualize=images, threshold=args.threshold, min_score=args.threshold)
        return 0
    except (ValueError, OSError) as err:
        return specs.main_error('inference', err)

