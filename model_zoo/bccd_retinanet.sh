#!/bin/sh
# RetinaNet (ResNet-18 v1b, FPN P3-P7) from scratch on BCCD (../shared/datasets/bccd) on the CPU.
# Anchors at half the paper's scales: at a 320 px short side BCCD's platelets are 15-20 px.
# The heads and loss of the demo recipe (gluondet/demo.py), which learn from scratch: GroupNorm,
# He initialization, focal gamma 1 / alpha 0.5; lr scaled to batch 4. Not run yet (issue 10).
# Usage: bash model_zoo/bccd_retinanet.sh [save-prefix]    (run from the repository root)
set -e
PREFIX=${1:-runs/bccd/}
.venv/bin/python scripts/train_retinanet.py --network resnet18_v1b \
  --dataset voc --dataset-root ../shared/datasets/bccd/BCCD --classes RBC,WBC,Platelets \
  --train-split trainval --val-split test --no-pretrained-base --gpus '' -j 0 \
  --batch-size 4 --epochs 16 --lr 0.02 --lr-mode cosine --lr-warmup 100 --wd 1e-4 \
  --resize 320 --max-size 427 --anchor-scales 0.5,0.63,0.79 \
  --fpn-channels 128 --head-channels 128 --head-norm group --head-init msra \
  --focal-alpha 0.5 --focal-gamma 1 \
  --val-interval 4 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX"
