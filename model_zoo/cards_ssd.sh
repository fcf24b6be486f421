#!/bin/sh
# SSD (MobileNet 0.5) from scratch on the cards photos (../shared/datasets/cards) on the CPU.
# 256 px: a card is then about 90 px (50 to 145), the size of this network's largest anchors
# (76 and 91 px on its stride-32 map). lr 0.01 with two warmup epochs (0.02 blew up in the
# tenth epoch); 100 epochs of 13 s (on one idle core) because SSD from scratch, with its zoom
# and crop augmentation, learns slowly: test mAP 0.30 after 60 epochs, 0.40 after 100.
# Usage: bash model_zoo/cards_ssd.sh [save-prefix [cards-images-folder [more flags]]]
#   (more flags go after the recipe's, and the last of a flag wins)
# gluondet: the .venv of the checkout holding this file, if it has one, else the one on
# PATH (an activated venv with the wheel installed). Relative paths are the working
# directory's.
set -e
VENV="$(dirname "$0")/../.venv/bin"
if [ -x "$VENV/gluondet" ]; then PATH="$VENV:$PATH"; fi
PREFIX=${1:-runs/cards/}
CARDS=${2:-../shared/datasets/cards/images}
if [ $# -ge 2 ]; then shift 2; else set --; fi
gluondet train ssd --network mobilenet0.5 --data-shape 256 \
  --dataset voc --dataset-root "$CARDS" --classes nine,ten,jack,queen,king,ace \
  --train-split train --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 8 --epochs 100 --lr 0.01 --lr-mode cosine --lr-warmup 2 \
  --val-interval 20 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX" "$@"
