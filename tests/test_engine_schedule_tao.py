"""NVIDIA TAO's soft-start annealing learning-rate schedule in the engine."""
import math

import pytest

from gluondet.engine import TrainConfig
from gluondet.engine.schedule import LRSchedule


def test_soft_start_annealing_ramps_holds_and_decays_exponentially():
    sched = LRSchedule(0.01, 10, 10, 'soft_start_annealing', lr_min=1e-4, soft_start=0.1,
                       annealing=0.3)
    assert math.isclose(sched(0), 1e-4)
    assert math.isclose(sched(5), 1e-4 * (0.01 / 1e-4) ** 0.5)       # halfway up, geometric
    assert math.isclose(sched(10), 0.01) and math.isclose(sched(29), 0.01)
    assert math.isclose(sched(65), 0.01 * (1e-4 / 0.01) ** 0.5)      # halfway down
    assert math.isclose(sched(100), 1e-4)
    values = [sched(i) for i in range(100)]
    assert values[:10] == sorted(values[:10]) and values[30:] == sorted(values[30:], reverse=True)


def test_cosine_ends_at_lr_min():
    sched = LRSchedule(0.02, 10, 2, 'cosine', lr_min=0.002)
    assert math.isclose(sched(0), 0.02) and math.isclose(sched(20), 0.002)


@pytest.mark.parametrize('values, message', [
    (dict(lr_mode='soft_start_annealing'), 'needs lr_min > 0'),
    (dict(lr_min=0.5, lr=0.1), 'need 0 <= lr_min < lr'),
    (dict(soft_start=0.5, annealing=0.3), 'need 0 <= soft_start <= annealing <= 1'),
])
def test_bad_settings_are_refused(values, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(values)


def test_an_iteration_budget_stops_partway_and_decays_at_milestones(tmp_path):
    """ODTK's schedule: max_iters steps (the last epoch cut short), decays at steps,
    validation every val_iters steps as well as at the end."""
    import json
    from gluondet.engine import fit
    from test_engine_toy import ToyTask
    config = TrainConfig(batch_size=2, num_workers=0, epochs=99, max_iters=7,
                         lr_decay_iters=(3, 5), lr=0.1, lr_decay=0.5, val_iters=4,
                         val_interval=1, save_interval=0, log_interval=1,
                         save_prefix=str(tmp_path / 'toy'))
    task = ToyTask(num_train=6)           # 3 steps an epoch
    result = fit(task, config)
    assert (result.iteration, result.epoch) == (7, 3)
    with open(str(tmp_path / 'toy_metrics.jsonl')) as f:
        records = [json.loads(line) for line in f]
    lrs = [r['lr'] for r in records if r['type'] == 'train']
    assert lrs == [0.1, 0.1, 0.1, 0.05, 0.05, 0.025, 0.025]
    validated = [r['iteration'] for r in records if r['type'] == 'val']
    assert validated == [3, 4, 6, 7]       # each epoch's end, step 4, and the last step
