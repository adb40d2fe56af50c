"""Dense ids: columns of keys (stream ids, device and stream pairs, string
ids) numbered 0..k-1 in sorted key order. The Numba kernels number keys by
an open-addressing hash (``dense_ids``) or a small table of the pairs
seen (``pair_ids``: traces have few streams), with a sort as the way out
when there are many; the NumPy twin is ``np.unique``."""

from __future__ import annotations

import numpy as np
from numba import njit

from .engines import _ro, empty_i64, resolve_engine

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
    keys = _ro(keys)
    if resolve_engine(engine, len(keys)) == "numba":
        bits = 7
        while (1 << bits) <= 4 * len(keys) + 4:
            ids, uniq, ok = _dense_nb(keys, bits)
            if ok:
                return ids, uniq
            bits += 3
    return _dense_np(keys)


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
    a, b = _ro(a), _ro(b)
    if len(a) == 0:
        e = np.zeros(0, np.int64)
        return e, e, e
    if resolve_engine(engine, len(a)) == "numba":
        ids, ka, kb, ok = _pairs_nb(a, b)
        if ok:
            return ids, ka, kb
    return _pairs_np(a, b)
