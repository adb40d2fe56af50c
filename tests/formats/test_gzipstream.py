"""gzipstream.py: the deflate codec of a .json.gz export, ISA-L's igzip
where the isal package imports, else zlib; the gunzipped bytes are the
same whichever, and a missing package falls back to zlib."""

from __future__ import annotations

import functools
import gzip
import importlib.util
import io
import sys
import zlib

import numpy as np
import pytest
from test_chrome import odd

import cutimeline as ctl
from cutimeline import CutimelineError
from cutimeline.formats import chrome, jsonrows
from cutimeline.formats.chunkwriter import write_chunks
from cutimeline.formats.gzipstream import END_BLOCK, codec

from handmade import random_timeline

HAS_ISAL = importlib.util.find_spec("isal") is not None
needs_isal = pytest.mark.skipif(not HAS_ISAL, reason="the isal package is not installed")
CODECS = ["zlib", pytest.param("isal", marks=needs_isal)]


@pytest.fixture
def no_isal(monkeypatch):
    """As if isal were not installed: importing it fails."""
    monkeypatch.setitem(sys.modules, "isal", None)
    monkeypatch.setitem(sys.modules, "isal.isal_zlib", None)


def trace_like(seed: int, size: int) -> bytes:
    """Bytes that compress like a trace: repeated keys, varying digits."""
    rng = np.random.default_rng(seed)
    rows = [b'{"ph": "X", "name": "aten::mm", "ts": %d.%03d, "dur": %d},\n'
            % (t, t % 1000, d) for t, d in zip(rng.integers(0, 10**12, size // 60).tolist(),
                                               rng.integers(0, 10**4, size // 60).tolist())]
    return b"".join(rows)[:size]


@pytest.mark.parametrize("name", CODECS)
def test_chunks_deflated_apart_make_one_stream(name):
    c = codec(name)
    assert c.name == name
    parts = [trace_like(k, size) for k, size in enumerate([0, 1, 70_000, 5, 300_000])]
    parts.append(np.frombuffer(trace_like(9, 50_000), np.uint8))   # arrays too
    stream = b"".join(c.deflate(p) for p in parts) + END_BLOCK
    d = zlib.decompressobj(-zlib.MAX_WBITS)
    whole = b"".join(bytes(p) for p in parts)
    assert d.decompress(stream) == whole and d.eof and d.unused_data == b""
    crc = 0
    for p in parts:
        crc = c.crc32(p, crc)
    assert crc == zlib.crc32(whole)


@needs_isal
def test_auto_takes_isal_where_it_imports():
    assert codec().name == codec("auto").name == "isal"


def test_auto_falls_back_to_zlib_without_isal(no_isal):
    assert codec("auto").name == "zlib"
    with pytest.raises(CutimelineError, match="needs the 'isal' package.*pip install isal"):
        codec("isal")


def test_an_unknown_codec_is_refused_before_any_file(tmp_path):
    with pytest.raises(CutimelineError, match="codec='gzip9' is no gzip codec.*'auto'"):
        codec("gzip9")
    tl = odd()
    with pytest.raises(CutimelineError, match="codec='gzip9'"):
        ctl.export_chrome(tl, tmp_path / "x.json.gz", codec="gzip9")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("threads", [1, 3])
def test_write_chunks_gunzips_the_same_by_every_codec(threads):
    parts = [trace_like(k, 40_000 + 997 * k) for k in range(12)]
    jobs = [functools.partial(bytes, p) for p in parts]
    packed = {}
    for name in ("zlib", "isal") if HAS_ISAL else ("zlib",):
        out = io.BytesIO()
        write_chunks(out, jobs, gzip=True, threads=threads, codec=name)
        packed[name] = out.getvalue()
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)   # one gzip member, nothing after
        assert d.decompress(packed[name]) == b"".join(parts) and d.eof and not d.unused_data
    if HAS_ISAL:   # the codec named is the one that ran
        assert packed["isal"] != packed["zlib"]


def exported(tl, path, **kw) -> tuple[bytes, bytes]:
    """The file export_chrome writes, as it is and gunzipped."""
    ctl.export_chrome(tl, path, **kw)
    data = path.read_bytes()
    return data, gzip.decompress(data)


@pytest.mark.parametrize("make", [lambda: odd(1_700_000_000_123_456_789),
                                  lambda: random_timeline(5, n=3_000, streams=3)])
def test_export_gunzips_to_the_plain_json_by_every_codec(tmp_path, monkeypatch, make):
    tl = make()
    monkeypatch.setattr(jsonrows, "CHUNK_BYTES", 3_000)   # many chunks
    monkeypatch.setattr(chrome, "POOL_ROWS", 0)            # worker threads
    ctl.export_chrome(tl, tmp_path / "plain.json")
    plain = (tmp_path / "plain.json").read_bytes()
    zl = exported(tl, tmp_path / "zlib.json.gz", codec="zlib")
    assert zl[1] == plain
    auto = exported(tl, tmp_path / "auto.json.gz")
    assert auto[1] == plain
    if HAS_ISAL:
        isal = exported(tl, tmp_path / "isal.json.gz", codec="isal")
        assert isal[1] == plain
        # auto deflated with ISA-L, not zlib; two ISA-L files are not compared
        # byte for byte (its deflate need not be deterministic: intel/isa-l#140)
        assert codec("auto").name == "isal" and auto[0] != zl[0] and isal[0] != zl[0]
    else:
        assert auto[0] == zl[0]


def test_export_without_isal_writes_what_zlib_writes(tmp_path, no_isal):
    tl = random_timeline(6, n=500, streams=2)
    auto = exported(tl, tmp_path / "auto.json.gz")
    assert auto == exported(tl, tmp_path / "zlib.json.gz", codec="zlib")
    with pytest.raises(CutimelineError, match="pip install isal"):
        ctl.export_chrome(tl, tmp_path / "isal.json.gz", codec="isal")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["auto.json.gz", "zlib.json.gz"]


@pytest.mark.parametrize("name", CODECS)
def test_a_path_that_cannot_be_written_is_refused_by_every_codec(tmp_path, name):
    tl = odd()
    (tmp_path / "a file").write_bytes(b"")
    for bad in (tmp_path / "missing" / "x.json.gz", tmp_path / "a file" / "x.json.gz"):
        with pytest.raises(CutimelineError, match="folder .* does not exist"):
            ctl.export_chrome(tl, bad, codec=name)
    assert [p.name for p in tmp_path.iterdir()] == ["a file"]
