"""How numbers read in a report's text: durations, percentages, bytes,
FLOP rates and runs of ranks; and the two notes every surface (summary,
figure, dict) gives on how a Timeline was read: what made its steps and
the warnings it carries."""

from __future__ import annotations

__all__ = ["fmt_ns", "pct", "fmt_bytes", "fmt_tflops", "fmt_runs", "steps_from_text",
           "warnings_text"]


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


def fmt_bytes(n: float) -> str:
    """Bytes in binary units: 800 B, 12 KiB, 512 MiB, 3.2 GiB."""
    n = float(n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:  # 1023 MiB, not 1.02e+03 MiB
            v = n / scale
            return f"{v:.3g} {unit}" if abs(v) < 999.5 else f"{v:.0f} {unit}"
    return f"{n:.0f} B"


def fmt_tflops(flop_per_s: float, digits: int = 3) -> str:
    """FLOP/s as TFLOP/s to ``digits`` significant digits: "41.2 TFLOP/s";
    "989.5 TFLOP/s" (a datasheet peak, ``digits=4``); whole from 10**digits."""
    t = float(flop_per_s) / 1e12
    return f"{t:.0f} TFLOP/s" if abs(t) >= 10 ** digits else f"{t:.{digits}g} TFLOP/s"


def fmt_runs(numbers: list[int]) -> str:
    """Sorted whole numbers as runs: [1, 2, 3, 7] → "1–3, 7" (a world of
    10^6 ranks with two files lists one run, not 10^6 lines)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)


def steps_from_text(meta: dict) -> str:
    """" (ends of ProfilerStep#N)": which marker made an imported trace's
    steps (``formats/kineto/steps.py``); "" when the Timeline does not say."""
    marker = meta.get("steps_from")
    return f" (ends of {marker})" if isinstance(marker, str) and marker else ""


def warnings_text(warnings: tuple[str, ...], first: bool = False) -> str:
    """"3 warnings on how it was read (Timeline.warnings)", with the first
    of them after a colon when ``first``."""
    n = len(warnings)
    head = f"{n} warning{'s' * (n != 1)} on how it was read (Timeline.warnings)"
    return f"{head}: {warnings[0]}" + (" …" if n > 1 else "") if first else head
