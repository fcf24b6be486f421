"""What every benchmark's correctness checks share: a failed check ends in a non-zero exit.

A benchmark records each check (parity of two implementations, the same detections,
the same metric values) on one `Checks`; the figures still print, then `Checks.exit`
prints ``FAILED: ...`` for every failed check and exits with status 1 (``run_all.py``
reports the script as failed). Unlike ``assert``, a check also runs under ``python -O``.

    checks = Checks()
    checks.check(np.array_equal(ours, theirs), 'mAP differs: %s vs %s' % (ours, theirs))
    ...
    checks.exit()
"""
import sys

__all__ = ['Checks']


class Checks:
    """The correctness checks of one benchmark run and their outcome."""

    def __init__(self):
        self.failures = []
        self.passed = 0

    def check(self, ok, message):
        """Record one check; ``message`` says what failed (printed at once if it did)."""
        if ok:
            self.passed += 1
        else:
            self.failures.append(message)
            print('CHECK FAILED: %s' % message, flush=True)
        return bool(ok)

    def status(self):
        """0 if every check passed, else 1, after printing a summary line."""
        if self.failures:
            print('FAILED: %d of %d checks: %s' % (len(self.failures),
                                                   len(self.failures) + self.passed,
                                                   '; '.join(self.failures)), flush=True)
            return 1
        print('checks: all %d passed' % self.passed, flush=True)
        return 0

    def exit(self):
        """Exit with `status`'s code (only on failure: a caller may go on after 0)."""
        code = self.status()
        if code:
            sys.exit(code)
