"""Seeded fuzzing of the three annotation readers: a mutated file loads (what is left out
counted in ``dataset.report``) or raises DatasetError naming it, never any other exception.

Each format starts from a small valid dataset (two 64 x 48 images) whose annotation files,
split list and images are mutated: values of the wrong type (list, dict, string, null,
bool), missing fields, NaN and infinities, huge and negative numbers, truncation and
garbage bytes. A case that fails is named by its format, seed and mutation, so it can be
rerun alone with ``run_case``.
"""
import json
import logging
import math
import os
import random
import shutil

import numpy as np
import pytest

from gluondet.data import COCODetection, DatasetError, KITTIDetection, VOCDetection

from filetools import jpeg, write

CASES = 400     # per format; each is read in both on_error modes

EVIL_VALUES = [None, True, False, [], [1, 2], {}, {'x': 1}, '', 'abc', '12', -1, 0, -1e9,
               1e308, 10 ** 30, 10 ** 400, float('nan'), float('inf'), float('-inf'), 0.5,
               [[1, 2, 3, 4]], [1, 2, 3, float('nan')]]
EVIL_TEXT = ['', 'nan', 'NaN', 'inf', '-inf', '1e309', '-1e309', 'abc', '-5', '0', '1e20',
             '9' * 5000, '3.5.1', '  ', '\x00', '12abc', '-0', '<', '&amp;', '1' * 40]
GARBAGE = [b'\xff\xfe\x00', b'\x00' * 8, b'\xc3\x28', b'<<<', b'}{', b'\x89PNG', b'"', b'\n\n']


# -- the valid datasets ---------------------------------------------------------------

def coco_files():
    images = [{'id': 1, 'file_name': 'a.jpg', 'width': 64, 'height': 48},
              {'id': 2, 'file_name': 'b.jpg', 'width': 64, 'height': 48}]
    annotations = [{'id': 1, 'image_id': 1, 'category_id': 1, 'bbox': [2, 3, 20, 15],
                    'area': 300, 'iscrowd': 0},
                   {'id': 2, 'image_id': 1, 'category_id': 2, 'bbox': [30, 10, 25, 30],
                    'area': 750, 'iscrowd': 0},
                   {'id': 3, 'image_id': 2, 'category_id': 1, 'bbox': [5, 5, 10, 10],
                    'area': 100, 'iscrowd': 0}]
    data = {'images': images, 'annotations': annotations,
            'categories': [{'id': 1, 'name': 'cat'}, {'id': 2, 'name': 'dog'}]}
    return {'ann.json': data, 'images/a.jpg': jpeg(), 'images/b.jpg': jpeg()}


VOC_XML = """<annotation>
  <filename>{name}.jpg</filename>
  <size><width>64</width><height>48</height><depth>3</depth></size>
  <object><name>cat</name><difficult>0</difficult>
    <bndbox><xmin>3</xmin><ymin>4</ymin><xmax>22</xmax><ymax>18</ymax></bndbox></object>
  <object><name>dog</name><difficult>1</difficult>
    <bndbox><xmin>31</xmin><ymin>11</ymin><xmax>55</xmax><ymax>40</ymax></bndbox></object>
</annotation>
"""


def voc_files():
    files = {'ImageSets/Main/train.txt': 'a\nb\n'}
    for name in 'ab':
        files['Annotations/%s.xml' % name] = VOC_XML.format(name=name)
        files['JPEGImages/%s.jpg' % name] = jpeg()
    return files


def kitti_files():
    line = '%s 0.00 0 -1.57 %s 1.5 1.6 3.9 1.0 1.5 20.0 -1.5\n'
    return {'image_2/000000.jpg': jpeg(), 'image_2/000001.jpg': jpeg(),
            'label_2/000000.txt': line % ('Car', '2.00 3.00 21.50 17.00') +
            line % ('Pedestrian', '30.00 10.00 54.00 39.00'),
            'label_2/000001.txt': line % ('DontCare', '1 1 5 5') +
            line % ('Cyclist', '5 5 14.5 14.5')}


def load_coco(folder, on_error):
    return COCODetection(annotation_file=os.path.join(folder, 'ann.json'),
                         image_root=os.path.join(folder, 'images'), skip_empty=False,
                         on_error=on_error)


def load_voc(folder, on_error):
    return VOCDetection(folder, splits=('train',), classes=('cat', 'dog'), on_error=on_error)


def load_kitti(folder, on_error):
    return KITTIDetection(folder, on_error=on_error)


FORMATS = {'coco': (coco_files, load_coco, 'ann.json'),
           'voc': (voc_files, load_voc, 'Annotations/'),
           'kitti': (kitti_files, load_kitti, 'label_2/')}


# -- mutations ------------------------------------------------------------------------

def json_slots(value, path=()):
    """Every ``(container, key, path)`` in a json tree."""
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, child in items:
        yield value, key, path + (key,)
        yield from json_slots(child, path + (key,))


def mutate_json(rng, data):
    """Replace, delete or retype one value of the tree; return a description."""
    slots = list(json_slots(data))
    container, key, path = rng.choice(slots)
    action = rng.choice(['replace', 'replace', 'replace', 'delete'])
    if action == 'delete' and isinstance(container, dict):
        del container[key]
    else:
        container[key] = rng.choice(EVIL_VALUES)
    return '%s %s' % (action, '/'.join(map(str, path)))


def mutate_text(rng, text):
    """Replace one token (number, word or tag text) of a text file; return ``(text, what)``."""
    tokens = text.split(' ')
    i = rng.randrange(len(tokens))
    evil = rng.choice(EVIL_TEXT)
    if '>' in tokens[i] and '<' in tokens[i]:   # xml: replace an element's text
        start, end = tokens[i].find('>') + 1, tokens[i].rfind('<')
        if start <= end:
            tokens[i] = tokens[i][:start] + evil + tokens[i][end:]
            return ' '.join(tokens), 'text %d = %r' % (i, evil[:20])
    choice = rng.random()
    if choice < 0.2:
        del tokens[i]
        return ' '.join(tokens), 'delete token %d' % i
    if choice < 0.3:
        tokens.insert(i, evil)
        return ' '.join(tokens), 'insert %r at %d' % (evil[:20], i)
    tokens[i] = evil
    return ' '.join(tokens), 'token %d = %r' % (i, evil[:20])


def mutate_bytes(rng, data):
    """Truncate the file or splice garbage into it; return ``(bytes, what)``."""
    cut = rng.randrange(len(data) + 1)
    if rng.random() < 0.5:
        return data[:cut], 'truncate at %d' % cut
    junk = rng.choice(GARBAGE + [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 30)))])
    return data[:cut] + junk + data[cut + rng.randrange(3):], 'garbage at %d' % cut


def mutated(fmt, seed):
    """The files of case ``seed`` of ``fmt`` and what was done to them."""
    rng = random.Random('%s-%d' % (fmt, seed))
    files = FORMATS[fmt][0]()
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        name = rng.choice(sorted(n for n, v in files.items() if v is not None))
        value = files[name]
        if isinstance(value, dict):         # the parsed json: a value, or later its text
            if rng.random() < 0.7:
                done.append('%s: %s' % (name, mutate_json(rng, value)))
                continue
            value = json.dumps(value, allow_nan=True)
        raw = value.encode() if isinstance(value, str) else value
        if isinstance(value, str) and rng.random() < 0.7:
            files[name], what = mutate_text(rng, value)
        elif name.endswith('.jpg') and rng.random() < 0.3:
            files[name], what = None, 'delete'
        else:
            files[name], what = mutate_bytes(rng, raw)
        done.append('%s: %s' % (name, what))
    return files, '; '.join(done)


def write_files(folder, files):
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    for name, value in files.items():
        if value is None:
            continue
        if isinstance(value, dict):
            value = json.dumps(value, allow_nan=True)
        write(os.path.join(folder, name), value)
    os.makedirs(folder, exist_ok=True)


# -- checks ---------------------------------------------------------------------------

def check_loaded(ds):
    """A dataset that loaded is consistent: counts, finite labels inside the images.

    Returns the DatasetError an item raised when it was loaded, if any.
    """
    assert ds.report.images == len(ds) > 0
    assert ds.report.boxes == sum(len(ds.label(i)) for i in range(len(ds)))
    for i in range(len(ds)):
        try:
            image, label = ds[i]
        except DatasetError as error:   # an image that fails to decode (in 'skip' mode: all)
            return error
        assert label.dtype == np.float32 and label.ndim == 2 and label.shape[1] == 6
        assert np.isfinite(label).all()
        width, height = ds.image_size(i)
        assert image.shape[:2] == (height, width)
        boxes = label[:, :4]
        assert (boxes >= 0).all() and (boxes[:, [0, 2]] <= width - 1).all()
        assert (boxes[:, [1, 3]] <= height - 1).all()
        assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()


def run_case(fmt, seed, folder):
    """Build case ``seed`` in ``folder`` and read it both ways; return a failure or None."""
    files, what = mutated(fmt, seed)
    write_files(folder, files)
    for on_error in ('skip', 'raise'):
        try:
            ds = FORMATS[fmt][1](folder, on_error)
        except DatasetError as error:
            late = error
        except Exception as error:  # noqa: BLE001 - what the fuzzing looks for
            return '%s %d (%s, %s): %s: %s' % (fmt, seed, on_error, what,
                                               type(error).__name__, error)
        else:
            try:
                late = check_loaded(ds)
            except Exception as error:  # noqa: BLE001
                return '%s %d (%s, %s): loaded but %s: %s' % (fmt, seed, on_error, what,
                                                              type(error).__name__, error)
        if late is not None and folder not in str(late):
            return '%s %d (%s, %s): DatasetError not naming a file: %s' % (
                fmt, seed, on_error, what, late)
    return None


@pytest.mark.parametrize('fmt', sorted(FORMATS))
def test_mutated_files_load_or_raise_dataset_error(fmt, tmp_path, caplog):
    caplog.set_level(logging.CRITICAL, logger='gluondet.data')
    folder = str(tmp_path / 'case')
    failures = [f for f in (run_case(fmt, seed, folder) for seed in range(CASES)) if f]
    assert not failures, '%d of %d cases failed:\n%s' % (len(failures), CASES,
                                                          '\n'.join(failures[:10]))


def test_the_mutations_reach_both_outcomes(tmp_path, caplog):
    """The fuzzing is not vacuous: per format some cases load and some raise."""
    caplog.set_level(logging.CRITICAL, logger='gluondet.data')
    for fmt in sorted(FORMATS):
        outcomes = set()
        for seed in range(40):
            files, _ = mutated(fmt, seed)
            write_files(str(tmp_path / fmt), files)
            try:
                FORMATS[fmt][1](str(tmp_path / fmt), 'raise')
                outcomes.add('loads')
            except DatasetError:
                outcomes.add('raises')
        assert outcomes == {'loads', 'raises'}, fmt


def test_unmutated_files_load_whole(tmp_path):
    for fmt, (files, load, _) in sorted(FORMATS.items()):
        write_files(str(tmp_path / fmt), files())
        ds = load(str(tmp_path / fmt), 'raise')
        check_loaded(ds)
        assert len(ds) == 2 and ds.report.boxes == {'coco': 3, 'kitti': 3, 'voc': 4}[fmt]
        assert not math.isnan(ds.label(0).sum())
