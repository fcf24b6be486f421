"""One Python object that trains, validates, predicts and exports a detector, as Ultralytics'
users know it.

>>> from gluondet import Detector
>>> d = Detector('ssd_160_mobilenet0.5_custom')           # a zoo name, a .params, a .onnx ...
>>> d.train(data='demo', epochs=1, batch_size=8, save_prefix='runs/demo/')   # doctest: +SKIP
>>> d.model                                               # doctest: +SKIP
'runs/demo/ssd_160_mobilenet0.5_custom_best.params'
>>> d.val(data='demo')['mAP']                             # doctest: +SKIP
>>> for r in d.predict('video.mp4', conf=0.3, track=True):   # doctest: +SKIP
...     print(r.frame, r.boxes, r.labels(), r.track_ids)
>>> d.export('onnx')                                      # doctest: +SKIP
'runs/demo/ssd_160_mobilenet0.5_custom_best.onnx'

It is a thin layer: ``train`` runs the detector's training command (the flags of
``scripts/train_{detector}.py``, checked by the command's own parser, as an experiment
spec's keys are: :mod:`gluondet.tools.spec`), ``val`` is ``gluondet evaluate``
(:func:`gluondet.deploy.commands.evaluate_model`), ``predict`` runs the one
:class:`~gluondet.deploy.Predictor` of every backend over a source, and ``export`` is
``gluondet export`` (:func:`gluondet.deploy.commands.export_model`).
"""
import dataclasses
import glob
import os

from .deploy.predictor import Predictor
from .deploy.sources import ModelSource
from .detections import MASK_THRESHOLD, MASKS
from .inference_flags import NMS_OPTIONS, VIEW_DEFAULTS, nms_keywords
from .metadata import read_json
from .model_formats import export_path, source_kind
from .model_zoo import get_model_info
from .visualize import draw_detections, save_image

__all__ = ['Detector', 'Results']

DEFAULT_SAVE_PREFIX = 'runs/train/'


class Results:
    """The detections of one image or video frame, in its original pixels.

    Attributes
    ----------
    source : str or None
        The file, folder item, stream or video the image came from (None for an array).
    frame : int
        Index of the image in the source (a video's frame number).
    time : float or None
        Seconds from the start of a video, or since a camera or stream was opened.
    image : numpy.ndarray
        The ``H x W x 3`` uint8 RGB image.
    boxes : numpy.ndarray
        ``N x 4`` float32 ``xmin, ymin, xmax, ymax``, best first.
    scores : numpy.ndarray
        ``N`` float32.
    class_ids : numpy.ndarray
        ``N`` int64 indices into ``names``.
    names : tuple of str
        The model's class names.
    track_ids : numpy.ndarray or None
        ``N`` int64 track ids (-1: not tracked) when predicting with ``track=True``.
    detections : Detections
        All of them as one :class:`~gluondet.detections.Detections`, with every field the
        model and the stages gave (``boxes``, ``scores``, ``class_ids`` and ``track_ids``
        read it; a Mask R-CNN's ``masks``, each an ``M x M`` grid of probabilities over its
        box: :meth:`masks` pastes them into the image).
    """

    def __init__(self, source, frame, image, detections, names, time=None):
        self.source = source
        self.frame = frame
        self.time = time
        self.image = image
        self.detections = detections
        self.names = tuple(names)

    @property
    def boxes(self):
        return self.detections.boxes

    @property
    def scores(self):
        return self.detections.scores

    @property
    def class_ids(self):
        return self.detections.ids

    @property
    def track_ids(self):
        return self.detections.get('track_ids')

    def __len__(self):
        return len(self.scores)

    def __repr__(self):
        return 'Results(%s, frame %d, %d detections)' % (self.source, self.frame, len(self))

    def labels(self):
        """The class name of each detection."""
        return [self.names[i] for i in self.class_ids]

    def masks(self, threshold=MASK_THRESHOLD):
        """The detections' masks in the image: ``N x H x W`` uint8, 1 where a detection's
        probability is above ``threshold`` (:meth:`Detections.pasted_masks
        <gluondet.detections.Detections.pasted_masks>`), or None for a model without masks."""
        if MASKS not in self.detections.grid_fields:
            return None
        return self.detections.pasted_masks(self.image.shape[1::-1], threshold)

    def to_list(self):
        """One dict per detection: ``box`` (xyxy), ``score``, ``class_id``, ``name``, then its
        other fields (``track_id`` when tracking; a mask as ``segmentation``, its COCO
        compressed RLE in the image)."""
        return [dict({'box': box, 'score': score, 'class_id': cls, 'name': self.names[cls]},
                     **others)
                for box, score, cls, others in zip(self.boxes.tolist(), self.scores.tolist(),
                                                   self.class_ids.tolist(),
                                                   self.detections.other_fields(
                                                       self.image.shape[1::-1]))]

    def plot(self, conf=0.0):
        """The image with the boxes scoring at least ``conf`` drawn (class, score, track id)
        in their class's colour, and their masks filled in it.

        Returns
        -------
        numpy.ndarray
            ``H x W x 3`` uint8 RGB.
        """
        labels = None if self.track_ids is None else ['#%d' % t if t >= 0 else ''
                                                      for t in self.track_ids]
        return draw_detections(self.image, self.detections, self.names, conf, labels)

    def save(self, path, conf=0.0):
        """Write :meth:`plot` to ``path`` (the format from its extension; atomically).
        Returns ``path``."""
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        save_image(path, self.plot(conf))
        return path


class Detector:
    """A detector to train, validate, run and export.

    Parameters
    ----------
    model : str or ModelSource
        What ``gluondet infer --model`` takes: a model zoo name (``ssd_512_mobilenet1.0_voc``;
        weights from ``params`` or ``pretrained``, else the zoo's initialization), a training
        output ``PREFIX_best.params`` (its json beside), an MXNet symbol prefix, an ONNX model
        (``.onnx``), a TensorRT engine or an OpenVINO IR (``.xml``); or a
        :class:`~gluondet.deploy.sources.ModelSource` (the keywords below are its fields).
        Exported models predict, validate and export no further; only zoo names and
        ``.params`` train.
    backend : str, optional
        The runtime of ``predict`` and ``val`` (default: the model's, see
        :meth:`Predictor.from_model <gluondet.deploy.Predictor.from_model>`).
    params : str, optional
        Weights for a zoo name (a gluondet or GluonCV ``.params``).
    pretrained : bool
        A zoo name's published weights.
    classes : sequence of str, optional
        Class names where the model does not record them (and of a ``*_custom`` zoo name).
    data_shape : int or (int, int), optional
        Input size of a fixed-size model (SSD, YOLOv3).

    Raises
    ------
    OSError
        The model file or ``params`` is missing (FileNotFoundError) or cannot be read, in one
        line naming it.
    ValueError
        ``model`` is neither a file nor a zoo name.
    """

    def __init__(self, model, backend=None, params=None, pretrained=False, classes=None,
                 data_shape=None):
        self.source = ModelSource.of(model, backend=backend, params=params,
                                     pretrained=pretrained, data_shape=data_shape,
                                     classes=classes)
        self.data = None        # the data flags of the last train(), for val()
        self._unwritten = None  # the best .params the last train() did not write
        self._predictors = {}
        _check_model(self.model, self.source.params)

    @property
    def model(self):
        """The model's name or path (its :class:`~gluondet.deploy.sources.ModelSource`'s)."""
        return self.source.model

    def __repr__(self):
        return 'Detector(%r)' % self.model

    # ------------------------------------------------------------ train

    def network(self):
        """The model zoo name of a zoo name or a training output; ValueError for exports."""
        kind = source_kind(self.model)
        if kind != 'zoo':
            raise ValueError('%s is an exported model: it predicts, validates and exports, but '
                             'only a zoo name or a training output .params trains' % self.model)
        if self.model.lower().endswith('.params'):
            json_path = os.path.splitext(self.model)[0] + '.json'
            return read_json(json_path, 'training output description')['meta']['network']
        return self.model

    def train(self, data=None, epochs=None, save_prefix=DEFAULT_SAVE_PREFIX, **flags):
        """Train with the detector's training command; the model becomes its best weights.

        Parameters
        ----------
        data : str or dict, optional
            ``'demo'`` (the embedded synthetic set), a dataset folder (a VOC folder or
            devkit, a LabelImg folder, a KITTI folder with ``training/image_2``, a COCO folder
            with ``annotations/``), a flat experiment spec (``.yaml``/``.json``: its keys are
            the flags) or a dict of the dataset flags (``{'dataset': 'coco', 'train_json':
            ...}``). Default: the command's own (``--dataset voc`` in GluonCV's root).
        epochs : int, optional
        save_prefix : str
            Where checkpoints and logs go (``runs/train/`` by default).
        **flags
            Any flag of ``scripts/train_{detector}.py`` by its name (``batch_size=8``,
            ``lr=0.01``, ``gpus='0,1'``, ``amp=True``, ``classes=['a', 'b']``).

        Returns
        -------
        dict
            The last validation's metrics (``mAP``, ``AP/<class>``), empty without one.
        """
        from . import detectors
        from .engine import wording
        from .tools.spec import Schema, read_spec, detector_of
        network = self.network()
        row = detectors.of_network(network)
        module = row.module()
        values = {}
        if isinstance(data, str) and data.lower().endswith(('.yaml', '.yml', '.json')):
            spec = read_spec(data)
            if detectors.get(detector_of(spec, data)).name != row.name:
                raise ValueError('%s trains %s, not %s (%s)' % (
                    data, detector_of(spec, data), row.display, network))
            values.update({k: v for k, v in spec.items() if k not in ('detector',
                                                                        'architecture')})
        elif data is not None:
            values.update(data_flags(data))
        if self.source.classes is not None:
            values.setdefault('classes', list(self.source.classes))
        values.update(flags)
        if epochs is not None:
            values['epochs'] = epochs
        values['save_prefix'] = save_prefix
        if self.model.lower().endswith('.params') or self.source.params:
            # start from these weights: a resumed .params begins at --start-epoch
            values.setdefault('resume', self.source.params or self.model)
            values.setdefault('start_epoch', 0)
        schema = Schema(module.build_parser())
        given = schema.normalize(values, 'Detector.train')
        args = schema.namespace(given, module.network_flags(network), 'Detector.train')
        if save_prefix and os.path.dirname(save_prefix):
            os.makedirs(os.path.dirname(save_prefix), exist_ok=True)
        with wording.speaking(wording.keyword):     # messages name this method's keywords
            result = module.run(args)
        self._unwritten = (None if result.best_path else
                           save_prefix + module.network_name(args) + '_best.params')
        if not self._unwritten:
            self.source = dataclasses.replace(self.source, model=result.best_path, params=None,
                                              pretrained=False)
            self._predictors.clear()
        self.data = {k: v for k, v in given.items() if k in _DATA_KEYS}
        return dict(getattr(result, 'metrics', None) or {})

    # ------------------------------------------------------------ val

    def val(self, data=None, split=None, batch_size=None, **options):
        """Evaluate on a dataset: VOC07 mAP (and COCO's numbers on COCO data).

        Parameters
        ----------
        data : str or dict, optional
            As :meth:`train`'s (not a spec); default: the validation data of the last
            :meth:`train`.
        split : str, optional
            The split to evaluate (default the validation split).
        batch_size : int, optional
        **options
            More of :func:`~gluondet.deploy.commands.evaluate_model`'s keywords
            (``iou_thresh``, ``ap``, ``plots``, ``nms``, ``views``).

        Returns
        -------
        dict
            ``mAP``, ``AP/<class>``, and ``coco`` for COCO data.
        """
        from .deploy.commands import evaluate_model
        if data is None and self.data is None:
            raise ValueError('val: give data (a dataset folder, "demo" or dataset flags): this '
                             'Detector has not trained')
        self._check_weights('val')
        flags = data_flags(data) if data is not None else self.data
        kwargs = dict(dataset=flags.get('dataset', 'voc'), dataset_root=flags.get('dataset_root'),
                      split=split or flags.get('val_split'),
                      annotation_file=flags.get('val_json'), image_root=flags.get('image_root'),
                      records=flags.get('val_rec'), class_mapping=flags.get('class_mapping'))
        if kwargs['split'] == 'val' and kwargs['dataset'] != 'demo':
            kwargs['split'] = None
        return evaluate_model(self.source, batch_size=batch_size, progress=False,
                              **dict(kwargs, **options))

    def _check_weights(self, action):
        """ValueError saying what ``action`` needs if the model is a zoo name without weights."""
        if (self.source.params is not None or self.source.pretrained or self.source.kind != 'zoo'
                or self.model.lower().endswith('.params')):
            return
        why = ('its train() wrote no %s (no validation scored a finite metric: see %s_train.log)'
               % (self._unwritten, self._unwritten[:-len('_best.params')])
               if self._unwritten else 'a zoo name alone is untrained')
        raise ValueError("%s: %s has no weights: %s. It needs trained weights: a training output "
                         "(Detector('PREFIX_best.params')), params= or pretrained=True"
                         % (action, self, why))

    # ------------------------------------------------------------ predict

    def predictor(self, nms=None):
        """The :class:`~gluondet.deploy.Predictor` of this model with the NMS options ``nms``
        (an :class:`~gluondet.deploy.nms.NMSOptions`; made once per options)."""
        key = repr(nms)
        if key not in self._predictors:
            self._check_weights('predict')
            self._predictors[key] = Predictor.from_model(self.source, nms=nms)
        return self._predictors[key]

    def predict(self, source, conf=None, iou=None, max_det=None, agnostic_nms=False,
                soft_nms=None, soft_sigma=NMS_OPTIONS['soft_sigma'][1], track=False, slice=None,
                slice_overlap=VIEW_DEFAULTS['slice_overlap'], slice_full=False, tta=False,
                vid_stride=1, batch_size=None, stream=False):
        """Detect objects in a source (``gluondet infer``'s).

        Parameters
        ----------
        source : str, int, array or list
            An image file, a folder of images, a glob (``'images/*.jpg'``), a video file, a
            camera index, a stream URL (``rtsp://``, ``http://``: :func:`~gluondet.deploy.
            streams.open_source`), an ``H x W x 3`` uint8 RGB array, or a list of image files
            and arrays.
        conf, iou, max_det, agnostic_nms, soft_nms, soft_sigma
            The final NMS (:class:`~gluondet.deploy.nms.NMSOptions`; ``gluondet infer``'s
            ``--conf`` ... ``--soft-sigma``); None keeps the model's.
        track : bool or dict
            Give each detection a track id across the frames (:class:`~gluondet.deploy.track.
            ByteTrack`); a dict also sets its settings, ``{'track_thresh': 0.3}``
            (``gluondet infer``'s ``--track-thresh`` ...: ``TRACK_SETTINGS`` in
            :mod:`gluondet.inference_flags`).
        slice : int or (int, int), optional
            Sliced inference in tiles of this size (``--slice``), overlapping by
            ``slice_overlap``, with one whole-image pass too if ``slice_full``.
        tta : bool or TTA
            Test-time augmentation (``--tta``: :class:`~gluondet.deploy.views.TTA`).
        vid_stride : int
            Keep every ``vid_stride``-th frame.
        batch_size : int, optional
        stream : bool
            Return a generator (one :class:`Results` at a time: videos, cameras, streams)
            instead of a list.

        Returns
        -------
        list of Results, or a generator of them
        """
        from .deploy.nms import NMSOptions
        from .deploy.views import TTA, Slicing, ViewOptions, wrap
        keywords = nms_keywords(dict(conf=conf, iou=iou, max_det=max_det,
                                     agnostic_nms=agnostic_nms, soft_nms=soft_nms,
                                     soft_sigma=soft_sigma))
        nms = None if keywords is None else NMSOptions(**keywords)
        views = ViewOptions(
            Slicing(slice, slice_overlap, slice_full) if slice is not None else None,
            (tta if isinstance(tta, TTA) else TTA()) if tta else None, max_det)
        from .deploy.infer import track_keywords
        tracking = track_keywords(track) is not None     # a wrong key fails here
        predictor = self.predictor(nms)
        if isinstance(source, (list, tuple)) or not isinstance(source, (str, os.PathLike, int)):
            if tracking:
                raise ValueError('track=True follows objects through a video, camera or '
                                 'stream, not a list of images or arrays')
            items = list(source) if isinstance(source, (list, tuple)) else [source]
            results = self._listed(items, wrap(predictor, views), batch_size)
        else:
            from .deploy.streams import open_source
            frames = open_source(os.fspath(source) if not isinstance(source, int) else source,
                                 vid_stride)
            results = self._read(frames, predictor, views, batch_size, track)
        return results if stream else list(results)

    __call__ = predict

    @staticmethod
    def _listed(items, predictor, batch_size):
        for p in predictor.predict(items, batch_size):
            yield Results(p.source, p.index, p.image, p.detections, predictor.classes)

    @staticmethod
    def _read(frames, predictor, views, batch_size, track):
        from .deploy.infer import frame_setup
        from .deploy.loop import detect_frames
        with frames:
            predictor, size, tracker = frame_setup(predictor, frames, views, batch_size, track)
            for frame, found in detect_frames(predictor, frames, size, tracker=tracker):
                yield Results(frame.name, frame.index, frame.image, found, predictor.classes,
                              frame.time)

    # ------------------------------------------------------------ export

    def export(self, format='onnx', output=None, **options):
        """Export the model (``gluondet export``); returns the main file written.

        Parameters
        ----------
        format : {'onnx', 'openvino', 'tensorrt', 'symbol'}
        output : str, optional
            Default: beside a ``.params`` (its stem), else ``{zoo name}`` in the current
            folder, with the format's extension (a symbol: the prefix).
        **options
            More of :func:`~gluondet.deploy.commands.export_model`'s keywords
            (``batch_size``, ``dynamic_batch``, ``precision``, ``calibration_images``, ...).
        """
        from .deploy.commands import export_model
        self.network()      # exported models export no further
        self._check_weights('export')
        if output is None:
            stem = (os.path.splitext(self.model)[0] if self.model.lower().endswith('.params')
                    else self.model)
            output = export_path(stem, format)
        source = self.source
        export_model(self.model, output, format, params=source.params,
                     pretrained=source.pretrained, classes=source.classes,
                     data_shape=source.data_shape, verbose=False, **options)
        return output


_DATA_KEYS = ('dataset', 'dataset_root', 'classes', 'class_mapping', 'image_root',
              'val_split', 'val_json', 'val_rec')


def data_flags(data):
    """The dataset flags of :meth:`Detector.train`'s ``data``: ``'demo'``, a folder (its format
    recognized), or a dict of flags (returned as it is)."""
    if isinstance(data, dict):
        return dict(data)
    data = os.fspath(data)
    if data.lower() == 'demo':
        return {'dataset': 'demo'}
    if not os.path.isdir(data):
        raise FileNotFoundError('no dataset folder %s (data is "demo", a VOC, LabelImg, KITTI '
                                'or COCO folder, a spec .yaml or a dict of dataset flags)'
                                % data)
    if glob.glob(os.path.join(data, '*', 'label_2')) or os.path.isdir(
            os.path.join(data, 'label_2')):
        return {'dataset': 'kitti', 'dataset_root': data}
    if glob.glob(os.path.join(data, 'annotations', '*.json')):
        return {'dataset': 'coco', 'dataset_root': data}
    return {'dataset': 'voc', 'dataset_root': data}


def _check_model(model, params):
    """Raise, in one line naming it, if the file of ``model`` or ``params`` is missing or cannot
    be read, or ``model`` names no file and no zoo network."""
    kind = source_kind(model)
    if kind == 'zoo' and not model.lower().endswith('.params'):
        try:
            get_model_info(model)
        except ValueError as err:       # an unknown name, with suggestions
            raise ValueError('Detector: %s is no model file and an %s' % (model, err)) from None
    elif kind != 'symbol':              # a symbol PREFIX was recognized by its file
        _check_readable(model)
    if params is not None:
        _check_readable(params)


def _check_readable(path):
    """FileNotFoundError or another OSError, one line naming ``path``, if it cannot be read."""
    try:
        with open(path, 'rb'):
            pass
    except FileNotFoundError:
        raise FileNotFoundError('Detector: no such file: %s' % path) from None
    except OSError as err:
        raise type(err)('Detector: %s cannot be read (%s)' % (path, err.strerror)) from None
