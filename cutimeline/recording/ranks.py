"""A rank's recording under torch.distributed: its meta and its file.

``ctl.record(out_dir=DIR)`` on every rank records that rank and
writes ``DIR/rank-<r>.ctl`` at stop (atomically), also when the recorded
block raises (``meta["error"]`` then says what; the file holds what was
recorded up to there) and when the recording is interrupted: by Ctrl-C,
SIGTERM or an exit while recording (``meta["partial"]`` says which and in
which step, e.g. "SIGTERM at step 7"; ``lifecycle.py``); from start to
stop the file is the recording's journal, which a process killed without
a word leaves (``flusher.py``). Each file's meta names ``rank``,
``world_size``, ``local_rank``, ``backend``, ``host``, ``pid``, ``run_id``
(torchrun's ``TORCHELASTIC_RUN_ID``, when set: ``merge`` refuses ranks of
different runs) and the clock pair
``start_epoch_ns`` (``time.time_ns()``) / ``start_host_ns`` (host clock),
read together at start. Without an initialised process group the rank is
taken from the ``RANK``/``WORLD_SIZE`` environment (torchrun's), else 0 of 1.

Its collectives: ``collectives.py``. Moving a rank's host times:
``timeline/ranks.py``.

Test hook: ``CUTIMELINE_TEST_CLOCK_SKEW_NS=N`` in a rank's environment
moves every host time of its file, and its ``start_epoch_ns``, by N ns, as
if its machine's clocks were all N ns ahead; ``meta["test_clock_skew_ns"]``
says so. Tests use it to check that ``merge`` re-aligns such a rank.

Merging the ranks' files: ``merger.py``. Cross-rank analysis: ``straggler.py``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import CutimelineError
from ..timeline.ranks import shift_host
from ..timeline.timeline import Timeline

__all__ = ["rank_meta", "write_rank", "RANK_FILE"]

RANK_FILE = "rank-{rank}.ctl"
SKEW_ENV = "CUTIMELINE_TEST_CLOCK_SKEW_NS"


def rank_meta(at_start: dict[str, Any] | None = None) -> dict[str, Any]:
    """This process's rank, world size, local rank, backend, host and pid;
    at stop (``at_start`` given) a process group that is gone keeps what
    start saw."""
    import socket

    import torch.distributed as dist
    meta: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    if dist.is_available() and dist.is_initialized():
        meta.update(rank=dist.get_rank(), world_size=dist.get_world_size(),
                    backend=str(dist.get_backend()))
    elif at_start and at_start.get("backend"):
        meta.update({k: at_start[k] for k in ("rank", "world_size", "backend")})
    else:
        meta.update(rank=_int_env("RANK", 0), world_size=_int_env("WORLD_SIZE", 1),
                    backend=None)
    meta["local_rank"] = _int_env("LOCAL_RANK", meta["rank"])
    run = os.environ.get("TORCHELASTIC_RUN_ID", "").strip()  # torchrun's, for merge
    if run:
        meta["run_id"] = run
    return meta


def _int_env(name: str, default: int) -> int:
    v = os.environ.get(name, "").strip()
    return int(v) if re.fullmatch(r"\d+", v) else default


def write_rank(tl: Timeline, out_dir: str, error: BaseException | None = None,
               partial: str | None = None) -> Timeline:
    """Write a rank's Timeline to ``out_dir/rank-<r>.ctl`` (atomically) and
    return it as written: with ``meta["error"]`` when the recorded block
    raised an ``Exception``, ``meta["partial"]`` (``partial``: why the
    recording was cut short) and the test clock skew applied when
    ``CUTIMELINE_TEST_CLOCK_SKEW_NS`` is set (see the module doc)."""
    meta = dict(tl.meta)
    if isinstance(error, Exception):  # an interruption is partial, not an error
        meta["error"] = f"{type(error).__name__}: {error}"
    if partial is not None:
        meta["partial"] = partial
    skew = os.environ.get(SKEW_ENV, "").strip()
    if skew:
        if not re.fullmatch(r"[+-]?\d+", skew):
            raise CutimelineError(f"{SKEW_ENV}={skew!r} must be a whole number of "
                                  f"nanoseconds.")
        tl = shift_host(tl, int(skew), epoch=True)
        meta = {**tl.meta, **{k: v for k, v in meta.items() if k in ("error", "partial")},
                "test_clock_skew_ns": int(skew)}
    tl = tl.replace(meta=meta)
    rank = meta.get("rank", 0)
    tl.save(os.path.join(out_dir, RANK_FILE.format(rank=rank)))
    return tl
