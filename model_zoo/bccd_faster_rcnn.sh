#!/bin/sh
# Faster R-CNN (ResNet-18 FPN) from scratch on BCCD (../shared/datasets/bccd) on the CPU:
# test-split VOC07 mAP 0.876 (RBC 0.796, WBC 0.972, Platelets 0.860) after 16 epochs, 43.7 min.
# Usage: [BCCD=folder] bash model_zoo/bccd_faster_rcnn.sh [save-prefix]
# gluondet: the .venv of the checkout holding this file, if it has one, else the one on
# PATH (an activated venv with the wheel installed). Relative paths are the working
# directory's, as the default BCCD=../shared/datasets/bccd/BCCD.
set -e
VENV="$(dirname "$0")/../.venv/bin"
if [ -x "$VENV/gluondet" ]; then PATH="$VENV:$PATH"; fi
PREFIX=${1:-runs/bccd/}
BCCD=${BCCD:-../shared/datasets/bccd/BCCD}
gluondet train faster_rcnn --network resnet18_v1b --use-fpn \
  --dataset voc --dataset-root "$BCCD" --classes RBC,WBC,Platelets \
  --train-split trainval --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 4 --epochs 16 --lr 0.02 --lr-mode cosine --lr-warmup 100 --wd 1e-4 \
  --image-short 320 --image-max-size 427 \
  --val-interval 4 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX"
