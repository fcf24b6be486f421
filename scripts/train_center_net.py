#!/usr/bin/env python
"""Train CenterNet, as ``gluondet train center_net``: GluonCV's train_center_net.py command
lines (`gluondet.train.center_net`; ``--help`` lists the flags)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from gluondet.errors import run_main  # noqa: E402
from gluondet.train.center_net import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(run_main(main))
