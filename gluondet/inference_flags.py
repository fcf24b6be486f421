"""The flags of inference's options, one spelling each: the final NMS's (``--conf --iou
--max-det --agnostic-nms --soft-nms --soft-sigma``, :mod:`gluondet.deploy.nms`), sliced
inference's and test-time augmentation's (``--slice ... --tta ...``,
:mod:`gluondet.deploy.views`) and the tracker's (``--track --track-thresh ...``,
:class:`gluondet.deploy.track.ByteTrack`). ``gluondet infer``, ``evaluate`` and ``benchmark``
add the first two with `add_nms_arguments` and `add_view_arguments`, and read them with
:func:`gluondet.deploy.nms.nms_options` and :func:`gluondet.deploy.views.view_options`;
``gluondet infer`` adds the tracker's with `add_track_arguments` and reads them with
`track_settings`. Like :mod:`gluondet.dataset_flags`, it imports nothing heavy (``gluondet
--help`` stays fast).
"""
import argparse
import re

__all__ = ['SOFT_METHODS', 'TTA_SCALES', 'NMS_OPTIONS', 'VIEW_DEFAULTS', 'TRACK_SETTINGS',
           'add_nms_arguments', 'nms_keywords', 'add_view_arguments', 'add_track_arguments',
           'track_settings']

SOFT_METHODS = ('gaussian', 'linear')
TTA_SCALES = (1.0, 0.83, 0.67)      # Ultralytics' TTA scales
#: The defaults of the ``--slice-*`` and ``--tta-*`` flags (a flag set otherwise needs its
#: ``--slice`` or ``--tta``: :func:`gluondet.deploy.views.view_options`).
VIEW_DEFAULTS = {'slice_overlap': 0.2, 'slice_full': False, 'slice_iou': 0.5,
                 'tta_scales': TTA_SCALES, 'tta_merge': 'wbf', 'tta_iou': 0.55}


# ---------------------------------------------------------------- NMS

#: The final NMS's options by the flags' dests, which are also `gluondet.Detector.predict`'s
#: keywords: ``{name: (keyword of gluondet.deploy.nms.NMSOptions, default)}``.
NMS_OPTIONS = {'conf': ('conf', None), 'iou': ('iou', None), 'max_det': ('max_det', None),
               'agnostic_nms': ('agnostic', False), 'soft_nms': ('soft', None),
               'soft_sigma': ('sigma', 0.5)}


def nms_keywords(values):
    """The `NMSOptions` keywords of ``{name of NMS_OPTIONS: value}``, or None when every
    value is its default (the model's own NMS; ``soft_sigma`` alone changes nothing)."""
    if all(values[name] == default for name, (_, default) in NMS_OPTIONS.items()
           if name != 'soft_sigma'):
        return None
    return {keyword: values[name] for name, (keyword, _) in NMS_OPTIONS.items()}


def add_nms_arguments(parser):
    """``--conf --iou --max-det --agnostic-nms --soft-nms {gaussian,linear} --soft-sigma``."""
    group = parser.add_argument_group(
        'NMS options', "default: the model's own NMS; an exported model with NMS inside takes "
                       'only a stricter --conf and --max-det (export with --no-nms for the rest)')
    add = group.add_argument
    add('--conf', type=float, metavar='SCORE',
        help="drop detections scoring at most SCORE (default: the model's score threshold)")
    add('--iou', type=float, help="NMS IoU threshold (default: the model's)")
    add('--max-det', type=int, metavar='N', help="detections kept per image (default: the "
                                                 "model's)")
    add('--agnostic-nms', action='store_true', help='suppress overlapping boxes of any class')
    add('--soft-nms', choices=SOFT_METHODS,
        help='soft NMS: lower the scores of overlapping boxes (Bodla et al. 2017) instead of '
             'removing them; linear decays from --iou')
    add('--soft-sigma', type=float, default=NMS_OPTIONS['soft_sigma'][1], metavar='SIGMA',
        help='sigma of the Gaussian soft NMS, score * exp(-iou^2 / sigma) (default 0.5)')



# ---------------------------------------------------------------- views

def _slice_size(text):
    """``--slice``: ``S`` or ``HxW`` (or ``H,W``)."""
    match = re.fullmatch(r'\s*(\d+)\s*(?:[x,]\s*(\d+)\s*)?', text)
    if not match or int(match.group(1)) < 1 or int(match.group(2) or 1) < 1:
        raise argparse.ArgumentTypeError('expected a tile size S or HxW, got %r' % text)
    height = int(match.group(1))
    return height, int(match.group(2) or height)


def _fraction(low_open, high_open):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            value = float('nan')
        if not ((low_open and value > 0 or not low_open and value >= 0)
                and (high_open and value < 1 or not high_open and value <= 1)):
            raise argparse.ArgumentTypeError('expected a number in %s0, 1%s, got %r'
                                             % ('(' if low_open else '[',
                                                ')' if high_open else ']', text))
        return value
    return parse


def _scales(text):
    try:
        return tuple(float(v) for v in text.split(','))
    except ValueError:
        raise argparse.ArgumentTypeError('expected numbers S,S,..., got %r' % text) from None


def add_view_arguments(parser):
    """The flags of sliced inference and test-time augmentation (see :func:`view_options`)."""
    group = parser.add_argument_group('sliced inference and test-time augmentation')
    add = group.add_argument
    add('--slice', type=_slice_size, metavar='S|HxW',
        help='detect in tiles of S x S (or H x W) original pixels covering each image, merged '
             'by NMS: small objects in large images (tile: about the size of the images the '
             'model was trained on)')
    add('--slice-overlap', type=_fraction(False, True), default=VIEW_DEFAULTS['slice_overlap'],
        metavar='F',
        help="overlap of neighbouring tiles, as a share of a tile's side (default 0.2)")
    add('--slice-full', action='store_true',
        help='also detect in the whole image (for objects larger than a tile)')
    add('--slice-iou', type=_fraction(True, False), default=VIEW_DEFAULTS['slice_iou'],
        metavar='IOU',
        help="IoU of the NMS merging the tiles' detections (default 0.5)")
    add('--tta', action='store_true',
        help='test-time augmentation: each image also mirrored and shrunk by --tta-scales, '
             'the detections merged')
    add('--tta-scales', type=_scales, default=VIEW_DEFAULTS['tta_scales'], metavar='S,S,...',
        help='--tta: scales in (0, 1] (default 1,0.83,0.67): each view shrinks the image by '
             'one, padded to its size, each also mirrored')
    add('--tta-merge', choices=('wbf', 'nms'), default=VIEW_DEFAULTS['tta_merge'],
        help='--tta: weighted box fusion (default) or NMS of the views\' detections')
    add('--tta-iou', type=_fraction(True, False), default=VIEW_DEFAULTS['tta_iou'],
        metavar='IOU',
        help='--tta: IoU at which detections of the views are merged (default 0.55)')


# ---------------------------------------------------------------- tracking

def _frames(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError('expected a number of frames >= 0, got %r' % text)
    return value


#: ByteTrack's settings a user sets (its keywords; defaults in
#: :class:`gluondet.deploy.track.ByteTrack`): ``{keyword: (flag, type, metavar, help)}``.
TRACK_SETTINGS = {
    'track_thresh': ('--track-thresh', _fraction(False, False), 'SCORE',
                     'detections scoring at least this are matched first and may start '
                     'tracks (default 0.5; Ultralytics: track_high_thresh)'),
    'low_thresh': ('--track-low-thresh', _fraction(False, False), 'SCORE',
                   'lower-scoring detections above this only continue tracks (default 0.1)'),
    'new_track_thresh': ('--new-track-thresh', _fraction(False, False), 'SCORE',
                         'least score that starts a track (default: --track-thresh + 0.1)'),
    'match_thresh': ('--match-thresh', _fraction(False, False), 'COST',
                     'largest cost 1 - IoU x score of a match (default 0.8)'),
    'track_buffer': ('--track-buffer', _frames, 'FRAMES',
                     'frames (at 30 a second) a lost track waits for its object (default 30)'),
}


def add_track_arguments(parser):
    """``--track`` and the ByteTrack settings of `TRACK_SETTINGS`."""
    group = parser.add_argument_group('tracking', 'ByteTrack; each setting needs --track')
    group.add_argument('--track', action='store_true',
                       help='give each detection a track id across frames (ByteTrack), in the '
                            'JSON lines and drawn')
    for name, (flag, kind, metavar, text) in TRACK_SETTINGS.items():
        group.add_argument(flag, dest=name, type=kind, metavar=metavar, help=text)


def track_settings(args):
    """``False`` without ``--track``, else the dict of ByteTrack keywords the flags set.

    Raises
    ------
    ValueError
        For a setting given without ``--track``.
    """
    given = {name: getattr(args, name) for name in TRACK_SETTINGS
             if getattr(args, name, None) is not None}
    if not args.track:
        if given:
            raise ValueError('%s needs --track' % TRACK_SETTINGS[next(iter(given))][0])
        return False
    return given
