"""Make tests/data/odtk/ (see tests/odtk_reference.py) with torch and ODTK's own code.

Run in an environment with torch, torchvision, pillow and pycocotools (``make
bench-torch-venv``, then ``pip install pycocotools``), given ODTK's source tree (the
``odtk`` folder of NVIDIA/retinanet-examples, v0.2.6)::

    .venv-torch/bin/python tests/make_odtk_fixture.py --odtk-src /tmp/odtk_src \\
        --bccd /work/shared/datasets/bccd/BCCD

ODTK's network is built by its ``Model`` (batch norms frozen by its
``convert_fixedbn_model`` as its ``train`` does), takes :func:`fixture_weight`, and is
saved by its ``Model.save``. Its detections: the images through its ``CocoDataset``
(resize, normalization, padding), its forward pass (``exporting``: the sigmoid scores and
box maps), its ``generate_anchors``, the decoding of its CUDA kernel ``decode.cu`` (its
Python ``decode`` indexes with ``/`` divisions that torch >= 1.5 makes float) and its
Python ``nms``.
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import types
import zipfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from odtk_reference import (BACKBONE, CLASSES, FIXTURE, IMAGES, MAX_SIZE, RESIZE,  # noqa: E402
                            fixture_weight, odtk_input)


def import_odtk(src):
    """ODTK's package without its CUDA extension, on a torchvision without ``model_urls``."""
    sys.modules.setdefault('requests', types.ModuleType('requests'))   # odtk.utils' metrics
    sys.modules['odtk._C'] = types.ModuleType('odtk._C')
    for name in ('Engine', 'decode', 'iou', 'nms'):
        setattr(sys.modules['odtk._C'], name, None)
    from torchvision.models import mobilenet, resnet
    for module in (resnet, mobilenet):
        if not hasattr(module, 'model_urls'):
            module.model_urls = {k: None for k in (
                'resnet18', 'resnet34', 'resnet50', 'resnet101', 'resnet152',
                'resnext50_32x4d', 'resnext101_32x8d', 'mobilenet_v2')}
    sys.path.insert(0, src)
    from odtk import box, model                 # pylint: disable=import-outside-toplevel
    from odtk.backbones.layers import convert_fixedbn_model
    from odtk.data import CocoDataset
    return model.Model, convert_fixedbn_model, CocoDataset, box


def decode_level(scores, deltas, stride, anchors, threshold=0.05, top_n=1000):
    """decode.cu for one image and level: scores ``(A*C, H, W)``, deltas ``(A*4, H, W)``."""
    channels, height, width = scores.shape
    num_anchors = anchors.shape[0]
    num_classes = channels // num_anchors
    flat = scores.reshape(-1)
    keep = torch.nonzero(flat > threshold).view(-1)
    if keep.numel() > top_n:
        keep = keep[torch.argsort(flat[keep], descending=True, stable=True)[:top_n]]
    x = keep % width
    y = (keep // width) % height
    a = (keep // num_classes // height // width) % num_anchors
    cls = (keep // height // width) % num_classes
    d = deltas.view(num_anchors, 4, height, width)[a, :, y, x]
    corner = anchors[a] + torch.stack([x, y, x, y], 1).float() * stride
    w = corner[:, 2] - corner[:, 0] + 1
    h = corner[:, 3] - corner[:, 1] + 1
    cx = d[:, 0] * w + corner[:, 0] + 0.5 * w
    cy = d[:, 1] * h + corner[:, 1] + 0.5 * h
    pw, ph = torch.exp(d[:, 2]) * w, torch.exp(d[:, 3]) * h
    boxes = torch.stack([torch.clamp(cx - 0.5 * pw, min=0), torch.clamp(cy - 0.5 * ph, min=0),
                         torch.clamp(cx + 0.5 * pw - 1, max=width * stride - 1),
                         torch.clamp(cy + 0.5 * ph - 1, max=height * stride - 1)], 1)
    return flat[keep], boxes, cls.float()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--odtk-src', required=True, help='folder holding the odtk package')
    parser.add_argument('--bccd', required=True, help='BCCD folder (JPEGImages/)')
    parser.add_argument('--output', default=FIXTURE)
    args = parser.parse_args()
    Model, convert_fixedbn_model, CocoDataset, box = import_odtk(args.odtk_src)
    os.makedirs(args.output, exist_ok=True)

    model = convert_fixedbn_model(Model(backbones=BACKBONE, classes=CLASSES))
    state = model.state_dict()
    model.load_state_dict({k: torch.from_numpy(fixture_weight(k, v.shape))
                           for k, v in state.items()})
    work = tempfile.mkdtemp()
    path = os.path.join(work, 'odtk_r18.pth')
    model.save({'path': path})
    write_skeleton(path, model.state_dict(), args.output)

    coco = {'images': [{'id': i, 'file_name': f, 'width': 640, 'height': 480}
                       for i, f in enumerate(IMAGES)],
            'annotations': [], 'categories': [{'id': c + 1, 'name': 'c%d' % c}
                                              for c in range(CLASSES)]}
    json_path = os.path.join(work, 'images.json')
    with open(json_path, 'w') as f:
        json.dump(coco, f)
    dataset = CocoDataset(os.path.join(args.bccd, 'JPEGImages'), RESIZE, MAX_SIZE,
                          model.stride, json_path)
    model.eval()
    model.exporting = True
    expected = {}
    for i in range(len(IMAGES)):
        data, _, ratio = dataset[i]
        image = resized(os.path.join(args.bccd, 'JPEGImages', IMAGES[i]))
        if not np.array_equal(odtk_input(image), data.numpy()):
            raise AssertionError('odtk_input differs from ODTK\'s CocoDataset')
        expected['image%d' % i] = image
        with torch.no_grad():
            cls_heads, box_heads = model(data[None])
        levels = []
        for cls_head, box_head in zip(cls_heads, box_heads):
            stride = data.shape[-1] // cls_head.shape[-1]
            anchors = box.generate_anchors(stride, model.ratios, model.scales)
            levels.append(decode_level(cls_head[0], box_head[0], stride, anchors))
        scores, boxes, classes = (torch.cat(t)[None] for t in zip(*levels))
        scores, boxes, classes = box.nms(scores, boxes, classes, model.nms, model.detections)
        kept = scores[0] > 0
        expected['scores%d' % i] = scores[0][kept].numpy()
        expected['boxes%d' % i] = boxes[0][kept].numpy()
        expected['classes%d' % i] = classes[0][kept].numpy()
        print('%s: ratio %.4f, input %s, %d detections (%d candidates)' % (
            IMAGES[i], ratio, tuple(data.shape), int(kept.sum()), levels_total(levels)))
    np.savez_compressed(os.path.join(args.output, 'expected.npz'), **expected)


def resized(path):
    """The photo as ODTK's CocoDataset resizes it (PIL, bilinear), uint8 H x W x 3."""
    from PIL import Image                       # pylint: disable=import-outside-toplevel
    image = Image.open(path).convert('RGB')
    ratio = RESIZE / min(image.size)
    if ratio * max(image.size) > MAX_SIZE:
        ratio = MAX_SIZE / max(image.size)
    return np.asarray(image.resize([int(ratio * d) for d in image.size], Image.BILINEAR))


def levels_total(levels):
    return sum(int(level[0].numel()) for level in levels)


def write_skeleton(path, state_dict, output):
    """skeleton.zip (the checkpoint's entries but the storages) and manifest.json."""
    manifest = {'entries': [], 'storages': {}, 'sha256': None}
    with open(path, 'rb') as f:
        manifest['sha256'] = hashlib.sha256(f.read()).hexdigest()
    with zipfile.ZipFile(path) as archive, \
            zipfile.ZipFile(os.path.join(output, 'skeleton.zip'), 'w',
                            zipfile.ZIP_DEFLATED) as skeleton:
        pickled = [n for n in archive.namelist() if n.endswith('/data.pkl')][0]
        prefix = pickled[:-len('data.pkl')]
        names = storage_names(archive, prefix, state_dict)
        for entry in archive.namelist():
            manifest['entries'].append(entry)
            if entry.startswith(prefix + 'data/'):
                name = names[entry[len(prefix + 'data/'):]]
                data = archive.read(entry)
                manifest['storages'][entry] = {
                    'name': name, 'shape': list(state_dict[name].shape),
                    'sha256': hashlib.sha256(data).hexdigest()}
            else:
                skeleton.writestr(entry, archive.read(entry))
    with open(os.path.join(output, 'manifest.json'), 'w') as f:
        json.dump(manifest, f, indent=1)


def storage_names(archive, prefix, state_dict):
    """``{storage key: state-dict name}``, by matching each storage's bytes to a tensor."""
    by_bytes = {state_dict[n].numpy().tobytes(): n for n in state_dict}
    names = {}
    for entry in archive.namelist():
        if entry.startswith(prefix + 'data/'):
            names[entry[len(prefix + 'data/'):]] = by_bytes[archive.read(entry)]
    return names


if __name__ == '__main__':
    main()
