"""The version of gluondet (``gluondet.__version__``; setup.py reads it here)."""
__version__ = '0.1.0'
