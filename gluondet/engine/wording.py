"""How the engine's messages name a setting the user can change, in the words of what they ran.

A setting is named by its training commands' flag destination (``lr_warmup``, ``resume``),
which is also `gluondet.Detector.train`'s keyword. A message asks `setting` for its words:
the commands' flags by default (``--lr-warmup``, ``--resume auto``); inside `speaking`,
another language: `keyword` (``lr_warmup=``, ``resume='auto'``), or None for a caller that
takes none of these settings (``gluondet demo``), to whom a message offers none.
"""
import contextlib
import contextvars

__all__ = ['flag', 'keyword', 'setting', 'speaking']


def flag(dest, value=None):
    """The training commands' flag: ``--lr-warmup``, ``--resume auto``."""
    name = '--' + dest.replace('_', '-')
    return name if value is None else '%s %s' % (name, value)


def keyword(dest, value=None):
    """`gluondet.Detector.train`'s keyword: ``lr_warmup=``, ``resume='auto'``."""
    return '%s=%s' % (dest, '' if value is None else repr(value))


_LANGUAGE = contextvars.ContextVar('language', default=flag)


@contextlib.contextmanager
def speaking(language):
    """Inside, `setting` speaks ``language``: `flag`, `keyword` or None (no setting)."""
    token = _LANGUAGE.set(language)
    try:
        yield
    finally:
        _LANGUAGE.reset(token)


def setting(dest, value=None):
    """How the user sets ``dest`` (to ``value``) in the language spoken here; None if they
    cannot (`speaking`)."""
    language = _LANGUAGE.get()
    return None if language is None else language(dest, value)
