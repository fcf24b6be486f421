"""GluonCV's ``gluoncv.utils.viz`` drawing functions for detections and instance masks.

The signatures, defaults and pictures are GluonCV 0.10.5's (and 0.11's, the same):

- `plot_image` and `plot_bbox` draw on a matplotlib axes (pyplot's, so that ``plt.show()``
  shows it) and return it;
- `cv_plot_bbox` draws with OpenCV on the image and returns it, `cv_plot_image` shows one
  in an OpenCV window;
- `expand_mask` pastes Mask R-CNN's box-frame masks into the image
  (:func:`gluondet.mask_paste.paste`, GluonCV's arithmetic), `plot_mask` blends them in.

Inputs are numpy arrays or MXNet NDArrays (anything with ``asnumpy``). The colours are
GluonCV's: with ``class_names``, matplotlib's ``hsv`` map at ``class / len(class_names)``;
without, random ones from Python's :mod:`random` (`plot_bbox`, `cv_plot_bbox`) or numpy's
global generator (`plot_mask`), so that a seed gives GluonCV's picture. A ``colors`` dict
given is filled with the colours chosen, as GluonCV fills it (pass the same dict to keep a
class's colour from frame to frame). Unlike GluonCV, the boxes given are never scaled in
place.

matplotlib and OpenCV are imported by the functions that draw with them.
"""
import random

import numpy as np

__all__ = ['plot_image', 'plot_bbox', 'cv_plot_image', 'cv_plot_bbox', 'expand_mask',
           'plot_mask']

_SORT_COLUMNS = {'xmin': 0, 'ymin': 1, 'xmax': 2, 'ymax': 3}


def _numpy(a):
    """``a`` as numpy: an NDArray's ``asnumpy()``, a numpy array itself (None stays)."""
    if a is None:
        return None
    return a.asnumpy() if hasattr(a, 'asnumpy') else np.asarray(a)


def _pyplot():
    from ..plots import require_matplotlib
    require_matplotlib()
    from matplotlib import pyplot
    return pyplot


def _hsv():
    """matplotlib's ``hsv`` colormap."""
    from ..plots import require_matplotlib
    matplotlib = require_matplotlib()
    if hasattr(matplotlib, 'colormaps'):        # matplotlib >= 3.5
        return matplotlib.colormaps['hsv']
    from matplotlib import cm
    return cm.get_cmap('hsv')


def _check_lengths(bboxes, scores, labels):
    if labels is not None and len(bboxes) != len(labels):
        raise ValueError('The length of labels and bboxes mismatch, %d vs %d'
                         % (len(labels), len(bboxes)))
    if scores is not None and len(bboxes) != len(scores):
        raise ValueError('The length of scores and bboxes mismatch, %d vs %d'
                         % (len(scores), len(bboxes)))


def _absolute(bboxes, img, absolute_coordinates, scale=None):
    """A copy of the boxes (numpy) in pixels: relative ones times the image's width and
    height, absolute ones times ``scale`` (`cv_plot_bbox`'s)."""
    boxes = np.array(_numpy(bboxes))
    if not absolute_coordinates:
        boxes = boxes if np.issubdtype(boxes.dtype, np.floating) else boxes.astype(np.float64)
        boxes[:, (0, 2)] *= img.shape[1]
        boxes[:, (1, 3)] *= img.shape[0]
    elif scale is not None:
        boxes = boxes * scale
    return boxes


def _shown(bboxes, scores, labels, thresh, class_names, colors):
    """``(row, (xmin, ymin, xmax, ymax), colour, name)`` of each box drawn: scoring at least
    ``thresh`` (when scored), its label not negative (when labelled). ``name``: the class
    name, else the label's number ('' without labels). Colours of classes not in ``colors``
    are added to it, in GluonCV's order (so a seed gives its random colours)."""
    cmap = None
    for i, box in enumerate(bboxes):
        if scores is not None and scores.flat[i] < thresh:
            continue
        if labels is not None and labels.flat[i] < 0:
            continue
        cls = int(labels.flat[i]) if labels is not None else -1
        if cls not in colors:
            if class_names is not None:
                cmap = _hsv() if cmap is None else cmap
                colors[cls] = cmap(cls / len(class_names))
            else:
                colors[cls] = (random.random(), random.random(), random.random())
        if class_names is not None and cls < len(class_names):
            name = class_names[cls]
        else:
            name = str(cls) if cls >= 0 else ''
        yield i, tuple(int(v) for v in box), colors[cls], name


def plot_image(img, ax=None, reverse_rgb=False):
    """Show an image on a matplotlib axes.

    Parameters
    ----------
    img : numpy.ndarray or mxnet.nd.NDArray
        ``H x W x 3`` image (shown as uint8).
    ax : matplotlib axes, optional
        Where to draw; default: a new pyplot figure's.
    reverse_rgb : bool, default False
        Swap the first and third channels (BGR <-> RGB) first.

    Returns
    -------
    matplotlib axes
    """
    plt = _pyplot()
    if ax is None:
        ax = plt.figure().add_subplot(1, 1, 1)
    img = np.array(_numpy(img))
    if reverse_rgb:
        img[:, :, (0, 1, 2)] = img[:, :, (2, 1, 0)]
    ax.imshow(img.astype(np.uint8))
    return ax


def plot_bbox(img, bboxes, scores=None, labels=None, thresh=0.5,
              class_names=None, colors=None, ax=None,
              reverse_rgb=False, absolute_coordinates=True,
              linewidth=3.5, fontsize=12):
    """Draw boxes, with their class names and scores, over an image on a matplotlib axes.

    Parameters
    ----------
    img : numpy.ndarray or mxnet.nd.NDArray
        ``H x W x 3`` image.
    bboxes : numpy.ndarray or mxnet.nd.NDArray
        ``N x 4`` boxes ``xmin, ymin, xmax, ymax``.
    scores : numpy.ndarray or mxnet.nd.NDArray, optional
        ``N`` (or ``N x 1``) scores; boxes scoring under ``thresh`` are not drawn.
    labels : numpy.ndarray or mxnet.nd.NDArray, optional
        ``N`` (or ``N x 1``) class indices; boxes labelled below 0 (padding) are not drawn.
    thresh : float, default 0.5
    class_names : list of str, optional
        The names drawn for the labels (else their numbers); with them, each class has its
        colour of matplotlib's ``hsv`` map.
    colors : dict, optional
        ``{class: colour}`` (matplotlib colours, RGB in ``0 ... 1``); classes missing get
        one (random without ``class_names``), added to the dict.
    ax : matplotlib axes, optional
        Where to draw; default: a new pyplot figure's.
    reverse_rgb : bool, default False
        Swap the image's first and third channels.
    absolute_coordinates : bool, default True
        False: the boxes are fractions of the image's width and height.
    linewidth : float, default 3.5
    fontsize : int, default 12

    Returns
    -------
    matplotlib axes
        A rectangle patch per box drawn; a text ``'{name} {score:.3f}'`` at its top left
        when there is a name or a score.
    """
    plt = _pyplot()
    _check_lengths(bboxes, scores, labels)
    ax = plot_image(img, ax=ax, reverse_rgb=reverse_rgb)
    if len(bboxes) < 1:
        return ax
    scores, labels = _numpy(scores), _numpy(labels)
    bboxes = _absolute(bboxes, img, absolute_coordinates)
    colors = {} if colors is None else colors
    for i, (xmin, ymin, xmax, ymax), color, name in _shown(bboxes, scores, labels, thresh,
                                                            class_names, colors):
        ax.add_patch(plt.Rectangle((xmin, ymin), xmax - xmin, ymax - ymin, fill=False,
                                   edgecolor=color, linewidth=linewidth))
        score = '%.3f' % scores.flat[i] if scores is not None else ''
        if name or score:
            ax.text(xmin, ymin - 2, '%s %s' % (name, score),
                    bbox=dict(facecolor=color, alpha=0.5), fontsize=fontsize, color='white')
    return ax


def cv_plot_image(img, scale=1, upperleft_txt=None, upperleft_txt_corner=(10, 100),
                  left_txt_list=None, left_txt_corner=(10, 150),
                  title_txt_list=None, title_txt_corner=(500, 50),
                  canvas_name='demo'):
    """Show an RGB image in an OpenCV window (``cv2.imshow``), with white texts on it.

    Parameters
    ----------
    img : numpy.ndarray or mxnet.nd.NDArray
        ``H x W x 3`` RGB image.
    scale : float, default 1
        The image is resized by it first.
    upperleft_txt : str, optional
        Drawn with its bottom left at ``upperleft_txt_corner`` (thickness 3).
    left_txt_list : list of str, optional
        Drawn one under the other (30 pixels apart) from ``left_txt_corner`` (thickness 1).
    title_txt_list : list of str, optional
        Drawn from ``title_txt_corner``, each 100 pixels right and 50 down of the previous
        (thickness 3).
    canvas_name : str, default 'demo'
        The window's name.
    """
    import cv2
    img = _numpy(img)
    height, width = img.shape[:2]
    img = cv2.resize(img, (int(width * scale), int(height * scale)))
    font, white = cv2.FONT_HERSHEY_SIMPLEX, (255, 255, 255)
    if upperleft_txt is not None:
        cv2.putText(img, upperleft_txt, upperleft_txt_corner, font, 1, white, 3)
    if left_txt_list is not None:
        x, y = left_txt_corner
        for k, txt in enumerate(left_txt_list):
            cv2.putText(img, txt, (x, y + 30 * k), font, 1, white, 1)
    if title_txt_list is not None:
        x, y = title_txt_corner
        for k, txt in enumerate(title_txt_list):
            cv2.putText(img, txt, (x + 100 * k, y + 50 * k), font, 1, white, 3)
    cv2.imshow(canvas_name, cv2.cvtColor(img, cv2.COLOR_RGB2BGR))


def cv_plot_bbox(img, bboxes, scores=None, labels=None, thresh=0.5,
                 class_names=None, colors=None,
                 absolute_coordinates=True, scale=1.0, linewidth=2):
    """Draw boxes, with their class names and scores, on an image with OpenCV.

    Parameters
    ----------
    img : numpy.ndarray or mxnet.nd.NDArray
        ``H x W x 3`` uint8 image; a numpy image is drawn on (and returned), as OpenCV and
        GluonCV draw, unless OpenCV cannot draw on it (not contiguous, read-only: GluonCV
        fails), then its copy is, as an NDArray's.
    bboxes, scores, labels, thresh, class_names
        As `plot_bbox`'s.
    colors : dict, optional
        ``{class: colour}``, RGB in ``0 ... 1`` (drawn times 255); missing ones are added
        as `plot_bbox` adds them.
    absolute_coordinates : bool, default True
        False: the boxes are fractions of the image's width and height.
    scale : float, default 1.0
        Absolute boxes are multiplied by it (for an image shown resized by it); also sets
        the text's size (``min(scale / 2, 2)``) and thickness (``min(int(scale), 5)``).
    linewidth : int, default 2
        The boxes' line thickness; negative fills them.

    Returns
    -------
    numpy.ndarray
        The image drawn on; text ``'{name} {score}%'`` above each box drawn (below its top
        when that is within 30 pixels of the image's top).
    """
    import cv2
    _check_lengths(bboxes, scores, labels)
    img, scores, labels = _numpy(img), _numpy(scores), _numpy(labels)
    if len(bboxes) < 1:
        return img
    if not (img.flags.c_contiguous and img.flags.writeable):   # OpenCV draws on neither
        img = np.array(img, order='C')
    bboxes = _absolute(bboxes, img, absolute_coordinates, scale)
    colors = {} if colors is None else colors
    for i, (xmin, ymin, xmax, ymax), color, name in _shown(bboxes, scores, labels, thresh,
                                                            class_names, colors):
        bcolor = [c * 255 for c in color]
        cv2.rectangle(img, (xmin, ymin), (xmax, ymax), bcolor, linewidth)
        score = '%d%%' % int(scores.flat[i] * 100) if scores is not None else ''
        if name or score:
            y = ymin - 15 if ymin - 15 > 15 else ymin + 15
            cv2.putText(img, '%s %s' % (name, score), (xmin, y), cv2.FONT_HERSHEY_SIMPLEX,
                        min(scale / 2, 2), bcolor, min(int(scale), 5), lineType=cv2.LINE_AA)
    return img


def expand_mask(masks, bboxes, im_shape, scores=None, thresh=0.5, scale=1.0, sortby=None):
    """Paste Mask R-CNN's masks, each in its box's frame, into full-image masks.

    The arithmetic is GluonCV's (``gluoncv.data.transforms.mask.fill``): each ``M x M``
    mask, padded by a pixel of 0s, is resized with Pillow's bilinear filter over its box
    widened by that pixel and rounded to whole pixels, and kept where above 0.5
    (:func:`gluondet.mask_paste.paste`). Parts of boxes outside the image are cut off.

    Parameters
    ----------
    masks : numpy.ndarray or mxnet.nd.NDArray
        ``N x M x M`` mask probabilities.
    bboxes : numpy.ndarray or mxnet.nd.NDArray
        ``N x 4`` boxes ``xmin, ymin, xmax, ymax`` in the network input's pixels.
    im_shape : (int, int)
        The image's ``(width, height)``.
    scores : numpy.ndarray or mxnet.nd.NDArray, optional
        ``N`` (or ``N x 1``) scores; masks scoring under ``thresh`` are left out (all are
        kept without scores, where GluonCV fails).
    thresh : float, default 0.5
    scale : float, default 1.0
        The boxes are multiplied by it first (network input -> image pixels).
    sortby : {None, 'area', 'xmin', 'ymin', 'xmax', 'ymax'}
        Order the second output by that property of the boxes, largest first.

    Returns
    -------
    numpy.ndarray
        ``K x height x width`` uint8 0/1 masks of the ``K`` masks kept, in their order.
    numpy.ndarray
        ``K`` indices, GluonCV's: the order of all ``N`` boxes by ``sortby`` (``0 ... N-1``
        without), taken at the kept masks' positions.
    """
    from ..mask_paste import paste
    if len(masks) != len(bboxes):
        raise ValueError('The length of bboxes and masks mismatch, %d vs %d'
                         % (len(bboxes), len(masks)))
    if scores is not None and len(masks) != len(scores):
        raise ValueError('The length of scores and masks mismatch, %d vs %d'
                         % (len(scores), len(masks)))
    masks, scores = np.asarray(_numpy(masks)), _numpy(scores)
    bboxes = np.asarray(_numpy(bboxes))
    if sortby is None:
        order = np.arange(len(masks))
    elif sortby == 'area':
        areas = (bboxes[:, 2] - bboxes[:, 0]) * (bboxes[:, 3] - bboxes[:, 1])
        order = np.argsort(-areas)
    elif sortby in _SORT_COLUMNS:
        order = np.argsort(-bboxes[:, _SORT_COLUMNS[sortby]])
    else:
        raise ValueError('argument sortby cannot take value %s (one of None, %s)'
                         % (sortby, ', '.join(['area'] + list(_SORT_COLUMNS))))
    if not np.issubdtype(bboxes.dtype, np.floating):
        bboxes = bboxes.astype(np.float64)
    bboxes = bboxes * scale
    keep = (np.arange(len(masks)) if scores is None
            else np.flatnonzero(np.asarray(scores).reshape(len(masks), -1)[:, 0] >= thresh))
    full = paste(masks[keep], bboxes[keep], im_shape)
    return full, order[keep]


def plot_mask(img, masks, alpha=0.5):
    """Blend each mask into the image in a random colour (numpy's global generator draws
    three numbers per mask, as in GluonCV).

    Parameters
    ----------
    img : numpy.ndarray or mxnet.nd.NDArray
        ``H x W x 3`` image.
    masks : numpy.ndarray or mxnet.nd.NDArray
        ``N x H x W`` masks (a pixel is in a mask where above 0).
    alpha : float, default 0.5
        The colour's weight.

    Returns
    -------
    numpy.ndarray
        ``H x W x 3`` uint8: inside a mask ``img * (1 - alpha) + colour * alpha``, truncated.
    """
    img, masks = _numpy(img), _numpy(masks)
    for mask in masks:
        color = np.random.random(3) * 255
        img = np.where((mask > 0)[:, :, None], img * (1 - alpha) + color * alpha, img)
    return np.asarray(img).astype('uint8')
