#!/bin/sh
# Faster R-CNN (ResNet-18 FPN) from scratch on BCCD (../shared/datasets/bccd) on the CPU:
# test-split VOC07 mAP 0.876 (RBC 0.796, WBC 0.972, Platelets 0.860) after 16 epochs, 43.7 min.
# Usage: bash model_zoo/bccd_faster_rcnn.sh [save-prefix]    (run from the repository root)
set -e
PREFIX=${1:-runs/bccd/}
.venv/bin/python scripts/train_faster_rcnn.py --network resnet18_v1b --use-fpn \
  --dataset voc --dataset-root ../shared/datasets/bccd/BCCD --classes RBC,WBC,Platelets \
  --train-split trainval --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 4 --epochs 16 --lr 0.02 --lr-mode cosine --lr-warmup 100 --wd 1e-4 \
  --image-short 320 --image-max-size 427 \
  --val-interval 4 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX"
