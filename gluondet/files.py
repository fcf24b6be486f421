"""Files that matter are written so that a crash leaves the old file or the new one,
never part of one: write a temporary file beside it, sync it, rename it over.

What MXNet writes itself goes through Python here: MXNet's C++ file stream loses the end of
a file on a full disk without an error (it does not check ``fclose``) and reports the other
write errors without their errno, so `save_ndarrays` writes MXNet's ``.params`` format, and
`short_write_error` turns a short file from MXNet into the ``OSError`` the system would give.
"""
import errno
import os
import struct

__all__ = ['atomic_write', 'atomic_save', 'atomic_save_all', 'naming', 'write_synced',
           'remove_if_exists', 'save_ndarrays', 'save_parameters', 'short_write_error',
           'writer']

NDARRAY_LIST_MAGIC = 0x112      # MXNet's kMXAPINDArrayListMagic


def atomic_write(path, data):
    """Write ``data`` (str or bytes) to ``path`` through a synced temporary file and a rename."""
    atomic_save(writer(data), path)


def writer(data):
    """A ``write(path)`` of ``data`` (str or bytes), for `atomic_save_all`."""
    def write(path):
        with open(path, 'w' if isinstance(data, str) else 'wb') as f:
            f.write(data)
    return write


def atomic_save(write, path):
    """Call ``write(temporary path)``, sync the file and rename it to ``path``. An OSError
    names ``path``, not the temporary file."""
    atomic_save_all([(write, path)])


def atomic_save_all(files):
    """`atomic_save` of several files ``[(write, path), ...]``, all or none: each is written
    to its temporary file, and they are renamed into place when every one is written. An
    OSError names the user's path, not the temporary file; the temporary files are removed."""
    tmps = ['%s.tmp%d' % (path, os.getpid()) for _, path in files]
    try:
        for (write, path), tmp in zip(files, tmps):
            try:
                open(tmp, 'wb').close()     # the OSError of a folder not writable, here
                write_synced(write, tmp)
            except OSError as err:
                raise naming(err, tmp, path) from None
        for (_, path), tmp in zip(files, tmps):
            os.replace(tmp, path)
    finally:
        for tmp in tmps:
            remove_if_exists(tmp)


def naming(err, tmp, path):
    """The OSError ``err`` naming ``path`` where it names the temporary file ``tmp`` or no
    file (as a failed ``write`` or ``close``)."""
    if err.filename not in (tmp, None) or err.errno is None:
        return err
    return type(err)(err.errno, err.strerror, path)


def write_synced(write, path):
    """Call ``write(path)``, then flush the file to the disk."""
    write(path)
    with open(path, 'rb+') as f:
        os.fsync(f.fileno())


def remove_if_exists(path):
    if os.path.exists(path):
        os.remove(path)


def save_ndarrays(path, arrays):
    """``mx.nd.save(path, arrays)`` of a ``{name: NDArray}`` dict, the same bytes, written
    by Python (so a full disk raises ``OSError``; see the module docstring)."""
    with open(path, 'wb') as f:
        f.write(struct.pack('<QQQ', NDARRAY_LIST_MAGIC, 0, len(arrays)))
        for array in arrays.values():   # each as MXNet serializes one NDArray
            f.write(array.__getstate__()['handle'])
        f.write(struct.pack('<Q', len(arrays)))
        for name in arrays:
            key = name.encode('utf-8')
            f.write(struct.pack('<Q', len(key)) + key)


def save_parameters(net, path):
    """``net.save_parameters(path)`` (loads with ``net.load_parameters``), by `save_ndarrays`."""
    save_ndarrays(path, {name: param._reduce()
                         for name, param in net._collect_params_with_prefix().items()})


def short_write_error(path, missing):
    """The ``OSError`` of a file MXNet's writer left ``missing`` bytes short (or failed to
    write ``missing`` bytes to): EROFS when ``path``'s file system is read-only, ENOSPC when it
    has less than ``missing`` bytes free, else EIO."""
    stat = os.statvfs(os.path.dirname(os.path.abspath(path)))
    if stat.f_flag & os.ST_RDONLY:
        code = errno.EROFS
    elif stat.f_bavail * stat.f_frsize < missing:
        code = errno.ENOSPC
    else:
        return OSError(errno.EIO, 'MXNet could not write %d bytes of it' % missing, path)
    return OSError(code, os.strerror(code), path)
