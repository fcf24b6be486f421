#!/bin/sh
# YOLOv3 (the small yolo3_mobilenet0.5_custom: MobileNet 0.5 under a head of 128/64/64
# channels) from scratch on BCCD (../shared/datasets/bccd) on the CPU, at a fixed 320 px.
# GluonCV's anchors; the prediction starts at the objectness and class priors; GluonCV's
# augmentation without its zoom-out and crop (at 320 px the platelets are 15-20 px);
# lr 0.005 for batch 8 (0.01 with the zoom diverged in the third epoch), cosine decay, two
# warmup epochs, 30 epochs.
# Usage: [BCCD=folder] bash model_zoo/bccd_yolo3.sh [save-prefix]
# gluondet: the .venv of the checkout holding this file, if it has one, else the one on
# PATH (an activated venv with the wheel installed). Relative paths are the working
# directory's, as the default BCCD=../shared/datasets/bccd/BCCD.
set -e
VENV="$(dirname "$0")/../.venv/bin"
if [ -x "$VENV/gluondet" ]; then PATH="$VENV:$PATH"; fi
PREFIX=${1:-runs/bccd/}
BCCD=${BCCD:-../shared/datasets/bccd/BCCD}
gluondet train yolo3 --network mobilenet0.5 --data-shape 320 \
  --no-random-shape --no-zoom \
  --dataset voc --dataset-root "$BCCD" --classes RBC,WBC,Platelets \
  --train-split trainval --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 8 --epochs 30 --lr 0.005 --lr-mode cosine --warmup-epochs 2 --wd 5e-4 \
  --val-interval 5 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX"
