"""Small helpers the data tests share: write files, make encoded images, class lists."""
import os

import cv2
import numpy as np

BCCD_CLASSES = ('RBC', 'WBC', 'Platelets')
CARD_CLASSES = ('nine', 'ten', 'jack', 'queen', 'king', 'ace')


def write(path, data):
    """Write bytes or text to ``path`` (folders created); return the path as str."""
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return str(path)


def jpeg(width=64, height=48):
    """A flat grey JPEG, encoded."""
    ok, data = cv2.imencode('.jpg', np.full((height, width, 3), 90, np.uint8))
    assert ok
    return data.tobytes()
