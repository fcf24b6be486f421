"""Splitting work over groups of sizes into slices of a bounded total, to bound memory."""
import numpy as np

__all__ = ['chunked']


def chunked(sizes, limit):
    """``(lo, hi)`` slices of ``range(len(sizes))`` whose ``sizes`` add up to about ``limit``
    each (at least one group a slice)."""
    ends = np.cumsum(sizes)
    lo = 0
    while lo < len(sizes):
        base = ends[lo - 1] if lo else 0
        hi = max(int(np.searchsorted(ends, base + limit, side='right')), lo + 1)
        yield lo, hi
        lo = hi
