"""Tasks bind a detector to the engine: network, transforms, batchify, losses, validation."""
from .ssd import SSDTask

__all__ = ['SSDTask']
