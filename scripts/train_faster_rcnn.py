#!/usr/bin/env python
"""Train Faster R-CNN, as ``gluondet train faster_rcnn``: GluonCV's train_faster_rcnn.py
command lines (`gluondet.train.faster_rcnn`; ``--help`` lists the flags)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from gluondet.errors import run_main  # noqa: E402
from gluondet.train.faster_rcnn import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(run_main(main))
