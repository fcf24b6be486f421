#!/usr/bin/env python
"""Train RetinaNet, as ``gluondet train retinanet``: ODTK's and TAO's flags over gluondet's
(`gluondet.train.retinanet`; ``--help`` lists the flags)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from gluondet.errors import run_main  # noqa: E402
from gluondet.train.retinanet import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(run_main(main))
