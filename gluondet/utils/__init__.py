"""GluonCV's ``gluoncv.utils`` helpers that detection tutorials call, under the same names.

A GluonCV tutorial's calls, with ``gluondet`` for ``gluoncv``::

    from gluondet import model_zoo, data, utils
    ax = utils.viz.plot_bbox(img, boxes[0], scores[0], ids[0], class_names=net.classes)
    path = utils.download(url, path='images/')
    utils.export_block('ssd_512', net, preprocess=True, layout='HWC')

- :mod:`gluondet.utils.viz`: ``plot_image``, ``plot_bbox``, ``cv_plot_image``,
  ``cv_plot_bbox``, ``expand_mask`` and ``plot_mask``, GluonCV's signatures and pictures.
- `download` and `check_sha1` (:mod:`gluondet.utils.downloads`): a file from a URL, its sha1
  checked, written whole or not at all.
- `export_block` (:mod:`gluondet.utils.export`): a HybridBlock as ``path-symbol.json`` and
  ``path-0000.params``, behind GluonCV's default preprocessing if asked.

Importing this package imports neither MXNet, matplotlib nor OpenCV: each is imported by
the function that needs it (`export_block` on first use).
"""
from . import viz
from .downloads import DownloadError, check_sha1, download

__all__ = ['viz', 'download', 'check_sha1', 'DownloadError', 'export_block']


def __getattr__(name):
    """`export_block`, imported when first used (it imports MXNet)."""
    if name == 'export_block':
        from .export import export_block
        return export_block
    raise AttributeError('module %r has no attribute %r' % (__name__, name))
