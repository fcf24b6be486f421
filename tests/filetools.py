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


def tensorboard_events(logdir):
    """Every TensorBoard ``Event`` in the event files of ``logdir`` (TFRecord framing)."""
    import struct
    from tensorboardX.proto import event_pb2
    for name in sorted(os.listdir(logdir)):
        with open(os.path.join(logdir, name), 'rb') as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            (size,) = struct.unpack('<Q', data[pos:pos + 8])
            event = event_pb2.Event()
            event.ParseFromString(data[pos + 12:pos + 12 + size])
            yield event
            pos += 12 + size + 4
