#!/bin/sh
# SSD from scratch on BCCD (../shared/datasets/bccd) on the CPU: test-split VOC07 mAP 0.738.
# Usage: [BCCD=folder] bash model_zoo/bccd_ssd.sh [save-prefix]
# gluondet: the .venv of the checkout holding this file, if it has one, else the one on
# PATH (an activated venv with the wheel installed). Relative paths are the working
# directory's, as the default BCCD=../shared/datasets/bccd/BCCD.
set -e
VENV="$(dirname "$0")/../.venv/bin"
if [ -x "$VENV/gluondet" ]; then PATH="$VENV:$PATH"; fi
PREFIX=${1:-runs/bccd/}
BCCD=${BCCD:-../shared/datasets/bccd/BCCD}
gluondet train ssd --network mobilenet0.5 --data-shape 320 \
  --dataset voc --dataset-root "$BCCD" --classes RBC,WBC,Platelets \
  --train-split trainval --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 8 --epochs 36 --lr 0.01 --lr-mode cosine --lr-warmup 2 \
  --val-interval 6 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX"
