"""A Timeline made ready to draw: its window, its lanes, the analysis behind
the shading, and the drawing of each part into matplotlib Axes.

Lanes (``layout.py``), top to bottom: one row of host spans (steps,
DataLoader fetches, user spans), one lane per CPU thread that dispatched
ops, one lane per GPU stream, grouped by device — once per rank in a
merged Timeline. Every metric drawn comes from ``analyze``: gap intervals
and causes (``overlap.device_idle_amounts`` per pixel column), queue depth
(``lanes.queue_depth``) and CPU lead (``Lanes.lead``). A stream's idle time
while another stream of its device ran has no cause (``overlap.py``) and
is left unshaded. What is computed here is drawing only: an op's colour
(its phase), pixel-resolution merging (``pixels.py``) and the thinning of
launch lines.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analysis.gaps import CAUSES
from ..analysis.overlap import device_idle_amounts
from ..errors import CutimelineError
from ..numeric import intervals as iv
from ..timeline.schema import NONE, GpuKind, OpFlag, SpanKind
from ..timeline.timeline import Timeline
from . import pixels as px
from .layout import lay_out

__all__ = ["PHASES", "PHASE_COLORS", "CAUSE_COLORS", "FLOW_COLOR", "Scene"]

# Phase of an op, by priority (a later one wins): forward is everything
# not claimed by another (the loss, zero_grad...); "no op" is GPU work
# whose launching op is unknown.
PHASES = ("forward / other", "backward", "optimizer", "data", "sync", "no op")
FORWARD, BACKWARD, OPTIMIZER, DATA, SYNC, NO_OP = range(len(PHASES))
PHASE_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#8172b3", "#222222", "#9a9a9a")
COMPILED_HATCH, COMPILED_EDGE = "////", "#ffffff"  # over a compiled region's rows
# Idle shading on GPU lanes, light so that work drawn over it stands out;
# no colour here is red, which only launch lines use.
CAUSE_COLORS = {"data": "#cdbfe8", "sync": "#f3d36b", "launch": "#a6dcef",
                "host": "#b9e3b0", "dependency": "#d5d5d5", "unknown": "#efe6cf"}
CAUSE_LABELS = {"data": "waiting for data", "sync": "after a sync",
                "launch": "waiting for launches", "host": "host busy elsewhere",
                "dependency": "dependency / latency", "unknown": "unknown cause"}
FLOW_COLOR = "#e00000"
STEP_COLORS = ("#e4e4e4", "#f4f4f4")
USER_COLOR = "#2a9d8f"
STREAM_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
HALF = 0.38        # half-height of work boxes, in lanes
GAP_HALF = 0.46    # half-height of idle shading


class Scene:
    """One Timeline over one window, with the analysis it is drawn from."""

    def __init__(self, tl: Any, window: Any = None, *, what: str = "plot"):
        if not isinstance(tl, Timeline):
            raise CutimelineError(f"{what} needs a Timeline (from ctl.record, "
                                  f"ctl.load or ctl.import_chrome), not "
                                  f"{type(tl).__name__}.")
        if not (len(tl.ops) or len(tl.gpu) or len(tl.spans)):
            raise CutimelineError("The Timeline is empty (no ops, gpu rows or "
                                  "spans), so there is nothing to plot; was "
                                  "recording disabled (CUTIMELINE_DISABLE)?")
        from ..analysis.analyzer import analyze
        self.tl = tl
        self.report = analyze(tl)  # raises for unaligned gpu rows
        self.lanes, self.act = self.report.lanes, self.report.activity
        lo, hi = tl.start_ns, tl.end_ns
        if window is None:
            w0, w1 = lo, max(hi, lo + 1)
        else:
            w0, w1 = tl.window_bounds(window)
            if w1 <= lo or w0 >= hi:
                raise CutimelineError(
                    f"Window {window!r} lies outside the Timeline, which spans "
                    f"0–{(hi - lo) / 1e9:.6g} s; choose steps it has or "
                    f"seconds within that range.")
        self.window, self.w0, self.w1 = window, int(w0), int(w1)
        self.span_ms = (self.w1 - self.w0) / 1e6
        self._layout()
        self.phase = _op_phases(tl, self.act)

    # -- lanes -------------------------------------------------------------
    def _layout(self) -> None:
        ln = self.lanes
        self.keys = ln.stream_keys if ln is not None else np.zeros((0, 2), np.int64)
        lay = lay_out(self.tl, self.keys)
        self.layout, self.labels = lay, lay.labels
        self.threads, self.thread_y, self.stream_y = lay.threads, lay.thread_y, lay.stream_y
        self.stream_order = np.argsort(self.stream_y, kind="stable")  # top to bottom
        self.n_lanes = len(self.labels)

    def stream_label(self, k: int) -> str:
        return self.labels[self.stream_y[k]]

    # -- the main lanes ------------------------------------------------------
    def draw_lanes(self, ax, cols: px.Columns, flows: int) -> dict[str, set]:
        """Draw every lane into ax; returns what was drawn, for the legend:
        {"phases": {...}, "causes": {...}, "flows": n, "spans": {...}}."""
        ax.set_ylim(self.n_lanes - 0.5, -0.5)
        ax.set_yticks(np.arange(self.n_lanes), self.labels)
        ax.set_xlim(0, self.span_ms)
        ax.tick_params(axis="y", length=0)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        used = {"phases": set(), "causes": set(), "spans": set(), "flows": 0,
                "compiled": False}
        self._separators(ax)
        self._gaps(ax, cols, used)
        self._spans(ax, cols, used)
        o, y = self.tl.ops, self.tl.syncs
        lane = np.searchsorted(self.threads, o.thread)
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
            at = np.where(known[free], np.searchsorted(self.threads, th[free]), 0)
            lane = np.concatenate([lane, at])
            begin = np.concatenate([begin, y.host_begin_ns[free]])
            end = np.concatenate([end, y.host_end_ns[free]])
            phase = np.concatenate([phase, np.full(int(free.sum()), SYNC)])
        self._work(ax, cols, lane, self.thread_y, begin, end, phase, used)
        ln = self.lanes
        if ln is not None:
            g = self.tl.gpu
            ph = np.where(g.op >= 0, self.phase[np.maximum(g.op, 0)], NO_OP) \
                if len(self.phase) else np.full(len(g), NO_OP)
            self._work(ax, cols, ln.streams.of_row, self.stream_y, ln.begin,
                       ln.end, ph, used)
            self._compiled(ax, cols, g.kind == GpuKind.COMPILED, used)
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

    def _work(self, ax, cols, lane, lane_y, begin, end, phase, used) -> None:
        """Boxes of work, one colour per phase, merged at pixel resolution;
        later phases are drawn over earlier ones."""
        if len(lane) == 0:
            return
        n = len(lane_y)
        group = np.asarray(lane, np.int64) * len(PHASES) + phase
        g, c0, c1 = px.runs(group, begin, end, n * len(PHASES), cols)
        ph = g % len(PHASES)
        order = np.argsort(ph, kind="stable")
        y = lane_y[g // len(PHASES)]
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
        from matplotlib.collections import PolyCollection
        x0, x1, y = cols.ms(c0), cols.ms(c1), self.stream_y[g]
        verts = np.stack([np.stack([x0, y - HALF], 1), np.stack([x0, y + HALF], 1),
                          np.stack([x1, y + HALF], 1), np.stack([x1, y - HALF], 1)], 1)
        ax.add_collection(PolyCollection(verts, facecolors="none", edgecolors=COMPILED_EDGE,
                                         hatch=COMPILED_HATCH, linewidths=0, zorder=2.5))
        used["compiled"] = True

    def _gaps(self, ax, cols, used) -> None:
        """Idle shading on GPU lanes: each whole pixel column inside a gap
        gets the cause that claims most of it (``overlap.device_idle_amounts``
        over that column), none where other streams of the device ran for
        most of it. Gaps narrower than a column are hidden by the work on
        both sides anyway."""
        ln = self.lanes
        if ln is None:
            return
        grp = ln.streams
        gb, ge = grp.gb, grp.ge
        sel = np.flatnonzero((ge > self.w0) & (gb < self.w1))
        c0 = np.clip(cols.ceil(np.maximum(gb[sel], self.w0)), 0, cols.width)
        c1 = np.clip(cols.floor(np.minimum(ge[sel], self.w1)), 0, cols.width)
        ok = c1 > c0
        sel, c0, c1 = sel[ok], c0[ok], c1[ok]
        if len(sel) == 0:
            return
        n = c1 - c0
        r = np.repeat(sel, n)
        col = np.repeat(c0 - np.cumsum(n) + n, n) + np.arange(n.sum())
        amounts, over = device_idle_amounts(ln, self.act, r, cols.time(col),
                                            cols.time(col + 1))
        cause = np.argmax(np.column_stack([amounts, over]), axis=1)
        shaded = cause < len(CAUSES)  # the last column: other streams ran
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
        user = np.flatnonzero((s.kind == SpanKind.USER) & mine)
        fetch = np.array(["DataLoader" in str(nm) for nm in
                          self.tl.decode(s["name"][user])], bool)
        if rank is None:
            db, de = self.act.data
        else:  # this rank's fetches (act.data merges every rank's)
            d = np.concatenate([np.flatnonzero((s.kind == SpanKind.DATA) & mine),
                                user[fetch]])
            db, de = iv.union(s.begin_ns[d], s.end_ns[d])
        user = user[~fetch]  # drawn as data
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
            text = str(texts[i])
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

    # -- the lower panels -----------------------------------------------------
    def draw_queue(self, ax, cols, *, prefix: str = "", ls: str = "-") -> list:
        """Queue depth of each stream (the largest in each pixel column)."""
        ln, handles = self.lanes, []
        if ln is None:
            return handles
        from ..analysis.lanes import queue_depth
        edges = cols.ms(np.arange(cols.width + 1))
        for j, k in enumerate(self.stream_order):
            t, d = queue_depth(ln, ln.streams, int(k))
            v = px.step_max(t, d, cols)
            # a steps-post line, not ax.stairs: a Patch of ``width`` steps
            # costs a slow bounding-box update
            h, = ax.plot(edges, np.append(v, v[-1]), drawstyle="steps-post",
                         color=STREAM_COLORS[j % len(STREAM_COLORS)], lw=1.0,
                         ls=ls, label=prefix + self.stream_label(k))
            handles.append(h)
        return handles

    def draw_lead(self, ax, cols, *, ls: str = "-") -> None:
        """CPU lead (GPU begin − launch, ms) of each stream's work at its
        GPU begin: per pixel column a bar over the range and a dot at its
        top (no lines join columns: a line would invent values between
        sparse points)."""
        ln = self.lanes
        if ln is None:
            return
        from matplotlib.collections import LineCollection
        grp = ln.streams
        for j, k in enumerate(self.stream_order):
            rows = grp.order[grp.starts[k]:grp.starts[k + 1]]
            rows = rows[ln.lead[rows] != NONE]
            c, lo, hi = px.envelope(ln.begin[rows], ln.lead[rows], cols)
            if len(c) == 0:
                continue
            x = cols.ms(c + 0.5)
            color = STREAM_COLORS[j % len(STREAM_COLORS)]
            bar = np.stack([np.stack([x, lo / 1e6], 1), np.stack([x, hi / 1e6], 1)], 1)
            ax.add_collection(LineCollection(bar, colors=color, linewidths=1.0,
                                             linestyles=ls))
            ax.scatter(x, hi / 1e6, s=4, color=color, lw=0,
                       marker="o" if ls == "-" else "^")
        ax.autoscale_view()


def _boxes(ax, x0, x1, y0, y1, colors, zorder) -> None:
    """One PolyCollection of axis-aligned boxes, not antialiased: the boxes
    already sit on pixel columns, and crisp edges keep colours exact."""
    if len(x0) == 0:
        return
    from matplotlib.collections import PolyCollection
    y0 = np.broadcast_to(y0, np.shape(x0))
    y1 = np.broadcast_to(y1, np.shape(x0))
    verts = np.stack([np.stack([x0, y0], 1), np.stack([x0, y1], 1),
                      np.stack([x1, y1], 1), np.stack([x1, y0], 1)], 1)
    ax.add_collection(PolyCollection(verts, facecolors=colors, edgecolors="none",
                                     linewidths=0, antialiaseds=False, zorder=zorder))


def _inside(segments: tuple[np.ndarray, np.ndarray], t: np.ndarray) -> np.ndarray:
    b, e = segments
    if len(b) == 0:
        return np.zeros(len(t), bool)
    i = np.searchsorted(b, t, side="right")
    return (i > 0) & (t < e[np.maximum(i - 1, 0)])


def _op_phases(tl: Timeline, act) -> np.ndarray:
    """The phase of each op (for its colour), from where it began."""
    o, s = tl.ops, tl.spans
    t = o.host_begin_ns

    def spans(kind):
        m = s.kind == kind
        return iv.union(s.begin_ns[m], s.end_ns[m])

    phase = np.full(len(o), FORWARD, np.int64)
    phase[(o.grad_fn != NONE) | _inside(spans(SpanKind.BACKWARD), t)] = BACKWARD
    phase[_inside(spans(SpanKind.OPTIMIZER), t)] = OPTIMIZER
    phase[_inside(act.data, t)] = DATA
    sync = (o.flags & OpFlag.SYNC) != 0
    y_op = tl.syncs.op
    sync[y_op[y_op >= 0]] = True
    phase[sync] = SYNC
    return phase
