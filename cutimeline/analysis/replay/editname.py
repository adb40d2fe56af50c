"""The what-if edits' names: ``EditName``, the keys of ``edits.EDITS``.

A name is what ``Report.what_if(edit=...)``, ``plot(what_if=...)`` and
``cutimeline whatif --edit`` take, and what a verdict's ``fix`` says. It
lives apart from ``edits.py`` because ``gpuside.py``, below it, dispatches
on the GPU-side names too.
"""

from __future__ import annotations

from ...text import Word

__all__ = ["EditName"]


class EditName(Word):
    """A what-if edit's name (``edits.py``'s module doc says what each
    changes). A member equals, hashes and formats as its value, so plain
    strings name edits as before and every surface prints the word."""
    DATA = "data"
    SYNC = "sync"
    COPIES = "copies"
    HOST = "host"
    GRAPHS = "graphs"
    LAUNCH = "launch"
    TF32 = "tf32"
    BF16 = "bf16"
    FUSED_OPTIMIZER = "fused_optimizer"
    COMPILE = "compile"
    RECORDER = "recorder"
