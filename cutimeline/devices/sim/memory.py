"""SimGPU's memory: the bytes of the storages its ops made, alive or freed.

A simulated tensor has no device memory to ask about, so the meter counts
storages: after an op, each output tensor whose storage it has not seen
(``untyped_storage()``, keyed by its C++ address) is a new allocation of
``nbytes()`` bytes, unless it is an input's (an op whose schema says its
result aliases an input: in place, ``out=``, a view; for an op without a
schema, a storage an input tensor has). A view shares its base's storage:
no new bytes. torch keeps a storage's Python object for as long as the
storage lives, so a weak reference to it calls back when the storage is
freed; the meter holds no strong reference to any tensor or storage, and
the callback only notes the bytes, which the next read returns as freed.
A storage that grew in place (``resize_``) counts its growth as allocated.
Storages made before the recording are not counted, in use or freed.

Most of its cost is torch's: the weak reference to each new storage and
its callback (what it costs: ``benchmarks/RESULTS.md``, recorder options).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

__all__ = ["StorageMeter"]

_Tensor = torch.Tensor


def _tensors(out: Any) -> list:
    if isinstance(out, _Tensor):
        return [out]
    if type(out) is tuple or type(out) is list:
        return [t for t in out if isinstance(t, _Tensor)]
    return []


def _storage(t: Any) -> Any:
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError, AttributeError):  # no storage
        return None


def _aliases(func: Any) -> bool | None:
    """Whether ``func``'s schema says a result aliases an input (None: no schema)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return None
    return any(r.alias_info is not None for r in schema.returns)


def _shares(key: int, args: tuple, kwargs: dict) -> bool:
    """Whether a tensor among the arguments has the storage ``key``."""
    for a in (*args, *kwargs.values()):
        for t in _tensors(a):
            st = _storage(t)
            if st is not None and st._cdata == key:
                return True
    return False


class StorageMeter:
    """The memory meter of a simulated device (``Device.memory_meter``)."""

    def __init__(self) -> None:
        # storage key -> [bytes, weak reference]; the reference's callback
        # (through _keys: id(reference) -> storage key) removes the entry
        self._live: dict[int, list] = {}
        self._keys: dict[int, int] = {}
        self._freed: list[int] = []  # bytes freed since the last read
        self._aliasing: dict[Any, bool | None] = {}  # func -> _aliases(func)
        self._gone = self._free  # one bound method for every reference
        self.in_use = 0

    def read(self, func: Any, args: tuple, kwargs: dict, out: Any) -> tuple[int, int, int]:
        """(allocated, freed, in_use) bytes: the storages op ``func``'s
        result ``out`` brought, those freed since the previous read, those
        alive now."""
        allocated = 0
        live = self._live
        try:
            aliasing = self._aliasing[func]
        except KeyError:
            aliasing = self._aliasing[func] = _aliases(func)
        for t in _tensors(out):
            st = _storage(t)
            if st is None:
                continue
            key = st._cdata
            entry = live.get(key)
            if entry is not None:
                n = st.nbytes()
                if n > entry[0]:  # grew in place
                    allocated += n - entry[0]
                    entry[0] = n
                continue
            if aliasing or aliasing is None and _shares(key, args, kwargs):
                continue  # an input's storage, made before
            n = st.nbytes()
            ref = weakref.ref(st, self._gone)
            self._keys[id(ref)] = key
            live[key] = [n, ref]
            allocated += n
        k = len(self._freed)  # finalizers on other threads append past k
        freed = sum(self._freed[:k])
        del self._freed[:k]
        self.in_use += allocated - freed
        return allocated, freed, self.in_use

    def _free(self, ref: Any) -> None:
        entry = self._live.pop(self._keys.pop(id(ref), None), None)
        if entry is not None:
            self._freed.append(entry[0])

    def close(self) -> None:
        """Drop every weak reference (their callbacks go with them):
        storages freed from now on are not noted."""
        self._live.clear()
        self._keys.clear()
        self._freed.clear()
