"""Center-size box coding: boxes <-> regression targets relative to anchors."""
from mxnet import gluon

__all__ = ['corner_to_center', 'center_to_corner', 'BoxCenterEncoder', 'BoxCenterDecoder']


def corner_to_center(F, boxes):
    """``(xmin, ymin, xmax, ymax)`` -> ``(center_x, center_y, width, height)`` on the last axis."""
    xmin, ymin, xmax, ymax = F.split(boxes, axis=-1, num_outputs=4)
    width = xmax - xmin
    height = ymax - ymin
    return F.concat(xmin + width * 0.5, ymin + height * 0.5, width, height, dim=-1)


def center_to_corner(F, boxes):
    """``(center_x, center_y, width, height)`` -> ``(xmin, ymin, xmax, ymax)`` on the last axis."""
    x, y, width, height = F.split(boxes, axis=-1, num_outputs=4)
    half_w = width * 0.5
    half_h = height * 0.5
    return F.concat(x - half_w, y - half_h, x + half_w, y + half_h, dim=-1)


class BoxCenterEncoder(gluon.HybridBlock):
    """Encode boxes as offsets from anchors, normalized by ``stds``.

    ``t = ((gx - ax) / aw, (gy - ay) / ah, log(gw / aw), log(gh / ah)) / stds``
    (SSD's "center-size" coding, means 0).

    Parameters
    ----------
    stds : 4 floats
        Divisors of the four offsets (SSD: 0.1, 0.1, 0.2, 0.2).

    Inputs: ``boxes`` ``B x N x 4`` and ``anchors`` broadcastable to it (for
    example ``1 x N x 4``), both in corner format. Output: ``B x N x 4``.
    Degenerate boxes give non-finite offsets: mask them out.
    """

    def __init__(self, stds=(0.1, 0.1, 0.2, 0.2), **kwargs):
        super().__init__(**kwargs)
        if len(stds) != 4:
            raise ValueError('BoxCenterEncoder needs 4 stds, got %r' % (stds,))
        self._stds = tuple(float(s) for s in stds)

    def hybrid_forward(self, F, boxes, anchors):
        gx, gy, gw, gh = F.split(corner_to_center(F, boxes), axis=-1, num_outputs=4)
        ax, ay, aw, ah = F.split(corner_to_center(F, anchors), axis=-1, num_outputs=4)
        sx, sy, sw, sh = self._stds
        tx = F.broadcast_div(F.broadcast_sub(gx, ax), aw) / sx
        ty = F.broadcast_div(F.broadcast_sub(gy, ay), ah) / sy
        tw = F.log(F.broadcast_div(gw, aw)) / sw
        th = F.log(F.broadcast_div(gh, ah)) / sh
        return F.concat(tx, ty, tw, th, dim=-1)


class BoxCenterDecoder(gluon.HybridBlock):
    """Invert :class:`BoxCenterEncoder`: offsets + anchors -> corner boxes.

    Parameters
    ----------
    stds : 4 floats
        The same ``stds`` as the encoder.
    clip : float or None
        Largest log-size offset (after ``stds``), against overflow; None: no limit.
    anchor_format : {'center', 'corner'}
        How the anchors are given.

    Inputs: ``deltas`` ``B x N x 4`` and ``anchors`` ``1 x N x 4`` or ``B x N x 4``.
    Output: ``B x N x 4`` boxes ``(xmin, ymin, xmax, ymax)``.
    """

    def __init__(self, stds=(0.1, 0.1, 0.2, 0.2), clip=None, anchor_format='center', **kwargs):
        super().__init__(**kwargs)
        if len(stds) != 4:
            raise ValueError('BoxCenterDecoder needs 4 stds, got %r' % (stds,))
        if anchor_format not in ('center', 'corner'):
            raise ValueError("anchor_format must be 'center' or 'corner', got %r"
                             % (anchor_format,))
        self._stds = tuple(float(s) for s in stds)
        self.clip = clip
        self.anchor_format = anchor_format

    @property
    def stds(self):
        """The 4 divisors of the offsets."""
        return self._stds

    def hybrid_forward(self, F, deltas, anchors):
        sx, sy, sw, sh = self._stds
        return F.contrib.box_decode(deltas, anchors, sx, sy, sw, sh,
                                    clip=-1 if self.clip is None else self.clip,
                                    format=self.anchor_format)
