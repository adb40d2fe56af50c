"""Dense ids: columns of keys (stream ids, device and stream pairs, string
ids) numbered 0..k-1 in sorted key order. The Numba kernels number keys by
an open-addressing hash (``dense_ids``) or a small table of the pairs
seen (``pair_ids``: traces have few streams), with a sort as the way out
when there are many; the NumPy twin is ``np.unique``."""

from __future__ import annotations

import numpy as np
from numba import njit

from .engines import readonly, empty_i64, resolve_engine

__all__ = ["dense_ids", "pair_ids", "hash_slot"]


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing


@njit(cache=True)
def hash_slot(slot_key, slot_id, key, bits):
    """The slot of ``key`` in an open-addressing hash of 2^bits slots
    (``slot_id`` < 0: free), or of the free slot it goes in."""
    mask = (1 << bits) - 1
    j = np.int64((np.uint64(key) * _GOLDEN) >> np.uint64(64 - bits))
    while slot_id[j] >= 0 and slot_key[j] != key:
        j = (j + 1) & mask
    return j


@njit(cache=True)
def _dense_nb(keys, bits):
    """Ids in order of first appearance from an open-addressing hash of
    2^bits slots (a scan of the keys seen cost up to one compare per
    distinct key and op); past half full, ok False: the caller comes again
    with more bits. Then renumbered in sorted key order."""
    n = len(keys)
    slot_key = np.empty(1 << bits, np.int64)
    slot_id = np.full(1 << bits, -1, np.int64)
    uniq = np.empty(1 << (bits - 1), np.int64)
    ids = empty_i64(n)
    k = 0
    last_key, last_id = 0, -1
    for i in range(n):
        x = keys[i]
        if last_id >= 0 and x == last_key:
            ids[i] = last_id
            continue
        j = hash_slot(slot_key, slot_id, x, bits)
        if slot_id[j] < 0:
            if k == len(uniq):
                return ids, uniq, False
            slot_key[j], slot_id[j] = x, k
            uniq[k] = x
            k += 1
        ids[i] = last_id = slot_id[j]
        last_key = x
    o = np.argsort(uniq[:k])
    rank = np.empty(k, np.int64)
    rank[o] = np.arange(k)
    for i in range(n):
        ids[i] = rank[ids[i]]
    return ids, uniq[:k][o], True


def _dense_np(keys):
    u, inv = np.unique(keys, return_inverse=True)
    return inv.astype(np.int64).reshape(-1), u


def dense_ids(keys, engine: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """(ids, uniq): ``uniq`` the sorted distinct keys, ``ids`` each key's
    index into it."""
    keys = readonly(keys)
    if resolve_engine(engine, len(keys)) == "numba":
        bits = 7
        while (1 << bits) <= 4 * len(keys) + 4:
            ids, uniq, ok = _dense_nb(keys, bits)
            if ok:
                return ids, uniq
            bits += 3
    return _dense_np(keys)


_TABLE = 1 << 12  # pairs of a range this small are numbered by a table


@njit(cache=True)
def _bounds_nb(a, b):
    """(min a, max a, min b, max b) of non-empty a and b, in one pass."""
    a0 = a1 = np.int64(a[0])
    b0 = b1 = np.int64(b[0])
    for i in range(len(a)):
        a0, a1 = min(a0, np.int64(a[i])), max(a1, np.int64(a[i]))
        b0, b1 = min(b0, np.int64(b[i])), max(b1, np.int64(b[i]))
    return a0, a1, b0, b1


@njit(cache=True)
def _pairs_table_nb(a, b, a0, b0, na, nb):
    """``_pairs_nb`` for pairs within a range of na × nb values: a table
    marks the pairs seen and numbers them in sorted order, two passes
    without a data-dependent branch (many streams interleaved defeat the
    last-pair shortcut: 7 ns a row)."""
    n = len(a)
    seen = np.zeros(na * nb, np.int64)
    for i in range(n):
        seen[(np.int64(a[i]) - a0) * nb + (np.int64(b[i]) - b0)] = 1
    k = 0
    for c in range(na * nb):  # codes in (a, b) order: ranks are sorted ids
        if seen[c]:
            seen[c] = k
            k += 1
        else:
            seen[c] = -1
    ka = np.empty(k, np.int64)
    kb = np.empty(k, np.int64)
    for c in range(na * nb):
        if seen[c] >= 0:
            ka[seen[c]], kb[seen[c]] = a0 + c // nb, b0 + c % nb
    ids = empty_i64(n)
    for i in range(n):
        ids[i] = seen[(np.int64(a[i]) - a0) * nb + (np.int64(b[i]) - b0)]
    return ids, ka, kb


@njit(cache=True)
def _pairs_nb(a, b):
    n = len(a)
    ka = np.empty(16, np.int64)
    kb = np.empty(16, np.int64)
    ids = empty_i64(n)
    k = 0
    la, lb, lid = 0, 0, -1
    for i in range(n):
        x, y = a[i], b[i]
        if lid >= 0 and x == la and y == lb:
            ids[i] = lid
            continue
        j = -1
        for m in range(k):
            if ka[m] == x and kb[m] == y:
                j = m
                break
        if j < 0:
            if k == len(ka):  # many pairs: the caller sorts instead
                return ids, ka, kb, False
            ka[k], kb[k] = x, y
            j = k
            k += 1
        ids[i] = j
        la, lb, lid = x, y, j
    o = np.arange(k)
    for i in range(1, k):  # insertion sort of the few pairs
        j = i
        while j > 0 and (ka[o[j - 1]] > ka[o[j]] or
                         (ka[o[j - 1]] == ka[o[j]] and kb[o[j - 1]] > kb[o[j]])):
            o[j - 1], o[j] = o[j], o[j - 1]
            j -= 1
    rank = np.empty(k, np.int64)
    rank[o] = np.arange(k)
    moved = False
    for m in range(k):
        moved |= rank[m] != m
    if moved:  # seen out of sorted order: renumber
        for i in range(n):
            ids[i] = rank[ids[i]]
    return ids, ka[:k][o], kb[:k][o], True


def _pairs_np(a, b):
    keys = np.stack([a, b], axis=1)
    u, inv = np.unique(keys, axis=0, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), u[:, 0].copy(), u[:, 1].copy()


def pair_ids(a, b, engine: str = "auto"):
    """(ids, ka, kb): dense ids of the pairs (a[i], b[i]), numbered in
    sorted order of (a, b); ka, kb the distinct pairs."""
    if len(a) == 0:
        e = np.zeros(0, np.int64)
        return e, e, e
    if resolve_engine(engine, len(a)) == "numba":
        # the kernels read int16 devices as they are (a copy to int64 costs
        # more than the pass)
        a, b = readonly(a, np.int16 if _narrow(a) else np.int64), readonly(b)
        a0, a1, b0, b1 = _bounds_nb(a, b)
        na, nb = int(a1) - int(a0) + 1, int(b1) - int(b0) + 1
        if na * nb == 1:  # one pair: NumPy's zeros come as untouched pages
            return np.zeros(len(a), np.int64), np.full(1, a0), np.full(1, b0)
        if na * nb <= _TABLE:  # small ids (a few devices, streams): by table
            return _pairs_table_nb(a, b, a0, b0, na, nb)
        ids, ka, kb, ok = _pairs_nb(a, b)
        if ok:
            return ids, ka, kb
    return _pairs_np(readonly(a), readonly(b))


def _narrow(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == np.int16
