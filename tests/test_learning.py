"""`make test`'s learning tests: each kind of post-processing (`gluondet.deploy.postprocess`)
trains its demo recipe from scratch on a short, seeded budget and must clear a bar well above
what an untrained network scores (about 0), so a change that breaks training fails here within
`make test`. The full recipes to mAP 0.9, the cards and BCCD recipes run in
`make test-learning` (test_demo_learning.py, test_recipes_learning.py).

The budgets take 40 to 80 seconds on one core; each bar is half the mAP measured with it (on
an AMD EPYC, one thread, 100 val images), as oneDNN's kernels differ between CPUs and part
early trajectories."""
import pytest

from gluondet import demo

# detector: (epochs, train images, bar), the recipe's other settings unchanged; measured mAP
SHORT = {
    'ssd': (5, 1000, 0.2),              # softmax_nms: 0.404
    'faster_rcnn': (2, 400, 0.05),      # rcnn: 0.111
    'retinanet': (3, 500, 0.14),        # sigmoid_topk_nms: 0.281
    'yolo3': (4, 500, 0.08),            # yolo3: 0.162
    'center_net': (4, 1000, 0.15),      # center_net: 0.315
    'mask_rcnn': (2, 400, 0.05),        # mask_rcnn: 0.112 (its mask AP50 0.101)
}
# and the masks' COCO AP50 (Mask R-CNN)
MASK_AP50 = {'mask_rcnn': 0.05}


@pytest.mark.slow(minutes=1.5)
@pytest.mark.parametrize('detector', sorted(SHORT))
def test_recipe_learns_on_a_short_budget(tmp_path, detector):
    epochs, num_train, bar = SHORT[detector]
    metrics = demo.run_demo(str(tmp_path), detector, epochs=epochs, num_train=num_train,
                            num_val=100, val_interval=epochs)
    assert metrics['mAP'] >= bar, metrics
    if detector in MASK_AP50:
        assert metrics['mask_AP50'] >= MASK_AP50[detector], metrics
