"""The ``gluondet`` command line: ``gluondet <command> [options]``."""
import argparse
import sys


def main(argv=None):
    from . import __version__
    parser = argparse.ArgumentParser(prog='gluondet', description='Object detection on MXNet Gluon.')
    parser.add_argument('--version', action='version', version='gluondet ' + __version__)
    sub = parser.add_subparsers(dest='command', metavar='command')
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == '__main__':
    sys.exit(main())
