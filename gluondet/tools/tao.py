"""NVIDIA TAO RetinaNet experiment specs, read as they are and mapped onto gluondet's flags.

`read_tao_spec` parses a spec (protobuf text, `gluondet.tools.prototxt`) against `SCHEMA`,
TAO's own messages: field names, types, enums and oneofs as in TAO's
``nvidia_tao_tf1/cv/retinanet/proto/experiment.proto`` and the common protos it imports
(``training_config``, ``learning_rate_config``, ``optimizer_config``, ``regularizer_config``,
``visualizer_config``, ``nms_config``, ``class_weighting_config``,
``detection_sequence_dataset_config``; ``augmentation_config`` is SSD's). A typo is an error
naming the line and the closest field.

`translate` maps the fields onto the flags of ``scripts/train_retinanet.py`` (the keys of a
gluondet spec, `gluondet.tools.spec`), the evaluation settings (`Translation.evaluation`) and
the data (KITTI image and label folders, COCO json and images, or records). Every field that
is written in the spec is used, refused or warned: one that would train another model than
the spec says is a `TaoSpecError` naming its line, one that leaves the model alone a warning;
the translator marks the fields it reads, and whatever is left over is reported.
docs/tao.md has the table.
"""
import math
import os
import re

from .prototxt import ProtoTextError, parse, validate

__all__ = ['SCHEMA', 'TaoSpecError', 'Translation', 'read_tao_spec', 'translate', 'link_data',
           'link_kitti']

SCHEMA = {
    'Experiment': {
        'random_seed': 'uint32', 'dataset_config': 'DatasetConfig',
        'augmentation_config': 'AugmentationConfig', 'training_config': 'TrainingConfig',
        'eval_config': 'EvalConfig', 'nms_config': 'NMSConfig',
        'retinanet_config': 'RetinaNetConfig', 'class_weighting_config': 'ClassWeightingConfig'},
    'RetinaNetConfig': {
        'aspect_ratios': 'string', 'aspect_ratios_global': 'string', 'scales': 'string',
        'min_scale': 'float', 'max_scale': 'float', 'two_boxes_for_ar1': 'bool',
        'steps': 'string', 'clip_boxes': 'bool', 'variances': 'string', 'offsets': 'string',
        'mean_color': 'string', 'arch': 'string', 'loss_loc_weight': 'float',
        'focal_loss_alpha': 'float', 'focal_loss_gamma': 'float',
        'freeze_blocks': ('repeated', 'float'), 'freeze_bn': 'bool', 'nlayers': 'uint32',
        'n_kernels': 'uint32', 'feature_size': 'uint32', 'pos_iou_thresh': 'float',
        'neg_iou_thresh': 'float', 'n_anchor_levels': 'uint32'},
    'TrainingConfig': {
        'batch_size_per_gpu': 'uint32', 'num_epochs': 'uint32',
        'learning_rate': 'LearningRateConfig', 'regularizer': 'RegularizerConfig',
        'optimizer': 'OptimizerConfig', 'cost_scaling': 'CostScalingConfig',
        'checkpoint_interval': 'uint32', 'enable_qat': 'bool', 'resume_model_path': 'string',
        'pretrain_model_path': 'string', 'pruned_model_path': 'string',
        'max_queue_size': 'uint32', 'n_workers': 'uint32', 'use_multiprocessing': 'bool',
        'early_stopping': 'EarlyStopping', 'visualizer': 'VisualizerConfig', 'model_ema': 'bool',
        '__oneof__': [('resume_model_path', 'pretrain_model_path', 'pruned_model_path')]},
    'EarlyStopping': {'monitor': 'string', 'min_delta': 'float', 'patience': 'uint32'},
    'LearningRateConfig': {
        'soft_start_annealing_schedule': 'SoftStartAnnealingScheduleConfig',
        'soft_start_cosine_annealing_schedule': 'SoftStartCosineAnnealingScheduleConfig',
        '__oneof__': [('soft_start_annealing_schedule', 'soft_start_cosine_annealing_schedule')]},
    'SoftStartAnnealingScheduleConfig': {
        'min_learning_rate': 'float', 'max_learning_rate': 'float', 'soft_start': 'float',
        'annealing': 'float'},
    'SoftStartCosineAnnealingScheduleConfig': {
        'max_learning_rate': 'float', 'soft_start': 'float', 'min_learning_rate': 'float'},
    'RegularizerConfig': {'type': ('enum', ('NO_REG', 'L1', 'L2')), 'weight': 'float'},
    'OptimizerConfig': {
        'adam': 'AdamOptimizerConfig', 'sgd': 'SGDOptimizerConfig',
        'rmsprop': 'RMSpropOptimizerConfig', '__oneof__': [('adam', 'sgd', 'rmsprop')]},
    'AdamOptimizerConfig': {'epsilon': 'float', 'beta1': 'float', 'beta2': 'float',
                            'amsgrad': 'bool'},
    'SGDOptimizerConfig': {'momentum': 'float', 'nesterov': 'bool'},
    'RMSpropOptimizerConfig': {'rho': 'float', 'momentum': 'float', 'epsilon': 'float',
                               'centered': 'bool'},
    'CostScalingConfig': {'enabled': 'bool', 'initial_exponent': 'double',
                          'increment': 'double', 'decrement': 'double'},
    'VisualizerConfig': {'enabled': 'bool', 'num_images': 'uint32', 'weight_histograms': 'bool',
                         'wandb_config': 'WandBConfig', 'clearml_config': 'ClearMLConfig'},
    'WandBConfig': {'enabled': 'bool', 'key': 'string', 'project': 'string', 'entity': 'string',
                    'reinit': 'bool', 'name': 'string', 'tags': ('repeated', 'string'),
                    'wandb_dir': 'string', 'notes': 'string',
                    'mode': ('enum', ('ONLINE', 'OFFLINE', 'DISABLED'))},
    'ClearMLConfig': {'project': 'string', 'task': 'string', 'tags': ('repeated', 'string'),
                      'reuse_last_task_id': 'bool', 'continue_last_task': 'bool',
                      'deferred_init': 'bool'},
    'EvalConfig': {'validation_period_during_training': 'uint32',
                   'average_precision_mode': ('enum', ('SAMPLE', 'INTEGRATE')),
                   'batch_size': 'uint32', 'matching_iou_threshold': 'float'},
    'NMSConfig': {'confidence_threshold': 'float', 'clustering_iou_threshold': 'float',
                  'top_k': 'uint32', 'infer_nms_score_bits': 'uint32', 'force_on_cpu': 'bool'},
    'AugmentationConfig': {
        'output_width': 'int32', 'output_height': 'int32', 'output_channel': 'int32',
        'random_crop_min_scale': 'float', 'random_crop_max_scale': 'float',
        'random_crop_min_ar': 'float', 'random_crop_max_ar': 'float',
        'zoom_out_min_scale': 'float', 'zoom_out_max_scale': 'float', 'brightness': 'int32',
        'contrast': 'float', 'saturation': 'float', 'hue': 'int32', 'random_flip': 'float',
        'image_mean': ('map', 'string', 'float')},
    'DatasetConfig': {
        'data_sources': ('repeated', 'DataSource'),
        'target_class_mapping': ('map', 'string', 'string'),
        'validation_data_sources': ('repeated', 'DataSource'),
        'include_difficult_in_training': 'bool', 'type': 'string',
        # not in RetinaNet's proto; TAO's docs name it for splitting converted records
        'validation_fold': 'uint32'},
    'DataSource': {'label_directory_path': 'string', 'image_directory_path': 'string',
                   'root_path': 'string', 'tfrecords_path': 'string'},
    'ClassWeightingConfig': {'class_weighting': ('map', 'string', 'float'),
                             'enable_auto': 'bool'},
}

# TAO's backbones gluondet has for RetinaNet: arch -> {nlayers: --network}
NETWORKS = {'resnet': {18: 'resnet18_v1b', 34: 'resnet34_v1b', 50: 'resnet50_v1b',
                       101: 'resnet101_v1b'},
            'mobilenet_v1': {None: 'mobilenet1.0'}}
STRIDES = (8, 16, 32, 64, 128)      # P3-P7
# ImageNet's mean in TAO's image_mean keys (0-255), which gluondet's normalization subtracts
IMAGENET_MEAN = {'r': 123.675, 'g': 116.28, 'b': 103.53}


class TaoSpecError(ProtoTextError):
    """A spec gluondet cannot train as written (an unknown backbone, mixed data kinds)."""


def read_tao_spec(path):
    """The validated `~gluondet.tools.prototxt.Message` of a TAO RetinaNet spec file."""
    with open(path, encoding='utf-8') as f:
        text = f.read()
    return validate(parse(text, path), SCHEMA, 'Experiment', path)


class Translation:
    """What a TAO spec says in gluondet's terms.

    Attributes
    ----------
    flags : dict
        Keys of the RetinaNet spec schema (``scripts/train_retinanet.py``'s dests).
    warnings : list of str
        One line per field written but not used, ``FILE:LINE: path: why``.
    notes : list of str
        How approximate mappings were made (anchors, input size).
    evaluation : dict
        ``ap`` ('11point' or 'area'), ``iou_thresh``, ``batch_size``, ``nms``
        (``score_thresh``, ``nms_thresh``, ``post_nms``), those the spec sets.
    data : dict
        ``kind`` ('kitti', 'coco' or 'rec'), ``train`` and ``val`` lists of data sources
        (dicts of their paths, ``root_path`` joined; a COCO source's json in
        ``annotation_file``), linked for training by `link_data`.
    """

    def __init__(self):
        self.flags, self.warnings, self.notes = {}, [], []
        self.evaluation, self.data = {}, {}


class _Reader:
    """Reads fields of the validated spec and remembers which were read."""

    def __init__(self, spec, source):
        self.spec, self.source, self.used = spec, source, set()

    def message(self, path):
        node = self.spec
        for part in path.split('.') if path else ():
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                return None
        return node

    def has(self, path):
        return self.message(path) is not None

    def get(self, path, default=None):
        value = self.message(path)
        if value is None:
            return default
        self.used.add(path)
        return value

    def line(self, path):
        parent, _, name = path.rpartition('.')
        node = self.message(parent)
        return getattr(node, 'lines', {}).get(name) if node is not None else None

    def where(self, path):
        line = self.line(path)
        return '%s:%s: %s' % (self.source, line, path) if line else '%s: %s' % (self.source, path)

    def leftovers(self):
        """Paths written in the spec that nothing read (a message counts as read when any
        field under it, or itself, was)."""
        left = []

        def walk(node, prefix):
            for name, value in node.items():
                path = prefix + name
                if path in self.used:
                    continue
                if hasattr(value, 'lines'):
                    walk(value, path + '.')
                elif isinstance(value, list) and value and hasattr(value[0], 'lines'):
                    for item in value:
                        walk(item, path + '.')
                else:
                    left.append(path)
        walk(self.spec, '')
        return list(dict.fromkeys(left))


def _floats(text, reader, path):
    """A TAO list string ``"[1.0, 2.0, 0.5]"`` -> floats."""
    body = text.strip().strip('[]()')
    try:
        return [float(v) for v in re.split(r'[,\s]+', body) if v]
    except ValueError:
        raise TaoSpecError(reader.source, reader.line(path), '%s: expected a list of numbers '
                           'like "[1.0, 2.0]", got %r' % (path, text)) from None


def translate(spec, source='<spec>', data_dir='tao_data', devices=1, results_dir=None):
    """Map a validated TAO spec (`read_tao_spec`) onto gluondet.

    Parameters
    ----------
    spec : Message
    source : str
        The file, for messages.
    data_dir : str
        Where `link_data` puts the KITTI or COCO folders of the data sources (``--dataset-root``).
    devices : int
        GPUs the training runs on (1 on the CPU): ``batch_size_per_gpu`` times this is
        ``--batch-size``.
    results_dir : str, optional
        The visualizer's TensorBoard logs go to ``results_dir/tensorboard``.

    Returns
    -------
    Translation
    """
    r, out = _Reader(spec, source), Translation()
    flags = out.flags

    def warn(path, why):
        r.used.add(path)
        out.warnings.append('%s: %s' % (r.where(path), why))

    def unless(path, default, why):
        """Refuse ``path`` set to anything but gluondet's own behaviour ``default`` (it would
        train another model than the spec says)."""
        value = r.get(path)
        if value is not None and value != default:
            raise TaoSpecError(source, r.line(path), '%s: %s' % (path, why))

    if r.has('random_seed'):
        flags['seed'] = r.get('random_seed')
    _network(r, flags)
    _anchors(r, out, warn)
    c = 'retinanet_config.'
    for field, flag in (('loss_loc_weight', 'loss_loc_weight'),
                        ('focal_loss_alpha', 'focal_alpha'), ('focal_loss_gamma', 'focal_gamma'),
                        ('freeze_bn', 'freeze_bn'), ('n_kernels', 'head_layers')):
        if r.has(c + field):
            flags[flag] = r.get(c + field)
    if r.has(c + 'freeze_blocks'):
        blocks = r.get(c + 'freeze_blocks')
        if any(b != int(b) for b in blocks):
            raise TaoSpecError(source, r.line(c + 'freeze_blocks'), 'freeze_blocks are block '
                               'numbers, got %s' % blocks)
        flags['freeze_blocks'] = sorted({int(b) for b in blocks})
    if r.has(c + 'feature_size'):
        flags['fpn_channels'] = flags['head_channels'] = r.get(c + 'feature_size')
    unless(c + 'two_boxes_for_ar1', False, 'not supported: one anchor per ratio and scale')
    unless(c + 'clip_boxes', False, 'not supported: anchors are not clipped to the image')
    for field, flag in (('pos_iou_thresh', 'fg_iou'), ('neg_iou_thresh', 'bg_iou')):
        if r.has(c + field):
            flags[flag] = r.get(c + field)
    if r.has(c + 'variances'):
        variances = _floats(r.get(c + 'variances'), r, c + 'variances')
        if len(variances) != 4 or min(variances) <= 0:
            raise TaoSpecError(source, r.line(c + 'variances'), 'variances: 4 positive '
                               'numbers (x, y, w, h), got %s' % variances)
        flags['box_stds'] = variances
    if r.has(c + 'steps'):
        steps = _floats(r.get(c + 'steps'), r, c + 'steps')
        if steps != list(STRIDES):
            raise TaoSpecError(source, r.line(c + 'steps'), 'steps: not supported: anchors '
                               'step by the pyramid strides 8, 16, 32, 64, 128, got %s' % steps)
    if r.has(c + 'offsets'):
        offsets = _floats(r.get(c + 'offsets'), r, c + 'offsets')
        if any(v != 0.5 for v in offsets):
            raise TaoSpecError(source, r.line(c + 'offsets'), 'offsets: not supported: anchors '
                               'are centred on the cells (0.5), got %s' % offsets)
    if r.has(c + 'mean_color'):
        warn(c + 'mean_color', "not used (TAO's RetinaNet does not read it either)")

    _training(r, out, warn, unless, devices, results_dir)
    _evaluation(r, out, warn, unless)
    _augmentation(r, out, warn, unless)
    _dataset(r, out, warn, data_dir)
    w = 'class_weighting_config.'
    if r.has(w + 'class_weighting'):
        flags['class_weights'] = dict(r.get(w + 'class_weighting'))
    unless(w + 'enable_auto', False, 'not supported: give class_weighting')
    for path in r.leftovers():
        warn(path, 'not used by gluondet')
    return out


def _network(r, flags):
    c = 'retinanet_config.'
    arch = r.get(c + 'arch')
    if arch is None:
        raise TaoSpecError(r.source, None, 'retinanet_config.arch is required (resnet with '
                           'nlayers 18, 34, 50 or 101, or mobilenet_v1)')
    nlayers = r.get(c + 'nlayers')
    choices = NETWORKS.get(arch)
    network = None if choices is None else choices.get(None if None in choices else nlayers)
    if network is None:
        raise TaoSpecError(r.source, r.line(c + ('nlayers' if choices else 'arch')),
                           'gluondet has no RetinaNet on arch %s%s; it has resnet with nlayers '
                           '18, 34, 50 or 101, and mobilenet_v1'
                           % (arch, ' nlayers %s' % nlayers if nlayers is not None else ''))
    flags['network'] = network


def _anchors(r, out, warn):
    c = 'retinanet_config.'
    if r.has(c + 'aspect_ratios_global'):
        ratios = _floats(r.get(c + 'aspect_ratios_global'), r, c + 'aspect_ratios_global')
        if not ratios or min(ratios) <= 0:
            raise TaoSpecError(r.source, r.line(c + 'aspect_ratios_global'),
                               'aspect ratios must be positive, got %s' % ratios)
        # TAO's ratio is width / height; gluondet's (GluonCV's) is height / width
        out.flags['anchor_ratios'] = [round(1.0 / v, 6) for v in ratios]
    if r.has(c + 'aspect_ratios'):
        raise TaoSpecError(r.source, r.line(c + 'aspect_ratios'), 'aspect_ratios: not '
                           'supported: one set of ratios for every level (give '
                           'aspect_ratios_global)')
    if r.has(c + 'n_anchor_levels'):
        n = r.get(c + 'n_anchor_levels')
        if n < 1:
            raise TaoSpecError(r.source, r.line(c + 'n_anchor_levels'),
                               'n_anchor_levels must be at least 1')
        out.flags['anchor_scales'] = [round(2 ** (i / n), 6) for i in range(n)]
    scales = None
    if r.has(c + 'scales'):
        scales = _floats(r.get(c + 'scales'), r, c + 'scales')
        for field in ('min_scale', 'max_scale'):
            if r.has(c + field):
                warn(c + field, 'not used: scales is given (as in TAO)')
    elif r.has(c + 'min_scale') and r.has(c + 'max_scale'):
        low, high = r.get(c + 'min_scale'), r.get(c + 'max_scale')
        scales = [low + (high - low) * i / len(STRIDES) for i in range(len(STRIDES) + 1)]
    if scales is None:
        return
    a = 'augmentation_config.'
    side = min(r.message(a + 'output_width') or 0, r.message(a + 'output_height') or 0)
    if len(scales) < len(STRIDES) or min(scales[:len(STRIDES)]) <= 0 or side <= 0:
        field = 'scales' if r.has(c + 'scales') else 'min_scale'
        raise TaoSpecError(r.source, r.line(c + field), '%s: needs 5 positive scales and '
                           'augmentation_config output_width and output_height' % field)
    # TAO: anchor side = scale x the input's shorter side per level; gluondet: anchor_base x
    # the level's stride. One anchor_base: the geometric mean of the levels' ratios.
    bases = [s * side / stride for s, stride in zip(scales, STRIDES)]
    base = round(math.exp(sum(math.log(b) for b in bases) / len(bases)), 3)
    out.flags['anchor_base'] = base
    out.notes.append('retinanet_config.scales: anchors of %s px at %d px (TAO) -> --anchor-base '
                     '%g: %s px (gluondet sizes anchors by the level\'s stride)' % (
                         ', '.join('%.0f' % (s * side) for s in scales[:len(STRIDES)]), side,
                         base, ', '.join('%.0f' % (base * s) for s in STRIDES)))


def _training(r, out, warn, unless, devices, results_dir):
    flags, t = out.flags, 'training_config.'
    if r.has(t + 'batch_size_per_gpu'):
        flags['batch_size'] = r.get(t + 'batch_size_per_gpu') * max(1, devices)
    if r.has(t + 'num_epochs'):
        flags['epochs'] = r.get(t + 'num_epochs')
    if r.has(t + 'checkpoint_interval'):
        flags['save_interval'] = r.get(t + 'checkpoint_interval')
    if r.has(t + 'n_workers'):
        flags['num_workers'] = r.get(t + 'n_workers')
    s = t + 'learning_rate.soft_start_annealing_schedule.'
    if r.has(s[:-1]):
        flags['lr_mode'] = 'soft_start_annealing'
        for field, flag in (('max_learning_rate', 'lr'), ('min_learning_rate', 'lr_min'),
                            ('soft_start', 'soft_start'), ('annealing', 'annealing')):
            flags[flag] = r.get(s + field, 0.0)
    s = t + 'learning_rate.soft_start_cosine_annealing_schedule.'
    if r.has(s[:-1]):
        flags['lr_mode'] = 'cosine'
        flags['lr'] = r.get(s + 'max_learning_rate', 0.0)
        flags['lr_min'] = r.get(s + 'min_learning_rate', 0.0)
        unless(s + 'soft_start', 0.0, 'not supported with the cosine schedule (no warmup); '
               'soft_start_annealing_schedule has it')
    if 'lr_mode' in flags:
        flags['lr_warmup'] = 0      # the schedule's soft start is the warmup (no ODTK default)
    g = t + 'regularizer.'
    if not r.has(g[:-1]):
        flags['regularizer'] = 'none'     # TAO without a regularizer: none (no weight decay)
    else:
        kind = r.get(g + 'type', 'NO_REG')
        flags['regularizer'] = {'NO_REG': 'none', 'L1': 'l1', 'L2': 'l2'}[kind]
        if r.has(g + 'weight'):
            flags['reg_weight'] = r.get(g + 'weight')
    o = t + 'optimizer.'
    if r.has(o + 'sgd'):
        r.get(o + 'sgd')
        if r.has(o + 'sgd.momentum'):
            flags['momentum'] = r.get(o + 'sgd.momentum')
        if r.get(o + 'sgd.nesterov'):
            flags['nesterov'] = True
    for name in ('adam', 'rmsprop'):
        if r.has(o + name):
            raise TaoSpecError(r.source, r.line(o + name), '%s: not supported: gluondet trains '
                               'RetinaNet with SGD (give optimizer { sgd { momentum: 0.9 } })'
                               % (o + name))
    if r.has(t + 'cost_scaling'):
        warn(t + 'cost_scaling', 'not supported: --amp scales the loss dynamically')
    unless(t + 'enable_qat', False, 'not supported: no quantization-aware training (export '
           '--precision int8 calibrates after training)')
    if r.get(t + 'model_ema'):
        flags['ema'] = True
    for field in ('max_queue_size', 'use_multiprocessing'):
        if r.has(t + field):
            warn(t + field, 'not used: the data loader has n_workers processes')
    _weights(r, flags, warn)
    e = t + 'early_stopping.'
    for field, flag in (('monitor', 'early_stop_monitor'), ('min_delta', 'early_stop_min_delta'),
                        ('patience', 'early_stop_patience')):
        if r.has(e + field):
            flags[flag] = r.get(e + field)
    v = t + 'visualizer.'
    if r.get(v + 'enabled'):
        flags['logdir'] = os.path.join(results_dir or '.', 'tensorboard')
        if r.has(v + 'num_images'):
            flags['tb_images'] = r.get(v + 'num_images')
    elif r.has(v + 'num_images'):
        warn(v + 'num_images', 'not used: the visualizer is not enabled')
    if r.get(v + 'weight_histograms'):
        warn(v + 'weight_histograms', 'not supported: TensorBoard gets scalars and images')
    for field in ('wandb_config', 'clearml_config'):
        if r.has(v + field):
            warn(v + field, 'not supported: TensorBoard only')


def _weights(r, flags, warn):
    t = 'training_config.'
    path = r.get(t + 'pretrain_model_path')
    if path is not None:
        if path.lower().endswith('.params'):
            flags['fine_tune'], flags['pretrained_base'] = path, False
        else:
            raise TaoSpecError(r.source, r.line(t + 'pretrain_model_path'), 'pretrain_model_path'
                               ': %s is not readable (a Keras model?): give a gluondet .params '
                               "file, or leave it out to train from scratch" % path)
    else:
        flags['pretrained_base'] = False      # TAO without a pretrained model: from scratch
    if r.has(t + 'pruned_model_path'):
        flags['pruned_model'] = r.get(t + 'pruned_model_path')
    path = r.get(t + 'resume_model_path')
    if path is not None:
        if path.lower().endswith(('.json', '.params')) or path == 'auto':
            flags['resume'] = path
        else:
            raise TaoSpecError(r.source, r.line(t + 'resume_model_path'), 'resume_model_path: '
                               "%s is not readable: resume takes a gluondet checkpoint (.json), "
                               "a .params file or 'auto'" % path)


def _evaluation(r, out, warn, unless):
    e, n = 'eval_config.', 'nms_config.'
    if r.has(e + 'validation_period_during_training'):
        out.flags['val_interval'] = max(1, r.get(e + 'validation_period_during_training'))
    mode = r.get(e + 'average_precision_mode')
    if mode is not None:
        out.evaluation['ap'] = {'SAMPLE': '11point', 'INTEGRATE': 'area'}[mode]
        if mode == 'INTEGRATE':
            out.notes.append('eval_config.average_precision_mode INTEGRATE: gluondet evaluate '
                             '-e reports the area mAP; validation during training the VOC07 '
                             '11-point one')
    if r.has(e + 'batch_size'):
        out.evaluation['batch_size'] = r.get(e + 'batch_size')
    if r.has(e + 'matching_iou_threshold'):
        out.evaluation['iou_thresh'] = r.get(e + 'matching_iou_threshold')
    nms = {}
    for field, key in (('confidence_threshold', 'score_thresh'),
                       ('clustering_iou_threshold', 'nms_thresh'), ('top_k', 'post_nms')):
        if r.has(n + field):
            nms[key] = r.get(n + field)
    if nms:
        out.evaluation['nms'] = nms
    for field in ('infer_nms_score_bits', 'force_on_cpu'):
        if r.has(n + field):
            warn(n + field, 'not used (TensorRT NMS plugin options)')


def _augmentation(r, out, warn, unless):
    a = 'augmentation_config.'
    width, height = r.get(a + 'output_width'), r.get(a + 'output_height')
    if width and height:
        out.flags['resize'], out.flags['max_size'] = min(width, height), max(width, height)
        out.notes.append('augmentation_config %dx%d: images keep their aspect ratio, shorter '
                         'side %d, longer at most %d (TAO resizes to exactly %dx%d)'
                         % (width, height, min(width, height), max(width, height), width, height))
    elif width or height:
        field = 'output_width' if width else 'output_height'
        raise TaoSpecError(r.source, r.line(a + field), '%s: give output_width and '
                           'output_height together' % field)
    unless(a + 'output_channel', 3, 'not supported: gluondet reads RGB images (3 channels)')
    unless(a + 'random_flip', 0.5, 'not supported: training images are flipped with '
           'probability 0.5')
    for field in ('random_crop_min_scale', 'random_crop_max_scale', 'random_crop_min_ar',
                  'random_crop_max_ar', 'zoom_out_min_scale', 'zoom_out_max_scale',
                  'brightness', 'contrast', 'saturation', 'hue'):
        if r.has(a + field):
            raise TaoSpecError(r.source, r.line(a + field), '%s: not supported: gluondet\'s '
                               'RetinaNet trains with resize and flip (or -- --auto-augment); '
                               'leave the field out to train so' % field)
    if r.has(a + 'image_mean'):
        mean = dict(r.get(a + 'image_mean'))
        if set(mean) != set(IMAGENET_MEAN) or any(
                abs(mean[k] - v) > 1 for k, v in IMAGENET_MEAN.items()):
            raise TaoSpecError(r.source, r.line(a + 'image_mean'), 'image_mean: not supported: '
                               "gluondet's backbones take ImageNet's mean (r 123.7, g 116.3, "
                               'b 103.5) and std, got %s' % mean)


# TAO's COCO data sources: the json in label_directory_path, by role (its CocoDataSequence)
COCO_JSON = {'train': 'instances_train2017.json', 'val': 'instances_val2017.json'}


def _dataset(r, out, warn, data_dir):
    d = 'dataset_config.'
    kind = r.get(d + 'type') or 'kitti'
    if kind not in ('kitti', 'coco'):
        raise TaoSpecError(r.source, r.line(d + 'type'), 'dataset_config.type %s: TAO\'s '
                           'RetinaNet reads kitti or coco data' % kind)
    if r.has(d + 'target_class_mapping'):
        mapping = dict(r.get(d + 'target_class_mapping'))
        if kind == 'kitti':
            out.flags['class_mapping'] = mapping
        elif any(key.lower() != value.lower() for key, value in mapping.items()):
            raise TaoSpecError(r.source, r.line(d + 'target_class_mapping'),
                               'target_class_mapping: COCO categories are classes by name: '
                               'map each to itself (got %s)' % ', '.join(
                                   '%s -> %s' % item for item in mapping.items()))
        else:
            out.flags['classes'] = list(dict.fromkeys(mapping.values()))
    if r.get(d + 'include_difficult_in_training'):
        warn(d + 'include_difficult_in_training', 'not used: KITTI and COCO labels have no '
             'difficult flag')
    if r.has(d + 'validation_fold'):
        warn(d + 'validation_fold', 'not supported: give validation_data_sources')
    train = [_source(r, s, kind, 'train') for s in r.get(d + 'data_sources') or []]
    val = [_source(r, s, kind, 'val') for s in r.get(d + 'validation_data_sources') or []]
    if not train:
        raise TaoSpecError(r.source, None, 'dataset_config.data_sources: no training data')
    if not val:
        out.warnings.append('%s: dataset_config: no validation_data_sources: validating on the '
                            'training data' % r.source)
        val = train
    kinds = {source['kind'] for source in train + val}
    if len(kinds) > 1:
        raise TaoSpecError(r.source, None, 'dataset_config: the training and validation data '
                           'must be of one kind: %s folders, or records converted by gluondet '
                           'convert (convert the other part too)' % kind.upper())
    out.data = {'kind': kinds.pop(), 'train': train, 'val': val}
    if out.data['kind'] == 'kitti':
        out.flags['dataset'], out.flags['dataset_root'] = 'kitti', data_dir
        out.flags['train_split'], out.flags['val_split'] = 'training', 'val'
        return
    for role, sources in (('train', train), ('val', val)):
        if len(sources) > 1:
            raise TaoSpecError(r.source, sources[1]['line'], 'one %s per role' % (
                'tfrecords_path (a glob of shards)' if out.data['kind'] == 'rec' else
                'COCO data source (one json)'))
        if out.data['kind'] == 'rec':
            out.flags[role + '_rec'] = sources[0]['tfrecords_path']
    if out.data['kind'] == 'rec':
        out.flags['dataset'] = 'rec'
    else:       # link_data makes GluonCV's COCO layout of the two sources
        out.flags['dataset'], out.flags['dataset_root'] = 'coco', data_dir
        out.flags['train_split'], out.flags['val_split'] = 'training', 'val'


def _source(r, source, kind, role):
    """A data source as ``{'kind', 'line', paths}``: ``root_path`` joined to its paths (as
    TAO joins it), a COCO source's json in ``annotation_file``."""
    line = getattr(source, 'line', None)
    root = source.get('root_path') or ''
    paths = {key: os.path.join(root, os.path.expanduser(source[key])) for key in (
        'image_directory_path', 'label_directory_path', 'tfrecords_path') if source.get(key)}
    field = 'dataset_config.%s' % ('data_sources' if role == 'train' else
                                   'validation_data_sources')
    if 'tfrecords_path' in paths:
        return dict(paths, kind='rec', line=line)
    if len(paths) != 2:
        raise TaoSpecError(r.source, line, '%s: give image_directory_path and '
                           'label_directory_path (%s), or tfrecords_path (records of gluondet '
                           'convert)' % (field, 'KITTI label files' if kind == 'kitti' else
                                         'the folder of the COCO json'))
    if kind == 'coco':
        labels = paths['label_directory_path']
        paths['annotation_file'] = labels if labels.lower().endswith('.json') else \
            os.path.join(labels, COCO_JSON[role])
    return dict(paths, kind=kind, line=line)


def link_data(translation, data_dir):
    """Make the data folders of a translation's KITTI or COCO sources under ``data_dir``, with
    symbolic links (records need none): `link_kitti`, or GluonCV's COCO layout
    ``annotations/{training,val}.json`` with the images in ``training/`` and ``val/``. Links
    made by an earlier call are replaced; the data is left alone."""
    kind = translation.data.get('kind')
    if kind == 'kitti':
        link_kitti(translation, data_dir)
    elif kind == 'coco':
        annotations = os.path.join(data_dir, 'annotations')
        os.makedirs(annotations, exist_ok=True)
        for split, role in (('training', 'train'), ('val', 'val')):
            source = translation.data[role][0]
            for path, link in ((source['annotation_file'], os.path.join(annotations,
                                                                        split + '.json')),
                               (source['image_directory_path'], os.path.join(data_dir, split))):
                if not os.path.exists(path):
                    raise FileNotFoundError('no such %s: %s (dataset_config)' % (
                        'file' if path.endswith('.json') else 'folder', path))
                _remove(link)
                os.symlink(os.path.abspath(path), link)


def _remove(path):
    """Remove a link, or a folder of links (`shutil.rmtree` does not follow links)."""
    import shutil
    if os.path.islink(path):
        os.remove(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def link_kitti(translation, data_dir):
    """Make ``data_dir/training`` and ``data_dir/val`` KITTI folders (``image_2``,
    ``label_2``) of the translation's data sources, with symbolic links: a folder link for
    one source, a link per file for several (their file stems must differ). Links made by
    an earlier call are replaced."""
    for split, sources in (('training', translation.data['train']),
                           ('val', translation.data['val'])):
        folder = os.path.join(data_dir, split)
        _remove(folder)
        os.makedirs(folder)
        pairs = [(os.path.abspath(os.path.expanduser(s['image_directory_path'])),
                  os.path.abspath(os.path.expanduser(s['label_directory_path'])))
                 for s in sources]
        for path in [p for pair in pairs for p in pair]:
            if not os.path.isdir(path):
                raise FileNotFoundError('no such folder: %s (dataset_config)' % path)
        if len(pairs) == 1:
            os.symlink(pairs[0][0], os.path.join(folder, 'image_2'))
            os.symlink(pairs[0][1], os.path.join(folder, 'label_2'))
            continue
        for sub, index in (('image_2', 0), ('label_2', 1)):
            os.makedirs(os.path.join(folder, sub))
            for pair in pairs:
                for name in sorted(os.listdir(pair[index])):
                    link = os.path.join(folder, sub, name)
                    if os.path.lexists(link):
                        raise ValueError('two data sources have %s: file names must differ'
                                         % name)
                    os.symlink(os.path.join(pair[index], name), link)
