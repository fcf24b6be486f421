"""Read a file written by ``torch.save`` without torch: tensors come back as numpy arrays.

Both of torch's layouts are read: the zip archive of torch >= 1.6 (``<name>/data.pkl``,
whose persistent ids name the entries ``<name>/data/<key>`` holding each storage's bytes)
and the older single stream (magic number, protocol, system info, the pickle, the list of
storage keys, then each storage as an int64 element count and its bytes). The unpickler
only builds what a checkpoint of tensors, lists and dicts needs (the names in
``_GLOBALS``); any other class in the file is refused with its name, so reading an
untrusted file runs no code from it.
"""
import collections
import pickle
import struct
import zipfile

import numpy as np

__all__ = ['load_torch_file']

_DTYPES = {'DoubleStorage': np.float64, 'FloatStorage': np.float32,
           'HalfStorage': np.float16, 'BFloat16Storage': 'bfloat16',
           'LongStorage': np.int64, 'IntStorage': np.int32, 'ShortStorage': np.int16,
           'CharStorage': np.int8, 'ByteStorage': np.uint8, 'BoolStorage': np.bool_}
_LEGACY_MAGIC = 0x1950a86a20f9469cfc6c


class _StorageType:
    """What the pickle's ``torch.FloatStorage`` (and the like) stands for: its dtype."""

    def __init__(self, name):
        self.name = name

    @property
    def itemsize(self):
        return 2 if self.name == 'BFloat16Storage' else np.dtype(_DTYPES[self.name]).itemsize

    def array(self, data):
        """The storage's bytes as a flat float32 (bfloat16) or native array."""
        if self.name == 'BFloat16Storage':
            return (np.frombuffer(data, '<u2').astype(np.uint32) << 16).view(np.float32)
        return np.frombuffer(data, np.dtype(_DTYPES[self.name]).newbyteorder('<'))


def _rebuild_tensor(storage, offset, size, stride, *_):
    """``torch._utils._rebuild_tensor_v2``: a strided view of a storage, copied."""
    if 0 in size:
        return np.zeros(size, storage.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if offset < 0 or min(stride, default=0) < 0 or last >= len(storage):
        raise ValueError('a tensor of size %s, stride %s at %d lies outside its storage of %d'
                         % (tuple(size), tuple(stride), offset, len(storage)))
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=tuple(size),
        strides=tuple(s * storage.itemsize for s in stride))
    return np.array(view)       # a copy, C order


def _rebuild_parameter(data, *_):
    return data


_GLOBALS = {('collections', 'OrderedDict'): collections.OrderedDict,
            ('torch._utils', '_rebuild_tensor_v2'): _rebuild_tensor,
            ('torch._utils', '_rebuild_tensor'): _rebuild_tensor,
            ('torch._utils', '_rebuild_parameter'): _rebuild_parameter}
_GLOBALS.update({('torch', name): _StorageType(name) for name in _DTYPES})


class _Unpickler(pickle.Unpickler):
    """Unpickler of torch's pickles: ``load_storage(storage type, key, count)`` gives the
    bytes of a storage."""

    def __init__(self, file, load_storage, source):
        super().__init__(file, encoding='utf-8')
        self._load_storage = load_storage
        self._source = source
        self._storages = {}

    def find_class(self, module, name):
        if (module, name) not in _GLOBALS:
            raise ValueError('%s: holds a %s.%s, which a checkpoint of tensors does not '
                             '(not read)' % (self._source, module, name))
        return _GLOBALS[module, name]

    def persistent_load(self, pid):
        kind, storage_type, key, _location, count = pid[:5]
        if kind != 'storage' or not isinstance(storage_type, _StorageType):
            raise ValueError('%s: unknown persistent object %r' % (self._source, pid[:2]))
        if key not in self._storages:
            self._storages[key] = self._load_storage(storage_type, key, count)
        storage = self._storages[key]
        view = pid[5] if len(pid) > 5 else None
        if view is not None:       # the legacy layout's views: (view key, offset, count)
            _view_key, offset, view_count = view
            storage = storage[offset:offset + view_count]
        return storage


def _load_zip(path, archive):
    names = archive.namelist()
    pickles = [n for n in names if n.endswith('/data.pkl') or n == 'data.pkl']
    if len(pickles) != 1:
        raise ValueError('%s: a zip archive without one data.pkl (not a torch.save file)'
                         % path)
    prefix = pickles[0][:-len('data.pkl')]
    if prefix + 'byteorder' in names and archive.read(prefix + 'byteorder') != b'little':
        raise ValueError('%s: written on a big-endian machine (not supported)' % path)

    def load_storage(storage_type, key, count):
        data = archive.read('%sdata/%s' % (prefix, key))
        if len(data) < count * storage_type.itemsize:
            raise ValueError('%s: storage %s holds %d bytes, %d expected (truncated file?)'
                             % (path, key, len(data), count * storage_type.itemsize))
        return storage_type.array(data[:count * storage_type.itemsize])

    with archive.open(pickles[0]) as stream:
        return _Unpickler(stream, load_storage, path).load()


def _load_legacy(path, stream):
    def read_pickle():
        return pickle.load(stream, encoding='utf-8')   # magic, protocol, info: plain data

    try:
        magic = read_pickle()
    except Exception:        # pylint: disable=broad-except  (any garbage: not a torch file)
        magic = None
    if magic != _LEGACY_MAGIC:
        raise ValueError('%s: not a file written by torch.save (neither a zip archive nor '
                         "torch's older format)" % path)
    read_pickle()
    read_pickle()
    start = stream.tell()
    types = {}

    def stand_in(storage_type, key, count):     # the bytes follow the pickle: read later
        types[key] = storage_type
        return np.zeros(count, storage_type.array(b'').dtype)

    _Unpickler(stream, stand_in, path).load()
    arrays = {}
    for key in read_pickle():
        count = struct.unpack('<q', stream.read(8))[0]
        size = count * types[key].itemsize
        data = stream.read(size)
        if len(data) != size:
            raise ValueError('%s: storage %s is cut short (truncated file?)' % (path, key))
        arrays[key] = types[key].array(data)
    stream.seek(start)      # again, over the storages' bytes
    return _Unpickler(stream, lambda _type, key, _count: arrays[key], path).load()


def load_torch_file(path):
    """The object saved by ``torch.save`` in ``path``, tensors as numpy arrays.

    Tensors keep their dtype (bfloat16 becomes float32); dicts, lists and numbers are
    themselves. Raises ValueError naming ``path`` when it is not such a file, is cut short,
    or holds objects other than tensors and plain data.
    """
    try:
        with open(path, 'rb') as stream:
            if stream.read(4) == b'PK\x03\x04':      # a zip archive (complete or not)
                with zipfile.ZipFile(stream) as archive:
                    return _load_zip(path, archive)
            stream.seek(0)
            return _load_legacy(path, stream)
    except (zipfile.BadZipFile, EOFError, pickle.UnpicklingError, KeyError,
            struct.error) as err:
        raise ValueError('%s: not a readable torch.save file (%s: %s)'
                         % (path, type(err).__name__, err)) from None
    except ValueError as err:
        if str(err).startswith(str(path)):
            raise
        raise ValueError('%s: %s' % (path, err)) from None
