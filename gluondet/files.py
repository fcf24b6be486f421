"""Files that matter are written so that a crash leaves the old file or the new one,
never part of one: write a temporary file beside it, sync it, rename it over."""
import os

__all__ = ['atomic_write', 'atomic_save', 'write_synced', 'remove_if_exists']


def atomic_write(path, data):
    """Write ``data`` (str or bytes) to ``path`` through a synced temporary file and a rename."""
    def write(tmp):
        with open(tmp, 'w' if isinstance(data, str) else 'wb') as f:
            f.write(data)
    atomic_save(write, path)


def atomic_save(write, path):
    """Call ``write(temporary path)``, sync the file and rename it to ``path``. An OSError
    names ``path``, not the temporary file."""
    tmp = '%s.tmp%d' % (path, os.getpid())
    try:
        try:
            open(tmp, 'wb').close()     # fails here, with the OSError, for a folder not writable
            write_synced(write, tmp)
            os.replace(tmp, path)
        except OSError as err:
            if err.filename != tmp:
                raise
            raise type(err)(err.errno, err.strerror, path) from None
    finally:
        remove_if_exists(tmp)


def write_synced(write, path):
    """Call ``write(path)``, then flush the file to the disk."""
    write(path)
    with open(path, 'rb+') as f:
        os.fsync(f.fileno())


def remove_if_exists(path):
    if os.path.exists(path):
        os.remove(path)
