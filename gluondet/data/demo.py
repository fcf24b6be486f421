"""The built-in demo dataset: seeded synthetic shapes on textured backgrounds.

Each image holds one to four shapes (circle, square, triangle, star, cross)
of 15-45% of the image side, in colours that contrast with the background,
overlapping at most a quarter of the smaller box, on a background of smooth
noise, a colour gradient or stripes, with mild uniform pixel noise on top. Boxes are
tight around each shape's pixels (0-based, inclusive: GluonCV's frame), and each shape's
mask is those pixels (all of them: where a later shape covers part of an earlier one,
their masks overlap).

Image ``i`` of a split depends only on ``(seed, split, i, image_size)``, so
the same seed gives the same data, and a smaller ``num_images`` gives a
prefix of a larger one. Images are written once as JPEG under
``$GLUONDET_HOME/demo`` (default ``~/.gluondet/demo``) and reused, with their boxes in
``labels.json`` and, once a dataset with masks is asked for, the masks as COCO RLE in
``masks.json``; a file lock lets concurrent processes share the cache, and every file is
written to a temporary name and renamed, so an interrupted run leaves no partial file.
"""
import json
import os

import cv2
import numpy as np
from filelock import FileLock

from .. import masks as rle_codec
from ..files import atomic_write
from .base import DatasetError, DetectionDataset, Record
from .coco import xyxy_to_coco

__all__ = ['DEMO_CLASSES', 'DemoDetection', 'demo_home', 'render_demo_image']

DEMO_CLASSES = ('circle', 'square', 'triangle', 'star', 'cross')
GENERATOR_VERSION = 1  # part of the cache folder name: bump when images change
DEFAULT_NUM_IMAGES = {'train': 1000, 'val': 200}
_SPLIT_STREAM = {'train': 0, 'val': 1}
SIDE_RANGE = (0.15, 0.45)   # shape size, as a fraction of the image side
MAX_OBJECTS = 4
MAX_OVERLAP = 0.25          # intersection over the smaller of two placement squares
_PLACEMENT_TRIES = 30
_MIN_CONTRAST = 120.        # RGB distance between a shape and the background under it
_JPEG_QUALITY = 95


def demo_home():
    """The demo cache folder: ``$GLUONDET_HOME/demo``, default ``~/.gluondet/demo``."""
    home = os.environ.get('GLUONDET_HOME') or os.path.join('~', '.gluondet')
    return os.path.join(os.path.expanduser(home), 'demo')


def _ramp(rng, size):
    """Distance along a random direction, per pixel."""
    angle = rng.uniform(0, 2 * np.pi)
    coords = np.arange(size, dtype=np.float32)
    return np.cos(angle) * coords[None, :] + np.sin(angle) * coords[:, None]


def _background(rng, size):
    """Float32 ``3 x size x size`` (channels first, which numpy broadcasts fast).

    Smooth noise, a linear gradient between two colours, or stripes.
    """
    base = rng.uniform(50, 205, 3).astype(np.float32)[:, None, None]
    kind = rng.integers(3)
    if kind == 0:
        cells = int(rng.integers(3, 12))
        low = rng.standard_normal((3, cells, cells), dtype=np.float32) * rng.uniform(15, 35)
        return base + np.stack([cv2.resize(c, (size, size), interpolation=cv2.INTER_CUBIC)
                                for c in low])
    ramp = _ramp(rng, size)
    if kind == 1:
        other = rng.uniform(50, 205, 3).astype(np.float32)[:, None, None]
        t = (ramp - ramp.min()) / max(float(ramp.max() - ramp.min()), 1.)
        return base + t[None] * (other - base)
    wave = np.sin(ramp * (2 * np.pi / rng.uniform(6, 32)))
    return base + wave[None] * rng.uniform(15, 40, 3).astype(np.float32)[:, None, None]


def _polygon(side, angle, radii):
    """Vertices of a star-like polygon centred in a ``side`` square, as int32."""
    centre = (side - 1) / 2.
    turns = angle + np.arange(len(radii)) * (2 * np.pi / len(radii))
    radius = np.asarray(radii) * centre
    points = np.stack([centre + radius * np.cos(turns), centre + radius * np.sin(turns)], axis=1)
    return np.round(points).astype(np.int32)


def _shape_mask(kind, side, angle):
    """Boolean ``side x side`` mask of one shape."""
    mask = np.zeros((side, side), np.uint8)
    if kind == 'circle':
        cv2.circle(mask, (side // 2, side // 2), (side - 1) // 2, 1, -1)
    elif kind == 'square':
        mask[:] = 1
    elif kind == 'triangle':
        cv2.fillPoly(mask, [_polygon(side, angle, [1.] * 3)], 1)
    elif kind == 'star':
        cv2.fillPoly(mask, [_polygon(side, angle, [1., 0.45] * 5)], 1)
    else:  # cross
        bar = max(3, int(round(side * 0.34)))
        start = (side - bar) // 2
        mask[start:start + bar, :] = 1
        mask[:, start:start + bar] = 1
    return mask.astype(bool)


def _overlap(a, b):
    """Intersection over the smaller area of two ``(x, y, side)`` squares."""
    w = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
    h = min(a[1] + a[2], b[1] + b[2]) - max(a[1], b[1])
    return max(w, 0) * max(h, 0) / float(min(a[2], b[2]) ** 2)


def _placements(rng, size):
    """``(x, y, side)`` squares for 1 to MAX_OBJECTS shapes with limited overlap."""
    placed = []
    for _ in range(int(rng.integers(1, MAX_OBJECTS + 1))):
        for _ in range(_PLACEMENT_TRIES):
            side = int(rng.uniform(*SIDE_RANGE) * size)
            square = (int(rng.integers(0, size - side + 1)), int(rng.integers(0, size - side + 1)),
                      side)
            if all(_overlap(square, other) <= MAX_OVERLAP for other in placed):
                placed.append(square)
                break
    return placed


def _contrasting_colour(rng, under):
    """A colour far (in RGB) from the mean colour ``under`` the shape."""
    best, best_distance = None, -1.
    for _ in range(20):
        colour = rng.uniform(0, 255, 3).astype(np.float32)
        distance = float(np.linalg.norm(colour - under))
        if distance > best_distance:
            best, best_distance = colour, distance
        if distance >= _MIN_CONTRAST:
            break
    return best


def render_demo_image(seed, split, index, image_size=256, masks=False):
    """Draw image ``index`` of a demo split.

    Parameters
    ----------
    seed : int
        Dataset seed.
    split : {'train', 'val'}
        Which split (they are drawn from different streams).
    index : int
        Image number.
    image_size : int, default 256
        Side of the square image.
    masks : bool, default False
        Return each shape's mask too.

    Returns
    -------
    tuple
        ``(image, label)``: uint8 ``image_size x image_size x 3`` RGB numpy
        array, float32 ``N x 6`` label (``difficult`` is 0); with ``masks``, ``(image,
        label, masks)``, ``masks`` uint8 ``N x image_size x image_size``, 1 where a
        shape was drawn.
    """
    rng = np.random.default_rng([seed, _SPLIT_STREAM[split], index])
    image = _background(rng, image_size)
    rows, drawn = [], []
    for x, y, side in _placements(rng, image_size):
        class_id = int(rng.integers(len(DEMO_CLASSES)))
        mask = _shape_mask(DEMO_CLASSES[class_id], side, rng.uniform(0, 2 * np.pi))
        window = image[:, y:y + side, x:x + side]
        window[:, mask] = _contrasting_colour(rng, window[:, mask].mean(axis=1))[:, None]
        ys, xs = np.nonzero(mask)
        rows.append([x + xs.min(), y + ys.min(), x + xs.max(), y + ys.max(), class_id, 0])
        if masks:
            drawn.append(np.zeros((image_size, image_size), np.uint8))
            drawn[-1][y:y + side, x:x + side] = mask
    image += (rng.random(image.shape, dtype=np.float32) - 0.5) * rng.uniform(6, 18)
    np.maximum(image, 0, out=image)
    # HWC, rounded and saturated to uint8 by OpenCV (much faster than numpy here).
    image = cv2.convertScaleAbs(cv2.merge(list(image)))
    label = np.array(rows, dtype=np.float32).reshape(-1, 6)
    if masks:
        return image, label, np.array(drawn, np.uint8).reshape(-1, image_size, image_size)
    return image, label


class DemoDetection(DetectionDataset):
    """Synthetic shapes for demos and tests: learnable in a few CPU minutes.

    Parameters
    ----------
    split : {'train', 'val'}
        Which split.
    num_images : int, optional
        Number of images; default 1000 for train, 200 for val.
    image_size : int, default 256
        Side of the square images.
    seed : int, default 0
        The same seed gives the same images and boxes.
    root : str, optional
        Cache folder; default :func:`demo_home`.
    transform : callable, optional
        ``fn(image, label)`` applied to every item.
    on_error : {'skip', 'raise'}
        See :class:`DetectionDataset` (it matters only if the cache is damaged).
    masks : bool, default False
        Items are ``(image, label, masks)``, ``masks`` an
        :class:`~gluondet.data.instance_masks.InstanceMasks` of each shape's pixels, and
        :meth:`coco_ground_truth` gives the ground truth for COCO mask AP.
    """

    CLASSES = DEMO_CLASSES

    def __init__(self, split='train', num_images=None, image_size=256, seed=0, root=None,
                 transform=None, on_error='skip', masks=False):
        if split not in _SPLIT_STREAM:
            raise ValueError("split must be 'train' or 'val', got %r" % (split,))
        if num_images is None:
            num_images = DEFAULT_NUM_IMAGES[split]
        if int(num_images) < 1 or int(image_size) < 32:
            raise ValueError('need num_images >= 1 and image_size >= 32, got %r and %r'
                             % (num_images, image_size))
        super().__init__(self.CLASSES, transform, on_error, masks=masks)
        self.split, self.seed = split, int(seed)
        self._num_images, self._image_size = int(num_images), int(image_size)
        self.folder = os.path.join(
            os.path.expanduser(root) if root else demo_home(),
            'v%d-seed%d-%dpx' % (GENERATOR_VERSION, self.seed, self._image_size),
            '%s-%d' % (split, self._num_images))
        labels, masks = self._cached_or_generated()
        records = []
        for (name, label), rles in zip(labels, masks):
            path = os.path.join(self.folder, name)
            size = self._image_size_or_skip(path, os.path.join(self.folder, 'labels.json'),
                                            (self._image_size, self._image_size))
            if size is not None:
                records.append(Record(path, np.array(label, dtype=np.float32).reshape(-1, 6),
                                      *size, masks=rles))
        self._finish(records, 'DemoDetection(%s, seed %d, %s)' % (split, self.seed, self.folder))

    @property
    def image_ids(self):
        """The image id of each item in :meth:`coco_ground_truth`: 1, 2, ..."""
        return list(range(1, len(self) + 1))

    @property
    def contiguous_id_to_json(self):
        """Class id -> category id in :meth:`coco_ground_truth` (class id + 1)."""
        return {i: i + 1 for i in range(self.num_class)}

    def coco_ground_truth(self):
        """The items' boxes and masks as a COCO instances dict (for COCO box and mask AP).

        ``images`` (id, width, height, file_name), ``annotations`` (id, image_id,
        category_id = class id + 1, bbox ``[x, y, w, h]`` by
        :func:`~gluondet.data.coco.xyxy_to_coco`, area = the mask's pixels, iscrowd 0,
        segmentation = compressed RLE) and ``categories``. Needs ``masks=True``.
        """
        if not self.with_masks:
            raise ValueError('coco_ground_truth needs the masks: build DemoDetection with '
                             'masks=True')
        images, annotations = [], []
        for image_id, record in zip(self.image_ids, self._records):
            images.append({'id': image_id, 'width': record.width, 'height': record.height,
                           'file_name': os.path.basename(record.path)})
            for row, bbox, rle in zip(record.label, xyxy_to_coco(record.label[:, :4]),
                                      record.masks):
                annotations.append({'id': len(annotations) + 1, 'image_id': image_id,
                                    'category_id': int(row[4]) + 1, 'bbox': bbox.tolist(),
                                    'area': int(rle_codec.area(rle)), 'iscrowd': 0,
                                    'segmentation': dict(rle)})
        categories = [{'id': i + 1, 'name': name} for i, name in enumerate(self.classes)]
        return {'images': images, 'annotations': annotations, 'categories': categories}

    def _description(self):
        return {'version': GENERATOR_VERSION, 'seed': self.seed, 'split': self.split,
                'image_size': self._image_size, 'classes': list(self.CLASSES)}

    def _read_cache(self):
        """``[(file name, label rows)]`` if the cache is complete, else None."""
        try:
            with open(os.path.join(self.folder, 'labels.json')) as f:
                cached = json.load(f)
        except (OSError, ValueError):
            return None
        if not isinstance(cached, dict) or cached.get('description') != self._description():
            return None
        images = cached.get('images')
        if not isinstance(images, list) or len(images) != self._num_images:
            return None
        if not all(os.path.isfile(os.path.join(self.folder, item['file'])) for item in images):
            return None
        return [(item['file'], item['boxes']) for item in images]

    def _generate(self):
        images = []
        for index in range(self._num_images):
            image, label = render_demo_image(self.seed, self.split, index, self._image_size)
            ok, encoded = cv2.imencode('.jpg', cv2.cvtColor(image, cv2.COLOR_RGB2BGR),
                                       [cv2.IMWRITE_JPEG_QUALITY, _JPEG_QUALITY])
            if not ok:
                raise DatasetError(self.folder, 'image', 'JPEG encoding failed for image %d'
                                   % index)
            name = '%06d.jpg' % index
            atomic_write(os.path.join(self.folder, name), encoded.tobytes())
            images.append({'file': name, 'boxes': label.tolist()})
        # labels.json is written last: its presence marks a complete cache.
        payload = {'description': self._description(), 'images': images}
        atomic_write(os.path.join(self.folder, 'labels.json'), json.dumps(payload).encode())
        return [(item['file'], item['boxes']) for item in images]

    def _read_masks(self, labels):
        """Per image the RLE of each box if ``masks.json`` is complete and sound for
        ``labels``, else None."""
        try:
            with open(os.path.join(self.folder, 'masks.json')) as f:
                cached = json.load(f)
        except (OSError, ValueError):
            return None
        if not isinstance(cached, dict) or cached.get('description') != self._description():
            return None
        masks = cached.get('images')
        if not (isinstance(masks, list) and len(masks) == len(labels) and all(
                isinstance(rles, list) and len(rles) == len(boxes)
                for rles, (_, boxes) in zip(masks, labels))):
            return None
        side = self._image_size
        try:
            return [[rle_codec.to_rle(rle, side, side) for rle in rles] for rles in masks]
        except ValueError:
            return None

    def _generate_masks(self):
        """Draw the images again for their masks (the same draws give the same shapes) and
        write ``masks.json``."""
        masks = []
        for index in range(self._num_images):
            drawn = render_demo_image(self.seed, self.split, index, self._image_size, True)[2]
            masks.append([rle_codec.encode(mask) for mask in drawn])
        payload = {'description': self._description(), 'images': masks}
        atomic_write(os.path.join(self.folder, 'masks.json'), json.dumps(payload).encode())
        return masks

    def _cached_or_generated(self):
        """``(labels, masks)``: ``[(file name, label rows)]`` and per image the RLE of each
        box (None per image without ``masks``)."""
        os.makedirs(self.folder, exist_ok=True)
        with FileLock(self.folder + '.lock'):
            labels = self._read_cache()
            if labels is None:
                labels = self._generate()
            if not self.with_masks:
                return labels, [None] * len(labels)
            masks = self._read_masks(labels)
            return labels, masks if masks is not None else self._generate_masks()
