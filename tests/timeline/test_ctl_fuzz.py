"""Fuzzing the ``.ctl`` reader: no file makes cutimeline crash.

Mutants of a small recorded ``.ctl`` (format 3) and of the version 1 and 2
fixtures (``.npz`` archives): bits flipped in the zip or inside a member
(the zip rewritten, so its CRC agrees with the damage), truncations, zip
members swapped, dropped, duplicated or added, zip headers that lie (sizes,
compression method), JSON values of ``meta.json`` replaced by inf, nan,
2**70, -1, [], "x", None, {} or 10^5 levels of nesting, claimed sizes far
beyond the bytes (10^11 rows, decompressed sizes deflate cannot make), wrong
dtype strings and shapes in ``.npy`` headers, and string ids, enum codes
and row references out of range. Each either loads, and then analyzes,
summarises and saves again without error, or raises ``CutimelineError``
naming the file. Anything else is a crash and fails the test with the
mutant that caused it.

The sweep runs in a subprocess (this file with ``--worker``) under a memory
cap (RLIMIT_AS) and a per-mutant time limit, as
``tests/formats/kineto/test_kineto_fuzz.py`` does for traces. The mutants come from a seeded generator: the same damage
every run (``FUZZ_SEED=<n>`` draws another set, for a longer hunt). Below
the sweep, one in-process test for each crash class it found.
"""

from __future__ import annotations

import collections
import copy
import io
import json
import math
import os
import pathlib
import random
import struct
import sys
import warnings
import zipfile

import numpy as np
import pytest

from fuzzsweep import Timeout, sweep as run_sweep, work

DATA = pathlib.Path(__file__).parents[1] / "data" / "ctl"
SEED = int(os.environ.get("FUZZ_SEED", 20240621))
COUNT = 300
MEMORY_CAP = 3 << 30    # bytes of address space the worker may add after imports
TIME_LIMIT_S = 20       # per mutant
DEEP = "\x00deep\x00"   # stands for 10^5 levels of nesting in the JSON text
DEPTH = 100_000
HUGE = [10**11, 2**62, 2**63 - 1, 2**31, 10**9]

# Values a JSON field may be damaged into.
BAD = [math.inf, -math.inf, math.nan, 2**70, -2**70, 2**63, -2**63 - 1, -1, -2, 0,
       10**11, 1e300, 1.5, -0.5, 2**31, 2**15, 256, [], {}, [1, 2], {"a": 1}, [[[[]]]],
       "x", "", "raw", "deflate", None, True, False, DEEP]
# Values a stored integer (a column's first or fill) may be damaged into:
# out of its table's rows, the string table, its enum or its dtype.
OUT_OF_RANGE = [-2, -7, 2**15, 2**16, 2**31, 2**32, 10**6, 99, 7, 8, 255, 256, 2**63 - 1,
                -2**63]
# npy headers' dtype strings and shapes a column may claim.
DESCRS = ["<f8", "<i4", "|u1", ">i8", "<u8", "|O", "<U5", "|S3", "<c16", "|b1", "x",
          "<i8", "V8", "<M8[ns]"]
SHAPES = [(10**11,), (2**62,), (), (3, 4), (0,), (1,), (-1,), (2**63 - 1,), (10**9,)]


# -- the bases: a fresh recording and the two older fixtures -------------------------
def record_base(path: pathlib.Path) -> bytes:
    """A small recorded ``.ctl``: meta-tensor matmuls and an ``.item()`` on a
    simulated H100 (6 ops, every table but none empty)."""
    import torch

    import cutimeline as ctl
    with ctl.record(device=ctl.SimGPU("h100", seed=0)) as rec:
        a = torch.ones(64, 64, device="meta")
        for _ in range(3):
            a = a @ a
        a.sum().item()
    rec.timeline.save(path)
    return path.read_bytes()


def members(data: bytes) -> list[tuple[str, bytes, int]]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i), i.compress_type) for i in z.infolist()]


def rezip(items: list[tuple[str, bytes, int]]) -> bytes:
    """A zip of ``items`` (name, bytes, method) whose CRCs agree with them."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a name twice is one of the mutants
        for name, data, method in items:
            info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            z.writestr(info, data)
    return out.getvalue()


# -- the mutants --------------------------------------------------------------------
def _paths(doc: object, at: tuple = ()) -> list[tuple]:
    """Every place in a JSON document (as key/index paths)."""
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, at + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, at + (i,))
    return out


def _set(doc: object, path: tuple, value: object) -> object:
    if not path:
        return value
    where = doc
    for k in path[:-1]:
        where = where[k]
    where[path[-1]] = value
    return doc


def _encode(doc: object, rng: random.Random) -> bytes:
    text = json.dumps(doc)
    if json.dumps(DEEP) in text:
        deep = rng.choice(["[" * DEPTH + "]" * DEPTH, '{"a": ' * DEPTH + "1" + "}" * DEPTH])
        text = text.replace(json.dumps(DEEP), deep)
    return text.encode()


def _damage_json(doc: dict, rng: random.Random, manifest: bool) -> str:
    """One value of ``doc`` replaced by a bad one or deleted (in place); says which."""
    paths = _paths(doc)
    inside = [p for p in paths if p[:1] == ("manifest",)]
    if manifest and inside and rng.random() < 0.75:
        path = rng.choice(inside)
    else:
        path = rng.choice(paths[1:])
    if rng.random() < 0.15 and isinstance(path[-1], str):
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        del parent[path[-1]]
        return f"del {'.'.join(map(str, path))}"
    value = copy.deepcopy(rng.choice(BAD))
    _set(doc, path, value)
    return f"{'.'.join(map(str, path))}={value!r:.30}"


def _columns(head: dict) -> dict:
    cols = head.get("manifest", {}).get("columns", {})
    return cols if isinstance(cols, dict) else {}


def _size_lie(head: dict, rng: random.Random) -> str:
    """A claimed count (rows, strings, bytes, plane size) far beyond the bytes."""
    m, n = head["manifest"], rng.choice(HUGE + [1, 7, 50])
    cols = _columns(head)
    kind = rng.randrange(5)
    if kind == 0:
        table = rng.choice(sorted(m["rows"]))
        m["rows"][table] = n
        return f"rows.{table}={n}"
    if kind == 1:
        m["strings"] = n
        return f"strings={n}"
    if kind == 2:
        cols["strings.blob"]["bytes"] = n
        return f"strings.blob bytes={n}"
    key = rng.choice(sorted(k for k, e in cols.items() if "planes" in e))
    e = cols[key]
    if kind == 3:
        i = rng.randrange(len(e["planes"]))
        e["planes"][i][1] = n
        return f"{key} plane {i} size={n}"
    field = rng.choice(["size", "offset", "width"])
    e[field] = n
    return f"{key} {field}={n}"


def _range_lie(head: dict, rng: random.Random) -> str:
    """A column's first value or fill out of its range (string id, enum code,
    row reference, dtype); rows added to a table of constants."""
    cols = _columns(head)
    key = rng.choice(sorted(cols))
    e = cols[key]
    value = rng.choice(OUT_OF_RANGE)
    if "fill" in e and rng.random() < 0.5:
        e["fill"] = value
        return f"{key} fill={value}"
    if rng.random() < 0.2:
        e["encoding"] = rng.choice([["raw"], ["delta"], ["minus", "op"], ["after", "end_ns"],
                                    ["ref", "op", "ops", "device"], ["ref", "op", "x", "y"],
                                    ["ref", "op", "gpu", "op"], ["minus", "x"]])
        return f"{key} encoding={e['encoding']}"
    e["first"] = value
    return f"{key} first={value}"


def _zip_lie(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A field of a zip header (central or local) that lies."""
    data = bytearray(data)
    central = rng.random() < 0.6
    sig = b"PK\x01\x02" if central else b"PK\x03\x04"
    starts = [i for i in range(len(data) - 3) if data[i:i + 4] == sig]
    at = rng.choice(starts)
    fields = ({"method": (10, "<H"), "crc": (16, "<I"), "compressed": (20, "<I"),
               "size": (24, "<I"), "name length": (28, "<H"), "extra length": (30, "<H"),
               "offset": (42, "<I")} if central else
              {"method": (8, "<H"), "compressed": (18, "<I"), "size": (22, "<I"),
               "name length": (26, "<H"), "extra length": (28, "<H")})
    name = rng.choice(sorted(fields))
    off, fmt = fields[name]
    top = 0xFFFF if fmt == "<H" else 0xFFFFFFFF
    old = struct.unpack_from(fmt, data, at + off)[0]
    new = rng.choice([0, 1, old + 1, max(0, old - 1), top, top - 1, 99, 12, 14, 8, 0])
    struct.pack_into(fmt, data, at + off, min(new, top))
    return bytes(data), f"{'central' if central else 'local'} {name} {old}->{new}"


def _members_lie(items: list, rng: random.Random) -> tuple[list, str]:
    kind = rng.randrange(6)
    items = list(items)
    i, j = rng.randrange(len(items)), rng.randrange(len(items))
    if kind == 0:  # names swapped
        (a, da, ma), (b, db, mb) = items[i], items[j]
        items[i], items[j] = (a, db, ma), (b, da, mb)
        return items, f"{a} and {b} swapped"
    if kind == 1:
        return items[:i] + items[i + 1:], f"{items[i][0]} dropped"
    if kind == 2:  # the same name twice: which one wins is zipfile's choice
        dup = (items[i][0], items[j][1], items[i][2])
        return items + [dup], f"{items[i][0]} duplicated (with {items[j][0]}'s bytes)"
    if kind == 3:
        extra = rng.choice([("meta.json.npy", items[j][1], 0), ("junk", b"x" * 10, 0),
                            ("columns.bin", b"", 0), ("meta.json", b"{}", 8)])
        return ([extra] + items if rng.random() < 0.5 else items + [extra]), \
            f"{extra[0]} added"
    if kind == 4:  # another compression: one zipfile reads (bz2, lzma)
        method = rng.choice([zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA, zipfile.ZIP_STORED])
        items[i] = (items[i][0], items[i][1], method)
        return items, f"{items[i][0]} compressed as method {method}"
    items.reverse()
    return items, "members reversed"


def _npy_header_lie(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """An ``.npy`` member whose header claims another dtype or shape."""
    from numpy.lib import format as npy
    f = io.BytesIO(data)
    read = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
    shape, fortran, dtype = read[npy.read_magic(f)](f)
    body = data[f.tell():]
    descr, new_shape = dtype.str, shape
    if rng.random() < 0.5:
        descr = rng.choice(DESCRS)
    else:
        new_shape = rng.choice(SHAPES)
    header = repr({"descr": descr, "fortran_order": fortran, "shape": new_shape})
    header += " " * ((-(len(header) + 11)) % 64) + "\n"
    out = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + body
    return out, f"descr={descr} shape={new_shape}"


def _npy_value_lie(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A value of an ``.npy`` column out of range (as its dtype holds it)."""
    a = np.load(io.BytesIO(data), allow_pickle=False).copy()
    if not len(a):
        return data, "nothing (empty column)"
    i = rng.randrange(len(a))
    value = rng.choice(OUT_OF_RANGE + [-1, 0, 1])
    if a.dtype.kind == "f":
        value = rng.choice([math.nan, math.inf, -math.inf, 1e300, -1.0, 0.0])
    else:
        info = np.iinfo(a.dtype)
        value = min(max(value, int(info.min)), int(info.max))
    a[i] = value
    out = io.BytesIO()
    np.save(out, a, allow_pickle=False)
    return out.getvalue(), f"[{i}]={value!r}"


def _flip(data: bytes, rng: random.Random) -> tuple[bytes, int]:
    data = bytearray(data)
    bits = rng.randint(1, 4)
    for _ in range(bits):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data), bits


def _mutate_v3(raw: bytes, kind: str, rng: random.Random) -> tuple[bytes, str]:
    items = members(raw)
    at = {name: k for k, (name, _, _) in enumerate(items)}
    head = json.loads(items[at["meta.json"]][1])

    def with_head(label: str) -> tuple[bytes, str]:
        items[at["meta.json"]] = ("meta.json", _encode(head, rng), zipfile.ZIP_DEFLATED)
        return rezip(items), label

    if kind == "value":
        return with_head(_damage_json(head, rng, manifest=True))
    if kind == "values":
        return with_head(", ".join(_damage_json(head, rng, manifest=True)
                                   for _ in range(rng.randint(2, 5))))
    if kind == "size":
        return with_head(_size_lie(head, rng))
    if kind == "range":
        return with_head(", ".join(_range_lie(head, rng) for _ in range(rng.randint(1, 2))))
    if kind == "flip-member":
        k = rng.randrange(len(items))
        name, data, method = items[k]
        items[k] = (name, _flip(data, rng)[0], method)
        return rezip(items), f"bits of {name} flipped"
    if kind == "cut-member":
        k = rng.randrange(len(items))
        name, data, method = items[k]
        n = rng.randrange(len(data) + 1)
        items[k] = (name, data[:n], method)
        return rezip(items), f"{name} cut at {n}"
    raise AssertionError(kind)


def _mutate_npz(raw: bytes, kind: str, rng: random.Random) -> tuple[bytes, str]:
    items = members(raw)
    at = {name: k for k, (name, _, _) in enumerate(items)}
    columns = sorted(n for n in at if n != "meta.json.npy" and not n.startswith("strings."))
    if kind in ("value", "values", "size"):  # meta.json, an npy of its UTF-8 bytes
        name, data, method = items[at["meta.json.npy"]]
        head = json.loads(bytes(np.load(io.BytesIO(data), allow_pickle=False)))
        label = ", ".join(_damage_json(head, rng, manifest=False)
                          for _ in range(1 if kind == "value" else rng.randint(2, 5)))
        out = io.BytesIO()
        np.save(out, np.frombuffer(_encode(head, rng), np.uint8))
        items[at["meta.json.npy"]] = (name, out.getvalue(), method)
        return rezip(items), label
    name = rng.choice(columns + ["strings.offsets.npy", "strings.blob.npy"])
    k = at[name]
    data, method = items[k][1], items[k][2]
    if kind == "range":
        data, label = _npy_value_lie(data, rng)
    elif kind in ("npy-header", "size-npy"):
        data, label = _npy_header_lie(data, rng)
    elif kind == "flip-member":
        data, label = _flip(data, rng)[0], "bits flipped"
    else:
        n = rng.randrange(len(data) + 1)
        data, label = data[:n], f"cut at {n}"
    items[k] = (name, data, method)
    return rezip(items), f"{name} {label}"


KINDS = {"flip": 8, "cut": 5, "members": 8, "zip-header": 7, "value": 24, "values": 8,
         "size": 10, "range": 12, "flip-member": 10, "cut-member": 4, "npy-header": 8}


def mutants(bases: dict[str, bytes], count: int = COUNT,
            seed: int = SEED) -> list[tuple[str, bytes]]:
    """``count`` (label, file bytes) damaged from ``bases`` (name → ``.ctl``
    bytes); the same for the same bases and seed."""
    rng = random.Random(seed)
    out = []
    names = sorted(bases)
    for i in range(count):
        kind = rng.choices(list(KINDS), list(KINDS.values()))[0]
        base = rng.choice(names) if rng.random() < 0.4 else "v3"
        raw = bases[base]
        npz = base != "v3"
        if kind == "npy-header" and not npz:
            kind = "size"
        if kind == "flip":
            data, bits = _flip(raw, rng)
            label = f"{bits} bits flipped"
        elif kind == "cut":
            n = rng.choice([0, 1, 4, 22, rng.randrange(len(raw)), len(raw) - 1])
            data, label = raw[:n], f"cut at {n}"
        elif kind == "members":
            items, label = _members_lie(members(raw), rng)
            data = rezip(items)
        elif kind == "zip-header":
            data, label = _zip_lie(raw, rng)
        elif npz:
            data, label = _mutate_npz(raw, kind, rng)
        else:
            data, label = _mutate_v3(raw, kind, rng)
        out.append((f"{i:03d} {kind} {base}: {label}", data))
    return out


# -- the worker: each mutant through load, analyze and save, in process ---------------
def _outcome(path: str, out_dir: str) -> dict:
    import cutimeline as ctl
    from cutimeline import CutimelineError
    stage = "load"
    try:
        tl = ctl.load(path)
        stage = "analyze"
        ctl.analyze(tl).summary()
        stage = "save"
        tl.save(os.path.join(out_dir, "again.ctl"))
    except CutimelineError as exc:
        return {"outcome": "CutimelineError", "stage": stage, "message": str(exc)}
    except (Exception, Timeout) as exc:
        import traceback
        return {"outcome": type(exc).__name__, "stage": stage, "message": str(exc)[:300],
                "traceback": traceback.format_exc()[-3000:]}
    return {"outcome": "ok", "stage": stage, "rows": len(tl.ops) + len(tl.gpu)}


def _work(folder: str) -> None:
    """The worker: every mutant of ``folder``."""
    import cutimeline as ctl  # imports and the first analysis are not the mutants' memory
    ctl.analyze(ctl.load(DATA / "v2.ctl")).summary()
    work(folder, lambda path, ok: _outcome(path, folder), memory_cap=MEMORY_CAP,
         time_limit_s=TIME_LIMIT_S)


def sweep(folder: pathlib.Path, items: list[tuple[str, bytes]],
          timeout: float = 300) -> list[dict]:
    """Write the mutants to ``folder`` and run them in a worker process."""
    return run_sweep(folder, [(label, data, ".ctl") for label, data in items], __file__,
                     timeout=timeout)


# -- the tests ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("base")
    return {"v3": record_base(folder / "small.ctl"),
            "v1": (DATA / "v1.ctl").read_bytes(), "v2": (DATA / "v2.ctl").read_bytes()}


@pytest.fixture(scope="module")
def swept(tmp_path_factory, bases):
    folder = tmp_path_factory.mktemp("fuzz")   # (folder, one outcome per mutant)
    return folder, sweep(folder, mutants(bases))


def test_mutants_are_deterministic(bases):
    assert mutants(bases, 40) == mutants(bases, 40) != mutants(bases, 40, seed=SEED + 1)


def test_no_mutant_crashes(swept):
    crashes = [r for r in swept[1] if r["outcome"] not in ("ok", "CutimelineError")]
    detail = "\n\n".join(f"{r['label']}: {r['outcome']} in {r['stage']}: {r['message']}\n"
                         f"{r.get('traceback', '')}" for r in crashes[:5])
    table = collections.Counter(r["outcome"] for r in crashes)
    assert not crashes, f"{len(crashes)} crashes {dict(table)}:\n{detail}"


def test_the_sweep_meets_both_outcomes(swept):
    # A sweep where nothing loads (or nothing fails) tests too little.
    n = collections.Counter(r["outcome"] for r in swept[1])
    assert n["ok"] >= len(swept[1]) // 10 and n["CutimelineError"] >= len(swept[1]) // 3, n
    kinds = {r["label"].split()[1] for r in swept[1] if r["outcome"] == "CutimelineError"}
    assert kinds == set(KINDS), set(KINDS) - kinds


def test_errors_are_one_line_naming_the_file(swept):
    for r in swept[1]:
        if r["outcome"] == "CutimelineError" and r["stage"] == "load":
            assert r["file"] in r["message"], (r["label"], r["message"])
            assert "\n" not in r["message"], (r["label"], r["message"])


# -- one of each crash class the sweep found, in process ------------------------------
def _damaged(path: pathlib.Path, words: str) -> None:
    import cutimeline as ctl
    with pytest.raises(ctl.CutimelineError) as info:
        ctl.load(path)
    message = str(info.value)
    assert message.startswith(str(path)) and words in message, message
    assert "\n" not in message


def _central(data: bytes, name: str) -> int:
    """Where the central directory entry of member ``name`` begins."""
    return data.rindex(b"PK\x01\x02", 0, data.rindex(name.encode()))


def _head_edit(raw: bytes, edit) -> bytes:
    items = members(raw)
    head = json.loads(items[0][1])
    text = edit(head)
    items[0] = ("meta.json", text if isinstance(text, bytes) else json.dumps(head).encode(), 8)
    return rezip(items)


def _npy_edit(raw: bytes, name: str, edit) -> bytes:
    return rezip([(n, edit(d) if n == name else d, m) for n, d, m in members(raw)])


def _header(descr: str, shape: str) -> bytes:
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    text += " " * (-(len(text) + 11) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


@pytest.mark.parametrize("base, damage, words", [
    # zlib.error: a deflated member's stream corrupt, its CRC never reached
    ("v3", lambda raw: raw[:60] + bytes([raw[60] ^ 0xFF]) + raw[61:], "damaged"),
    # NotImplementedError (or bz2/lzma reached for): another compression method
    ("v3", lambda raw: raw[:_central(raw, "columns.bin") + 10] + b"\x63\x00"
     + raw[_central(raw, "columns.bin") + 12:], "compression method 99"),
    ("v2", lambda raw: raw[:_central(raw, "ops.seq.npy") + 10] + b"\x09\x00"
     + raw[_central(raw, "ops.seq.npy") + 12:], "compression method 9"),
    # RecursionError: 10^5 levels of nesting in meta.json
    ("v3", lambda raw: _head_edit(raw, lambda h: json.dumps(h).replace(
        '"source"', '"x": ' + "[" * DEPTH + "]" * DEPTH + ', "source"').encode()),
     "nested too deeply"),
    # tokenize.TokenError / AttributeError: a .npy header numpy cannot parse
    ("v2", lambda raw: _npy_edit(raw, "ops.name.npy", lambda d: d[:20] + b"(" + d[21:]),
     "not a 1-d array as numpy.save writes one"),
    ("v1", lambda raw: _npy_edit(raw, "spans.end_ns.npy", lambda d: d[:2]),
     "not a 1-d array"),
    # MemoryError: a .npy header claiming 10^11 rows
    ("v1", lambda raw: _npy_edit(raw, "spans.number.npy",
                                 lambda d: _header("<i8", "(100000000000,)") + d[128:]),
     "claims 100000000000 values but holds"),
    ("v2", lambda raw: _npy_edit(raw, "ops.seq.npy", lambda d: _header("|O", "(40,)") + d[128:]),
     "claims dtype '|O'"),
    # TypeError: a width of True (== 1)
    ("v3", lambda raw: _head_edit(raw, lambda h: h["manifest"]["columns"]["spans.end_ns"].update(
        width=True)), "its width True"),
    # a second member of the same name: which one zipfile reads is its choice
    ("v3", lambda raw: rezip(members(raw) + [("meta.json", b"{}", 8)]),
     "member meta.json more than once"),
    # NaN (and numbers past float64) the writer never writes: such a file
    # would load, then fail to save
    ("v3", lambda raw: _head_edit(raw, lambda h: h["meta"].update(x=math.nan)), "NaN"),
    ("v3", lambda raw: _head_edit(raw, lambda h: json.dumps(h).replace(
        '"source"', '"x": 1e400, "source"').encode()), "beyond float64"),
])
def test_a_damaged_archive_is_a_sentence(tmp_path, bases, base, damage, words):
    path = tmp_path / "damaged.ctl"
    path.write_bytes(damage(bases[base]))
    _damaged(path, words)


@pytest.mark.parametrize("key, value", [
    # TypeError in analysis.nesting (an unhashable source)
    ("source", {}), ("source", [1, 2]),
    # ValueError in analysis.costs (an id or price that is no number)
    ("overhead_ns_by_signature", {"name": [3], "shapes": ["raw"], "ns": [1]}),
    ("overhead_ns_by_signature", {"name": [3], "shapes": [4], "ns": ["raw"]}),
    ("overhead_ns_by_signature", {"name": [3, 4], "shapes": [4], "ns": [1]}),
    ("overhead_ns_per_op", "x"), ("overhead_ns_per_op", 2**70), ("overhead_ns_per_launch", -1),
    ("overhead_model", {"backward_ns": "x"}), ("overhead_model", [1]),
    ("overhead_calibrations", [[1, 2]]), ("overhead_calibrations", [[1, 2, 2**70]]),
    ("clock_resolution_ns", [1]), ("clock_resolution_ns", {"0": "x"}),
])
def test_a_meta_field_the_stages_compute_with_is_checked(tmp_path, bases, key, value):
    path = tmp_path / "damaged.ctl"
    path.write_bytes(_head_edit(bases["v3"], lambda h: h["meta"].update({key: value})))
    _damaged(path, f"its meta[{key!r}] is")
    path.write_bytes(_head_edit(bases["v3"], lambda h: h["meta"].update({key: None})))
    import cutimeline as ctl
    ctl.analyze(ctl.load(path)).summary()   # None is as absent


@pytest.mark.parametrize("column, value", [
    ("gpu.kind", 255), ("events.kind", 8), ("spans.kind", 99), ("ops.flags", 64 | 8)])
def test_an_unknown_enum_code_or_flag_is_refused(tmp_path, bases, column, value):
    path = tmp_path / "damaged.ctl"
    path.write_bytes(_head_edit(bases["v3"], lambda h: h["manifest"]["columns"][column].update(
        first=value)))
    _damaged(path, f"column {column} holds codes it does not know (such as {value})")


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _work(sys.argv[2])
