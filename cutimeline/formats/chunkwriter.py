"""Writing a file from chunks of bytes that worker threads make, in order:
as they are, or as one gzip member whose chunks are deflated in parallel.

Each job is a function returning a chunk (bytes or a uint8 array). Workers
run the jobs (and deflate their chunks) while the calling thread writes the
finished ones in order, so formatting and compression use every core: numpy
and zlib let go of the GIL while they work. At most two chunks a worker are
in flight, so memory stays a few chunks whatever the file's size.

The gzip stream is laid out the way pigz lays out its own: each chunk a
run of deflate blocks ended by a sync flush (byte-aligned, so chunks
deflated apart join into one stream), then an empty final block and the
CRC-32 and length of the whole. Any gzip reader reads it as one member.
The codec (gzipstream.py) is ISA-L's igzip where installed, else zlib.
"""

from __future__ import annotations

import collections
import contextlib
import os
import struct
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

from .gzipstream import AUTO, END_BLOCK, codec as find_codec

__all__ = ["write_chunks", "workers"]

# Magic, deflate, no flags; mtime 0 (the same trace, the same bytes with zlib);
# "fastest" (deflate level 1 for either codec: zlib's level 6 is 3x
# slower for a file only a quarter smaller); OS unknown.
_HEADER = b"\x1f\x8b\x08\x00" + b"\x00\x00\x00\x00" + b"\x04\xff"


def workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        return os.cpu_count() or 1


def write_chunks(raw: BinaryIO, jobs: Iterable[Callable[[], Any]], *, gzip: bool,
                 threads: int | None = None, codec: str = AUTO) -> int:
    """Write the chunks of ``jobs`` (bytes or contiguous uint8 arrays), in
    order, to ``raw`` (gzipped when ``gzip``); the bytes written.
    ``threads``: workers (default: one a core; 1 runs every job in the
    calling thread). ``codec``: the deflate codec, "auto", "isal" or "zlib"
    (gzipstream.py; the gunzipped bytes are the same whichever)."""
    threads = workers() if threads is None else threads
    found = find_codec(codec)
    deflate, crc32 = found.deflate, found.crc32

    def run(job: Callable[[], Any]) -> tuple[Any, bytes | None]:
        data = job()
        return data, deflate(data) if gzip else None

    crc, size, written = 0, 0, 0
    if gzip:
        written += raw.write(_HEADER)
    # closing: a failed write stops the workers now, not when the
    # traceback that holds this frame goes.
    with contextlib.closing(_in_order(run, jobs, threads)) as chunks:
        for data, packed in chunks:
            if gzip:
                crc, size = crc32(data, crc), size + len(memoryview(data))
                written += raw.write(packed)
            else:
                written += raw.write(data)
    if gzip:
        written += raw.write(END_BLOCK + struct.pack("<II", crc, size & 0xFFFFFFFF))
    return written


def _in_order(run: Callable, jobs: Iterable, threads: int) -> Iterable:
    """``run(job)`` of each job, in order; in a pool of ``threads``."""
    if threads <= 1:
        yield from map(run, jobs)
        return
    pending: collections.deque[Future] = collections.deque()
    pool = ThreadPoolExecutor(threads, thread_name_prefix="cutimeline-export")
    try:
        for job in jobs:
            pending.append(pool.submit(run, job))
            if len(pending) >= 2 * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        # On an error (or Ctrl-C) drop the jobs not started; running ones
        # end with their chunk.
        for f in pending:
            f.cancel()
        pool.shutdown(wait=True)
