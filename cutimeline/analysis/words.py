"""How numbers read in a report's text: durations and percentages."""

from __future__ import annotations

__all__ = ["fmt_ns", "pct"]


def fmt_ns(ns: float) -> str:
    """ns as a short human duration: 850 ns, 12.3 µs, 4.56 ms, 1.23 s."""
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            v = ns / scale
            return f"{v:.3g} {unit}" if abs(v) < 100 else f"{v:.0f} {unit}"
    return f"{ns:.0f} ns"


def pct(x: float) -> str:
    """A fraction as a whole percentage: 0.623 → "62%"."""
    return f"{100 * x:.0f}%"
