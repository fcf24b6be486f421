#!/bin/sh
# RetinaNet (ResNet-18 v1b, FPN P3-P7) from scratch on BCCD (../shared/datasets/bccd) on the CPU.
# Anchors at half the paper's scales: at a 320 px short side BCCD's platelets are 15-20 px.
# The heads and loss of the demo recipe (gluondet/demo.py), which learn from scratch: GroupNorm,
# He initialization, focal gamma 1 / alpha 0.5; lr scaled to batch 4; heads of 64 channels and
# 12 epochs to fit 45 minutes on one core.
# Usage: [BCCD=folder] bash model_zoo/bccd_retinanet.sh [save-prefix] [voc|kitti]
# kitti: trains on a KITTI copy of BCCD (trainval as training/, test as val/, written first to
# {save-prefix}kitti/ by gluondet.data.write_kitti), TAO's input format.
# gluondet: the .venv of the checkout holding this file, if it has one, else the one on
# PATH (an activated venv with the wheel installed). Relative paths are the working
# directory's, as the default BCCD=../shared/datasets/bccd/BCCD.
set -e
VENV="$(dirname "$0")/../.venv/bin"
if [ -x "$VENV/gluondet" ]; then PATH="$VENV:$PATH"; fi
PREFIX=${1:-runs/bccd/}
BCCD=${BCCD:-../shared/datasets/bccd/BCCD}
if [ "${2:-voc}" = kitti ]; then
  python -c "import sys; from gluondet.data import VOCDetection, write_kitti
for split, folder in (('trainval', 'training'), ('test', 'val')):
    write_kitti(VOCDetection(sys.argv[1], splits=(split,), classes=sys.argv[3].split(',')),
                sys.argv[2] + folder)" "$BCCD" "${PREFIX}kitti/" RBC,WBC,Platelets
  DATA="--dataset kitti --dataset-root ${PREFIX}kitti"
else
  DATA="--dataset voc --dataset-root $BCCD --train-split trainval --val-split test"
fi
gluondet train retinanet --network resnet18_v1b $DATA \
  --classes RBC,WBC,Platelets --no-pretrained-base --gpus '' -j 0 \
  --batch-size 4 --epochs 12 --lr 0.02 --lr-mode cosine --lr-warmup 100 --wd 1e-4 \
  --resize 320 --max-size 427 --anchor-scales 0.5,0.63,0.79 \
  --fpn-channels 128 --head-channels 64 --head-norm group --head-init msra \
  --focal-alpha 0.5 --focal-gamma 1 \
  --val-interval 3 --save-interval 0 --log-interval 10 --seed 1 --save-prefix "$PREFIX"
