"""gluondet.metrics.evaluation: the one loop of a predictor over a dataset, into metrics."""
import multiprocessing

import numpy as np

from gluondet.data import DemoDetection
from gluondet.data.preprocess import fixed_size, keep_ratio
from gluondet.deploy.predictor import Predictor
from gluondet.metrics import VOC07MApMetric, evaluate, evaluate_voc07, voc_result
from gluondet.metrics.evaluation import _batches


class GridRunner:
    """Detects boxes a third and a quarter of the input on a grid, scored from the pixels."""

    batch_range = (1, None)

    def __call__(self, batch):
        n, _, height, width = batch.shape
        boxes = np.array([[x * width, y * height, (x + side) * width, (y + side) * height]
                          for side in (1 / 3, 1 / 4) for x in np.arange(0, 1 - side, 1 / 8)
                          for y in np.arange(0, 1 - side, 1 / 8)], np.float32)
        scores = np.stack([np.abs(batch[:, :, int(y0):int(y1) + 1, int(x0):int(x1) + 1]).mean(
            axis=(1, 2, 3)) for x0, y0, x1, y1 in boxes], axis=1)
        ids = np.zeros(scores.shape, np.float32)
        return ids[..., None], scores[..., None], np.tile(boxes, (n, 1, 1))


def test_evaluate_is_the_same_at_any_batch_and_with_worker_processes(tmp_path):
    data = DemoDetection('val', num_images=10, image_size=64, root=str(tmp_path))
    for spec in (fixed_size(48), keep_ratio(48, 64, 32)):
        predictor = Predictor(GridRunner(), data.classes, spec)
        results = [evaluate_voc07(predictor, data, 4)]
        for batch_size, workers in ((1, 0), (3, 2)):
            metric = VOC07MApMetric(class_names=data.classes)
            evaluate(predictor, data, [metric], batch_size, num_workers=workers)
            results.append(voc_result(metric))
        assert results[0]['mAP'] > 0
        for result in results[1:]:
            assert result.keys() == results[0].keys()
            assert all(result[k] == results[0][k] or np.isnan(result[k]) and
                       np.isnan(results[0][k]) for k in result)


def test_the_reading_processes_end_when_reading_stops_early():
    before = set(multiprocessing.active_children())
    batches = _batches(DemoDetection('val', num_images=8, image_size=64), [0, 4], 4, 2)
    assert len(next(batches)) == 4
    assert set(multiprocessing.active_children()) > before
    batches.close()        # as an abandoned validation's generator is
    assert set(multiprocessing.active_children()) <= before
