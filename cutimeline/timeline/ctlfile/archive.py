"""The members of a ``.ctl`` zip archive, read without trusting the archive.

``fileformat`` reads every member through here: its compression method
must be one cutimeline writes (stored or deflated: zipfile would otherwise
reach for bz2 or lzma, or fail with NotImplementedError), its claimed size
one its stored bytes can make (deflate makes at most ``MAX_RATIO`` bytes of
one) before any is inflated, and a name may appear once. ``json_member``
parses JSON text that the writer made with ``allow_nan=False``, so NaN,
Infinity and numbers past float64 are damage, as is nesting deeper than the
parser can follow. ``npy_array`` reads a column of the older ``.npz``
layout (formats 1 and 2): its header must be the one ``numpy.save`` writes
for a 1-d array of the expected dtype, and its bytes exactly what that
header promises, checked before the array is made (``np.load`` would
allocate what a header claims, and evaluates the header as Python).
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import zipfile
from typing import Any

import numpy as np

from ...errors import CutimelineError
from .columncodec import MAX_RATIO

__all__ = ["check_names", "member", "json_member", "npy_array"]

_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
# numpy.save's header of a 1-d array (format 1.0 and 2.0), padding included
_NPY = re.compile(rb"\{'descr': '([^']{1,16})', 'fortran_order': (?:True|False), "
                  rb"'shape': \((\d{1,19}),\), \} *\n")
_NPY_MAGIC = {b"\x93NUMPY\x01\x00": "<H", b"\x93NUMPY\x02\x00": "<I"}


def check_names(path: str, z: zipfile.ZipFile) -> set[str]:
    """The members' names; a name twice is damage (which copy zipfile reads
    is its choice, not the writer's)."""
    names = z.namelist()
    if len(set(names)) != len(names):
        twice = sorted(n for n in set(names) if names.count(n) > 1)[0]
        raise CutimelineError(f"{path} is damaged: it holds the member {twice} more "
                              f"than once, which cutimeline never writes.")
    return set(names)


def member(path: str, z: zipfile.ZipFile, name: str) -> bytes:
    """The bytes of member ``name``, once its method and sizes are possible."""
    info = z.getinfo(name)
    method = _METHODS.get(info.compress_type)
    if method is None:
        raise CutimelineError(f"{path} is damaged: its member {name} claims compression "
                              f"method {info.compress_type}, but cutimeline writes only "
                              f"stored (0) or deflated (8) members.")
    if info.flag_bits & 0x41:  # bit 0: encrypted, bit 6: strong encryption
        raise CutimelineError(f"{path} is damaged: its member {name} is flagged "
                              f"encrypted, which cutimeline never writes.")
    packed = info.compress_size
    most = packed if method == "stored" else MAX_RATIO * packed + 64
    if packed > os.path.getsize(path) or info.file_size > most:
        raise CutimelineError(f"{path} is damaged: its member {name} claims "
                              f"{info.file_size} bytes, which its {packed} {method} bytes "
                              f"cannot make.")
    # read as many bytes as claimed, no more: zipfile's read() would inflate
    # whatever the stream holds before cutting it to the claimed size
    with z.open(info) as fp:
        data = fp.read(info.file_size)
        if len(data) != info.file_size or fp.read(1):
            raise CutimelineError(f"{path} is damaged: its member {name} holds other than "
                                  f"the {info.file_size} bytes it claims.")
    return data


def json_member(path: str, text: bytes, name: str) -> Any:
    """The JSON document ``text`` (of member ``name``)."""
    try:
        return json.loads(text.decode("utf-8"), parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        raise CutimelineError(f"{path} is damaged: its {name} is nested too deeply "
                              f"to be one cutimeline wrote.") from None


def _constant(word: str) -> float:
    raise ValueError(f"the JSON holds {word}, which cutimeline never writes")


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"the JSON number {text[:30]} is beyond float64")
    return x


def npy_array(path: str, z: zipfile.ZipFile, name: str, dtype: np.dtype) -> np.ndarray:
    """The 1-d ``dtype`` array of ``.npy`` member ``name`` (read-only, no copy)."""
    data = member(path, z, name)
    fmt = _NPY_MAGIC.get(data[:8])
    size = struct.calcsize(fmt) if fmt else 0
    match = _NPY.fullmatch(data, 8 + size, 8 + size + struct.unpack_from(fmt, data, 8)[0]) \
        if fmt and len(data) >= 8 + size else None
    if match is None:
        raise CutimelineError(f"{path} is damaged: its member {name} is not a 1-d "
                              f"array as numpy.save writes one.")
    descr, rows = match[1].decode("ascii", "replace"), int(match[2])
    if descr != dtype.str:
        raise CutimelineError(f"{path} is damaged: column {name} claims dtype {descr!r}, "
                              f"where this format stores {dtype.str!r}.")
    body = memoryview(data)[match.end():]
    if len(body) != rows * dtype.itemsize:
        raise CutimelineError(f"{path} is damaged: column {name} claims {rows} values "
                              f"but holds {len(body)} bytes.")
    return np.frombuffer(body, dtype)
