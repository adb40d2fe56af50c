"""A Timeline made ready to draw: its window, its lanes, the analysis behind
the shading, and the drawing of the lanes into a matplotlib Axes.

Lanes (``layout.py``), top to bottom: one row of host spans (steps,
DataLoader fetches, user spans), one lane per CPU thread that dispatched
ops, one lane per GPU stream, grouped by device — once per rank in a
merged Timeline. Every metric drawn comes from ``analyze`` (a Report made
here, or the one given): gap intervals and causes
(``Report.idle_amounts`` per pixel column), queue depth and CPU
lead (``panels.py``), step verdicts (``strip.py``). A stream's idle time
while another stream of its device ran has no cause (``overlap.py``) and
is left unshaded; so is all idle time of a *side stream* (busy less than
half as long as its device's busiest stream) but the part spent waiting
on a dependency: a side stream with nothing queued is idle, not starved,
and its lane must not repeat the device's blame. What is computed here is
drawing only: an op's colour (its phase, ``phases.py``), pixel-resolution
merging (``pixels.py``), which streams are side streams, and the thinning
of launch lines. A window with more GPU rows than pixels can show is
drawn as an overview (``overview.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...analysis import CAUSES, Report, analyze
from ...errors import CutimelineError
from ...numeric import intervals as iv
from ...text import figure_text
from ...timeline.schema import NONE, GpuKind, SpanKind
from ...timeline.timeline import as_timeline
from ...timeline.windows import parse_window
from .. import pixels as px
from ..artists import GAP_HALF, HALF, boxes as _boxes
from ..palette import (CAUSE_COLORS, CAUSE_LABELS, COMPILED_EDGE, COMPILED_HATCH, FLOW_COLOR,
                       PHASE_COLORS, PHASES, STEP_COLORS, STREAM_COLORS, USER_COLOR)
from .layout import lay_out
from .names import draw_names
from .overview import ROWS_PER_PX, draw_overview
from .phases import DATA, SYNC, gpu_phases, op_phases, with_syncs

__all__ = ["PHASES", "PHASE_COLORS", "CAUSE_COLORS", "CAUSE_LABELS", "FLOW_COLOR",
           "STEP_COLORS", "STREAM_COLORS", "USER_COLOR", "COMPILED_EDGE",
           "COMPILED_HATCH", "HALF", "GAP_HALF", "Scene"]

SIDE_BELOW = 0.5   # a stream busy less than this share of its device's busiest is a side stream
SIDE_CAUSES = ("dependency",)  # the only idle a side stream's lane is shaded for
OVERVIEW_FLOW_PX = 8  # in an overview, at most one launch line per this many columns


class Scene:
    """One Timeline over one window, with the analysis it is drawn from."""

    def __init__(self, tl: Any, window: Any = None, *, what: str = "plot",
                 report: Any = None):
        tl = as_timeline(tl, what)
        if not (len(tl.ops) or len(tl.gpu) or len(tl.spans)):
            raise CutimelineError("The Timeline is empty (no ops, gpu rows or "
                                  "spans), so there is nothing to plot; was "
                                  "recording disabled (CUTIMELINE_DISABLE)?")
        if report is None:
            report = analyze(tl)  # raises for unaligned gpu rows
        elif not isinstance(report, Report) or report.source is not tl:
            raise CutimelineError(f"report={report!r} must be the Report of the "
                                  f"Timeline drawn, from ctl.analyze(tl) on that "
                                  f"same Timeline object.")
        self.tl, self.report = tl, report
        self.lanes, self.act = report.lanes, report.activity
        lo, hi = tl.start_ns, tl.end_ns
        # "recording": the whole Timeline; "device": first to last device
        # activity, the default for imported traces without steps (as HTA:
        # their host-only preamble would squeeze the GPU work into a corner)
        self.extent = "recording"
        if window is None:
            w0, w1 = lo, max(hi, lo + 1)
            g = tl.gpu
            if (len(g) and not len(tl.step_numbers())
                    and tl.meta.get("source") == "kineto"):
                w0, w1 = int(g.begin_ns.min()), max(int(g.end_ns.max()), int(g.begin_ns.min()) + 1)
                self.extent = "device"
        else:
            w0, w1 = tl.window_bounds(window)
            window = parse_window(window)  # one spelling for the analysis
            if w1 <= lo or w0 >= hi:
                raise CutimelineError(
                    f"Window {window!r} lies outside the Timeline, which spans "
                    f"0–{(hi - lo) / 1e9:.6g} s; choose steps it has or "
                    f"seconds within that range.")
        self.window, self.w0, self.w1 = window, int(w0), int(w1)
        self.span_ms = (self.w1 - self.w0) / 1e6
        self._layout()
        work = op_phases(tl, self.act, sync=False)
        self.phase = with_syncs(tl, work)
        self.gpu_phase = gpu_phases(tl, work)
        self.side = self._side_streams()

    # -- lanes -------------------------------------------------------------
    def _layout(self) -> None:
        ln = self.lanes
        self.keys = ln.stream_keys if ln is not None else np.zeros((0, 2), np.int64)
        lay = lay_out(self.tl, self.keys, ln.streams.of_row if ln is not None else None)
        # thread and device names from the trace, as figure text (cutimeline.text)
        self.layout, self.labels = lay, [figure_text(str(t)) for t in lay.labels]
        self.threads, self.thread_y, self.stream_y = lay.threads, lay.thread_y, lay.stream_y
        self.folded = lay.folded  # streams on a shared "more streams" lane
        order = np.argsort(self.stream_y, kind="stable")  # top to bottom
        self.stream_order = order[~self.folded[order]]
        # the stream lanes (a shared lane once) and each group's among them
        self.slot_y = np.unique(self.stream_y)
        self.stream_slot = np.searchsorted(self.slot_y, self.stream_y)
        self.n_lanes = len(self.labels)

    def stream_label(self, k: int) -> str:
        return self.labels[self.stream_y[k]]

    def _side_streams(self) -> np.ndarray:
        """Per stream group: busy less than SIDE_BELOW of the busiest stream
        of its device (busy time from the report's streams table)."""
        ln = self.lanes
        if ln is None:
            return np.zeros(0, bool)
        st = self.report.streams
        busy = np.zeros(len(self.keys))
        for i, (d, s) in enumerate(self.keys):
            hit = (st["device"] == d) & (st["stream"] == s)
            busy[i] = st["busy_ns"][hit].sum()
        top = np.zeros(len(busy))
        for d in np.unique(self.keys[:, 0]):
            m = self.keys[:, 0] == d
            top[m] = busy[m].max()
        return busy < SIDE_BELOW * top

    def dense(self, cols: px.Columns) -> bool:
        """More GPU rows in the window than ``overview.ROWS_PER_PX`` per pixel
        column: too many to draw one by one (``overview.py``)."""
        ln = self.lanes
        if ln is None:
            return False
        n = np.count_nonzero((ln.begin < self.w1) & (ln.end > self.w0))
        return n > ROWS_PER_PX * cols.width

    # -- the main lanes ------------------------------------------------------
    def draw_lanes(self, ax, cols: px.Columns, flows: int,
                   overview: bool = False) -> dict[str, set]:
        """Draw every lane into ax; returns what was drawn, for the legend:
        {"phases": {...}, "causes": {...}, "flows": n, "spans": {...}}.
        ``overview``: GPU lanes as per-column busy and idle bands."""
        ax.set_ylim(self.n_lanes - 0.5, -0.5)
        ax.set_yticks(np.arange(self.n_lanes), self.labels)
        ax.set_xlim(0, self.span_ms)
        ax.tick_params(axis="y", length=0)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        used = {"phases": set(), "causes": set(), "spans": set(), "flows": 0,
                "compiled": False}
        self._separators(ax)
        if not overview:
            self._gaps(ax, cols, used)
        self._spans(ax, cols, used)
        o, y = self.tl.ops, self.tl.syncs
        lane = self.thread_y[np.searchsorted(self.threads, o.thread)]
        begin, end, phase = o.host_begin_ns, o.host_end_ns, self.phase
        # host waits that no op made (torch.cuda.synchronize, SimGPU's), on
        # the lane of the thread that waited; of an unknown thread (older
        # files, imports) only when there is one CPU lane. Calibration pings
        # are the recorder's own.
        free = (y.op == NONE) & (y.kind != self.tl.string_id("ping"))
        th = np.asarray(y.thread, np.int64)
        known = np.isin(th, self.threads)
        free &= known | ((th == NONE) & (len(self.threads) == 1))
        if free.any():
            at = self.thread_y[np.where(known[free], np.searchsorted(self.threads, th[free]), 0)]
            lane = np.concatenate([lane, at])
            begin = np.concatenate([begin, y.host_begin_ns[free]])
            end = np.concatenate([end, y.host_end_ns[free]])
            phase = np.concatenate([phase, np.full(int(free.sum()), SYNC)])
        self._work(ax, cols, lane, begin, end, phase, used)
        ln = self.lanes
        if ln is None:
            return used
        if overview:
            draw_overview(self, ax, cols, used)
            flows = min(flows, cols.width // OVERVIEW_FLOW_PX)
        else:
            self._work(ax, cols, self.stream_y[ln.streams.of_row], ln.begin,
                       ln.end, self.gpu_phase, used)
            self._compiled(ax, cols, self.tl.gpu.kind == GpuKind.COMPILED, used)
            draw_names(self, ax, cols)
        used["flows"] = self._flows(ax, flows)
        return used

    def _separators(self, ax) -> None:
        lay = self.layout
        for y in lay.host_gpu:
            ax.axhline(y, color="#888888", lw=0.8, zorder=0.5)
        for y in lay.devices:
            ax.axhline(y, color="#aaaaaa", lw=0.6, ls="--", zorder=0.5)
        for _, b in lay.groups[:-1]:   # between ranks
            ax.axhline(b - 0.5, color="#333333", lw=1.2, zorder=0.5)

    def _work(self, ax, cols, lane, begin, end, phase, used) -> None:
        """Boxes of work on lanes ``lane`` (y), one colour per phase, merged at
        pixel resolution; later phases are drawn over earlier ones."""
        if len(lane) == 0:
            return
        group = np.asarray(lane, np.int64) * len(PHASES) + phase
        g, c0, c1 = px.runs(group, begin, end, self.n_lanes * len(PHASES), cols)
        ph = g % len(PHASES)
        order = np.argsort(ph, kind="stable")
        y = g // len(PHASES)
        _boxes(ax, cols.ms(c0[order]), cols.ms(c1[order]), y[order] - HALF,
               y[order] + HALF, np.array(PHASE_COLORS)[ph[order]], zorder=2)
        used["phases"].update(PHASES[p] for p in np.unique(ph))

    def _compiled(self, ax, cols, rows, used) -> None:
        """Hatching over compiled regions' rows: their fused kernels are
        bracketed as a whole, so a row is an upper bound on that work."""
        if not rows.any():
            return
        ln = self.lanes
        g, c0, c1 = px.runs(ln.streams.of_row[rows], ln.begin[rows], ln.end[rows],
                            len(self.stream_y), cols)
        if len(g) == 0:
            return
        # matplotlib loads on the first draw (see rendering/__init__.py)
        from matplotlib.collections import PolyCollection
        x0, x1, y = cols.ms(c0), cols.ms(c1), self.stream_y[g]
        verts = np.stack([np.stack([x0, y - HALF], 1), np.stack([x0, y + HALF], 1),
                          np.stack([x1, y + HALF], 1), np.stack([x1, y - HALF], 1)], 1)
        ax.add_collection(PolyCollection(verts, facecolors="none", edgecolors=COMPILED_EDGE,
                                         hatch=COMPILED_HATCH, linewidths=0, zorder=2.5))
        used["compiled"] = True

    def _gaps(self, ax, cols, used) -> None:
        """Idle shading on GPU lanes: each whole pixel column inside a gap
        gets the cause that claims most of it (``Report.idle_amounts``
        over that column), none where other streams of the device ran for
        most of it. Gaps narrower than a column are hidden by the work on
        both sides anyway."""
        ln = self.lanes
        if ln is None:
            return
        grp = ln.streams
        gb, ge = grp.gb, grp.ge
        sel = np.flatnonzero((ge > self.w0) & (gb < self.w1) & ~self.folded[grp.gg])
        c0 = np.clip(cols.ceil(np.maximum(gb[sel], self.w0)), 0, cols.width)
        c1 = np.clip(cols.floor(np.minimum(ge[sel], self.w1)), 0, cols.width)
        ok = c1 > c0
        sel, c0, c1 = sel[ok], c0[ok], c1[ok]
        if len(sel) == 0:
            return
        n = c1 - c0
        r = np.repeat(sel, n)
        col = np.repeat(c0 - np.cumsum(n) + n, n) + np.arange(n.sum())
        amounts, over = self.report.idle_amounts(r, cols.time(col), cols.time(col + 1))
        amounts = self.unblamed(amounts, grp.gg[r])
        cause = np.argmax(np.column_stack([amounts, over]), axis=1)
        # the last column: other streams ran; all zero: a side stream's idle
        shaded = (cause < len(CAUSES)) & (amounts.max(axis=1) > 0)
        r, col, cause = r[shaded], col[shaded], cause[shaded]
        if len(r) == 0:
            return
        # runs of columns of one gap with one cause
        head = np.ones(len(r), bool)
        head[1:] = (r[1:] != r[:-1]) | (cause[1:] != cause[:-1]) | \
            (col[1:] != col[:-1] + 1)
        h = np.flatnonzero(head)
        last = np.append(h[1:], len(r)) - 1
        y = self.stream_y[grp.gg[r[h]]]
        names = np.array(CAUSES)[cause[h]]
        _boxes(ax, cols.ms(col[h]), cols.ms(col[last] + 1), y - GAP_HALF,
               y + GAP_HALF, np.array([CAUSE_COLORS[c] for c in names]), zorder=1)
        used["causes"].update(names.tolist())

    def unblamed(self, amounts: np.ndarray, group: np.ndarray) -> np.ndarray:
        """Idle amounts by cause with a side stream's causes but SIDE_CAUSES
        set to 0: ``group`` is the stream group of each row of amounts."""
        side = self.side[group]
        if not side.any():
            return amounts
        keep = np.array([c in SIDE_CAUSES for c in CAUSES])
        return np.where(side[:, None] & ~keep, 0, amounts)

    def _spans(self, ax, cols, used) -> None:
        """Steps (alternating greys, upper half), data fetches and user
        spans (lower half) on each host-spans row, with names where wide."""
        for y, rank in self.layout.span_rows:
            self._span_row(ax, cols, used, y, rank)

    def _span_row(self, ax, cols, used, y: int, rank: int | None) -> None:
        s, lay = self.tl.spans, self.layout
        mine = np.ones(len(s), bool) if rank is None else \
            lay.thread_rank[s.thread] == rank
        step = np.flatnonzero((s.kind == SpanKind.STEP) & mine)
        step = step[np.argsort(s.begin_ns[step], kind="stable")]
        fetch = self.report.fetches()  # drawn as data, not as user spans
        user = np.flatnonzero((s.kind == SpanKind.USER) & mine & ~fetch)
        if rank is None:
            db, de = self.act.data
        else:  # this rank's fetches (act.data merges every rank's)
            d = np.flatnonzero(fetch & mine)
            db, de = iv.union(s.begin_ns[d], s.end_ns[d])
        group = np.concatenate([np.arange(len(step)) % 2, np.full(len(db), 2),
                                np.full(len(user), 3)])
        begin = np.concatenate([s.begin_ns[step], db, s.begin_ns[user]])
        end = np.concatenate([s.end_ns[step], de, s.end_ns[user]])
        g, c0, c1 = px.runs(group, begin, end, 4, cols)
        top = g < 2
        colors = np.array(STEP_COLORS + (PHASE_COLORS[DATA], USER_COLOR))[g]
        _boxes(ax, cols.ms(c0), cols.ms(c1), np.where(top, y - 0.44, y + 0.04),
               np.where(top, y - 0.04, y + 0.44), colors, zorder=2)
        used["spans"].update({0: "step", 1: "step", 2: "data", 3: "user"}[k]
                             for k in np.unique(g).tolist())
        self._span_text(ax, cols, s.begin_ns[step], s.end_ns[step],
                        [f"step {n}" for n in s.number[step]], y - 0.24, 40)
        self._span_text(ax, cols, s.begin_ns[user], s.end_ns[user],
                        self.tl.decode(s["name"][user]), y + 0.24, 60)
        t = s.begin_ns[step]
        t = t[(t > self.w0) & (t < self.w1)]
        if 0 < len(t) <= 400:  # faint step boundaries across this rank's lanes
            a, b = next((a, b) for a, b in lay.groups if a <= y < b)
            ax.vlines((t - self.w0) / 1e6, a - 0.5, b - 0.5, color="#b8b8b8",
                      lw=0.6, ls=(0, (3, 3)), zorder=0.5)

    def _span_text(self, ax, cols, begin, end, texts, y, min_px) -> None:
        """Names inside spans wide enough for them, left to right, skipping
        any that would overlap one already placed (nested spans)."""
        c0 = np.clip(cols.floor(begin), 0, cols.width)
        c1 = np.clip(cols.ceil(end), 0, cols.width)
        wide = np.flatnonzero(c1 - c0 >= min_px)
        if len(wide) > 60:  # too many to read: none
            return
        free_from = -1.0
        for i in wide[np.argsort(c0[wide], kind="stable")]:
            text = figure_text(str(texts[i]))
            need = 4.4 * len(text) + 8  # ~px of 7-pt text, and a margin
            mid = (c0[i] + c1[i]) / 2
            if need > c1[i] - c0[i] or mid - need / 2 < free_from:
                continue
            free_from = mid + need / 2
            ax.text(cols.ms(mid), y, text, ha="center", va="center", fontsize=7,
                    color="#333333", zorder=3, clip_on=True)

    def _flows(self, ax, most: int) -> int:
        """Red lines from each launch on its thread's lane to the start of
        its work on the stream's lane; evenly thinned to ``most`` lines.
        Rows with no known launch time or launching op get none."""
        if most == 0:
            return 0
        g, ln, o = self.tl.gpu, self.lanes, self.tl.ops
        ok = np.flatnonzero((g.op >= 0) & (ln.launch != NONE) &
                            (ln.launch < self.w1) & (ln.begin > self.w0))
        ok = ok[px.even_sample(len(ok), most)]
        if len(ok) == 0:
            return 0
        # matplotlib loads on the first draw (see rendering/__init__.py)
        from matplotlib.collections import LineCollection
        ty = self.thread_y[np.searchsorted(self.threads, o.thread[g.op[ok]])]
        sy = self.stream_y[ln.streams.of_row[ok]]
        x0 = (ln.launch[ok] - self.w0) / 1e6
        x1 = (ln.begin[ok] - self.w0) / 1e6
        seg = np.stack([np.stack([x0, ty + HALF], 1), np.stack([x1, sy - HALF], 1)], 1)
        # under the work boxes, over the idle shading: a line shows where
        # it crosses empty lane space and never hides work
        ax.add_collection(LineCollection(seg, colors=FLOW_COLOR, linewidths=0.6,
                                         alpha=0.8, zorder=1.5))
        return len(ok)
