"""Detection x ground-truth pairs of the same image (and class), built with array operations."""
import numpy as np

from ..chunking import chunked

PAIR_CHUNK = 1 << 22  # pairs built at once, to bound memory


def pairs(start, count):
    """Row and column of every pair, row by row.

    Row ``i`` is paired with columns ``start[i] ... start[i] + count[i] - 1``.

    Returns
    -------
    rows, cols, seg : numpy.ndarray
        Row and column of each pair, and where each row's pairs begin.
    """
    seg = np.cumsum(count) - count
    rows = np.repeat(np.arange(len(count)), count)
    cols = np.repeat(start - seg, count) + np.arange(int(np.sum(count)))
    return rows, cols, seg


def chunks(count, limit=None):
    """Split ``range(len(count))`` into ``(lo, hi)`` runs of about ``limit`` pairs each
    (default :data:`PAIR_CHUNK`)."""
    return chunked(count, PAIR_CHUNK if limit is None else limit)
