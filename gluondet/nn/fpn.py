"""Feature pyramid network (Lin et al. 2017, arXiv:1612.03144)."""
from mxnet import gluon, init
from mxnet.gluon import nn

__all__ = ['FPN']


class FPN(gluon.HybridBlock):
    """Top-down pyramid over backbone maps (C2..C5 or C3..C5), plus coarser levels.

    Each ``C_i`` gets a 1x1 lateral convolution; from the top, the running map
    is upsampled x2 (nearest), cropped to the next lateral and added to it;
    every sum goes through a 3x3 output convolution. The next level is a 3x3
    stride-2 convolution of: C5's lateral output (``p6='lateral'``, GluonCV's
    Faster R-CNN), C5 itself (``'c5'``, RetinaNet as ODTK and the paper), or the
    top output (``'p5'``, as FCOS). ``p7`` adds a 3x3 stride-2 convolution of
    ``relu(P6)`` (RetinaNet).

    Parameters
    ----------
    channels : int
        Channels of every pyramid level.
    num_inputs : int
        Number of backbone maps (finest first).
    p6 : {'lateral', 'c5', 'p5', 'none'}
        Where the level after the top comes from.
    p7 : bool
        Add the level after that (needs ``p6``).
    use_bias : bool
        Convolutions with bias (True when no normalization follows).
    norm_layer : type or None
        A norm layer after every convolution, built as ``norm_layer(**norm_kwargs)``
        (GluonCV's ``faster_rcnn_fpn_syncbn_*``: SyncBatchNorm, no bias); the top lateral is
        normalized before it feeds P6 and the top-down path. None: no normalization.
    norm_kwargs : dict or None

    Input: the backbone maps, finest first. Output: the list of levels, finest first
    (``[P2, ..., P5, P6]`` for GluonCV's Faster R-CNN, ``[P3, ..., P7]`` for RetinaNet).
    """

    def __init__(self, channels=256, num_inputs=4, p6='lateral', p7=False, use_bias=True,
                 norm_layer=None, norm_kwargs=None, **kwargs):
        super().__init__(**kwargs)
        if p6 not in ('lateral', 'c5', 'p5', 'none'):
            raise ValueError("FPN p6 must be 'lateral', 'c5', 'p5' or 'none', got %r" % (p6,))
        if p7 and p6 == 'none':
            raise ValueError('FPN p7 needs a p6')
        self._p6_from = p6
        weight = init.Xavier(rnd_type='uniform', factor_type='in', magnitude=1.)
        conv = dict(use_bias=use_bias, weight_initializer=weight)
        with self.name_scope():
            self.laterals = nn.HybridSequential()
            self.outputs = nn.HybridSequential()
            for _ in range(num_inputs):
                self.laterals.add(nn.Conv2D(channels, 1, **conv))
                self.outputs.add(nn.Conv2D(channels, 3, 1, 1, **conv))
            self.p6 = nn.Conv2D(channels, 3, 2, 1, **conv) if p6 != 'none' else None
            self.p7 = nn.Conv2D(channels, 3, 2, 1, **conv) if p7 else None
            self.lateral_norms = self.output_norms = self.p6_norm = self.p7_norm = None
            if norm_layer is not None:
                def norm():
                    return norm_layer(**dict(norm_kwargs or {}))
                self.lateral_norms = nn.HybridSequential()
                self.output_norms = nn.HybridSequential()
                for _ in range(num_inputs):
                    self.lateral_norms.add(norm())
                    self.output_norms.add(norm())
                self.p6_norm = norm() if self.p6 is not None else None
                self.p7_norm = norm() if p7 else None

    @staticmethod
    def _conv(conv, norm, x):
        """``conv`` then, if any, its norm layer."""
        x = conv(x)
        return x if norm is None else norm(x)

    def _level(self, convs, norms, i, x):
        return self._conv(convs[i], None if norms is None else norms[i], x)

    def hybrid_forward(self, F, *maps):
        last = len(maps) - 1
        top = self._level(self.laterals, self.lateral_norms, last, maps[-1])
        results = [self._level(self.outputs, self.output_norms, last, top)]
        extra = []
        if self.p6 is not None:
            source = {'lateral': top, 'c5': maps[-1], 'p5': results[0]}[self._p6_from]
            extra.append(self._conv(self.p6, self.p6_norm, source))
        if self.p7 is not None:
            extra.append(self._conv(self.p7, self.p7_norm, F.relu(extra[0])))
        running = top
        for i in range(last - 1, -1, -1):
            lateral = self._level(self.laterals, self.lateral_norms, i, maps[i])
            upsampled = F.UpSampling(running, scale=2, sample_type='nearest')
            running = lateral + F.slice_like(upsampled, lateral, axes=(2, 3))
            results.insert(0, self._level(self.outputs, self.output_norms, i, running))
        return results + extra
