"""Tools around the detectors: dataset conversion, pruning, experiment specs (gluondet's and
NVIDIA TAO's)."""
