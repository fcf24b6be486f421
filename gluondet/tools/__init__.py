"""Tools around the detectors: visualization, dataset conversion, pruning."""
