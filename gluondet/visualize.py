"""Draw detections or ground truth on images."""
import colorsys
import os

import cv2
import numpy as np

from .detections import MASKS, PASTE_CHUNK

MASK_ALPHA = 0.5    # opacity of a mask's fill


def class_colors(num_classes):
    """Distinct RGB colours, one per class, stable across calls."""
    hues = (np.arange(num_classes) * 0.618033988749895) % 1.0
    return [tuple(int(255 * c) for c in colorsys.hsv_to_rgb(h, 0.85, 0.95)) for h in hues]


def draw_boxes(image, boxes, ids=None, scores=None, class_names=None, threshold=0.0,
               thickness=2, labels=None):
    """Return a copy of ``image`` with boxes, class names, labels and scores drawn.

    Parameters
    ----------
    image : numpy.ndarray or mx.nd.NDArray
        H x W x 3 uint8 RGB image.
    boxes : array-like
        N x 4 ``xmin, ymin, xmax, ymax`` in pixels of ``image``.
    ids : array-like, optional
        N class indices; rows with a negative id are padding and are skipped.
    scores : array-like, optional
        N scores; rows below ``threshold`` are skipped.
    class_names : sequence of str, optional
        Names for the class indices.
    labels : sequence of str, optional
        N texts drawn after the class names (track ids, ``'#3'``); empty ones are not.

    Returns
    -------
    numpy.ndarray
        H x W x 3 uint8 RGB image.
    """
    canvas = _canvas(image)
    boxes = _as_numpy(boxes).reshape(-1, 4)
    ids = np.zeros(len(boxes)) if ids is None else _as_numpy(ids).reshape(-1)
    scores = None if scores is None else _as_numpy(scores).reshape(-1)
    colors = _colors(ids, class_names)
    for i, box in enumerate(boxes):
        cls = int(ids[i])
        if cls < 0 or (scores is not None and scores[i] < threshold):
            continue
        color = colors[i]
        x1, y1, x2, y2 = [int(round(v)) for v in box]
        cv2.rectangle(canvas, (x1, y1), (x2, y2), color, thickness)
        text = class_names[cls] if class_names and cls < len(class_names) else str(cls)
        if labels is not None and labels[i]:
            text += ' ' + labels[i]
        if scores is not None:
            text += ' %.2f' % scores[i]
        _label(canvas, text, x1, y1, color)
    return canvas


def draw_detections(image, detections, class_names=None, threshold=0.0, labels=None,
                    thickness=2):
    """`draw_boxes` of a :class:`~gluondet.detections.Detections`: its detections scoring at
    least ``threshold``, each with its mask filled translucently in its box's colour when it
    has a ``masks`` grid field (only the drawn ones are pasted).

    Parameters
    ----------
    image : numpy.ndarray or mx.nd.NDArray
        H x W x 3 uint8 RGB image, the detections' (their boxes in its pixels).
    detections : Detections
    class_names, threshold, thickness
        As `draw_boxes`'.
    labels : sequence of str, optional
        One text per detection, drawn after its class name (track ids).

    Returns
    -------
    numpy.ndarray
        H x W x 3 uint8 RGB image.
    """
    canvas = _canvas(image)
    rows = np.flatnonzero((detections.ids >= 0) & (detections.scores >= threshold))
    shown = detections[rows]
    if MASKS in shown.grid_fields:
        colors = np.array(_colors(shown.ids, class_names), np.float32)
        for start in range(0, len(shown), PASTE_CHUNK):      # pasted a chunk at a time
            part = slice(start, start + PASTE_CHUNK)
            for mask, color in zip(shown[part].pasted_masks(canvas.shape[1::-1]),
                                   colors[part]):
                inside = mask.astype(bool)
                canvas[inside] = np.round((1 - MASK_ALPHA) * canvas[inside]
                                          + MASK_ALPHA * color).astype(np.uint8)
    return draw_boxes(canvas, shown.boxes, shown.ids, shown.scores, class_names, threshold,
                      thickness, None if labels is None else [labels[i] for i in rows])


def _canvas(image):
    """A uint8 copy of an RGB image (numpy or NDArray) to draw on."""
    image = image.asnumpy() if hasattr(image, 'asnumpy') else np.asarray(image)
    return np.ascontiguousarray(image, dtype=np.uint8).copy()


def _colors(ids, class_names):
    """The colour of each row's class (`class_colors` of the classes named, or of as many as
    the largest id needs)."""
    ids = np.asarray(ids).reshape(-1)
    num_classes = len(class_names) if class_names else int(ids.max(initial=0)) + 1
    colors = class_colors(max(num_classes, 1))
    return [colors[int(cls) % len(colors)] for cls in ids]


def _label(canvas, text, x, y, color):
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, 0.45
    (w, h), base = cv2.getTextSize(text, font, scale, 1)
    top = max(y - h - base - 2, 0)
    cv2.rectangle(canvas, (x, top), (x + w + 2, top + h + base + 2), color, -1)
    cv2.putText(canvas, text, (x + 1, top + h + 1), font, scale, (0, 0, 0), 1, cv2.LINE_AA)


def _as_numpy(a):
    return a.asnumpy() if hasattr(a, 'asnumpy') else np.asarray(a, dtype=np.float32)


def image_grid(images, columns=4, pad=4):
    """Tile same-height-or-not RGB images into one grid image (padded with white)."""
    h = max(im.shape[0] for im in images)
    w = max(im.shape[1] for im in images)
    rows = (len(images) + columns - 1) // columns
    grid = np.full((rows * (h + pad) + pad, columns * (w + pad) + pad, 3), 255, np.uint8)
    for k, im in enumerate(images):
        r, c = divmod(k, columns)
        y, x = pad + r * (h + pad), pad + c * (w + pad)
        grid[y:y + im.shape[0], x:x + im.shape[1]] = im
    return grid


def save_image(path, image):
    """Write an RGB image atomically (format from the extension)."""
    tmp = '%s.tmp-%d%s' % (path, os.getpid(), os.path.splitext(path)[1])
    if not cv2.imwrite(tmp, cv2.cvtColor(np.asarray(image), cv2.COLOR_RGB2BGR)):
        raise IOError('could not write image %s' % path)
    os.replace(tmp, path)
