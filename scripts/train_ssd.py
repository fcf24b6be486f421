#!/usr/bin/env python
"""Train SSD (flags as GluonCV's scripts/detection/ssd/train_ssd.py, plus gluondet's).

Examples
--------
Demo data on the CPU::

    python scripts/train_ssd.py --network mobilenet0.25 --data-shape 256 --dataset demo \
        --gpus '' --epochs 30 --lr 0.02 --lr-decay-epoch 20,26 --no-pretrained-base

A VOC-style folder of your own::

    python scripts/train_ssd.py --network mobilenet1.0 --data-shape 512 --dataset voc \
        --dataset-root ~/data/mine --classes cat,dog
"""
import logging
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from gluondet.engine import fit  # noqa: E402
from gluondet.errors import UserError, run_main  # noqa: E402
from gluondet.model_zoo.ssd import SSD_ARCHS, min_input_size  # noqa: E402
from gluondet.tasks import SSDTask  # noqa: E402
from gluondet.tasks import cli  # noqa: E402


def _sizes():
    """``{network: [zoo input sizes]}`` of SSD_ARCHS."""
    sizes = {}
    for arch in SSD_ARCHS:
        _, size, network = arch.split('_', 2)
        sizes.setdefault(network, []).append(int(size))
    return sizes


def build_parser():
    parser = cli.parser('Train SSD networks.')
    sizes = _sizes()
    cli.add_network_arg(parser, 'vgg16_atrous', sorted(sizes))
    parser.add_argument('--data-shape', type=int, default=300, help=(
        "the input size; the network is the zoo's architecture of the size nearest to it "
        '(%s), whose name begins the files written (ssd_300_...), run at this size'
        % '; '.join('%s %s' % (n, ' or '.join(map(str, s))) for n, s in sorted(sizes.items()))))
    cli.add_training_args(parser, epochs=240, lr=0.001, lr_decay_epoch='160,200',
                          batch_size=32)
    return parser


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def network_name(args):
    """GluonCV's naming, ``ssd_{size}_{network}_{voc|coco|custom}``.

    ``size`` is that of the zoo architecture nearest to ``--data-shape`` (the
    network may run at another input size); data with classes of its own
    (``--classes``, ``--train-json``, demo, kitti) takes the ``custom`` variant.
    """
    archs = [a for a in SSD_ARCHS if a.split('_', 2)[2] == args.network]
    if not archs:
        raise UserError('unknown --network %r; SSD has %s' % (
            args.network, ', '.join(sorted({a.split('_', 2)[2] for a in SSD_ARCHS}))))
    arch = min(archs, key=lambda a: abs(int(a.split('_')[1]) - args.data_shape))
    smallest = min_input_size(arch)
    if args.data_shape < smallest:
        raise UserError('--data-shape %d is too small for %s: its feature maps need at least '
                        '%d px' % (args.data_shape, arch, smallest))
    return '%s_%s' % (arch, cli.zoo_dataset(args))


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    cli.check_args(args)
    name = network_name(args)
    train_dataset, val_dataset = cli.build_datasets(args)
    task = SSDTask(name, train_dataset, val_dataset, args.data_shape,
                   pretrained_base=args.pretrained_base, num_workers=args.num_workers,
                   model_kwargs={'norm_layer': 'syncbn'} if args.syncbn else None,
                   pruned_model=cli.pruned_model(args, args.save_prefix + name))
    config = cli.train_config(args, args.save_prefix + name)
    result = fit(task, config)
    cli.print_final(result)
    return result


if __name__ == '__main__':
    sys.exit(run_main(main))
