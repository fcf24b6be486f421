#!/bin/sh
# CenterNet (the small center_net_mobilenet0.5_custom: MobileNet 0.5 under deconvolutions of
# 128/64/64 channels, heads of 32) from scratch on BCCD (../shared/datasets/bccd) on the CPU,
# at 384 px (the preset's size). GluonCV's augmentation and targets; Adam as GluonCV, at
# lr 0.004 for batch 8 (on the demo data it learned 4 times faster than 0.001 over the first
# 5 epochs; SGD at 0.02 collapsed the heatmap), cosine decay after 2 warmup epochs from 0, no
# weight decay on the biases. NOT YET MEASURED on BCCD: a first guess from the demo runs (an
# epoch is about 37 steps of 0.5 s on 2 idle cores, plus loading).
# Usage: bash model_zoo/bccd_center_net.sh [save-prefix]    (run from the repository root)
set -e
PREFIX=${1:-runs/bccd/}
.venv/bin/python scripts/train_center_net.py --network mobilenet0.5 --data-shape 384 \
  --dataset voc --dataset-root ../shared/datasets/bccd/BCCD --classes RBC,WBC,Platelets \
  --train-split trainval --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 8 --epochs 30 --lr 0.004 --lr-mode cosine --warmup-epochs 2 --wd 1e-4 \
  --val-interval 5 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX"
