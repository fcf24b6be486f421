#!/bin/sh
# Faster R-CNN (ResNet-18 FPN) from scratch on the cards photos (../shared/datasets/cards) on the CPU.
# The BCCD recipe's training (batch 4, lr 0.02 with a cosine decay and 100 warmup iterations:
# GluonCV's VOC defaults are made for a pretrained backbone) at a shorter side of 256 px, where
# a card is 50 to 145 px wide, within the zoo's anchors (32 to 512 px). 12 epochs of 2 minutes
# on one core: test mAP 0.242, 0.467, 0.575, 0.595 after epochs 3, 6, 9, 12.
# Usage: bash model_zoo/cards_faster_rcnn.sh [save-prefix [cards-images-folder [more flags]]]
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
gluondet train faster_rcnn --network resnet18_v1b --use-fpn \
  --dataset voc --dataset-root "$CARDS" --classes nine,ten,jack,queen,king,ace \
  --train-split train --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 4 --epochs 12 --lr 0.02 --lr-mode cosine --lr-warmup 100 --wd 1e-4 \
  --image-short 256 --image-max-size 341 \
  --val-interval 3 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX" "$@"
