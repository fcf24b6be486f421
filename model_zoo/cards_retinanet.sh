#!/bin/sh
# RetinaNet (ResNet-18 v1b, FPN P3-P7) from scratch on the cards photos
# (../shared/datasets/cards) on the CPU.
# The heads are the script's from scratch (--no-pretrained-base): GroupNorm, He initialization
# (the log says so; the paper's heads stay at mAP 0.000 from scratch). The demo's recipe
# (gluondet/demo.py) for the rest: FPN of 128 channels, heads of 2 convs of 64, focal gamma 1 /
# alpha 0.5, lr 0.02 for batch 4 with a cosine decay. 256 px: a card is then 50 to 145 px wide,
# within the paper's anchors (32 to 813 px); 320 px costs 60% more an epoch and gave 0.464
# after 8 epochs. 12 epochs of about 80 s on one core.
# Usage: bash model_zoo/cards_retinanet.sh [save-prefix [cards-images-folder [more flags]]]
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
gluondet train retinanet --network resnet18_v1b \
  --dataset voc --dataset-root "$CARDS" --classes nine,ten,jack,queen,king,ace \
  --train-split train --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 4 --epochs 12 --lr 0.02 --lr-mode cosine --lr-warmup 100 --wd 1e-4 \
  --resize 256 --max-size 341 --fpn-channels 128 --head-channels 64 --head-layers 2 \
  --focal-alpha 0.5 --focal-gamma 1 \
  --val-interval 3 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX" "$@"
