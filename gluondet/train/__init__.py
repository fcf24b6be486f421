"""The training commands: a module per detector (``build_parser``, ``main``, ``DEMO``; the
rows of `gluondet.detectors` name them) over the shared flags (`flags`), their config
(`config`) and what every command does around the engine (`common`). ``scripts/train_*.py``
and ``gluondet train DETECTOR`` run them."""
