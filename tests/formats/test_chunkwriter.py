"""chunkwriter.py: chunks made by worker threads, written in order, plain
or as one gzip member deflated in parallel."""

from __future__ import annotations

import functools
import gzip
import importlib.util
import io
import threading
import zlib

import numpy as np
import pytest

from cutimeline.formats.chunkwriter import write_chunks

CODECS = ["zlib", pytest.param("isal", marks=pytest.mark.skipif(
    importlib.util.find_spec("isal") is None, reason="the isal package is not installed"))]


def chunks(seed: int, count: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    words = [b'{"ph": "X", ', b'"ts": 123.456', b", ", b"\n", rng.bytes(50)]
    return [b"".join(words[int(k)] for k in rng.integers(0, len(words), rng.integers(0, 3_000)))
            for _ in range(count)]


def written(parts, **kw) -> bytes:
    out = io.BytesIO()
    n = write_chunks(out, [functools.partial(bytes, p) for p in parts], **kw)
    assert n == len(out.getvalue())
    return out.getvalue()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_plain_and_gzip_hold_the_chunks_in_order(threads, codec):
    parts = chunks(threads, 40)
    whole = b"".join(parts)
    assert written(parts, gzip=False, threads=threads, codec=codec) == whole
    packed = written(parts, gzip=True, threads=threads, codec=codec)
    assert gzip.decompress(packed) == whole
    d = zlib.decompressobj(zlib.MAX_WBITS | 16)   # one gzip member, nothing after it
    assert d.decompress(packed) == whole and d.eof and d.unused_data == b""
    # The same bytes however run: zlib's deflate is deterministic; ISA-L
    # does not promise it (intel/isa-l#140; one run in a loaded suite of
    # ~2,000 deflated a chunk differently), so its files are compared
    # unzipped, above.
    if codec == "zlib":
        assert packed == written(parts, gzip=True, threads=1, codec=codec)


def test_uint8_arrays_and_no_chunks():
    parts = [np.frombuffer(p, np.uint8) for p in chunks(9, 5)]
    out = io.BytesIO()
    write_chunks(out, [functools.partial(lambda p: p, p) for p in parts], gzip=True, threads=2)
    assert gzip.decompress(out.getvalue()) == b"".join(p.tobytes() for p in parts)
    assert gzip.decompress(written([], gzip=True)) == b""
    assert written([], gzip=False) == b""


def test_a_failing_job_stops_the_write_and_its_workers():
    started = []

    def job(i):
        started.append(i)
        if i == 3:
            raise RuntimeError("chunk 3 failed")
        return b"x" * 1000

    before = threading.active_count()
    with pytest.raises(RuntimeError, match="chunk 3"):
        write_chunks(io.BytesIO(), (functools.partial(job, i) for i in range(1_000)),
                     gzip=True, threads=2)
    assert len(started) < 20   # jobs beyond those in flight never ran
    assert threading.active_count() == before


def test_a_failing_write_stops_the_workers():
    class Full(io.BytesIO):
        def write(self, data):
            if self.tell() > 5_000:
                raise OSError(28, "No space left on device")
            return super().write(data)

    before = threading.active_count()
    with pytest.raises(OSError, match="No space"):
        write_chunks(Full(), (functools.partial(bytes, 3_000) for _ in range(1_000)),
                     gzip=False, threads=2)
    assert threading.active_count() == before
