"""The deflate codec behind chunkwriter's gzip stream: ISA-L's igzip (the
optional ``isal`` package) where it is installed, else the standard zlib.

Deflate was half the CPU time of a .json.gz export with zlib at level 1;
igzip at its level 1 deflates the same text several times faster for a
file as small, and its CRC-32 is faster too (the figures: "The gzip codec"
in benchmarks/RESULTS.md). Both write standard deflate, so the file is a
gzip any reader opens and gunzips to the same bytes; only the compressed
bytes differ between codecs. zlib deflates the same chunk to the same
bytes every time; ISA-L does not promise that (intel/isa-l#140), and
once in a few hundred runs here it did not: compare exports unzipped.

Each codec deflates one chunk on its own (raw deflate, no header, ended by
a sync flush: byte-aligned, so chunks deflated apart join into one stream)
and releases the GIL while it works, so chunks deflate on every core.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import CutimelineError

__all__ = ["CODECS", "AUTO", "Codec", "codec", "END_BLOCK"]

CODECS = ("isal", "zlib")   # the fastest first
AUTO = "auto"               # the first of CODECS that imports
# An empty final block (fixed Huffman codes, end-of-block only): what any
# deflate encoder's final flush writes after a sync flush; it ends a stream.
END_BLOCK = b"\x03\x00"


@dataclass(frozen=True)
class Codec:
    """``deflate(data)``: raw deflate of one chunk (bytes or a contiguous
    uint8 array), sync flushed; ``crc32(data, crc)``: the running CRC-32."""
    name: str
    deflate: Callable[[Any], bytes]
    crc32: Callable[[Any, int], int]


def codec(name: str = AUTO) -> Codec:
    """The codec called ``name``: "auto" (isal when it imports, else zlib),
    "isal" or "zlib"."""
    if not isinstance(name, str):
        raise CutimelineError(f"codec wants a name ('auto', 'isal' or 'zlib'); got "
                              f"{type(name).__name__}.")
    if name == AUTO:
        for each in CODECS:
            found = _load(each)
            if found is not None:
                return found
    if name not in CODECS:
        raise CutimelineError(
            f"codec={name!r} is no gzip codec cutimeline knows; use one of "
            f"{', '.join(map(repr, (AUTO,) + CODECS))}.")
    found = _load(name)
    if found is None:
        raise CutimelineError(
            f"codec={name!r} needs the {name!r} package, which is not installed; "
            f"pip install {name} (or cutimeline[fast]), or use codec='auto'.")
    return found


def _load(name: str) -> Codec | None:
    """The codec, or None when its package does not import."""
    if name == "zlib":
        return _make("zlib", zlib, level=1, mem_level=7)
    try:
        from isal import isal_zlib
    except ImportError:
        return None
    return _make("isal", isal_zlib, level=1, mem_level=8)


def _make(name: str, mod: Any, *, level: int, mem_level: int) -> Codec:
    """A Codec from a module with zlib's interface, at the level and
    memLevel that deflated export text fastest for a file as small (zlib:
    level 1 with a hash table half the default's; isal: level 1; measured
    in "The gzip codec" of benchmarks/RESULTS.md)."""
    sync, method = mod.Z_SYNC_FLUSH, mod.DEFLATED

    def deflate(data: Any) -> bytes:
        z = mod.compressobj(level, method, -15, mem_level)
        return z.compress(data) + z.flush(sync)

    return Codec(name, deflate, mod.crc32)
