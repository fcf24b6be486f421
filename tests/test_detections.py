"""gluondet.detections: one image's detections, every field kept by every operation."""
import copy
import json
import pickle

import numpy as np
import pytest

from gluondet.detections import Detections


def _three(**fields):
    return Detections([2, 0, 1], [0.9, 0.3, 0.6], [[0, 0, 9, 9], [5, 5, 20, 30], [1, 2, 3, 4]],
                      **fields)


def test_fields_are_typed_and_of_one_length():
    d = _three(embedding=np.arange(6.).reshape(3, 2))
    assert d.ids.dtype == np.int64 and d.scores.dtype == np.float32
    assert d.boxes.dtype == np.float32 and d.boxes.shape == (3, 4)
    assert d.fields == ('ids', 'scores', 'boxes', 'embedding')
    assert d.embedding.shape == (3, 2) and d['embedding'] is d.embedding
    assert len(d) == 3 and repr(d) == 'Detections(3; ids, scores, boxes, embedding)'
    with pytest.raises(ValueError, match=r'one row per detection \(3 ids\); got embedding \(2\)'):
        _three(embedding=np.zeros((2, 5)))
    with pytest.raises(AttributeError, match="no field 'masks'"):
        assert d.masks is None
    assert d.get('masks') is None
    with pytest.raises(AttributeError, match='replace'):
        d.scores = 0
    with pytest.raises(TypeError, match='not a tuple'):
        ids, scores, boxes = d


def test_indexing_filters_and_sorting_apply_to_every_field():
    d = _three(track_ids=[7, -1, 3], keypoints=np.arange(12.).reshape(3, 2, 2))
    one = d[1]
    assert len(one) == 1 and one.track_ids.tolist() == [-1] and one.keypoints.shape == (1, 2, 2)
    best = d.sorted()
    assert best.scores.tolist() == pytest.approx([0.9, 0.6, 0.3])
    assert best.track_ids.tolist() == [7, 3, -1] and best.keypoints[1, 0].tolist() == [8, 9]
    kept = d.above(0.6)
    assert kept.ids.tolist() == [2, 1] and kept.track_ids.tolist() == [7, 3]
    assert d[np.array([False, False, False])].fields == d.fields
    assert d.replace(track_ids=None).fields == ('ids', 'scores', 'boxes', 'keypoints')
    moved = d.replace(boxes=d.boxes + 1)
    assert moved.boxes[0].tolist() == [1, 1, 10, 10] and d.boxes[0].tolist() == [0, 0, 9, 9]


def test_concat_keeps_the_fields_and_refuses_different_ones():
    d = _three(track_ids=[7, -1, 3])
    both = Detections.concat([d, d[:1]])
    assert len(both) == 4 and both.track_ids.tolist() == [7, -1, 3, 7]
    assert len(Detections.concat([])) == 0
    with pytest.raises(ValueError, match='fields differ'):
        Detections.concat([d, _three()])
    empty = Detections.empty(embedding=np.zeros(8, np.float16))
    assert empty.embedding.shape == (0, 8) and empty.embedding.dtype == np.float16


def test_conversions_carry_every_field():
    d = _three(track_ids=[7, -1, 3], embedding=np.array([[0.5], [1.5], [2.5]]))
    rows = d.coco_results(4)
    assert rows[1] == {'image_id': 4, 'category_id': 1, 'bbox': [5.0, 5.0, 16.0, 26.0],
                       'score': pytest.approx(0.3)}
    assert d.kitti_lines(['a', 'b', 'c'], (15, 25))[1].split()[4:8] == ['5.00', '5.00', '14.00',
                                                                         '24.00']
    objects = d.json_objects(['a', 'b', 'c'])
    assert objects[0] == {'bbox': [0.0, 0.0, 9.0, 9.0], 'score': 0.9, 'class_id': 2,
                          'class': 'c', 'track_id': 7, 'embedding': [0.5]}
    json.dumps(objects)


def test_pickled_and_copied_whole():
    d = _three(track_ids=[7, -1, 3])
    for back in (pickle.loads(pickle.dumps(d)), copy.deepcopy(d), copy.copy(d)):
        assert back.fields == d.fields and back.track_ids.tolist() == [7, -1, 3]
        assert back.boxes.tolist() == d.boxes.tolist()
    points = _three(keypoints=np.zeros((3, 2, 3)), point_fields=['keypoints'])
    for back in (pickle.loads(pickle.dumps(points)), copy.deepcopy(points)):
        assert back.point_fields == ('keypoints',)


def test_point_fields_move_with_the_boxes_and_keep_what_follows_x_and_y():
    keypoints = np.array([[[0, 0, 1], [9, 9, 2]], [[5, 5, 1], [20, 30, 0]],
                          [[1, 2, 1], [3, 4, 1]]], np.float32)
    d = _three(keypoints=keypoints, embedding=np.ones((3, 2)), point_fields=('keypoints',))
    assert d.point_fields == ('keypoints',)
    assert d[1:].point_fields == ('keypoints',) and d.sorted().point_fields == ('keypoints',)
    assert Detections.concat([d, d[:1]]).point_fields == ('keypoints',)
    assert d.replace(keypoints=None).point_fields == ()
    # twice as large, 10 px right, in a 30 x 40 image: clipped to it, then mirrored
    moved = d.mapped_points((2, 2), (10, 0), size=(30, 40), mirror=True)
    assert moved.keypoints[1].tolist() == [[29 - 20, 10, 1], [29 - 29, 39, 0]]
    assert moved.embedding.tolist() == d.embedding.tolist()
    assert moved.boxes.tolist() == d.boxes.tolist()
    assert _three().mapped_points((2, 2)).fields == _three().fields
    with pytest.raises(ValueError, match='a point field .* not embedding, boxes, masks'):
        _three(embedding=np.ones(3), point_fields=('embedding', 'boxes', 'masks'))
    with pytest.raises(ValueError, match=r'fields differ: ids, scores, boxes, keypoints, '
                                         r'embedding \(points: keypoints\) and ids, scores, '
                                         r'boxes, keypoints, embedding$'):
        Detections.concat([d, Detections(d.ids, d.scores, d.boxes, keypoints=keypoints,
                                         embedding=d.embedding)])
