"""COCO ids as TAO, pycocotools and other tools write them (issue 26): ints, strings and both,
through the reader, COCODetectionMetric and the evaluation; and seeded fuzzing of the
evaluation's inputs, as tests/test_data_fuzz.py fuzzes the readers: a mutated ground truth
or detections file evaluates or raises a ValueError naming it, never anything else."""
import copy
import json
import os
import random
import warnings

import numpy as np
import pytest

from gluondet.data import COCODetection
from gluondet.metrics import STAT_NAMES, COCODetectionMetric, coco_evaluate

from test_data_fuzz import json_slots, mutate_bytes, mutate_json
from test_metrics_coco import _assert_stats, _jittered_problem, _pycocotools


def _as_strings(gt, dets, every=2):
    """``gt`` and ``dets`` with every ``every``-th image id written as a string, and the same
    problem with those ids as ints above all others (the order gluondet gives them: ints,
    then strings), which pycocotools can evaluate."""
    ids = sorted(image['id'] for image in gt['images'])
    strings = {i: 'img-%05d' % i for i in ids[::every]}
    renumber = {s: max(ids) + 1 + k for k, s in enumerate(sorted(strings.values()))}
    mixed, ints = copy.deepcopy(gt), copy.deepcopy(gt)
    for entry, same in zip(mixed['images'], ints['images']):
        entry['id'] = strings.get(entry['id'], entry['id'])
        same['id'] = renumber.get(entry['id'], entry['id'])
    for ann, same in zip(mixed['annotations'], ints['annotations']):
        ann['image_id'] = strings.get(ann['image_id'], ann['image_id'])
        same['image_id'] = renumber.get(ann['image_id'], ann['image_id'])
    mixed_dets = [dict(d, image_id=strings.get(d['image_id'], d['image_id'])) for d in dets]
    int_dets = [dict(d, image_id=renumber.get(d['image_id'], d['image_id'])) for d in mixed_dets]
    return mixed, mixed_dets, ints, int_dets


def test_mixed_image_ids_evaluate_as_pycocotools_does_the_same_problem(cards_root):
    """Issue 26: images with int and str ids crashed the evaluation (AttributeError: 'bool'
    object has no attribute 'all'); they evaluate, with pycocotools' numbers."""
    with open(os.path.join(cards_root, 'coco', 'instances_test.json')) as f:
        gt, dets = _jittered_problem(json.load(f), 1)
    mixed, mixed_dets, ints, int_dets = _as_strings(gt, dets)
    assert {type(image['id']) for image in mixed['images']} == {int, str}
    stats = coco_evaluate(mixed, mixed_dets)
    assert 0.1 < stats['AP'] < 0.9
    _assert_stats(stats, _pycocotools(ints, int_dets))
    # all strings: pycocotools takes them as they are
    strings, string_dets, _, _ = _as_strings(gt, dets, every=1)
    _assert_stats(coco_evaluate(strings, string_dets), _pycocotools(strings, string_dets))


def _cards_with_ids(cards_root, tmp_path, image_id, category_id):
    """The cards test json with its image and category ids rewritten, read by
    COCODetection."""
    with open(os.path.join(cards_root, 'coco', 'instances_test.json')) as f:
        data = json.load(f)
    for entry in data['images']:
        entry['id'] = image_id(entry['id'])
    for cat in data['categories']:
        cat['id'] = category_id(cat['id'])
    for ann in data['annotations']:
        ann['image_id'], ann['category_id'] = image_id(ann['image_id']), category_id(
            ann['category_id'])
    path = str(tmp_path / 'test.json')
    with open(path, 'w') as f:
        json.dump(data, f)
    return COCODetection(annotation_file=path, image_root=os.path.join(cards_root, 'images'),
                         skip_empty=False, on_error='raise')


@pytest.mark.parametrize('image_id, category_id', [
    (lambda i: str(i) if i % 2 else i, lambda c: c),                # TAO / tools: mixed
    (lambda i: 'COCO_%012d' % i, lambda c: 'cat-%d' % c),            # all strings
    (lambda i: i, lambda c: str(c))])                                # string categories
def test_the_reader_and_the_metric_take_ids_as_written(cards_root, tmp_path, image_id,
                                                       category_id):
    dataset = _cards_with_ids(cards_root, tmp_path, image_id, category_id)
    assert len(dataset) == 67 and dataset.report.boxes == 143
    metric = COCODetectionMetric(dataset, str(tmp_path / 'results'), use_time=False,
                                 score_thresh=0)
    for i in range(len(dataset)):
        label = dataset.label(i)
        metric.update(label[None, :, :4], label[None, :, 4], np.ones((1, len(label))))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        names, values = metric.get()
    assert metric.stats['AP'] == 1.0 and values[1:] == ['100.0'] * (len(dataset.classes) + 1)
    with open(str(tmp_path / 'results.json')) as f:
        written = json.load(f)
    # the results name the images and categories as the json does
    with open(dataset.annotation_file) as f:
        gt = json.load(f)
    assert {d['image_id'] for d in written} <= {e['id'] for e in gt['images']}
    assert {d['category_id'] for d in written} == {c['id'] for c in gt['categories']}
    _assert_stats(coco_evaluate(dataset.annotation_file, written), metric.stats)


def test_an_id_of_the_other_type_is_named(tmp_path):
    gt = {'images': [{'id': 7}, {'id': 'b'}], 'categories': [{'id': 1, 'name': 'x'}],
          'annotations': [{'id': 1, 'image_id': 7, 'category_id': 1, 'bbox': [0, 0, 9, 9],
                           'area': 81},
                          {'id': 2, 'image_id': '7', 'category_id': 1, 'bbox': [20, 20, 9, 9],
                           'area': 81}]}
    path = str(tmp_path / 'gt.json')
    with open(path, 'w') as f:
        json.dump(gt, f)
    det = {'image_id': 7, 'category_id': 1, 'bbox': [0, 0, 9, 9], 'score': 0.9}
    # ground truth: the annotation of "7" is left out as pycocotools leaves it, named
    with pytest.warns(UserWarning) as seen:
        stats = coco_evaluate(path, [det])
    assert str(seen[0].message) == (
        "%s: annotations[1]/image_id: no images entry has the id '7' (images has it as the "
        "int 7: ids must be of one type); 1 such annotations are not evaluated" % path)
    assert stats['AR100'] == 1.0
    # detections: an image of the other type is an error naming the file and the id
    with pytest.raises(ValueError) as err:
        coco_evaluate(path, [dict(det, image_id='7')])
    assert str(err.value) == ("detections name images absent from %s (first: '7' (the "
                              'ground truth has it as the int 7: ids must be of one type))'
                              % path)
    # a category of the other type: left out as pycocotools does, named
    with pytest.warns(UserWarning, match=r"1 detections have category ids absent from .*gt\.json "
                                         r"\(first: '1' \(the ground truth has it as the int "
                                         r'1: ids must be of one type\)\)'):
        coco_evaluate(path, [det, dict(det, category_id='1')])
    # pycocotools' numpy form: float ids are its int ids
    array = np.array([[7, 0, 0, 9, 9, 0.9, 1]], dtype=np.float64)
    with pytest.warns(UserWarning, match='no images entry'):
        _assert_stats(coco_evaluate(path, array), stats)


@pytest.mark.parametrize('field, value, message', [
    ('images', [{'id': 1.5}], r"gt\.json: images\[0\]/id: missing or not an int or str, got "
                              r'1\.5'),
    ('images', [{'id': True}], r'images\[0\]/id: missing or not an int or str, got True'),
    ('categories', [None], r'categories\[0\]/id: missing or not an int or str, got None'),
    ('annotations', [{'id': [1], 'image_id': 1, 'category_id': 1}],
     r'annotations\[0\]/id: missing or not an int or str, got \[1\]')])
def test_ground_truth_ids_that_are_no_ids_are_named(tmp_path, field, value, message):
    gt = {'images': [{'id': 1}], 'categories': [{'id': 1, 'name': 'x'}], 'annotations': []}
    gt[field] = value
    path = tmp_path / 'gt.json'
    path.write_text(json.dumps(gt))
    with pytest.raises(ValueError, match=message):
        coco_evaluate(str(path), [])


# -- fuzzing the evaluation's inputs --------------------------------------------------------

CASES = 400

EVIL_IDS = ['1', '2', 1.0, 2.5, True, None, [1], {'id': 1}, '', 'x', -1, 0, 10 ** 30]


def _problem():
    """A small valid problem: two images, two categories, a crowd, four detections."""
    gt = {'images': [{'id': 1, 'width': 64, 'height': 48}, {'id': 2, 'width': 64, 'height': 48}],
          'categories': [{'id': 1, 'name': 'cat'}, {'id': 2, 'name': 'dog'}],
          'annotations': [
              {'id': 1, 'image_id': 1, 'category_id': 1, 'bbox': [2, 3, 20, 15], 'area': 300,
               'iscrowd': 0},
              {'id': 2, 'image_id': 1, 'category_id': 2, 'bbox': [30, 10, 25, 30], 'area': 750,
               'iscrowd': 0},
              {'id': 3, 'image_id': 2, 'category_id': 1, 'bbox': [5, 5, 10, 10], 'area': 100,
               'iscrowd': 1}]}
    dets = [{'image_id': 1, 'category_id': 1, 'bbox': [2, 4, 20, 14], 'score': 0.9},
            {'image_id': 1, 'category_id': 2, 'bbox': [31, 10, 24, 30], 'score': 0.8},
            {'image_id': 2, 'category_id': 1, 'bbox': [5, 6, 10, 9], 'score': 0.7},
            {'image_id': 2, 'category_id': 2, 'bbox': [40, 20, 10, 10], 'score': 0.2}]
    return {'gt.json': gt, 'dets.json': dets}


def _mutated(seed):
    """The files of case ``seed`` (parsed json, or bytes when mutated as text) and what was
    done: one to three mutations of either file's values (ids of the other type among
    them) or bytes."""
    rng = random.Random('coco-eval-%d' % seed)
    files, done = _problem(), []
    for _ in range(rng.choice([1, 1, 2, 3])):
        name = rng.choice(sorted(files))
        value = files[name]
        if isinstance(value, bytes) or rng.random() < 0.15:
            raw = value if isinstance(value, bytes) else json.dumps(value).encode()
            files[name], what = mutate_bytes(rng, raw)
        elif rng.random() < 0.4:      # an id field of another type
            slots = [s for s in json_slots(value) if s[2][-1] in ('id', 'image_id',
                                                                   'category_id')]
            container, key, path = rng.choice(slots)
            container[key] = rng.choice(EVIL_IDS)
            what = 'id %s = %r' % ('/'.join(map(str, path)), container[key])
        else:
            what = mutate_json(rng, value)
        done.append('%s: %s' % (name, what))
    return files, '; '.join(done)


def _run_case(seed, folder):
    """Evaluate case ``seed`` (the ground truth as a file, the detections as a file's
    parsed list); return a failure or None."""
    files, what = _mutated(seed)
    gt_path = os.path.join(folder, 'gt.json')
    for name, value in files.items():
        with open(os.path.join(folder, name), 'wb') as f:
            f.write(value if isinstance(value, bytes) else json.dumps(value).encode())
    try:
        with open(os.path.join(folder, 'dets.json'), encoding='utf-8') as f:
            dets = json.load(f)
    except ValueError:
        dets = None         # not json: the reading is the user's, not the evaluation's
    if dets is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            stats = coco_evaluate(gt_path, dets)
    except ValueError as error:
        if 'gt.json' not in str(error) and not str(error).startswith(('detection', 'every '
                                                                       'detection')):
            return '%d (%s): ValueError naming neither input: %s' % (seed, what, error)
        return None
    except Exception as error:  # noqa: BLE001 - what the fuzzing looks for
        return '%d (%s): %s: %s' % (seed, what, type(error).__name__, error)
    if list(stats) != list(STAT_NAMES) or not all(
            v == -1 or 0 <= v <= 1 for v in stats.values()):
        return '%d (%s): evaluated to %s' % (seed, what, stats)
    return None


def test_mutated_evaluation_inputs_evaluate_or_raise_a_named_error(tmp_path):
    failures = [f for f in (_run_case(seed, str(tmp_path)) for seed in range(CASES)) if f]
    assert not failures, '%d of %d cases failed:\n%s' % (len(failures), CASES,
                                                          '\n'.join(failures[:10]))


def test_the_evaluation_mutations_reach_both_outcomes(tmp_path):
    """The fuzzing is not vacuous: cases evaluate and cases raise, ids of the other type
    among both."""
    outcomes = set()
    for seed in range(60):
        files, what = _mutated(seed)
        if any(isinstance(v, bytes) for v in files.values()):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                coco_evaluate(files['gt.json'], files['dets.json'])
            outcomes.add('evaluates' + (' with an id' if 'id ' in what else ''))
        except ValueError:
            outcomes.add('raises' + (' with an id' if 'id ' in what else ''))
    assert outcomes == {'evaluates', 'raises', 'evaluates with an id', 'raises with an id'}
