"""The ``gluondet`` command line: ``gluondet <command> [options]``.

Each command is a ``(name, add_arguments, run)`` entry in ``COMMANDS``; the heavy
imports happen inside ``run`` so ``gluondet --help`` stays fast.
"""
import argparse
import os
import sys


def _demo_arguments(parser):
    parser.add_argument('--output', default='demo_out', help='folder for the demo outputs')
    parser.add_argument('--num-images', type=int, default=8, help='images drawn in the preview')


def _demo(args):
    from .data import DemoDetection
    from .tools.visualize import draw_boxes, image_grid, save_image
    os.makedirs(args.output, exist_ok=True)
    dataset = DemoDetection(split='val')
    drawn = []
    for i in range(min(args.num_images, len(dataset))):
        image, label = dataset[i]
        drawn.append(draw_boxes(image, label[:, :4], label[:, 4], class_names=dataset.classes))
    path = os.path.join(args.output, 'demo_val_samples.jpg')
    save_image(path, image_grid(drawn))
    print('demo: %d val images of %d classes (%s); preview written to %s'
          % (len(dataset), len(dataset.classes), ', '.join(dataset.classes), path))
    return 0


COMMANDS = [
    ('demo', 'run the main job on the embedded demo dataset', _demo_arguments, _demo),
]


def main(argv=None):
    from . import __version__
    parser = argparse.ArgumentParser(prog='gluondet', description='Object detection on MXNet Gluon.')
    parser.add_argument('--version', action='version', version='gluondet ' + __version__)
    sub = parser.add_subparsers(dest='command', metavar='command')
    for name, help_text, add_arguments, run in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(p)
        p.set_defaults(run=run)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.run(args)


if __name__ == '__main__':
    sys.exit(main())
