"""List the GPU code a shared library carries: the entries of its ``.nv_fatbin`` section.

    python benchmarks/fatbin_archs.py path/to/libmxnet.so

Each CUDA translation unit adds a fat-binary container (magic 0xBA55ED50, then its header
size and payload size) holding one entry per target: kind 1 is PTX (``compute_XX``, which
the driver can compile for newer GPUs), kind 2 a cubin of machine code (``sm_XX``); the
entry's architecture is the 32-bit number at byte 28 of its header. Prints each target
with the number of containers that hold it. Needs no CUDA tools (cuobjdump does the same).
"""
import collections
import struct
import sys

MAGIC = 0xBA55ED50
KINDS = {1: 'PTX compute_%d', 2: 'SASS sm_%d'}


def section(path, wanted=b'.nv_fatbin'):
    """The bytes of the ELF64 section ``wanted`` of ``path``."""
    with open(path, 'rb') as f:
        data = f.read()
    if data[:5] != b'\x7fELF\x02':
        sys.exit('%s: not a 64-bit ELF file' % path)
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3A)
    headers = [struct.unpack_from('<IIQQQQ', data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for name, _type, _flags, _addr, offset, size in headers:
        if data[names + name:data.index(b'\0', names + name)] == wanted:
            return data[offset:offset + size]
    sys.exit('%s: no %s section (no CUDA code)' % (path, wanted.decode()))


def targets(fatbin):
    """Yield ``'SASS sm_86'`` / ``'PTX compute_86'`` for every entry of every container."""
    pos = 0
    while pos + 16 <= len(fatbin):
        magic, _version, header, size = struct.unpack_from('<IHHQ', fatbin, pos)
        if magic != MAGIC:            # containers are 8-byte aligned, padding between them
            pos += 8
            continue
        entry, end = pos + header, pos + header + size
        while entry < end:
            kind, _, entry_header, entry_size = struct.unpack_from('<HHIQ', fatbin, entry)
            arch, = struct.unpack_from('<I', fatbin, entry + 28)
            yield KINDS.get(kind, 'kind %d, arch %%d' % kind) % arch
            entry += entry_header + entry_size
        pos = end


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    for target, count in sorted(collections.Counter(targets(section(sys.argv[1]))).items()):
        print('%-16s in %d containers' % (target, count))


if __name__ == '__main__':
    main()
