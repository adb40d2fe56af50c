"""The bytes of one column in a ``.ctl`` file (format version 3 on).

An integer column (a residual after ``prediction``, int64) keeps its first
value in its manifest entry (``first``: a delta column's first value is a
whole timestamp, which would widen every row) and stores the rest in the
fewest bytes that hold them: zig-zagged when there are negative values
(-1 → 1, 1 → 2: small values of either sign have zero high bytes), cast to
the narrowest of uint8/16/32/64 that holds the largest, and split into byte
planes (all low bytes, then all second bytes…). Each plane is deflated at
level 1 on its own, or kept as it is when deflate would save under an
eighth: the low plane of a random duration is noise, which inflating on
load would only slow down; its high planes are a few distinct values, and
a plane of zeros deflates to nothing. A float64 column is split into planes
the same way. The reader trusts none of it: a size the bytes cannot hold is
refused before anything is allocated.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["pack", "unpack", "pack_bytes", "unpack_bytes", "CodecError"]

WIDTHS = (1, 2, 4, 8)
LEVEL = 1  # deflate level: level 6 (numpy's savez_compressed) was 4× slower for 2% less
PROBE = 1 << 16  # bytes of a plane deflated first to see whether the rest is worth it
MAX_RATIO = 1032  # deflate cannot inflate one byte into more than this many
_LIMITS = [(w, (1 << (8 * w)) - 1) for w in WIDTHS]
_INT64 = (-(1 << 63), (1 << 63) - 1)


class CodecError(ValueError):
    """What is wrong with one stored column (the reader names the file)."""


def pack(values: np.ndarray, fill: bool = True) -> tuple[dict, bytes]:
    """The stored form of an int64 or float64 column: its manifest entry and
    its bytes. ``fill``: a constant may be stored as its value alone (then
    the rows it has are vouched for by another column's bytes)."""
    entry: dict = {}
    if values.dtype.kind == "f":
        width, planes = 8, values.astype("<f8").view("<u8")
    else:
        v = values.astype(np.int64, copy=False)
        if len(v):
            entry["first"], v = int(v[0]), v[1:]
        lo, hi = (int(v.min()), int(v.max())) if len(v) else (0, 0)
        if fill and lo == hi and len(v):  # a constant (thread, device, seq's delta): no bytes
            return dict(entry, fill=lo), b""
        zigzag = lo < 0
        top = max(_zigzag(lo), _zigzag(hi)) if zigzag else hi
        width = next(w for w, limit in _LIMITS if top <= limit)
        if zigzag:
            planes = ((v << 1) ^ (v >> 63)).astype(f"<u{width}")
        else:
            planes = v.astype(f"<u{width}")
        entry["zigzag"] = zigzag
    entry["width"] = width
    stored = [_squeeze(p) for p in _planes(planes, width)]
    entry["planes"] = [[codec, len(data)] for codec, data in stored]
    return entry, b"".join(data for _, data in stored)


def unpack(entry: dict, data: bytes | memoryview, rows: int, kind: str) -> np.ndarray:
    """The column ``pack`` stored: ``rows`` int64 values (``kind`` "i") or
    float64 ("f"); CodecError when the entry and the bytes disagree."""
    first = entry.get("first")
    if kind == "i" and rows:
        if not _int64(first):
            raise CodecError(f"its first value {first!r} is not an int64")
    elif first is not None:
        raise CodecError("it has a first value but no rows")
    n = rows - (first is not None)
    if "fill" in entry:
        fill = entry["fill"]
        if kind != "i" or not _int64(fill) or data:
            raise CodecError(f"its fill value {fill!r} is not one this format writes")
        v = np.full(rows, fill, np.int64)
        if first is not None:
            v[0] = first
        return v
    width, planes, zigzag = entry.get("width"), entry.get("planes"), entry.get("zigzag", False)
    if not _int64(width) or width not in WIDTHS or not isinstance(zigzag, bool) or \
            (kind == "f" and (width != 8 or zigzag)) or \
            not isinstance(planes, list) or len(planes) != width:
        raise CodecError(f"its width {width!r}, zig-zag flag {zigzag!r} or "
                         f"planes are not ones this format writes")
    sizes = [p[1] if isinstance(p, list) and len(p) == 2 else None for p in planes]
    at = 0
    for i, (plane, size) in enumerate(zip(planes, sizes)):
        if not _int64(size) or size < 0 or at + size > len(data):
            raise CodecError(f"its plane {i} claims {size!r} bytes at {at} of {len(data)}")
        _check(plane[0], size, n)  # all before allocating the rows
        at += size
    if at != len(data):
        raise CodecError(f"its planes fill {at} of its {len(data)} bytes")
    u = np.empty((n, width), np.uint8)  # row-major: plane i is column i
    at = 0
    for i, (plane, size) in enumerate(zip(planes, sizes)):
        u[:, i] = np.frombuffer(_inflate(plane[0], data[at:at + size], n), np.uint8)
        at += size
    u = u.view(f"<u{width}").reshape(n)
    if kind == "f":
        return u.view("<f8").astype(np.float64, copy=False)
    if zigzag:  # in the narrow type: the signed value has the same width
        u = (u >> 1) ^ (np.zeros(1, u.dtype) - (u & 1))
    v = np.empty(rows, np.int64)
    v[rows - n:] = u.view(f"<i{width}") if zigzag else u
    if first is not None:
        v[0] = first
    return v


def pack_bytes(raw: bytes) -> tuple[dict, bytes]:
    """Plain bytes (the UTF-8 of the strings): deflated unless that does not pay."""
    codec, data = _squeeze(raw)
    return {"codec": codec, "bytes": len(raw)}, data


def unpack_bytes(entry: dict, data: bytes | memoryview) -> bytes:
    n = entry.get("bytes")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise CodecError(f"its length {n!r} is not a count of bytes")
    return bytes(_inflate(entry.get("codec"), data, n))


def _zigzag(x: int) -> int:
    return 2 * x if x >= 0 else -2 * x - 1


def _int64(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and _INT64[0] <= x <= _INT64[1]


def _planes(planes: np.ndarray, width: int) -> list[bytes]:
    if width == 1:
        return [planes.tobytes()]
    split = planes.view(np.uint8).reshape(-1, width).T
    return [split[i].tobytes() for i in range(width)]


def _squeeze(raw: bytes) -> tuple[str, bytes]:
    if len(raw) > 2 * PROBE and not _pays(raw[:PROBE], zlib.compress(raw[:PROBE], LEVEL)):
        return "raw", raw  # noise: not worth deflating all of it to find out
    packed = zlib.compress(raw, LEVEL)
    return ("deflate", packed) if _pays(raw, packed) else ("raw", raw)


def _pays(raw: bytes, packed: bytes) -> bool:
    return len(packed) < len(raw) - (len(raw) >> 3)


def _check(codec: object, size: int, expected: int) -> None:
    """Whether ``size`` stored bytes can make ``expected`` bytes, before any is made."""
    if codec == "raw":
        if size != expected:
            raise CodecError(f"it holds {size} bytes where its entry promises {expected}")
    elif codec != "deflate":
        raise CodecError(f"its codec {codec!r} is not one this format writes")
    elif expected > MAX_RATIO * size + 64:
        raise CodecError(f"its {size} deflated bytes cannot hold the "
                         f"{expected} its entry promises")


def _inflate(codec: object, data: bytes | memoryview, expected: int) -> bytes | memoryview:
    _check(codec, len(data), expected)
    if codec == "raw":
        return data
    d = zlib.decompressobj()
    try:
        raw = d.decompress(data, expected)
    except zlib.error as exc:
        raise CodecError(f"its deflated bytes are corrupt ({exc})") from None
    if len(raw) != expected or not d.eof or d.unconsumed_tail or d.unused_data:
        raise CodecError(f"its deflated bytes make {len(raw)}"
                         f"{'' if d.eof else '+'} bytes, not the {expected} "
                         f"its entry promises")
    return raw
