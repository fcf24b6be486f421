#!/bin/sh
# CenterNet (the small center_net_mobilenet0.5_custom: MobileNet 0.5 up to its stride-16 block,
# under deconvolutions of 128 and 32 channels, heads of 32) from scratch on BCCD
# (../shared/datasets/bccd) on the CPU, at 384 px (the preset's size). GluonCV's augmentation
# and targets; Adam as GluonCV, at lr 0.004 for batch 8, cosine decay after 2 warmup epochs
# from 0, no weight decay on the biases, 60 epochs. Measured (2026-12-04, AMD EPYC VM, one
# thread, the CenterNet demo and a test run on the other core): test VOC07 mAP 0.851 at the
# end (RBC 0.751, WBC 0.986, Platelets 0.816), in 32.4 min wall time, 31.5 CPU minutes;
# 0.488, 0.638, 0.798, 0.814, 0.828 after 10 to 50 epochs. The first version of the network
# (cut at stride 32, three deconvolutions) gave 0.621 in 38.8 CPU minutes: it found few
# platelets (12 px at 384, AP 0.231).
# Usage: [BCCD=folder] bash model_zoo/bccd_center_net.sh [save-prefix]
# gluondet: the .venv of the checkout holding this file, if it has one, else the one on
# PATH (an activated venv with the wheel installed). Relative paths are the working
# directory's, as the default BCCD=../shared/datasets/bccd/BCCD.
set -e
VENV="$(dirname "$0")/../.venv/bin"
if [ -x "$VENV/gluondet" ]; then PATH="$VENV:$PATH"; fi
PREFIX=${1:-runs/bccd/}
BCCD=${BCCD:-../shared/datasets/bccd/BCCD}
gluondet train center_net --network mobilenet0.5 --data-shape 384 \
  --dataset voc --dataset-root "$BCCD" --classes RBC,WBC,Platelets \
  --train-split trainval --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 8 --epochs 60 --lr 0.004 --lr-mode cosine --warmup-epochs 2 --wd 1e-4 \
  --val-interval 10 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX"
