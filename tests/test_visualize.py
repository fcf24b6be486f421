"""Drawing boxes, tiling previews, writing images atomically."""
import os

import cv2
import numpy as np

from gluondet.visualize import class_colors, draw_boxes, image_grid, save_image


def test_draw_boxes_draws_kept_rows_only():
    image = np.zeros((60, 80, 3), np.uint8)
    boxes = np.array([[10, 10, 40, 40], [50, 5, 70, 30], [0, 0, 79, 59]], np.float32)
    ids = np.array([0, -1, 1])
    scores = np.array([0.9, 0.9, 0.1])
    out = draw_boxes(image, boxes, ids, scores, class_names=['a', 'b'], threshold=0.3,
                     thickness=1)
    assert out.shape == image.shape and out.dtype == np.uint8
    assert image.sum() == 0  # the input is not modified
    color = class_colors(2)[0]
    assert tuple(out[40, 25]) == color  # bottom edge of the kept box
    assert out[20:30, 60].sum() == 0    # padding row (id -1) not drawn
    assert out[59, 40].sum() == 0       # below-threshold box not drawn


def test_class_colors_are_distinct_and_stable():
    colors = class_colors(20)
    assert len(set(colors)) == 20 and colors == class_colors(20)


def test_grid_and_atomic_save(tmp_path):
    grid = image_grid([np.full((10, 20, 3), 7, np.uint8)] * 3, columns=2, pad=2)
    assert grid.shape == (2 * 12 + 2, 2 * 22 + 2, 3)
    path = str(tmp_path / 'grid.png')
    save_image(path, grid)
    back = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
    np.testing.assert_array_equal(back, grid)
    assert os.listdir(str(tmp_path)) == ['grid.png']
