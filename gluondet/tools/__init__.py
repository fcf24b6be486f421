"""Tools around the detectors: visualization, dataset conversion, pruning, experiment specs
(gluondet's and NVIDIA TAO's)."""
