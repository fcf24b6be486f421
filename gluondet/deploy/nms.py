"""NMS options for every backend's predictor: confidence, IoU, detections kept, class-agnostic
and soft NMS (Gaussian or linear, Bodla et al. 2017, "Soft-NMS -- Improving Object Detection
With One Line of Code").

A detector's final NMS is MXNet's ``box_nms`` within each class (Faster R-CNN: optionally
over all classes, ``force_nms``), on the candidates its post-processing picks (scores above
``score_thresh``, the best ``nms_topk``). Class-agnostic or soft NMS applied to its output
is not the same thing: they need those candidates. Where an option runs:

- a Gluon network (a zoo name, a training output ``.params``): ``conf``, ``iou`` and
  ``max_det`` set the network's own NMS (``score_thresh``, ``nms_thresh``, ``post_nms``), as
  ``agnostic`` does a Faster R-CNN's (``force_nms``); otherwise ``agnostic`` and ``soft``
  switch the network to return its candidates (the post-processing's ``candidates``) and the
  predictor runs the NMS (:func:`configure_network`);
- an export with its NMS inside (the default): ``conf`` and ``max_det`` act on its
  detections on the host, only stricter than the export's; ``iou``, ``agnostic`` and
  ``soft`` are refused (:func:`export_plan`);
- an export of candidates (``gluondet export --no-nms``: metadata ``nms_applied`` false):
  the predictor runs the NMS, by default with the export's settings (its metadata ``nms``),
  which gives the detections of the export with NMS.

A kind of post-processing without an NMS (CenterNet's, ``has_nms`` false in
:mod:`gluondet.deploy.postprocess`) returns the candidates themselves (its heatmap peaks),
exported or not: ``max_det`` caps a Gluon network's detections (``post_nms``; after the NMS when
there is one), ``conf`` and an export's ``max_det`` act on the host, and ``iou``, ``agnostic``
and ``soft`` run an NMS on the host over them; it has no IoU threshold of its own, so a hard or
linear soft NMS needs ``iou`` (:func:`_without_nms`).

The host's hard NMS is ``box_nms`` itself (:func:`nms_keep`), so its detections equal the
networks'; soft NMS is written here (:func:`soft_nms_keep`).
"""
import numbers

import mxnet as mx
import numpy as np

from ..inference_flags import NMS_OPTIONS, SOFT_METHODS, nms_keywords
from .postprocess import postprocess_from_metadata, postprocess_of

__all__ = ['NMSOptions', 'HostNMS', 'SOFT_METHODS', 'configure_network', 'export_plan',
           'nms_keep', 'nms_options', 'soft_nms_keep']


def _check(value, flag, low, high=None, integer=False, closed=False):
    """``value`` (None allowed) checked in ``(low, high]`` (``[low, high)`` if ``closed``),
    or ValueError naming ``flag``."""
    if value is None:
        return None
    kind = numbers.Integral if integer else numbers.Real
    inside = (low <= value if closed else low < value) and (
        high is None or (value < high if closed else value <= high))
    if not isinstance(value, kind) or isinstance(value, bool) or not inside:
        raise ValueError('%s must be %s %s %g%s, got %r'
                         % (flag, 'an integer' if integer else 'a number',
                            'from' if closed else 'above', low,
                            '' if high is None else ' %s %g' % ('and under' if closed else
                                                                'to', high), value))
    return value


class NMSOptions:
    """What a user asks of the final NMS; None keeps the model's own setting.

    Parameters
    ----------
    conf : float, optional
        Detections (and candidates) scoring at most this are dropped.
    iou : float, optional
        IoU above which a lower-scoring box is suppressed (soft NMS: linear decay from it).
    max_det : int, optional
        Detections kept per image, best first.
    agnostic : bool
        Suppress across classes.
    soft : {None, 'gaussian', 'linear'}
        Soft NMS: lower the scores of overlapping boxes instead of removing them.
    sigma : float
        The Gaussian soft NMS's ``sigma`` (``score * exp(-iou^2 / sigma)``).
    """

    def __init__(self, conf=None, iou=None, max_det=None, agnostic=False, soft=None,
                 sigma=NMS_OPTIONS['soft_sigma'][1]):
        self.conf = _check(conf, '--conf', 0, 1, closed=True)
        self.iou = _check(iou, '--iou', 0, 1)
        self.max_det = _check(max_det, '--max-det', 0, integer=True)
        self.agnostic = bool(agnostic)
        if soft not in (None,) + SOFT_METHODS:
            raise ValueError('--soft-nms must be one of %s, got %r' % (', '.join(SOFT_METHODS),
                                                                      soft))
        self.soft = soft
        self.sigma = _check(sigma, '--soft-sigma', 0)

    def __repr__(self):
        return 'NMSOptions(%s)' % ', '.join('%s=%r' % item for item in vars(self).items())

    @property
    def needs_candidates(self):
        """Whether an option changes the suppression itself (not only what is kept after it)."""
        return self.iou is not None or self.agnostic or self.soft is not None


# ---------------------------------------------------------------- the NMS on the host

def _area(boxes):
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def _iou(box, boxes):
    """IoU of one corner box with each of ``boxes`` (``box_nms``'s: no +1)."""
    width = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    height = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = width * height
    union = _area(box) + _area(boxes) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0)


def nms_keep(boxes, scores, ids, iou, agnostic=False):
    """Greedy NMS with MXNet's ``box_nms``: the indices kept, best first.

    Boxes are sorted by score (a stable sort: ties in input order); a box is suppressed by
    a kept one of its class (any class if ``agnostic``) overlapping it by IoU above ``iou``.

    Parameters
    ----------
    boxes : numpy.ndarray
        ``N x 4`` ``xmin, ymin, xmax, ymax``.
    scores : numpy.ndarray
        ``N``.
    ids : numpy.ndarray
        ``N`` class ids (``>= 0``).
    iou : float
    agnostic : bool

    Returns
    -------
    numpy.ndarray
        int64 indices into the inputs, by descending score.
    """
    count = len(scores)
    if count == 0:
        return np.zeros(0, np.int64)
    rows = np.concatenate([np.reshape(ids, (-1, 1)), np.reshape(scores, (-1, 1)),
                           np.reshape(boxes, (-1, 4)), np.arange(count).reshape(-1, 1)],
                          axis=1).astype(np.float32)
    kept = mx.nd.contrib.box_nms(mx.nd.array(rows[None]), overlap_thresh=iou,
                                 valid_thresh=-np.inf, topk=-1, coord_start=2, score_index=1,
                                 id_index=0, background_id=-1,
                                 force_suppress=agnostic).asnumpy()[0]
    return kept[kept[:, 0] >= 0, 6].astype(np.int64)


def soft_nms_keep(boxes, scores, ids, iou, method='gaussian', sigma=0.5, conf=0.0,
                  agnostic=False, max_det=-1):
    """Soft NMS (Bodla et al. 2017): the indices kept, best first, and their new scores.

    Repeatedly the best remaining box is kept, and every remaining box of its class (any
    class if ``agnostic``) has its score multiplied by ``exp(-IoU^2 / sigma)``
    (``'gaussian'``) or, if its IoU with the kept box is at least ``iou``, by ``1 - IoU``
    (``'linear'``); boxes whose score falls to ``conf`` or below are dropped. Ties go to
    the first box; IoU as ``box_nms``'s. It stops after ``max_det`` boxes (if positive): the
    boxes are kept by descending new score, so no later one would come before them.

    Returns
    -------
    keep : numpy.ndarray
        int64 indices, in the order kept (by descending new score).
    scores : numpy.ndarray
        float32 new score of each kept box.
    """
    if method not in SOFT_METHODS:
        raise ValueError('soft NMS method must be one of %s, got %r' % (', '.join(SOFT_METHODS),
                                                                       method))
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    current = np.asarray(scores, np.float32).copy()
    ids = np.asarray(ids).reshape(-1)
    left = np.flatnonzero(current > conf)
    keep, kept_scores = [], []
    while len(left) and len(keep) != max_det:
        best = left[np.argmax(current[left])]
        keep.append(best)
        kept_scores.append(current[best])
        left = left[left != best]
        overlap = _iou(boxes[best], boxes[left])
        if method == 'gaussian':
            decay = np.exp(-overlap * overlap / sigma)
        else:
            decay = np.where(overlap >= iou, 1 - overlap, 1)
        if not agnostic:
            decay = np.where(ids[left] == ids[best], decay, 1)
        current[left] = current[left] * decay.astype(np.float32)
        left = left[current[left] > conf]
    return np.asarray(keep, np.int64), np.asarray(kept_scores, np.float32)


class HostNMS:
    """What the predictor does to one image's rows of the runner: an NMS or only a cut.

    Parameters
    ----------
    conf : float
        Rows scoring at most this are dropped.
    max_det : int
        Rows kept, best first; -1 (or 0) for all.
    nms : bool
        The rows are candidates (before the NMS): run it; else they are detections,
        sorted, and only ``conf`` and ``max_det`` apply.
    iou, agnostic, soft, sigma
        The NMS (as :class:`NMSOptions`).
    """

    def __init__(self, conf, max_det, nms=True, iou=None, agnostic=False, soft=None,
                 sigma=0.5):
        self.conf, self.max_det, self.nms = conf, max_det, nms
        self.iou, self.agnostic, self.soft, self.sigma = iou, agnostic, soft, sigma

    def __repr__(self):
        return 'HostNMS(%s)' % ', '.join('%s=%r' % item for item in vars(self).items())

    def __call__(self, ids, scores, boxes):
        """``(indices kept, best first; their scores)`` of one image's ``K`` rows (``ids``
        and ``scores`` ``K``, ``boxes`` ``K x 4``, rows of -1 ignored)."""
        ids, scores = np.reshape(ids, -1), np.reshape(scores, -1).astype(np.float32)
        index = np.flatnonzero((ids >= 0) & (scores > self.conf))
        if self.nms and self.soft:
            keep, scores = soft_nms_keep(boxes[index], scores[index], ids[index], self.iou,
                                         self.soft, self.sigma, self.conf, self.agnostic,
                                         self.max_det)
            index = index[keep]
        else:
            if self.nms:
                index = index[nms_keep(boxes[index], scores[index], ids[index], self.iou,
                                       self.agnostic)]
            scores = scores[index]
        if self.max_det > 0:
            index, scores = index[:self.max_det], scores[:self.max_det]
        return index, scores


# ---------------------------------------------------------------- plans per source

def _host(options, settings, nms=True):
    """The :class:`HostNMS` of ``options`` over a model's NMS ``settings`` (its defaults)."""
    def pick(value, key):
        return settings[key] if value is None else value

    agnostic = options.agnostic or bool(settings.get('force_nms', False))
    return HostNMS(pick(options.conf, 'score_thresh'), pick(options.max_det, 'post_nms'), nms,
                   pick(options.iou, 'nms_thresh'), agnostic, options.soft, options.sigma)


def configure_network(net, options):
    """Set a Gluon detector's inference NMS for ``options``; the host's part, or None.

    ``conf``, ``iou`` and ``max_det`` become the network's ``score_thresh``, ``nms_thresh``
    and ``post_nms``, and ``agnostic`` its ``force_nms`` where its NMS has one (Faster
    R-CNN). Soft NMS, and class-agnostic NMS of the others, switch its post-processing to
    return the candidates of its NMS (``candidates``); the :class:`HostNMS` returned runs
    the NMS on them, with the network's settings where ``options`` has none.

    Parameters
    ----------
    net : DetectionNet (:mod:`gluondet.model_zoo`)
        Changed in place.
    options : NMSOptions or None

    Returns
    -------
    HostNMS or None
    """
    post = net.postprocess
    if options is None:
        return None
    if not postprocess_of(net).has_nms:
        if options.max_det is not None and not options.needs_candidates:
            net.set_nms(post.nms_thresh, post.nms_topk, options.max_det)
        return _without_nms(options, type(net).__name__)
    if options.conf is not None:
        post.score_thresh = options.conf
    native = hasattr(post, 'force_nms')
    post.candidates = bool(options.soft or (options.agnostic and not native))
    settings = {key: getattr(post, key) for key in ('score_thresh', 'nms_thresh', 'nms_topk',
                                                      'post_nms')}
    if not post.candidates:
        settings.update({key: value for key, value in (('nms_thresh', options.iou),
                                                        ('post_nms', options.max_det))
                         if value is not None})
    kwargs = dict(nms_thresh=settings['nms_thresh'], nms_topk=settings['nms_topk'],
                  post_nms=settings['post_nms'])
    if native:
        kwargs['force_nms'] = options.agnostic or post.force_nms
    net.set_nms(**kwargs)   # clears the cached graph
    if not post.candidates:
        return None
    return _host(options, dict(settings, force_nms=kwargs.get('force_nms', False)))


def export_plan(options, meta, source):
    """The host's part of the NMS of an exported model (its metadata ``meta``), or None.

    An export of candidates (``nms_applied`` false) gets its NMS on the host, with its
    recorded settings where ``options`` has none. An export with NMS inside takes only a
    stricter ``conf`` and ``max_det``.

    Raises
    ------
    ValueError
        In one line naming ``source``, for an option its export cannot give.
    """
    post = postprocess_from_metadata(meta, source)
    if post is not None and not post.has_nms:
        return _without_nms(options, source)
    settings = meta.get('nms') or {}
    applied = meta.get('nms_applied', True)
    if options is None:
        return None if applied else _host(NMSOptions(), settings)
    exported = settings.get('score_thresh')
    if options.conf is not None and exported is not None and options.conf < exported:
        raise ValueError('--conf %g: %s was exported with score threshold %g, so nothing below '
                         'it is left: give --conf %g or more (or export it again from a '
                         'lower threshold)' % (options.conf, source, exported, exported))
    if not applied:
        return _host(options, settings)
    asked = [flag for flag, wanted in (
        ('--iou', options.iou is not None and options.iou != settings.get('nms_thresh')),
        ('--agnostic-nms', options.agnostic and not settings.get('force_nms')),
        ('--soft-nms', options.soft is not None)) if wanted]
    if asked:
        raise ValueError('%s: %s ends with its own NMS (exported with it): %s need%s the '
                         'candidates before it: export it with --no-nms'
                         % (' '.join(asked), source, ' and '.join(asked),
                            's' if len(asked) == 1 else ''))
    limit = settings.get('post_nms', -1)
    if options.max_det is not None and 0 < limit < options.max_det:
        raise ValueError('--max-det %d: %s returns at most %d detections (its export\'s '
                         'post_nms): give at most %d, or export it with --no-nms'
                         % (options.max_det, source, limit, limit))
    if options.conf is None and options.max_det is None:
        return None
    return HostNMS(-np.inf if options.conf is None else options.conf,
                   options.max_det or -1, nms=False)


def _without_nms(options, source):
    """The host's part for a model whose post-processing has no NMS: ``conf`` and ``max_det``
    cut its rows, ``iou``, ``agnostic`` and ``soft`` run an NMS over them; None if nothing is
    asked. ValueError naming ``source`` for a hard or linear soft NMS without ``iou``."""
    if options is None:
        return None
    nms = options.needs_candidates
    if nms and options.iou is None and options.soft != 'gaussian':
        flag = '--soft-nms linear' if options.soft else '--agnostic-nms'
        raise ValueError('%s: %s has no NMS of its own (its outputs are its candidates), so no '
                         'IoU threshold: give --iou for the NMS %s asks for'
                         % (flag, source, flag))
    if not nms and options.conf is None and options.max_det is None:
        return None
    return HostNMS(-np.inf if options.conf is None else options.conf, options.max_det or -1,
                   nms, options.iou, options.agnostic, options.soft, options.sigma)


def nms_options(args):
    """:class:`NMSOptions` from the flags of :func:`add_nms_arguments`, or None if none was
    given (ValueError naming a bad flag)."""
    keywords = nms_keywords({name: getattr(args, name) for name in NMS_OPTIONS})
    return None if keywords is None else NMSOptions(**keywords)
