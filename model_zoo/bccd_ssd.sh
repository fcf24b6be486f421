#!/bin/sh
# SSD from scratch on BCCD (../shared/datasets/bccd) on the CPU: test-split VOC07 mAP 0.738.
# Usage: bash model_zoo/bccd_ssd.sh [save-prefix]    (run from the repository root)
set -e
PREFIX=${1:-runs/bccd/}
.venv/bin/python scripts/train_ssd.py --network mobilenet0.5 --data-shape 320 \
  --dataset voc --dataset-root ../shared/datasets/bccd/BCCD --classes RBC,WBC,Platelets \
  --train-split trainval --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 8 --epochs 36 --lr 0.01 --lr-mode cosine --lr-warmup 2 \
  --val-interval 6 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX"
