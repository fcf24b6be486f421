"""Feature pyramid network (Lin et al. 2017, arXiv:1612.03144)."""
from mxnet import gluon, init
from mxnet.gluon import nn

__all__ = ['FPN']


class FPN(gluon.HybridBlock):
    """Top-down pyramid over backbone maps C2..C5: P2..P5, plus P6.

    Each ``C_i`` gets a 1x1 lateral convolution; from the top, the running map
    is upsampled x2 (nearest), cropped to the next lateral and added to it;
    every sum goes through a 3x3 output convolution. ``P6`` is a 3x3 stride-2
    convolution of C5's lateral output (GluonCV's Faster R-CNN; RetinaNet
    variants take it from C5 or P5 instead, see ``p6``).

    Parameters
    ----------
    channels : int
        Channels of every pyramid level.
    num_inputs : int
        Number of backbone maps (finest first).
    p6 : {'lateral', 'none'}
        Where P6 comes from.
    use_bias : bool
        Convolutions with bias (True when no normalization follows).

    Input: the backbone maps, finest first. Output: the list ``[P2, ..., P5(, P6)]``.
    """

    def __init__(self, channels=256, num_inputs=4, p6='lateral', use_bias=True, **kwargs):
        super().__init__(**kwargs)
        if p6 not in ('lateral', 'none'):
            raise ValueError("FPN p6 must be 'lateral' or 'none', got %r" % (p6,))
        weight = init.Xavier(rnd_type='uniform', factor_type='in', magnitude=1.)
        conv = dict(use_bias=use_bias, weight_initializer=weight)
        with self.name_scope():
            self.laterals = nn.HybridSequential()
            self.outputs = nn.HybridSequential()
            for _ in range(num_inputs):
                self.laterals.add(nn.Conv2D(channels, 1, **conv))
                self.outputs.add(nn.Conv2D(channels, 3, 1, 1, **conv))
            self.p6 = nn.Conv2D(channels, 3, 2, 1, **conv) if p6 == 'lateral' else None

    def hybrid_forward(self, F, *maps):
        top = self.laterals[-1](maps[-1])
        results = [self.outputs[-1](top)]
        extra = [] if self.p6 is None else [self.p6(top)]
        running = top
        for i in range(len(maps) - 2, -1, -1):
            lateral = self.laterals[i](maps[i])
            upsampled = F.UpSampling(running, scale=2, sample_type='nearest')
            running = lateral + F.slice_like(upsampled, lateral, axes=(2, 3))
            results.insert(0, self.outputs[i](running))
        return results + extra
