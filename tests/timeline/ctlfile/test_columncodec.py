"""columncodec.py: one column's bytes in a .ctl file — exact round trips in
the narrowest width, and entries that disagree with their bytes refused
before anything is allocated."""

import tracemalloc

import numpy as np
import pytest

from cutimeline.timeline.ctlfile.columncodec import CodecError, pack, pack_bytes, unpack, unpack_bytes

I64 = np.iinfo(np.int64)


def round_trip(values, kind="i", **kw):
    entry, data = pack(np.asarray(values), **kw)
    back = unpack(entry, data, len(values), kind)
    assert back.dtype == (np.float64 if kind == "f" else np.int64)
    np.testing.assert_array_equal(back, values)
    return entry, data


@pytest.mark.parametrize("values, width, zigzag", [
    (np.arange(1000) % 200, 1, False),
    (np.arange(1000) % 200 - 100, 1, True),        # zig-zag keeps ±100 in a byte
    (np.r_[10**15, np.arange(999) * 3000], 4, False),  # the first value rides apart
    (np.r_[0, 2**15, -(2**15)], 4, True),
    (np.r_[0, 2**15 - 1, -(2**15) + 1], 2, True),
    (np.r_[0, I64.max, I64.min, -1, 1], 8, True),
])
def test_integers_round_trip_in_the_narrowest_width(values, width, zigzag):
    entry, _ = round_trip(np.asarray(values, np.int64))
    assert entry["width"] == width and entry["zigzag"] == zigzag


def test_random_columns_round_trip():
    rng = np.random.default_rng(5)
    for bits in (3, 7, 8, 15, 16, 31, 33, 62):
        for signed in (False, True):
            lo = -(2**bits) if signed else 0
            round_trip(rng.integers(lo, 2**bits, 5000))


def test_constants_store_no_bytes_unless_asked():
    entry, data = round_trip(np.r_[7, np.full(10_000, -3)])
    assert entry == {"first": 7, "fill": -3} and data == b""
    entry, data = round_trip(np.full(10_000, -3), fill=False)
    assert "fill" not in entry and 0 < len(data) < 1000


def test_empty_and_single_rows():
    for values in (np.zeros(0, np.int64), np.array([I64.min])):
        round_trip(values)
    round_trip(np.zeros(0), "f")


def test_noise_is_stored_raw_and_runs_deflated():
    rng = np.random.default_rng(0)
    durations = rng.integers(1_000, 20_000, 200_000)  # random low byte, few high
    entry, data = round_trip(durations)
    assert [c for c, _ in entry["planes"]] == ["raw", "deflate"]
    assert len(data) < 1.9 * len(durations)


def test_floats_round_trip_bit_for_bit():
    values = np.array([0.0, -0.0, 1.00005, np.inf, -np.inf, np.nan, 5e-324, 1e308])
    entry, data = pack(values)
    back = unpack(entry, data, len(values), "f")
    assert back.tobytes() == values.tobytes()


def test_bytes_round_trip():
    for raw in (b"", b"aten::mm" * 1000, bytes(range(256))):
        entry, data = pack_bytes(raw)
        assert unpack_bytes(entry, data) == raw


@pytest.mark.parametrize("change, match", [
    (dict(width=3), "width"),
    (dict(zigzag="yes"), "zig-zag"),
    (dict(planes=[["raw", 0]]), "planes are not"),
    (dict(first=2**63), "first value"),
    (dict(first=True), "first value"),
    (dict(first=None), "first value"),
    (dict(fill=1), "fill value"),
])
def test_entries_that_disagree_are_refused(change, match):
    entry, data = pack(np.arange(300) * 1000)
    with pytest.raises(CodecError, match=match):
        unpack({k: v for k, v in {**entry, **change}.items() if v is not None},
               data, 300, "i")


def test_bytes_that_disagree_are_refused():
    entry, data = pack(np.arange(3000) * 1000)
    with pytest.raises(CodecError, match="planes fill"):
        unpack(entry, data + b"x", 3000, "i")
    with pytest.raises(CodecError, match="claims"):
        unpack(entry, data[:-1], 3000, "i")
    with pytest.raises(CodecError, match="corrupt|make"):
        broken = bytearray(data)
        broken[-12:-4] = bytes(8)
        unpack(entry, bytes(broken), 3000, "i")
    with pytest.raises(CodecError, match="make 2999.*not the 3000|holds"):
        unpack(entry, data, 3001, "i")
    with pytest.raises(CodecError, match="first value but no rows"):
        unpack(entry, data, 0, "i")
    with pytest.raises(CodecError, match="first value|width"):
        unpack(entry, data, 3000, "f")
    with pytest.raises(CodecError, match="length"):
        unpack_bytes({"codec": "raw", "bytes": -1}, b"")


def test_a_huge_claim_allocates_nothing():
    entry, data = pack(np.arange(3000) * 1000)
    tracemalloc.start()
    try:
        for rows in (10**12, 2**62):
            with pytest.raises(CodecError, match="cannot hold|promises"):
                unpack(entry, data, rows, "i")
        with pytest.raises(CodecError, match="cannot hold"):
            unpack_bytes({"codec": "deflate", "bytes": 10**12}, b"x" * 100)
        assert tracemalloc.get_traced_memory()[1] < 2**20
    finally:
        tracemalloc.stop()
