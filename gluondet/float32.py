"""Layers that stay float32 under bfloat16 mixed precision.

MXNet's AMP chooses an operator's precision from the operator and its arguments, not from
the layer. A convolution marked by `keep_float32` carries a workspace of
``FLOAT32_WORKSPACE`` MB (one more than MXNet's default: CPUs ignore it, a GPU gets
1 MB more scratch space), and ``gluondet.engine.precision`` tells AMP to run
convolutions with that workspace in float32 (`float32_conditions`).

Why: oneDNN's bfloat16 convolution gives non-finite weight gradients now and then (in about
half of the runs, with two OpenMP threads) on SSD's extra layers at the end of the
network, whose maps are 1x1 to 3x3 with a few samples per batch; float32 there costs
nothing measurable.
"""
from mxnet.gluon import nn

FLOAT32_WORKSPACE = 1025


def keep_float32(block):
    """Mark every convolution in ``block`` to run in float32 under bfloat16 AMP; returns
    ``block``."""
    for child in _walk(block):
        if isinstance(child, nn.Conv2D):
            child._kwargs['workspace'] = FLOAT32_WORKSPACE
    return block


def float32_conditions():
    """AMP's ``conditional_fp32_ops`` entry for the convolutions `keep_float32` marked."""
    return [('Convolution', 'workspace', [FLOAT32_WORKSPACE])]


def _walk(block):
    yield block
    for child in block._children.values():
        yield from _walk(child)
