"""Learned-policy augmentation for detection (Zoph et al. 2019, arXiv:1906.11172) and its
scale-aware variant (Chen et al. 2021, arXiv:2103.17220), on numpy images and boxes.

A *policy* is a list of sub-policies; each call picks one at random and applies its
operations in order, each with its probability. An operation is ``(name, probability,
level)``, the level 0-10 mapped to a magnitude as in the papers (rotation up to 30
degrees, shear up to 0.3, translation up to 250 px, colour factors 0.1-1.9, cutout up to
100 px). Three kinds:

- colour operations change the whole image (``Equalize``, ``Color``, ``Solarize``, ...);
- geometric operations move the image and its boxes together (``Rotate_BBox``,
  ``ShearX_BBox``, ``TranslateY_BBox``; a box is the bounds of its moved corners, clipped;
  a box moved out of the image is dropped) and ``Cutout`` greys a square;
- box-level operations (``*_Only_BBoxes``) change the pixels inside each box, each box with
  the operation's probability, the boxes staying where they are.

The scale-aware policy adds an image-level zoom (``Zoom``: the image and its boxes
resized by a factor, then cropped or padded back to the original size) and applies its
box-level operations with an area attenuation: the changed pixels are blended into the
box with a Gaussian weight centred on the box (1 at the centre), as the paper's
box-level augmentation does.

Random draws come from numpy's global RNG (or ``rng``), which the engine seeds per sample,
so a run with the same seed augments alike. Images are ``H x W x 3`` uint8 RGB; labels
``N x 5+`` with the boxes first.
"""
import cv2
import numpy as np

from .transforms import _image

__all__ = ['POLICIES', 'DetectionAutoAugment', 'apply_operation']

FILL = 128          # the grey that uncovered pixels get (as the papers' implementation)
MAX_LEVEL = 10.

# Zoph et al.'s policy v0 (the one their paper trains RetinaNet with).
POLICY_V0 = [
    [('TranslateX_BBox', 0.6, 4), ('Equalize', 0.8, 10)],
    [('TranslateY_Only_BBoxes', 0.2, 2), ('Cutout', 0.8, 8)],
    [('Sharpness', 0.0, 8), ('ShearX_BBox', 0.4, 0)],
    [('ShearY_BBox', 1.0, 2), ('TranslateY_Only_BBoxes', 0.6, 6)],
    [('Rotate_BBox', 0.6, 10), ('Color', 1.0, 6)],
]
# A scale-aware policy: an image-level zoom in or out, then box-level operations with area
# attenuation (the structure of Chen et al.'s searched policy; these sub-policies are ours).
POLICY_SCALE_AWARE = [
    [('Zoom', 0.5, 2), ('Equalize_Only_BBoxes', 0.6, 10)],
    [('Zoom', 0.5, 8), ('Color_Only_BBoxes', 0.6, 8)],
    [('Rotate_Only_BBoxes', 0.4, 6), ('Brightness', 0.6, 6)],
    [('Zoom', 0.3, 5), ('Cutout_Only_BBoxes', 0.4, 6)],
    [('ShearX_Only_BBoxes', 0.4, 6), ('Contrast', 0.6, 7)],
]
POLICIES = {'v0': POLICY_V0, 'scale_aware': POLICY_SCALE_AWARE}


def _signed(level, largest, rng):
    value = level / MAX_LEVEL * largest
    return value if rng.uniform() < 0.5 else -value


def _factor(level):
    return level / MAX_LEVEL * 1.8 + 0.1


def _blend(a, b, factor):
    """``b + factor * (a - b)``, clipped to uint8 (PIL's ImageEnhance)."""
    return np.clip(b.astype(np.float32) + factor * (a.astype(np.float32) - b), 0, 255).astype(
        np.uint8)


def _gray(img):
    return cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)[:, :, None].repeat(3, axis=2)


# ---------------------------------------------------------------- colour operations

def _equalize(img, level, rng):
    return np.stack([cv2.equalizeHist(np.ascontiguousarray(img[:, :, c])) for c in range(3)], 2)


def _autocontrast(img, level, rng):
    low = img.reshape(-1, 3).min(0).astype(np.float32)
    high = img.reshape(-1, 3).max(0).astype(np.float32)
    scale = np.where(high > low, 255. / np.maximum(high - low, 1), 1.)
    return np.clip((img - np.where(high > low, low, 0)) * scale, 0, 255).astype(np.uint8)


def _posterize(img, level, rng):
    bits = 8 - int(level / MAX_LEVEL * 4)       # level 10 keeps 4 bits a channel
    return img & np.uint8(256 - 2 ** (8 - bits))


def _solarize(img, level, rng):
    threshold = int(level / MAX_LEVEL * 256)
    return np.where(img < threshold, img, 255 - img).astype(np.uint8)


def _color(img, level, rng):
    return _blend(img, _gray(img), _factor(level))


def _contrast(img, level, rng):
    mean = np.full_like(img, int(round(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).mean())))
    return _blend(img, mean, _factor(level))


def _brightness(img, level, rng):
    return _blend(img, np.zeros_like(img), _factor(level))


def _sharpness(img, level, rng):
    kernel = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float32) / 13
    smooth = cv2.filter2D(img, -1, kernel, borderType=cv2.BORDER_REPLICATE)
    smooth[0, :], smooth[-1, :], smooth[:, 0], smooth[:, -1] = (img[0, :], img[-1, :],
                                                                img[:, 0], img[:, -1])
    return _blend(img, smooth, _factor(level))


def _cutout(img, level, rng, largest=100):
    out = img.copy()
    pad = int(level / MAX_LEVEL * largest)
    if pad:
        h, w = img.shape[:2]
        cy, cx = rng.randint(0, h), rng.randint(0, w)
        out[max(0, cy - pad):cy + pad, max(0, cx - pad):cx + pad] = FILL
    return out


COLOR_OPS = {'Equalize': _equalize, 'AutoContrast': _autocontrast, 'Posterize': _posterize,
             'Solarize': _solarize, 'Color': _color, 'Contrast': _contrast,
             'Brightness': _brightness, 'Sharpness': _sharpness, 'Cutout': _cutout}


# ---------------------------------------------------------------- geometric operations

def _rotate(level, rng, size):
    h, w = size
    return cv2.getRotationMatrix2D((w / 2., h / 2.), _signed(level, 30., rng), 1.0)


def _shear_x(level, rng, size):
    return np.array([[1, _signed(level, 0.3, rng), 0], [0, 1, 0]], np.float64)


def _shear_y(level, rng, size):
    return np.array([[1, 0, 0], [_signed(level, 0.3, rng), 1, 0]], np.float64)


def _translate_x(level, rng, size, largest=250.):
    return np.array([[1, 0, _signed(level, largest, rng)], [0, 1, 0]], np.float64)


def _translate_y(level, rng, size, largest=250.):
    return np.array([[1, 0, 0], [0, 1, _signed(level, largest, rng)]], np.float64)


GEOMETRIC_OPS = {'Rotate': _rotate, 'ShearX': _shear_x, 'ShearY': _shear_y,
                 'TranslateX': _translate_x, 'TranslateY': _translate_y}


def _warp(img, matrix, size=None):
    h, w = img.shape[:2] if size is None else size
    return cv2.warpAffine(img, matrix, (w, h), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=(FILL,) * 3)


def _move_boxes(label, matrix, size):
    """Boxes through the affine ``matrix``: the bounds of their moved corners, clipped;
    boxes left with no area are dropped."""
    if label is None or not len(label):
        return label
    h, w = size
    x1, y1, x2, y2 = (label[:, i] for i in range(4))
    corners = np.stack([np.stack([x1, y1], 1), np.stack([x2, y1], 1), np.stack([x1, y2], 1),
                        np.stack([x2, y2], 1)], 1)                              # N x 4 x 2
    moved = corners @ matrix[:, :2].T + matrix[:, 2]
    out = label.copy()
    out[:, 0] = np.clip(moved[..., 0].min(1), 0, w - 1)
    out[:, 1] = np.clip(moved[..., 1].min(1), 0, h - 1)
    out[:, 2] = np.clip(moved[..., 0].max(1), 0, w - 1)
    out[:, 3] = np.clip(moved[..., 1].max(1), 0, h - 1)
    return out[(out[:, 2] > out[:, 0]) & (out[:, 3] > out[:, 1])]


def _zoom(img, label, level, rng):
    """Image-level zoom: in (factor up to 1.5) or out (down to 0.5) about a random point,
    back to the original size."""
    h, w = img.shape[:2]
    factor = 1 + _signed(level, 0.5, rng)
    cx, cy = rng.uniform(0, w), rng.uniform(0, h)
    matrix = np.array([[factor, 0, cx * (1 - factor)], [0, factor, cy * (1 - factor)]])
    return _warp(img, matrix), _move_boxes(label, matrix, (h, w))


# ---------------------------------------------------------------- box-level operations

def _box_region_op(name):
    """The operation applied to the pixels of one box: a colour one, or a geometric one
    warping the box's crop within itself (translations up to 120 px, cutout up to 50 px)."""
    if name == 'Flip':
        return lambda crop, level, rng: np.ascontiguousarray(crop[:, ::-1])
    if name == 'Cutout':
        return lambda crop, level, rng: _cutout(crop, level, rng, largest=50)
    if name in COLOR_OPS:
        return COLOR_OPS[name]
    if name in GEOMETRIC_OPS:
        make = GEOMETRIC_OPS[name]

        def geometric(crop, level, rng):
            size = crop.shape[:2]
            if name.startswith('Translate'):
                matrix = make(level, rng, size, largest=120.)
            else:
                matrix = make(level, rng, size)
            return _warp(crop, matrix)
        return geometric
    raise ValueError('unknown box-level operation %r' % name)


def _gaussian_weight(h, w):
    """``h x w x 1`` weights, 1 at the centre, e^-2 at the box's edge midpoints."""
    ys = (np.arange(h) + 0.5 - h / 2.) / max(h / 2., 1)
    xs = (np.arange(w) + 0.5 - w / 2.) / max(w / 2., 1)
    return np.exp(-2 * (ys[:, None] ** 2 + xs[None, :] ** 2))[:, :, None]


def _in_boxes(img, label, name, probability, level, rng, attenuate):
    op = _box_region_op(name)
    out = img.copy()
    if label is None:
        return out
    for box in label:
        if rng.uniform() >= probability:
            continue
        x1, y1 = int(np.floor(box[0])), int(np.floor(box[1]))
        x2, y2 = int(np.ceil(box[2])) + 1, int(np.ceil(box[3])) + 1
        crop = out[y1:y2, x1:x2]
        if crop.shape[0] < 2 or crop.shape[1] < 2:
            continue
        changed = op(np.ascontiguousarray(crop), level, rng)
        if attenuate:
            weight = _gaussian_weight(*crop.shape[:2])
            changed = (weight * changed + (1 - weight) * crop).round().astype(np.uint8)
        out[y1:y2, x1:x2] = changed
    return out


# ---------------------------------------------------------------- the policy

def _check(name, probability, level):
    base = name[:-len('_Only_BBoxes')] if name.endswith('_Only_BBoxes') else None
    known = (name == 'Zoom' or name in COLOR_OPS
             or (name.endswith('_BBox') and name[:-len('_BBox')] in GEOMETRIC_OPS)
             or base in COLOR_OPS or base in GEOMETRIC_OPS or base == 'Flip')
    if not known:
        raise ValueError('unknown augmentation %r' % (name,))
    if not 0 <= level <= MAX_LEVEL or not 0 <= probability <= 1:
        raise ValueError('%s: level %r must be in [0, 10] and probability %r in [0, 1]'
                         % (name, level, probability))


def apply_operation(img, label, name, probability, level, rng=None, attenuate=False):
    """One operation of a sub-policy, applied with ``probability`` (box-level operations:
    each box with it). Returns ``(image, label)``; the label may lose boxes moved out."""
    rng = rng or np.random
    _check(name, probability, level)
    if name.endswith('_Only_BBoxes'):
        return _in_boxes(img, label, name[:-len('_Only_BBoxes')], probability, level, rng,
                         attenuate), label
    if rng.uniform() >= probability:
        return img, label
    if name == 'Zoom':
        return _zoom(img, label, level, rng)
    if name.endswith('_BBox') and name[:-len('_BBox')] in GEOMETRIC_OPS:
        matrix = GEOMETRIC_OPS[name[:-len('_BBox')]](level, rng, img.shape[:2])
        return _warp(img, matrix), _move_boxes(label, matrix, img.shape[:2])
    return COLOR_OPS[name](img, level, rng), label


class DetectionAutoAugment:
    """Apply one random sub-policy of ``policy`` to an image and its label.

    Parameters
    ----------
    policy : str or list
        A key of :data:`POLICIES` (``'v0'``, ``'scale_aware'``) or a list of sub-policies,
        each a list of ``(name, probability, level)``.
    rng : numpy.random.RandomState, optional
        Default: numpy's global RNG (seeded per sample by the engine).

    Call with ``(image, label)``: ``image`` ``H x W x 3`` uint8 (numpy or NDArray), ``label``
    ``N x 5+`` (boxes
    first, pixels); returns the augmented pair (same image size; boxes moved out are
    dropped).
    """

    def __init__(self, policy='v0', rng=None):
        if isinstance(policy, str):
            if policy not in POLICIES:
                raise ValueError('unknown auto-augment policy %r; known: %s'
                                 % (policy, ', '.join(POLICIES)))
            self.attenuate = policy == 'scale_aware'
            policy = POLICIES[policy]
        else:
            self.attenuate = False
        self.policy = [list(sub) for sub in policy]
        if not self.policy or not all(self.policy):
            raise ValueError('an auto-augment policy needs sub-policies of operations')
        for sub in self.policy:        # unknown names and levels fail here, not in a worker
            for name, probability, level in sub:
                _check(name, probability, level)
        self.rng = rng

    def __call__(self, image, label):
        rng = self.rng or np.random
        img = np.ascontiguousarray(_image(image), dtype=np.uint8)
        label = None if label is None else np.asarray(label, np.float32)
        for name, probability, level in self.policy[rng.randint(len(self.policy))]:
            img, label = apply_operation(img, label, name, probability, level, rng,
                                         self.attenuate)
        return img, label
