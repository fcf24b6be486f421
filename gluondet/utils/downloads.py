"""``download(url, path)``: GluonCV's ``gluoncv.utils.download`` on gluondet's downloader.

The transfer is the weight store's (:mod:`gluondet.model_zoo.store`): a progress bar,
retries after a network failure, a 5xx answer or a transfer cut short (checked against
``Content-Length``), none after a 4xx. The file is written to a temporary file beside the
destination, its sha1 checked there, and only then renamed into place
(:func:`gluondet.files.atomic_save`): a failed or mismatching download leaves the old file
(or none), never part of one.
"""
import hashlib
import os
import warnings

from ..errors import UserError

__all__ = ['DownloadError', 'check_sha1', 'download']


class DownloadError(UserError, RuntimeError):
    """A URL could not be downloaded (an HTTP error, the network), or its content has another
    sha1 than expected. A RuntimeError, as GluonCV's failed download; a sha1 mismatch is also
    a UserWarning, the exception GluonCV raises for one."""


class ChecksumError(DownloadError, UserWarning):
    """The downloaded content does not have the expected sha1 (nothing was saved)."""


def _file_sha1(filename):
    digest = hashlib.sha1()
    with open(filename, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def _matches(found, expected):
    """GluonCV's comparison: the shorter of the two hex digests is a prefix of the other (an
    8-digit short hash matches)."""
    n = min(len(found), len(expected))
    return found[:n] == expected[:n].lower()


def check_sha1(filename, sha1_hash):
    """Whether the sha1 of the file's content matches ``sha1_hash``.

    Parameters
    ----------
    filename : str
        Path to the file.
    sha1_hash : str
        Expected sha1 in hexadecimal digits; a shorter prefix of it (GluonCV's 8-digit
        short hashes) is compared on its length.

    Returns
    -------
    bool
    """
    return _matches(_file_sha1(filename), sha1_hash)


def _destination(url, path):
    name = url.split('/')[-1]
    if path is None:
        if not name:
            raise ValueError('cannot name the file of %r (the URL ends with "/"): give path'
                             % url)
        return name
    path = os.path.expanduser(path)
    if os.path.isdir(path):
        if not name:
            raise ValueError('cannot name the file of %r in the folder %s (the URL ends with '
                             '"/"): give a file path' % (url, path))
        return os.path.join(path, name)
    return path


def download(url, path=None, overwrite=False, sha1_hash=None, retries=5, verify_ssl=True):
    """Download ``url`` to a file, unless a file with the expected content is there.

    Parameters
    ----------
    url : str
        The URL (http or https).
    path : str, optional
        Where to save: a file path, or an existing folder (the file is then named as the
        URL's last part). Default: the URL's last part in the current folder. ``~``
        expands; missing parent folders are created.
    overwrite : bool, default False
        Download even if the file exists.
    sha1_hash : str, optional
        Expected sha1 of the content (hex; a prefix such as an 8-digit short hash is
        compared on its length). An existing file that does not match is downloaded again;
        a download that does not match raises and saves nothing.
    retries : int, default 5
        Attempts in all (as MXNet's ``gluon.utils.download``; at least one) when the
        network fails, the server answers 408, 429 or 5xx, or the transfer is cut short.
    verify_ssl : bool, default True
        Check the server's TLS certificate (False warns).

    Returns
    -------
    str
        The path of the file.

    Raises
    ------
    DownloadError
        The server refused the URL (4xx), or every attempt failed; or (``ChecksumError``,
        also a UserWarning as in GluonCV) the content's sha1 is not ``sha1_hash``.
    """
    from ..files import atomic_save
    from ..model_zoo import store

    fname = _destination(url, path)
    if int(retries) < 0:
        raise ValueError('retries must be at least 0, got %r' % (retries,))
    if not verify_ssl:
        warnings.warn('Downloading %s without checking its TLS certificate (verify_ssl=False)'
                      % url)
    if not overwrite and os.path.isfile(fname) and (not sha1_hash
                                                    or check_sha1(fname, sha1_hash)):
        return fname
    folder = os.path.dirname(os.path.abspath(fname))
    os.makedirs(folder, exist_ok=True)
    print('Downloading %s from %s...' % (fname, url))

    def fetch(tmp):
        try:
            store._get_with_retries(url, tmp, attempts=max(int(retries), 1), verify=verify_ssl)
        except store._Refused as err:
            raise DownloadError('Failed downloading url %s: the server answered %s'
                                % (url, err)) from None
        except store._Retryable as err:
            raise DownloadError('Failed downloading url %s after %d attempts: %s'
                                % (url, max(int(retries), 1), err)) from None
        if sha1_hash:
            found = _file_sha1(tmp)
            if not _matches(found, sha1_hash):
                raise ChecksumError('Downloaded %s from %s, but its sha1 is %s, not %s: the '
                                    'server has another file or the transfer was damaged; '
                                    '%s was not written' % (os.path.basename(fname), url,
                                                            found, sha1_hash, fname))

    atomic_save(fetch, fname)
    return fname
