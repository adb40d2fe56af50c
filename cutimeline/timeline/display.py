"""How a name from a trace is shown: as terminal text, as figure text.

Op, kernel, module, thread, device and file names come from the program
recorded or from a trace file, which anyone may have written. They stay
as they are in the Timeline (names are data: an export writes them back
unchanged); only where they become text for a person are they made
harmless, by one function per medium:

* ``terminal_text``: control characters (C0 but tab and newline, DEL, C1,
  among them ESC, which starts the sequences that set a window's title,
  clear the screen or, by OSC 52, the clipboard) and the bidirectional
  overrides that reorder what is shown are written as visible escapes
  (``\\x1b``, ``\\u202e``); a lone surrogate (no character: it cannot be
  encoded) becomes U+FFFD. The command line passes everything it prints
  through it (``cli.py``; a progress bar, its label: ``progress.py``).
* ``figure_text``: the same, and ``$`` escaped (``\\$``), which matplotlib
  would otherwise read as the start of math text: a name such as
  ``a$b\\c$`` fails to parse and ends the plot. The figures pass every
  name they show through it, once (``rendering/``).
"""

from __future__ import annotations

import re

__all__ = ["terminal_text", "figure_text"]

# C0 but tab and newline, DEL and C1; bidi embeddings, overrides and isolates;
# the lone surrogates
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


def _escaped(m: re.Match) -> str:
    c = ord(m.group())
    if 0xD800 <= c <= 0xDFFF:
        return "\ufffd"
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal_text(text: str) -> str:
    """``text`` safe to write to a terminal (see the module doc)."""
    return _UNSAFE.sub(_escaped, text) if _UNSAFE.search(text) else text


def figure_text(text: str) -> str:
    """``text`` safe to hand to matplotlib as a label or title: as
    ``terminal_text``, and every ``$`` literal. Apply it once: ``\\$``
    escaped again would show its backslash."""
    return terminal_text(text).replace("$", r"\$")
