"""Restore the numpy aliases that mxnet 1.9.1 looks up at import (mxnet#21165).

numpy 1.24 removed ``np.bool``; mxnet reads it when it is imported. The pinned
numpy (1.23.5) still has it, so this only matters when a user runs a newer 1.x.
"""
import numpy as np

if 'bool' not in np.__dict__:
    np.bool = bool
