"""The ``gluondet`` command line: ``gluondet <command> [options]``.

Each command is a ``(name, add_arguments, run)`` entry in ``COMMANDS``; the heavy
imports happen inside ``run`` so ``gluondet --help`` stays fast.
"""
import argparse
import sys


def _demo_arguments(parser):
    parser.add_argument('--output', default='demo_out', help='folder for the demo outputs')
    parser.add_argument('--epochs', type=int, help="training epochs (default: the recipe's)")
    parser.add_argument('--seed', type=int, help="random seed (default: the recipe's)")


def _demo(args):
    from . import demo
    demo.run_demo(args.output, epochs=args.epochs or demo.EPOCHS,
                  seed=demo.SEED if args.seed is None else args.seed)
    return 0


COMMANDS = [
    ('demo', 'train the small SSD on the embedded demo data and print its mAP',
     _demo_arguments, _demo),
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
