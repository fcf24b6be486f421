"""The detector table: what the command line, spec readers, docs, demo and tools know of the
detectors.

A detector is its own files plus one `register` call. Its entry module (``entry``) holds its
training command: ``build_parser()``, ``main(argv)`` (``run(parse_args(argv))``), ``run(args)``
(trains as the parsed flags say; returns the engine's `FitResult`), ``network_flags(name)``
(the flags that make the command train the zoo network ``name``, for `gluondet.Detector`),
``network_name(args)`` and ``DEMO``, its demo recipe (a `gluondet.demo.Recipe`, or None).
What its exported graph needs after the network is the network's own ``postprocess`` kind
(`gluondet.deploy`); its model zoo names start with ``zoo_prefix``. The detectors gluondet
ships are registered at the end of this file.

>>> from gluondet import detectors
>>> [d.name for d in detectors.all_detectors()]
['ssd', 'faster_rcnn', 'retinanet', 'yolo3', 'center_net', 'mask_rcnn']
>>> detectors.get('frcnn').display
'Faster R-CNN'
"""
import dataclasses
import difflib
import importlib
from typing import FrozenSet, Tuple, Union

__all__ = ['Family', 'FEATURES', 'register', 'get', 'all_detectors', 'names', 'of_network']

#: What a detector's training command can do besides what the engine gives every detector
#: (Horovod, the parameter server, resume, ...), for the readers that offer it (the demo's
#: --amp and --dali, the docs).
FEATURES = frozenset({'amp', 'dali', 'syncbn', 'mixup', 'prune'})


@dataclasses.dataclass(frozen=True)
class Family:
    """One row of the table.

    Parameters
    ----------
    name : str
        ``gluondet train NAME``, a spec's ``detector:``, ``gluondet demo --detector NAME``;
        the training script is ``scripts/train_NAME.py``.
    display : str
        The name people write (``'Faster R-CNN'``).
    entry : str
        The module of its training command (``build_parser``, ``main``, ``DEMO``).
    zoo_prefix : str or tuple of str
        Its model zoo names start with this (``'faster_rcnn_'``), or one of these.
    aliases : tuple of str
        Other spellings a spec may use (``'frcnn'``).
    features : frozenset of str
        Of `FEATURES`: what its command supports.
    """

    name: str
    display: str
    entry: str
    zoo_prefix: Union[str, Tuple[str, ...]]
    aliases: Tuple[str, ...] = ()
    features: FrozenSet[str] = frozenset()

    def __post_init__(self):
        unknown = set(self.features) - FEATURES
        if unknown:
            raise ValueError('detector %s: unknown features %s (known: %s)' % (
                self.name, ', '.join(sorted(unknown)), ', '.join(sorted(FEATURES))))
        object.__setattr__(self, 'features', frozenset(self.features))

    def module(self):
        """The imported entry module."""
        return importlib.import_module(self.entry)

    def build_parser(self):
        return self.module().build_parser()

    def main(self, argv=None):
        """Train as its command line says; returns what the entry's ``main`` returns."""
        return self.module().main(argv)

    @property
    def demo(self):
        """Its demo recipe (`gluondet.demo.Recipe`), or None."""
        return getattr(self.module(), 'DEMO', None)


_TABLE = {}


def register(detector):
    """Add ``detector`` (a `Family`) to the table; a name or alias taken already is a
    ValueError. Returns it."""
    for key in (detector.name,) + tuple(detector.aliases):
        taken = _lookup().get(key.lower())
        if taken is not None:
            raise ValueError('detector name %r is taken by %s (%s)'
                             % (key, taken.name, taken.entry))
    _TABLE[detector.name] = detector
    return detector


def _lookup():
    return {key.lower(): d for d in _TABLE.values() for key in (d.name,) + tuple(d.aliases)}


def get(name):
    """The detector called ``name`` (or an alias, any case); an unknown name is a ValueError
    naming the detectors, with a did-you-mean."""
    found = _lookup().get(str(name).strip().lower())
    if found is None:
        close = difflib.get_close_matches(str(name).lower(), list(_lookup()), n=2, cutoff=0.6)
        hint = ' (did you mean %s?)' % ' or '.join(close) if close else ''
        raise ValueError('unknown detector %r: one of %s%s' % (name, ', '.join(names()), hint))
    return found


def all_detectors():
    """The registered detectors, in registration order."""
    return list(_TABLE.values())


def names():
    return [d.name for d in _TABLE.values()]


def of_network(network):
    """The detector whose model zoo names ``network`` belongs to, or None."""
    return next((d for d in _TABLE.values() if network.startswith(d.zoo_prefix)), None)


register(Family('ssd', 'SSD', 'gluondet.train.ssd', 'ssd_',
                  features={'amp', 'dali', 'syncbn', 'prune'}))
register(Family('faster_rcnn', 'Faster R-CNN', 'gluondet.train.faster_rcnn', 'faster_rcnn_',
                  aliases=('fasterrcnn', 'faster-rcnn', 'frcnn'),
                  features={'amp', 'syncbn', 'mixup', 'prune'}))
register(Family('retinanet', 'RetinaNet', 'gluondet.train.retinanet', 'retinanet_',
                  features={'amp', 'dali', 'syncbn', 'prune'}))
register(Family('yolo3', 'YOLOv3', 'gluondet.train.yolo3', 'yolo3_', aliases=('yolov3',),
                  features={'amp', 'syncbn', 'mixup', 'prune'}))
register(Family('center_net', 'CenterNet', 'gluondet.train.center_net', 'center_net_',
                  aliases=('centernet',), features={'amp', 'syncbn', 'prune'}))
register(Family('mask_rcnn', 'Mask R-CNN', 'gluondet.train.mask_rcnn',
                  ('mask_rcnn_', 'custom_mask_rcnn_'), aliases=('maskrcnn', 'mask-rcnn'),
                  features={'amp', 'syncbn'}))
