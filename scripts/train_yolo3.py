#!/usr/bin/env python
"""Train YOLOv3, as ``gluondet train yolo3``: GluonCV's train_yolo3.py command lines
(`gluondet.train.yolo3`; ``--help`` lists the flags)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from gluondet.errors import run_main  # noqa: E402
from gluondet.train.yolo3 import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(run_main(main))
