"""The ``gluondet`` command line: ``gluondet <command> [options]``.

Each command is a ``(name, help, add_arguments, run)`` entry in ``COMMANDS``; the
heavy imports happen inside ``run`` so ``gluondet --help`` stays fast. ``export``,
``infer`` and ``evaluate`` turn their flags into a call of
:mod:`gluondet.deploy.commands`, which holds what they do.
"""
import argparse
import signal
import sys

from . import detectors
from .dataset_flags import add_dataset_args, dataset_kwargs
from .errors import ArgumentParser, UserError, add_debug_flag, run_main
from .model_formats import BACKENDS, FORMATS
from .inference_flags import (add_nms_arguments, add_track_arguments, add_view_arguments,
                              track_settings)


def _demo_arguments(parser):
    parser.add_argument('--output', default='demo_out', help='folder for the demo outputs')
    parser.add_argument('--detector', default='ssd', type=_detector_name,
                        help='which recipe, one of %s or an alias as `gluondet train` takes '
                             '(make demo runs the SSD one)' % ', '.join(detectors.names()))
    parser.add_argument('--epochs', type=_at_least(1),
                        help="training epochs (default: the recipe's)")
    parser.add_argument('--seed', type=int, help="random seed (default: the recipe's)")
    parser.add_argument('--amp', action='store_true',
                        help='mixed precision (bfloat16 on CPUs, float16 on GPUs)')
    parser.add_argument('--dali', action='store_true',
                        help='NVIDIA DALI data loading (the SSD and RetinaNet recipes)')


def _detector_name(text):
    """``--detector``: a detector's name or alias (any case), as its name."""
    try:
        return detectors.get(text).name
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _demo(args):
    from . import demo
    from .engine import wording
    detector = detectors.get(args.detector)
    for flag in ('amp', 'dali'):
        if getattr(args, flag) and flag not in detector.features:
            raise UserError('--%s: %s does not train with it' % (flag, detector.display))
    with wording.speaking(None):    # no resume, learning rate or clipping flags to offer
        demo.run_demo(args.output, args.detector, epochs=args.epochs, seed=args.seed,
                      amp=args.amp, dali=args.dali)
    return 0


def _data_shape(text):
    """``--data-shape``: ``S`` or ``HEIGHT,WIDTH``."""
    try:
        values = tuple(int(v) for v in text.split(','))
    except ValueError:
        values = ()
    if len(values) not in (1, 2) or min(values) < 1:
        raise argparse.ArgumentTypeError('expected a size S or HEIGHT,WIDTH, got %r' % text)
    return values * (3 - len(values))


def _classes(text):
    return tuple(name.strip() for name in text.split(',') if name.strip())


def _model_arguments(parser):
    add = parser.add_argument
    add('-m', '--model', required=True,
        help='a model zoo name (with --params or --pretrained), a training output '
             'PREFIX_best.params (its json beside), a symbol PREFIX, a .onnx file, a TensorRT '
             '.engine file (its json beside) or an OpenVINO .xml (its .bin beside); any '
             'detector, preprocessed as the model records')
    add('--backend', choices=BACKENDS,
        help="default: the model's (mxnet for networks and symbols, onnxruntime for .onnx, "
             'tensorrt for engines, openvino for .xml); a .onnx runs on openvino too')
    _weights_arguments(parser, "input size S or HEIGHT,WIDTH of a fixed-size model (SSD, "
                               "YOLOv3; default: the model's); a keep-ratio model (Faster R-CNN, "
                               "RetinaNet) takes each image at its own size")
    add('--batch-size', type=int, help="images per batch (default: a fixed-batch model's batch, "
                                       'else 8)')


def _weights_arguments(parser, data_shape_help="input size S or HEIGHT,WIDTH (default: the "
                                               "model's)"):
    add = parser.add_argument
    add('--params', help='weights for a zoo name (gluondet or GluonCV .params)')
    add('--pretrained', action='store_true', help="the zoo name's published weights")
    add('--data-shape', type=_data_shape, help=data_shape_help)
    add('--classes', type=_classes,
        help="comma-separated class names, for a model that does not record them")


def _weights(args):
    """The keywords of `_weights_arguments`'s flags (what every deploy command takes)."""
    return dict(params=args.params, pretrained=args.pretrained, classes=args.classes,
                data_shape=args.data_shape)


def _model_source(args):
    """The ModelSource of `_model_arguments`'s flags: the model, its backend and weights."""
    from .deploy.sources import ModelSource
    return ModelSource(args.model, backend=args.backend, **_weights(args))


def _export_arguments(parser):
    add = parser.add_argument
    add('--network', '-m', '--model', dest='network', required=True,
        help='a model zoo name (with --params or --pretrained) or a training output '
             "PREFIX_best.params (its json beside; TAO's -m)")
    _weights_arguments(parser, "input size S or HEIGHT,WIDTH (default: the model's). The ONNX "
                               'model or engine of a keep-ratio model (Faster R-CNN, RetinaNet) '
                               'takes any size up to its max size by default; this fixes one '
                               'size; its symbol takes any')
    add('--format', dest='fmt', default='onnx', choices=FORMATS,
        help='symbol: PREFIX-symbol.json, PREFIX-0000.params, PREFIX-meta.json; onnx: one .onnx '
             'file; tensorrt: an .engine file, the .onnx it is built from and a .json beside; '
             'openvino: an OpenVINO IR .xml and its .bin, converted from the .onnx')
    add('-o', '--output', required=True, help='symbol: a path prefix; onnx: FILE.onnx; '
                                              'tensorrt: FILE.engine; openvino: FILE.xml')
    add('--batch-size', type=int,
        help='fixed batch of an ONNX model or engine (default 1); with --dynamic-batch, the '
             'largest batch of an engine (default 8)')
    add('--dynamic-batch', action='store_true', help='an ONNX model or engine for any batch size')
    add('--precision', choices=('fp32', 'fp16', 'int8'),
        help='default fp32; onnx, openvino: fp32 or int8 (ONNX Runtime quantization); '
             'tensorrt: all three')
    add('--calibration-images', help='int8: a folder of images like those the model will see')
    add('--calibration-batches', type=int, help='int8: batches to calibrate with (default all)')
    add('--calibration-cache', help='int8: calibration cache file, reused if it exists')
    add('--calibration-method', choices=('minmax', 'percentile'),
        help='onnx int8: how activation ranges are chosen (default minmax)')
    add('--gen-ds-config', '--gen_ds_config', action='store_true',
        help='onnx, tensorrt: also write a DeepStream nvinfer config (nvinfer_config.txt) and '
             'labels.txt beside the model')
    add('--no-nms', dest='with_nms', action='store_false',
        help='end the graph before the final NMS, with its candidates: the predictor runs the '
             "NMS (by default with the export's settings), so that infer, evaluate and "
             'benchmark take --iou, --agnostic-nms and --soft-nms')
    add('-e', '--experiment-spec', '--experiment_spec', '--experiment_spec_file',
        dest='experiment_spec', help="TAO's export -e: the exported graph takes the spec's "
                                     'nms_config')
    add('-k', '--key', help='accepted for TAO command lines and ignored')


def _export(args):
    from .deploy import commands
    from .tools import spec, spec_cli
    if args.key:
        print('gluondet export: ' + spec_cli.KEY_NOTICE, file=sys.stderr)
    nms = None
    if args.experiment_spec:
        try:
            nms = spec_cli.export_nms(args.experiment_spec)
        except (ValueError, OSError) as err:
            return spec.main_error('export', err)
    commands.export_model(
        network=args.network, output=args.output, fmt=args.fmt, **_weights(args),
        batch_size=args.batch_size,
        dynamic_batch=args.dynamic_batch, precision=args.precision,
        calibration_images=args.calibration_images,
        calibration_batches=args.calibration_batches, calibration_cache=args.calibration_cache,
        calibration_method=args.calibration_method, gen_ds_config=args.gen_ds_config, nms=nms,
        with_nms=args.with_nms)
    return 0


def _at_least(least):
    """An int flag's type: ``least`` or more."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError('expected an integer >= %d, got %r' % (least, text))
        return value
    return parse


def _infer_arguments(parser):
    _model_arguments(parser)
    add = parser.add_argument
    add('--source', '--images', dest='source', required=True,
        help="an image file, a folder of images, a glob ('photos/*.jpg'), a video file, a "
             'camera index (0) or device (/dev/video0), or a stream URL (rtsp://, http(s)://: '
             'MJPEG or any stream FFmpeg reads)')
    add('--output',
        help='the detections: a .json of COCO results (image files only; the default, '
             'detections.json, with image ids named in OUTPUT_images.json beside it) or a '
             '.jsonl of JSON lines, one per frame or image (the default for a video, camera '
             'or stream: detections.jsonl)')
    add('--kitti-labels', help='folder for one KITTI label file per image (STEM.txt) or frame '
                               '(STEM_FRAME.txt)')
    add('--visualize', help='folder for the images (frames) with their detections drawn')
    add('--save-video', metavar='FILE',
        help='a video, camera or stream: its frames with their detections drawn into FILE '
             '(.mp4, or .avi for Motion JPEG) at its size and frame rate')
    add('--threshold', type=float, default=0.3, help='least score of a drawn box')
    add('--vid-stride', type=_at_least(1), default=1, metavar='N',
        help='detect in every N-th frame (image) only (default 1: all)')
    add('--reconnect', type=_at_least(0), default=3, metavar='N',
        help='a camera or stream that drops is opened again up to N times in a row, 1, 2, '
             '4 ... (at most 30) seconds apart, before it counts as ended (default 3)')
    add_nms_arguments(parser)
    add_view_arguments(parser)
    add_track_arguments(parser)
    parser.epilog = ('Ctrl-C (SIGINT) or SIGTERM stops the reading: the frames read are '
                     'finished (with --slice or --tta, those whose views are running are '
                     'left out), and the JSON lines, video and labels are closed whole.')


def _infer(args):
    from .deploy import commands
    from .deploy.nms import nms_options
    from .deploy.views import view_options
    views = view_options(args)
    result = commands.infer(
        model=_model_source(args), source=args.source, output=args.output,
        batch_size=args.batch_size,
        kitti_labels=args.kitti_labels, visualize=args.visualize, threshold=args.threshold,
        save_video=args.save_video, vid_stride=args.vid_stride, track=track_settings(args),
        reconnect=args.reconnect, views=views, nms=nms_options(args))
    return 128 + getattr(signal, result['stopped']) if result['stopped'] else 0


def _evaluate_arguments(parser):
    _model_arguments(parser)
    add = parser.add_argument
    # the validation data's flags of train_*.py; --classes is the model's
    add_dataset_args(parser, roles=('val',), dataset=None, classes=False)
    add = parser.add_argument
    add('--iou-thresh', type=float,
        help="least IoU of a match (default 0.5, or the spec's matching_iou_threshold)")
    add('--ap', choices=('11point', 'area'),
        help="VOC07's 11-point AP (TAO's SAMPLE, the default) or the area under the PR curve "
             "(INTEGRATE; default with -e: the spec's average_precision_mode)")
    add('--plots', metavar='DIR',
        help='also draw into DIR: pr_curves.png (each class, its AP), confusion_matrix.png '
             '(classes and background, at the IoU of the evaluation) and ap_per_class.png')
    add('--confusion-score', type=float, default=0.25, metavar='SCORE',
        help='least score of a detection counted in confusion_matrix.png (default 0.25)')
    add_nms_arguments(parser)
    add_view_arguments(parser)
    from .tools import spec_cli
    spec_cli.add_spec_arguments(parser)


def _evaluate(args):
    from .deploy import commands
    if args.experiment_spec:
        from .tools import spec_cli
        return spec_cli.evaluate(args, _model_source(args))
    if not (args.dataset or args.val_json or args.val_rec):
        raise UserError('give --dataset (or -e SPEC)')
    if args.key:
        print('gluondet evaluate: -k: ignored', file=sys.stderr)
    from .deploy.nms import nms_options
    from .deploy.views import view_options
    views = view_options(args)
    nms = nms_options(args)
    data = dataset_kwargs(args, 'val')
    commands.evaluate_model(
        model=_model_source(args), dataset_root=data.pop('root'), **data,
        batch_size=args.batch_size, iou_thresh=args.iou_thresh or 0.5,
        ap=args.ap or '11point', plots=args.plots, confusion_score=args.confusion_score,
        views=views, nms=nms)
    return 0


def _train_arguments(parser):
    from .tools import spec_cli
    spec_cli.add_train_arguments(parser)
    parser.epilog = 'DETECTOR: %s' % ', '.join(
        '%s (%s)' % (d.name, d.display) for d in detectors.all_detectors())


def _train(args):
    from .tools import spec_cli
    return spec_cli.train(args)


def _inference_arguments(parser):
    from .tools import spec_cli
    spec_cli.add_inference_arguments(parser)


def _inference(args):
    from .tools import spec_cli
    return spec_cli.inference(args)


def _plot_arguments(parser):
    add = parser.add_argument
    add('runs', nargs='+', metavar='RUN_PREFIX',
        help="a training run's save prefix (its PREFIX_metrics.jsonl is read; a .jsonl path "
             'is taken as it is)')
    add('-o', '--output', default='curves.png', help='the picture (default curves.png)')
    add('--metric', default='mAP', help='the validation metric drawn (default mAP)')


def _plot(args):
    from . import plots
    try:
        plots.plot_runs(args.runs, args.output, args.metric)
    except (ValueError, OSError, ImportError) as err:
        print('gluondet plot: error: %s' % err, file=sys.stderr)
        return 1
    print('%s: the curves of %d run%s' % (args.output, len(args.runs),
                                         's' if len(args.runs) > 1 else ''))
    return 0


def _convert_arguments(parser):
    from .tools import convert
    convert.add_arguments(parser)


def _convert(args):
    from .tools import convert
    return convert.main(args)


def _prune_arguments(parser):
    add = parser.add_argument
    add('-m', '--model', required=True,
        help='a training output PREFIX_best.params (its json beside), or a pruned model')
    add('-o', '--output', '--output_file', dest='output', required=True,
        help='the pruned model: OUT.params (or OUT) and OUT.json beside it')
    add('-n', '--normalizer', default='max',
        help="max or L2: per-layer normalization of the filter norms: max divides by the "
             "layer's largest, L2 by their L2 norm times their number")
    add('-eq', '--equalization_criterion', '--equalization-criterion', dest='equalization',
        default='union',
        help='how the scores of layers whose outputs are added together are merged per '
             'channel: union (max), intersection (min), arithmetic_mean, geometric_mean')
    add('-pth', '--pruning_threshold', '--pruning-threshold', dest='threshold', type=float,
        default=0.1, help='channels whose normalized score is not above this are removed')
    add('-nf', '--min_num_filters', '--min-num-filters', dest='min_filters', type=int,
        default=16, help='least number of filters a layer keeps')
    add('-pg', '-g', '--pruning_granularity', '--pruning-granularity', dest='granularity',
        type=int, default=8, help='a layer keeps a multiple of this many filters')
    add('-el', '--excluded_layers', '--excluded-layers', dest='excluded', nargs='*', default=[],
        metavar='LAYER',
        help='layers kept whole, with the layers added to them: their paths, the parameter '
             "names of the params file less '.weight' (features.backbone.layer1.0.conv1); the "
             'prediction layers are always kept')
    add('-k', '--key', help="accepted and ignored (TAO's model key; gluondet models are not "
                            'encrypted)')


def _prune(args):
    from .tools.prune import prune_model
    if args.key is not None:
        print('gluondet prune: -k ignored: gluondet models are not encrypted', file=sys.stderr)
    prune_model(
        model=args.model, output=args.output, normalizer=args.normalizer,
        equalization=args.equalization, threshold=args.threshold,
        min_filters=args.min_filters, granularity=args.granularity, excluded=args.excluded)
    return 0


def _benchmark_arguments(parser):
    add = parser.add_argument
    add('-m', '--model', required=True,
        help='what infer --model takes: a model zoo name (random weights made to detect many '
             'boxes, unless --params or --pretrained), a training output PREFIX_best.params, '
             'a symbol PREFIX, a .onnx file, a TensorRT .engine file or an OpenVINO .xml')
    add('--backend', choices=BACKENDS,
        help="default: the model's. A Gluon network (zoo name or .params) with onnxruntime, "
             'openvino or tensorrt is first exported to a temporary ONNX model with a dynamic '
             'batch (tensorrt: and an fp32 engine up to the largest batch size)')
    _weights_arguments(parser, "input size S or HEIGHT,WIDTH of a fixed-size model (SSD, "
                               "YOLOv3; default: the model's)")
    add('--batch-sizes', default='1', help='comma-separated batch sizes to time (default 1)')
    add('--threads', type=int,
        help="CPU threads: MXNet's OpenMP threads (OMP_NUM_THREADS), ONNX Runtime's intra-op "
             "or OpenVINO's inference threads (default: gluondet's, one per physical core)")
    add('--warmup', type=int, default=5, help='untimed runs before each batch size (default 5)')
    add('--iters', type=int, help='timed runs per batch size (default 100, unless --seconds)')
    add('--seconds', type=float, help='stop timing a batch size after this long')
    add('--output', help='also write the results as json (per batch size latency mean, p50, '
                         'p90, p99 in ms and images/s; the machine and versions)')
    add_nms_arguments(parser)
    parser.epilog = ('Timed: the network forward with its box decoding and NMS on a '
                     'preprocessed batch, until the outputs are in host memory, then the '
                     "predictor's NMS on the host if it runs one (NMS options, --no-nms "
                     'exports); not image decoding, resizing or normalization.')


def _benchmark(args):
    from . import threads
    if args.threads is not None and args.threads >= 1 and args.backend != 'tensorrt':
        threads.request_mxnet_threads(args.threads)     # before mxnet is imported
    from .deploy import benchmark
    from .deploy.nms import nms_options
    benchmark.benchmark(
        model=_model_source(args), batch_sizes=args.batch_sizes, threads=args.threads,
        warmup=args.warmup, iters=args.iters, seconds=args.seconds, output=args.output,
        nms=nms_options(args))
    return 0


def _launch_arguments(parser):
    from . import launch
    launch.add_arguments(parser)


def _launch(args):
    from . import launch
    return launch.main(args)


COMMANDS = [
    ('demo', 'train a small SSD, Faster R-CNN, RetinaNet, YOLOv3 or CenterNet on the embedded '
     'demo data and print its mAP', _demo_arguments, _demo),
    ('export', 'export a detector as an MXNet symbol, an ONNX model, an OpenVINO IR or a '
     'TensorRT engine', _export_arguments, _export),
    ('infer', 'detect objects in images, videos, cameras and streams: COCO json or JSON lines, '
     'KITTI labels, drawn images and video, track ids',
     _infer_arguments, _infer),
    ('evaluate', 'VOC07 mAP (and COCO metrics) of a detector on a dataset, or on the '
     "validation data of an experiment spec (-e, TAO's evaluate)",
     _evaluate_arguments, _evaluate),
    ('plot', "overlay training runs' curves (losses, learning rate, validation mAP against "
     'the epoch, as each run\'s PREFIX_curves.png) in one picture', _plot_arguments, _plot),
    ('train', "train a detector: gluondet train DETECTOR [its training script's flags] (one of "
     "the detector table's, gluondet train DETECTOR --help), or from an experiment spec: a "
     "gluondet .yaml/.json of the scripts' flags or a TAO RetinaNet spec (TAO's train -e SPEC "
     '-r RESULTS_DIR)', _train_arguments, _train),
    ('inference', "TAO's inference: -e SPEC -m MODEL -i IMAGES -o DRAWN [-l LABELS] [-t 0.3] "
     '(gluondet infer with the spec\'s NMS and batch size)', _inference_arguments, _inference),
    ('convert', "a dataset to sharded MXNet RecordIO files in GluonCV's detection layout, "
     "split into folds (NVIDIA TAO's dataset_convert)", _convert_arguments, _convert),
    ('prune', "remove the filters of least norm from a trained detector (NVIDIA TAO's prune); "
     'retrain it with --pruned-model', _prune_arguments, _prune),
    ('benchmark', 'latency (mean, p50, p90, p99) and throughput of a detector on a backend at '
     'several batch sizes, as a table and json', _benchmark_arguments, _benchmark),
    ('launch', "start a training on MXNet's parameter server: the scheduler, servers and "
     'workers (--kv-store dist_sync), here or on the hosts of a host file',
     _launch_arguments, _launch),
]


def build_parser():
    """The ``gluondet`` parser, a subparser per command of ``COMMANDS``."""
    from .version import __version__
    parser = ArgumentParser(prog='gluondet', description='Object detection on MXNet Gluon.')
    parser.add_argument('--version', action='version', version='gluondet ' + __version__)
    sub = parser.add_subparsers(dest='command', metavar='command')
    for name, help_text, add_arguments, run in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(p)
        add_debug_flag(p)
        p.set_defaults(run=run, command_name=name)
    return parser


def main(argv=None):
    """``gluondet COMMAND ...``: its exit status (a user's error in one line, see `errors`).
    ``gluondet train DETECTOR ...`` runs that detector's training command."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) > 1 and argv[0] == 'train' and not argv[1].startswith('-'):
        return _train_detector(argv[1], argv[2:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return run_main(lambda _: args.run(args), argv, 'gluondet ' + args.command_name)


def _train_detector(name, argv):
    try:
        detector = detectors.get(name)
    except ValueError as err:
        print('gluondet train: error: %s' % err, file=sys.stderr)
        return 2
    prog = 'gluondet train ' + detector.name
    saved, sys.argv[0:1] = sys.argv[:1], [prog]     # its parser's prog, in usage and help
    try:
        return run_main(detector.main, argv, prog)
    finally:
        sys.argv[0:1] = saved


if __name__ == '__main__':
    sys.exit(main())
