#!/bin/sh
# CenterNet (the small center_net_mobilenet0.5_custom: MobileNet 0.5 under deconvolutions of
# 128/64/64 channels, heads of 32) from scratch on BCCD (../shared/datasets/bccd) on the CPU,
# at 384 px (the preset's size). GluonCV's augmentation and targets; Adam as GluonCV, at
# lr 0.004 for batch 8 (on the demo data it learned 4 times faster than 0.001 over the first
# 5 epochs; SGD at 0.02 collapsed the heatmap), cosine decay after 2 warmup epochs from 0, no
# weight decay on the biases, 60 epochs. Measured (2026-12-04, AMD EPYC VM, one thread, other
# trainings on the other core): test VOC07 mAP 0.621 at the end (RBC 0.741, WBC 0.892,
# Platelets 0.231), 0.644 at its best validation (epoch 50), in 42.5 min wall time, 38.8 CPU
# minutes; 0.015, 0.221, 0.541, 0.620 after 10, 20, 30, 40 epochs. CenterNet from scratch
# learns the platelets (12 px at 384) last; the anchor-based recipes find them far better.
# Usage: bash model_zoo/bccd_center_net.sh [save-prefix]    (run from the repository root)
set -e
PREFIX=${1:-runs/bccd/}
.venv/bin/python scripts/train_center_net.py --network mobilenet0.5 --data-shape 384 \
  --dataset voc --dataset-root ../shared/datasets/bccd/BCCD --classes RBC,WBC,Platelets \
  --train-split trainval --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 8 --epochs 60 --lr 0.004 --lr-mode cosine --warmup-epochs 2 --wd 1e-4 \
  --val-interval 10 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX"
