#!/usr/bin/env python
"""Train Mask R-CNN, as ``gluondet train mask_rcnn``: GluonCV's train_mask_rcnn.py
command lines (`gluondet.train.mask_rcnn`; ``--help`` lists the flags)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from gluondet.errors import run_main  # noqa: E402
from gluondet.train.mask_rcnn import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(run_main(main))
