#!/usr/bin/env python
"""Train SSD, as ``gluondet train ssd``: GluonCV's train_ssd.py command lines
(`gluondet.train.ssd`; ``--help`` lists the flags)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from gluondet.errors import run_main  # noqa: E402
from gluondet.train.ssd import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(run_main(main))
