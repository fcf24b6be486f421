"""The demo recipes: their plumbing at a tiny budget, and (slow) that they learn to mAP >= 0.9."""
import os
import re
import subprocess
import sys

import pytest

from gluondet import demo, detectors


@pytest.mark.parametrize('detector', [d.name for d in detectors.all_detectors() if d.demo])
def test_run_demo_trains_prints_map_and_draws_a_preview(tmp_path, capsys, detector):
    metrics = demo.run_demo(str(tmp_path / 'out'), detector, epochs=1, num_train=16, num_val=4,
                            data_root=str(tmp_path / 'data'))
    assert 0 <= metrics['mAP'] <= 1
    assert sorted(metrics) == sorted(['mAP'] + ['AP/' + c for c in demo.DemoDetection.CLASSES])
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert 'mAP %.4f' % metrics['mAP'] in last_line
    out = tmp_path / 'out'
    assert os.path.getsize(out / demo.PREVIEW_FILE) > 0
    assert (out / (demo.recipe_of(detector).network + '_best.params')).exists()


@pytest.mark.parametrize('detector', [      # minutes beside another training, in CI's order
    pytest.param('faster_rcnn', marks=pytest.mark.slow(minutes=7)),
    pytest.param('retinanet', marks=pytest.mark.slow(minutes=6.5))])
def test_demo_recipe_reaches_map_0_9_from_scratch(tmp_path, detector):
    """Each recipe's fixed, seeded budget (`gluondet.demo`: 5 to 7 minutes on a core)."""
    metrics = demo.run_demo(str(tmp_path), detector)
    assert metrics['mAP'] >= 0.9, metrics


@pytest.mark.slow(minutes=8)
def test_ssd_recipe_reaches_map_0_9_and_bfloat16_stays_within_0_03(tmp_path):
    """The SSD recipe in float32 (here), then with ``gluondet demo --amp`` in a process of its
    own (AMP converts a whole process): bfloat16 on this CPU, the same budget."""
    metrics = demo.run_demo(str(tmp_path / 'float32'), 'ssd')
    assert metrics['mAP'] >= 0.9, metrics
    out = subprocess.run([sys.executable, '-m', 'gluondet', 'demo', '--amp', '--output',
                          str(tmp_path / 'bfloat16')], capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    amp_map = float(re.search(r'VOC07 mAP ([0-9.]+)', out.stdout).group(1))
    assert abs(amp_map - metrics['mAP']) <= 0.03, (amp_map, metrics['mAP'])
