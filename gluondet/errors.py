"""A user's mistake is one line, not a traceback.

Every entry point (the training scripts, each ``gluondet`` command) runs through
`run_main`: an error a user can cause (a bad flag value, a file that is missing, unreadable
or unwritable, data that does not parse, a checkpoint of another network, a missing optional
package) prints ``PROG: error: MESSAGE`` on stderr and exits 1 (a malformed command line,
`ArgumentParser`: 2); a Ctrl-C before training
has anything to save prints ``PROG: interrupted`` and exits 130. Anything else is a bug:
its traceback, then a line asking for a report. ``--debug`` (or ``GLUONDET_DEBUG=1``) shows
the traceback of every error.
"""
import argparse
import os
import sys
import traceback

DEBUG_ENV = 'GLUONDET_DEBUG'


class UserError(Exception):
    """An error of the user's input; its message names the flag or file and the problem."""


# What a user can cause: bad values (ValueError, which DatasetError, SpecError and the config's
# checks are), files (OSError), optional packages not installed (ImportError).
USER_ERRORS = (UserError, ValueError, OSError, ImportError)


def debug_requested(argv=None):
    """Whether ``--debug`` is among the arguments or ``GLUONDET_DEBUG`` is set (not 0)."""
    argv = sys.argv[1:] if argv is None else argv
    return '--debug' in argv or os.environ.get(DEBUG_ENV, '0') not in ('', '0')


class ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line too, ``PROG: error: MESSAGE (see
    --help)``, exit status 2 (argparse's own prints the whole usage first)."""

    def error(self, message):
        self.exit(2, '%s: error: %s (see --help)\n' % (self.prog, message))


def add_debug_flag(parser):
    parser.add_argument('--debug', action='store_true',
                        help='show the traceback of an error (also GLUONDET_DEBUG=1), for a bug '
                             'report')


def message(err):
    """The one line of ``err``: its text, or its kind when it has none."""
    return ' '.join(str(err).split()) if str(err).strip() else type(err).__name__


def run_main(main, argv=None, prog=None):
    """``main(argv)``'s exit status, with the errors as the module docstring says.

    Parameters
    ----------
    main : callable
        Takes ``argv`` (a list, or None for ``sys.argv[1:]``); returns an exit status
        (None or a result object: 0).
    argv : list of str, optional
    prog : str, optional
        The name in the messages (default the script's file name).
    """
    prog = prog or os.path.basename(sys.argv[0])
    if debug_requested(argv):
        result = main(argv)
        return result if isinstance(result, int) else 0
    try:
        result = main(argv)
    except KeyboardInterrupt:
        print('%s: interrupted' % prog, file=sys.stderr)
        return 130
    except USER_ERRORS as err:
        print('%s: error: %s' % (prog, message(err)), file=sys.stderr)
        return 1
    except Exception:   # a bug: the traceback is what a report needs
        traceback.print_exc()
        print('%s: this is a bug in gluondet; please report it with the traceback above'
              % prog, file=sys.stderr)
        return 1
    return result if isinstance(result, int) else 0
