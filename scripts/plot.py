#!/usr/bin/env python3
"""Draw one PNG per reported metric of each cpbench results file (schema_version 1).

Usage: scripts/plot.py RESULTS_DIR_OR_FILE...   (folders are searched for results.json)

Each figure is written beside its results.json as <metric>.png. The x axis is the spec's
`plot.x` hint, else the case names when the spec has cases, else the first grid axis, else the
strategy. A numeric x gives a line plot, anything else a grouped bar plot (`plot.kind` overrides).
There is one series per strategy label and per value of every other axis. A panel draws at most
8 series: with more, the figure is split into small multiples, one panel per value of the
dimension(s) that bring the count under 8 (the figure says which); every value stays in
results.csv. Axis labels are `plot.x_label` or a readable name of the dimension ("TP size", not
`parallel.tp`); y labels carry the metric's unit.

Infeasible and failed points have no value: they are drawn as an 'x' at the top of the panel and
counted in the legend; on a memory plot an out-of-memory point whose reason states what it needed
is a hollow marker at that need, above the "HBM capacity" line drawn at the hardware preset's
memory. Published values (comparisons of kind "value") are black hollow markers at their x, and a
figure with one panel gets a second row with each one's error in % against the tolerance band;
ratio comparisons are listed under the axes ("published 1.48x, reproduced 1.45x").
With `plot.speedup_over: LABEL` each metric also gets <metric>_speedup.png
(scripts/plot_speedup.py): every other strategy against LABEL at the same case and grid point, inverted for lower-is-better
metrics (step time, bubble, exposed communication, memory, padding) so that above 1 is better.
Titles, notes and legends are laid out inside the canvas (checked by scripts/test_figures.py).
Output is deterministic: same results file, same bytes (no timestamps, no software version).
"""
import argparse
import itertools
import json
import math
import os
import re
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

# plot_speedup builds on this module: run as a script, this module is also the `plot` it imports.
sys.modules.setdefault("plot", sys.modules[__name__])
import plot_frontier  # noqa: E402
import plot_speedup  # noqa: E402

MAX_SERIES = 8  # per panel; more cannot be told apart
COLORS = [f"C{i}" for i in range(MAX_SERIES)]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
DPI = 110

# Units from the snake_case suffix of a metric name (DESIGN.md "Metric names"). Checked in order;
# every suffix starts with '_' so "_s" never matches "_ms".
SUFFIX_UNITS = [
    ("_ms", "ms"), ("_us", "µs"), ("_ns", "ns"), ("_s", "s"),
    ("_gib", "GiB"), ("_mib", "MiB"), ("_gb", "GB"), ("_mb", "MB"), ("_bytes", "bytes"),
    ("_gbps", "GB/s"), ("_b", "billions"), ("_m", "millions"),
    ("_fraction", "fraction"), ("_pct", "%"), ("_percent", "%"),
]
EXACT_UNITS = {"mfu": "fraction of peak", "compute_imbalance": "max/mean",
               "flops_per_iteration": "FLOP", "comm_bytes": "bytes"}
# Metrics whose name says little on an axis; others read from their name ("step time [s]").
METRIC_NAMES = {"tflops_per_gpu": "TFLOP/s per GPU", "tokens_per_s_per_gpu": "tokens/s per GPU",
                "tokens_per_s": "tokens/s (whole job)",
                "aggregate_pflops": "aggregate PFLOP/s", "mfu": "MFU", "params_b": "parameters",
                "exposed_cp_comm_s": "exposed CP communication",
                "exposed_comm_s": "exposed communication",
                "flops_per_iteration": "work per iteration"}
# Grid axes a reader knows by another name. Others read from their last path component.
DIM_NAMES = {"parallel.tp": "TP size", "parallel.pp": "PP size", "parallel.cp": "CP size",
             "parallel.dp": "DP size", "parallel.cp_comm_type": "CP communication",
             "parallel.num_gpus": "GPUs", "parallel.micro_batch_size": "micro-batch size",
             "parallel.max_seqlen_per_dp_cp_rank": "max tokens per DP×CP rank",
             "parallel.virtual_stages": "virtual stages",
             "workload.global_batch_sequences": "global batch [sequences]",
             "workload.max_sequence_tokens": "max sequence [tokens]",
             "workload.length_scale": "length scale", "case": "case", "strategy": "strategy"}
# Lower-is-better metrics by name: times, memory, bytes, fractions of waste, imbalance.
LOWER_IS_BETTER_SUFFIXES = ("_s", "_ms", "_us", "_ns", "_gib", "_mib", "_gb", "_mb", "_bytes",
                            "_fraction")
NEEDED_GIB = re.compile(r"([0-9]+(?:\.[0-9]+)?) GiB per GPU needed")


def metric_unit(name):
    """The unit a metric name carries: step_time_s -> 's', tflops_per_gpu -> 'TFLOP/s per GPU'."""
    if name in EXACT_UNITS:
        return EXACT_UNITS[name]
    if name.endswith("_per_gpu"):
        base = metric_unit(name[: -len("_per_gpu")])
        return f"{base} per GPU" if base else "per GPU"
    if "tflops" in name:
        return "TFLOP/s"
    if name.endswith("_per_s"):
        return name[: -len("_per_s")].split("_")[-1] + "/s"
    for suffix, unit in SUFFIX_UNITS:
        if name.endswith(suffix):
            return unit
    return ""


def metric_label(name):
    """A metric as an axis reads it: 'step time [s]', 'TFLOP/s per GPU', 'bubble fraction'."""
    if name in METRIC_NAMES:
        words = METRIC_NAMES[name]
    else:
        words = name
        for suffix, _ in SUFFIX_UNITS:
            if name.endswith(suffix) and suffix != "_fraction":
                words = name[: -len(suffix)]
                break
        words = words.replace("_", " ")
    unit = metric_unit(name)
    return words if not unit or words.endswith(unit) else f"{words} [{unit}]"


def lower_is_better(name):
    """Times, memory, bytes, fractions (bubble, padding) and imbalance: less is better."""
    if "flops" in name or name.endswith("_per_s") or "_per_s_" in name or name == "mfu":
        return False
    return name.endswith(LOWER_IS_BETTER_SUFFIXES) or "imbalance" in name


def is_memory(name):
    return "memory" in name and metric_unit(name) in ("GiB", "MiB", "GB", "MB")


def dim_name(dim):
    """A dimension as a reader names it: parallel.tp -> 'TP size'."""
    return DIM_NAMES.get(dim) or dim.rsplit(".", 1)[-1].replace("_", " ")


def find_results(paths):
    """Every results.json named or found under the given paths, sorted, without duplicates."""
    found = set()
    for path in paths:
        if os.path.isdir(path):
            for root, _, files in os.walk(path):
                if "results.json" in files:
                    found.add(os.path.join(root, "results.json"))
        else:
            found.add(path)
    return sorted(found)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def fmt(v):
    """A compact, deterministic rendering of a value: 4 significant digits, integers as is."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


def hashable(v):
    """Grid values may be lists or objects (a parallel layout); they become their JSON text."""
    return json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else v


def dim_value(record, dim):
    """The value of a dimension (case, strategy or grid axis) in a point or a comparison."""
    if dim in ("case", "strategy"):
        return hashable(record.get(dim))
    return hashable((record.get("params") or {}).get(dim))


def value_label(dim, v):
    """One dimension's value in a legend or a panel title: 'GitHub', 'CP size = 4'."""
    if dim in ("case", "strategy"):
        return str(v)
    name = re.sub(r" \[.*\]$", "", dim_name(dim))  # the unit goes with the axis, not the value
    return f"{name} = {fmt(v)}"


class Layout:
    """Which dimension is on x, which ones make the series, and the order of their values."""

    def __init__(self, results):
        spec = results.get("spec") or {}
        self.points = results.get("points") or []
        hints = spec.get("plot") or {}
        grid = spec.get("grid") or {}
        cases = [c.get("name") for c in spec.get("cases") or []]
        labels = [s if isinstance(s, str) else s.get("label", s.get("name"))
                  for s in spec.get("strategies") or []]
        known = {"case": cases, "strategy": labels,
                 **{axis: [hashable(x) for x in v] for axis, v in grid.items()}}
        dims = (["case"] if cases else []) + list(grid) + ["strategy"]
        self.known = known
        self.x = hints.get("x") if hints.get("x") in dims else dims[0]
        self.x_label = hints.get("x_label") or dim_name(self.x)
        rest = [d for d in dims if d != self.x]
        if hints.get("series") in rest:
            rest.remove(hints["series"])
            rest.insert(0, hints["series"])
        # A dimension with a single value everywhere says nothing in a legend.
        self.series_dims = [d for d in rest if len(self.values(d, known.get(d, []))) > 1]
        self.x_values = self.values(self.x, known.get(self.x, []))
        self.numeric_x = bool(self.x_values) and all(is_number(v) for v in self.x_values)
        self.kind = hints.get("kind") or ("line" if self.numeric_x and self.x != "case" else "bar")
        if self.kind == "line" and not self.numeric_x:
            self.kind = "bar"
        if self.kind == "line":
            self.x_values.sort()
        self.logy = bool(hints.get("logy"))
        self.logx = hints.get("logx")
        # A sweep over >= 16x (four doublings of a sequence length) crowds a linear axis.
        if self.logx is None and self.kind == "line":
            positive = [v for v in self.x_values if v > 0]
            self.logx = len(positive) == len(self.x_values) and max(positive) / min(positive) >= 16
        keys = [[]]
        for d in self.series_dims:
            keys = [k + [v] for k in keys for v in self.values(d, known.get(d, []))]
        self.series = [tuple(k) for k in keys]
        # The strategy when there is only one: it names the figure's only series.
        only = self.values("strategy", labels)
        self.only_strategy = only[0] if len(only) == 1 else None

    def values(self, dim, declared):
        """Declared values first (spec order), then any others seen in points, first seen first."""
        out = [v for v in declared]
        for p in self.points:
            v = dim_value(p, dim)
            if v is not None and v not in out:
                out.append(v)
        return out

    def series_of(self, record):
        return tuple(dim_value(record, d) for d in self.series_dims)

    def series_label(self, key, dims=None):
        """'GitHub, dp_balanced'; the values of `dims` (all series dimensions by default)."""
        dims = self.series_dims if dims is None else dims
        parts = [value_label(d, v) for d, v in zip(self.series_dims, key) if d in dims]
        return ", ".join(parts) or (str(self.only_strategy) if self.only_strategy else "")

    def where(self, record):
        """A point's place in the figure, for notes: 'ptdp, CP size = 4'."""
        return ", ".join(value_label(d, dim_value(record, d))
                         for d in [self.x] + self.series_dims)


class Panels:
    """How the series keys of a figure are split into at most MAX_SERIES per panel.

    `by` are the series dimensions that pick the panel (none: one panel), `inner` the ones left
    to tell series apart in a panel. The split leaves at most MAX_SERIES series a panel with the
    fewest dimensions, then the fewest panels, and keeps the strategies together if it can. A
    dimension with one value among the keys goes to the panel title. If no split is small enough
    only the first MAX_SERIES series are drawn and `dropped` counts the others."""

    def __init__(self, lay, keys):
        self.lay = lay
        dims = lay.series_dims
        distinct = {d: {k[i] for k in keys} for i, d in enumerate(dims)}
        single = [d for d in dims if len(distinct[d]) == 1 and keys]
        free = [d for d in dims if d not in single]
        best = None
        for n in range(len(free) + 1):
            for by in itertools.combinations(free, n):
                inner = [d for d in free if d not in by]
                n_series = len({self._project(k, inner) for k in keys})
                n_panels = len({self._project(k, by) for k in keys})
                rank = ("strategy" in by, n_panels)
                if n_series <= MAX_SERIES and (best is None or rank < best[0]):
                    best = (rank, list(by), inner)
            if best is not None:
                break
        if best is None:  # even one panel per combination has too many: keep the first ones
            by, inner = [d for d in free if d != "strategy"], [d for d in free if d == "strategy"]
        else:
            by, inner = best[1], best[2]
        self.split = by  # the dimensions that make more than one panel
        self.by, self.inner = [d for d in dims if d in single or d in by], inner
        order = []
        for k in keys:
            if self._project(k, inner) not in order:
                order.append(self._project(k, inner))
        self.dropped = max(0, len(order) - MAX_SERIES)
        self.inner_keys = order[:MAX_SERIES]  # position in this list: colour, marker, bar slot
        by_panel = {}  # panel key -> [series keys], in the order first seen
        for k in keys:
            if self._project(k, inner) in self.inner_keys:
                by_panel.setdefault(self._project(k, self.by), []).append(k)
        self.panels = list(by_panel.items())

    def _project(self, key, dims):
        return tuple(v for d, v in zip(self.lay.series_dims, key) if d in dims)

    def slot(self, key):
        """The series' index in every panel: its colour, marker and bar offset."""
        return self.inner_keys.index(self._project(key, self.inner))

    def label(self, key):
        return self.lay.series_label(key, self.inner)

    def title(self, panel_key):
        return ", ".join(value_label(d, v) for d, v in zip(self.by, panel_key))

    def note(self):
        """What a reader must know about the split: [] when there is none."""
        lines = []
        if self.split:
            lines.append(f"One panel per {' × '.join(dim_name(d) for d in self.split)} (at most "
                         f"{MAX_SERIES} series a panel); every value is in results.csv.")
        if self.dropped:
            lines.append(f"Only the first {MAX_SERIES} series are drawn ({self.dropped} more in "
                         "results.csv).")
        return lines


def series_handle(kind, slot, label):
    """The legend entry of one series, drawn as the series is."""
    if kind == "bar":
        return Patch(facecolor=COLORS[slot], label=label)
    return Line2D([], [], color=COLORS[slot], marker=MARKERS[slot], label=label)


def draw_series(ax, kind, slot, n_slots, xs, ys, label):
    """One series on one panel: bars side by side at integer x, or a line with markers."""
    if kind == "bar":
        width = 0.8 / max(n_slots, 1)
        px = [x + (slot - (n_slots - 1) / 2) * width for x in xs]
        shown = [(p, y) for p, y in zip(px, ys) if not math.isnan(y)]
        ax.bar([p for p, _ in shown], [y for _, y in shown], width=width, color=COLORS[slot],
               label=label)
        return px
    ax.plot(xs, ys, color=COLORS[slot], marker=MARKERS[slot], label=label)
    return list(xs)


def x_positions(lay, x_values):
    return {x: (i if lay.kind == "bar" else x) for i, x in enumerate(x_values)}


def bar_offset(lay, slot, n_slots):
    return (slot - (n_slots - 1) / 2) * 0.8 / max(n_slots, 1) if lay.kind == "bar" else 0.0


def grid_shape(n_panels):
    cols = 1 if n_panels == 1 else 2 if n_panels <= 4 else 3
    return math.ceil(n_panels / cols), cols


def new_figure(n_panels, error_row=False):
    """A figure with one panel per entry, in rows of 2 or 3; with `error_row` (one panel only) a
    short second row below it for errors against published values. Returns (fig, panels,
    error axes or None)."""
    rows, cols = grid_shape(n_panels)
    width = 7.5 if cols <= 2 else 10.0
    fig = plt.figure(figsize=(width, 4.2 if rows == 1 else 2.9 * rows + 0.4))
    if error_row:
        top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
        fig.set_size_inches(width, 5.4)
        return fig, [top], bottom
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True).ravel().tolist()
    for ax in axes[n_panels:]:
        ax.remove()
    return fig, axes[:n_panels], None


def set_x_axis(ax, lay, x_values):
    if lay.kind == "bar":
        labels = [fmt(x) for x in x_values]
        # Categories whose names do not fit side by side (a character is about 0.55 of the
        # 10 pt font wide) are written at an angle, ending under their bar.
        width_in = ax.get_position().width * ax.figure.get_figwidth()
        crowded = sum(len(s) + 1 for s in labels) * 10 * 0.55 / 72 > width_in
        ax.set_xticks(range(len(x_values)), labels, rotation=35 if crowded else 0,
                      ha="right" if crowded else "center", rotation_mode="anchor")
        ax.set_xlim(-0.6, len(x_values) - 0.4)
    else:
        if lay.logx:
            ax.set_xscale("log")
        ax.set_xticks(x_values, [fmt(x) for x in x_values])
        ax.minorticks_off()


def wrap(text, width_in, font_pt):
    """Text wrapped to a width in inches (a character is about 0.55 of the font size wide)."""
    chars = max(20, int(width_in * 72 / (font_pt * 0.55)))
    return "\n".join(textwrap.fill(line, chars, subsequent_indent="  ") if line else line
                     for line in text.split("\n"))


def label_axes(fig, panels, x_label, y_label, error_ax=None):
    """Axis labels, wrapped to the panel: x under the bottom row, y left of the first column."""
    rows, cols = grid_shape(len(panels))
    panel_w = fig.get_figwidth() / cols - 0.9
    panel_h = (fig.get_figheight() - 1.0) / rows
    for i, ax in enumerate(panels):
        bottom_row = i + cols >= len(panels)
        if bottom_row and error_ax is None:
            ax.set_xlabel(wrap(x_label, panel_w, 10))
            ax.tick_params(axis="x", labelbottom=True)
        if i % cols == 0:
            ax.set_ylabel(wrap(y_label, panel_h, 10))
    if error_ax is not None:
        error_ax.set_xlabel(wrap(x_label, panel_w, 10))


def finish(fig, title, handles, notes):
    """Title on top; the legend (figure-wide, so never over the data) and the notes under the
    panels; the figure made taller by what they need so that nothing leaves the canvas."""
    width = fig.get_figwidth()
    fig.suptitle(wrap(title, width - 0.3, 10), fontsize=10)
    renderer = fig.canvas.get_renderer()
    legend = None
    ncol = min(len(handles), 4)
    while handles:
        legend = fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8,
                            frameon=False)
        if ncol == 1 or legend.get_window_extent(renderer).width <= 0.97 * fig.bbox.width:
            break
        legend.remove()
        ncol -= 1
    note = None
    if notes:
        note = fig.text(0.01, 0.0, wrap("\n".join(notes), width - 0.3, 7.5), fontsize=7.5,
                        va="bottom", ha="left")
    pad = 0.06  # inches
    note_h = note.get_window_extent(renderer).height / fig.dpi + pad if note else 0.0
    legend_h = legend.get_window_extent(renderer).height / fig.dpi + pad if legend else 0.0
    panels_h = fig.get_figheight()
    height = panels_h + note_h + legend_h + pad
    fig.set_size_inches(width, height)
    if note:
        note.set_position((0.01, pad / height))
    if legend:
        legend.set_bbox_to_anchor((0.5, (note_h + pad) / height), transform=fig.transFigure)
    fig.tight_layout(rect=(0, (note_h + legend_h + pad) / height, 1, 1))


def ratio_note(c):
    """'label: published 1.48×, reproduced 1.45×'; a ratio published only as a direction says so."""
    if is_number(c.get("published")):
        published = f"published {fmt(c['published'])}×"
    else:
        published = {"above_one": "expected > 1", "below_one": "expected < 1"}.get(c.get("expect"), "published n/a")
    return (f"{c.get('label', c.get('metric'))}: {published}, "
            f"reproduced {fmt(c.get('reproduced')) if is_number(c.get('reproduced')) else 'n/a'}×")


def hbm_capacities(results):
    """The GPU memory (GiB) of every hardware preset the spec uses (spec, cases or a grid axis)."""
    spec = results.get("spec") or {}
    presets = (spec.get("presets") or {}).get("hardware") or {}
    used = [spec.get("hardware")] + [c.get("hardware") for c in spec.get("cases") or []]
    used += list((spec.get("grid") or {}).get("hardware") or [])
    caps = set()
    for hw in used:
        preset = hw if isinstance(hw, dict) else presets.get(hw) if isinstance(hw, str) else None
        v = ((preset or {}).get("gpu") or {}).get("hbm_gib")
        v = v.get("value") if isinstance(v, dict) else v
        if is_number(v):
            caps.add(v)
    return sorted(caps)


def rel_tolerance(results, c):
    """A value comparison's relative tolerance: its own, its published entry's, else the spec's
    per-metric one; None when there is none (or only an absolute one)."""
    published = (results.get("spec") or {}).get("published") or {}
    entries = [e for e in published.get("values") or [] if e.get("label") == c.get("label")]
    for tol in [c.get("tolerance")] + [e.get("tolerance") for e in entries] + [
            (published.get("tolerance") or {}).get(c.get("metric"))]:
        if isinstance(tol, dict) and is_number(tol.get("rel")):
            return tol["rel"]
    return None


def value_comparisons(results, metric):
    return [c for c in results.get("comparisons") or [] if c.get("metric") == metric
            and c.get("kind", "value") == "value" and is_number(c.get("published"))]


def draw_errors(ax, results, lay, panels, comps, xpos):
    """Each published value's error in % at its x, with the tolerance band; above 0: high."""
    tolerances = sorted({t for t in (rel_tolerance(results, c) for c in comps) if t is not None})
    for tol in tolerances[-1:]:
        ax.axhspan(-100 * tol, 100 * tol, color="0.85", zorder=0)
    ax.axhline(0.0, color="black", linewidth=0.8)
    for c in comps:
        err = c.get("rel_error")
        if not is_number(err) and is_number(c.get("reproduced")) and c["published"]:
            err = (c["reproduced"] - c["published"]) / c["published"]
        if not is_number(err):
            continue
        slot = panels.slot(lay.series_of(c))
        x = xpos[dim_value(c, lay.x)] + bar_offset(lay, slot, len(panels.inner_keys))
        ax.plot([x], [100 * err], marker=MARKERS[slot], color=COLORS[slot], linestyle="none")
    band = f" (band: ±{fmt(100 * tolerances[-1])}%)" if tolerances else ""
    ax.set_ylabel(wrap("vs published [%]" + band, 1.3, 8), fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def not_ok_reasons(lay, most=3):
    """The first few distinct reasons of points that are not ok, so a reader sees why there are
    gaps: 'infeasible at GPUs = 32, packing only (and 3 more points): out of memory: ...'."""
    first, count = {}, {}
    for p in lay.points:
        if p.get("status") != "ok" and p.get("reason"):
            reason = (p.get("status"), str(p["reason"]))
            first.setdefault(reason, p)
            count[reason] = count.get(reason, 0) + 1
    out = []
    for reason, p in list(first.items())[:most]:
        more = f" (and {count[reason] - 1} more)" if count[reason] > 1 else ""
        text = textwrap.shorten(reason[1], 180, placeholder=" …")
        out.append(f"{reason[0]} at {lay.where(p)}{more}: {text}")
    if len(first) > most:
        out.append(f"… {len(first) - most} other reasons in results.csv")
    return out


def headroom_for_marks(ax):
    """Room above the data for the marks at the top of a panel (0.96 of its height)."""
    lo, hi = ax.get_ylim()
    if ax.get_yscale() == "log":
        ax.set_ylim(lo, hi * (hi / lo) ** 0.15)
    else:
        ax.set_ylim(lo, lo + (hi - lo) / 0.88)


def plot_metric(results, metric):
    """One figure for one metric of a results file (a matplotlib Figure; the caller saves it)."""
    lay = Layout(results)
    label = metric_label(metric)
    title = f"{results.get('experiment', '?')}: {label}"
    comps = [c for c in results.get("comparisons") or [] if c.get("metric") == metric]
    notes = [ratio_note(c) for c in comps if c.get("kind") == "ratio"]
    cells = {}  # (series key, x value) -> point
    for p in lay.points:
        cells.setdefault((lay.series_of(p), dim_value(p, lay.x)), p)
    value = {k: p["metrics"][metric] for k, p in cells.items() if p.get("status") == "ok"
             and is_number((p.get("metrics") or {}).get(metric))}
    reasons = not_ok_reasons(lay)
    if not value:
        fig = plt.figure(figsize=(7.5, 4.2))
        ax = fig.add_subplot(1, 1, 1)
        counts = {}
        for p in lay.points:
            counts[p.get("status", "?")] = counts.get(p.get("status", "?"), 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no points"
        ax.text(0.5, 0.5, f"no feasible points\n({summary})", ha="center", va="center",
                transform=ax.transAxes, fontsize=12)
        ax.set_axis_off()
        finish(fig, title, [], notes + reasons)
        return fig
    keys = [k for k in lay.series if any((k, x) in cells for x in lay.x_values)]
    panels = Panels(lay, keys)
    xpos = x_positions(lay, lay.x_values)
    published = value_comparisons(results, metric)
    drawn = [k for _, series in panels.panels for k in series]
    drawn_published = [c for c in published if dim_value(c, lay.x) in xpos
                       and lay.series_of(c) in drawn]
    error_row = len(panels.panels) == 1 and bool(drawn_published)
    fig, axes, error_ax = new_figure(len(panels.panels), error_row)
    memory = is_memory(metric)
    not_ok, needed_drawn = {}, 0
    n_slots = len(panels.inner_keys)
    for ax, (pk, series) in zip(axes, panels.panels):
        if len(panels.panels) > 1 or pk:
            ax.set_title(panels.title(pk), fontsize=9)
        for key in series:
            slot = panels.slot(key)
            xs = [x for x in lay.x_values if (key, x) in cells]
            ys = [value.get((key, x), math.nan) for x in xs]
            px = draw_series(ax, lay.kind, slot, n_slots, [xpos[x] for x in xs], ys,
                             panels.label(key))
            for x, y, xp in zip(xs, ys, px):
                if not math.isnan(y):
                    continue
                point = cells[(key, x)]
                status = point.get("status") if point.get("status") == "infeasible" else "error"
                need = NEEDED_GIB.search(str(point.get("reason", ""))) if memory else None
                if need and metric_unit(metric) == "GiB":
                    # What the point would need: above the capacity line, hollow (not a value).
                    ax.plot([xp], [float(need.group(1))], marker=MARKERS[slot], markersize=8,
                            markerfacecolor="none", markeredgecolor=COLORS[slot],
                            linestyle="none")
                    needed_drawn += 1
                else:
                    ax.plot([xp], [0.96], marker="x" if status == "infeasible" else "X",
                            color=COLORS[slot], markersize=9, linestyle="none",
                            transform=ax.get_xaxis_transform(), clip_on=False)
                    not_ok[status] = not_ok.get(status, 0) + 1
        for c in published:
            x, key = dim_value(c, lay.x), lay.series_of(c)
            if x not in xpos or key not in series:
                continue
            ax.scatter([xpos[x] + bar_offset(lay, panels.slot(key), n_slots)], [c["published"]],
                       s=70, marker="o", facecolors="none", edgecolors="black", linewidths=1.5,
                       zorder=5)
        if memory:
            for cap in hbm_capacities(results):
                ax.axhline(cap, color="black", linestyle=":", linewidth=1.2, label="_hbm")
        set_x_axis(ax, lay, lay.x_values)
        if lay.logy:
            ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
    if not_ok:
        headroom_for_marks(axes[0])  # the panels share y
    for c in published:
        if c not in drawn_published:
            notes.append(f"{c.get('label', metric)}: published {fmt(c['published'])}, reproduced "
                         f"{fmt(c.get('reproduced')) if is_number(c.get('reproduced')) else 'n/a'}")
    if error_ax is not None:
        draw_errors(error_ax, results, lay, panels, drawn_published, xpos)
        set_x_axis(error_ax, lay, lay.x_values)
        axes[0].tick_params(axis="x", labelbottom=False)
    label_axes(fig, axes, lay.x_label, label, error_ax)
    handles = [series_handle(lay.kind, panels.slot(k), panels.label(k))
               for k in first_of_each_slot(panels, keys)]
    handles = [h for h in handles if h.get_label()]
    if drawn_published:
        handles.append(Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="black",
                              linestyle="none", label="published"))
    if memory:
        caps = hbm_capacities(results)
        if caps:
            handles.append(Line2D([], [], color="black", linestyle=":", label="HBM capacity ("
                                  + ", ".join(f"{fmt(c)} GiB" for c in caps) + ")"))
    if needed_drawn:
        handles.append(Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="grey",
                              linestyle="none", label=f"out of memory ({needed_drawn}): "
                              "memory it would need"))
    for status, n in sorted(not_ok.items()):
        handles.append(Line2D([], [], marker="x" if status == "infeasible" else "X",
                              color="grey", linestyle="none",
                              label=f"{status} ({n}): no value, marked at the top"))
    finish(fig, title, handles, panels.note() + notes + reasons)
    return fig


def describe_keys(dims, keys):
    """Series keys in few words: 'A = 1, 2 × x, y' when they are every combination of their
    values, else grouped by the last dimension: 'x: A = 1, 2; y: A = 1'."""
    values = [list(dict.fromkeys(k[i] for k in keys)) for i in range(len(dims))]
    if len(keys) == math.prod(len(v) for v in values):
        parts = []
        for d, v in zip(dims, values):
            if d in ("case", "strategy"):
                parts.append(", ".join(map(str, v)))
            else:
                parts.append(value_label(d, v[0]) + "".join(f", {fmt(x)}" for x in v[1:]))
        return (", " if len(keys) == 1 else " × ").join(parts)
    groups = {}
    for k in keys:
        groups.setdefault(k[-1], []).append(k[:-1])
    return "; ".join(f"{value_label(dims[-1], v)}: {describe_keys(dims[:-1], rest)}"
                     for v, rest in groups.items())


def first_of_each_slot(panels, keys):
    """One series key per legend entry, in slot order."""
    first = {}
    for k in keys:
        if panels._project(k, panels.inner) in panels.inner_keys:
            first.setdefault(panels.slot(k), k)
    return [first[s] for s in sorted(first)]


def metrics_to_plot(results):
    spec = results.get("spec") or {}
    hinted = (spec.get("plot") or {}).get("y") or spec.get("metrics")
    if isinstance(hinted, str):
        hinted = [hinted]
    if hinted:
        return list(dict.fromkeys(hinted))
    names = set()
    for p in results.get("points") or []:
        names.update(k for k, v in (p.get("metrics") or {}).items() if is_number(v))
    return sorted(names)


def plot_file(path):
    """Writes <metric>.png (and <metric>_speedup.png) beside one results.json; returns the paths
    written."""
    with open(path, encoding="utf-8") as f:
        results = json.load(f)
    if not isinstance(results, dict) or results.get("schema_version") != 1:
        raise ValueError("not a cpbench results file (schema_version 1 expected)")
    hints = (results.get("spec") or {}).get("plot") or {}
    if not isinstance(hints.get("x_label", ""), str):
        raise ValueError(f"plot.x_label: expected a string, got {hints['x_label']!r}")
    # Checked before any figure is written, so a typo leaves no half-drawn folder.
    baseline = plot_speedup.check_baseline(results) if "speedup_over" in hints else None
    written = []
    if hints.get("kind") == "frontier":  # a frontier run: one figure, the trade-off
        fig = plot_frontier.frontier_figure(results)
        out = os.path.join(os.path.dirname(path) or ".", "frontier.png")
        fig.savefig(out, dpi=DPI, metadata={"Software": None})
        plt.close(fig)
        return [out]
    metrics = metrics_to_plot(results)
    if not metrics:
        print(f"plot: {path}: no metrics to plot, skipped", file=sys.stderr)
    for metric in metrics:
        fig = plot_metric(results, metric)
        out = os.path.join(os.path.dirname(path) or ".", f"{metric}.png")
        fig.savefig(out, dpi=DPI, metadata={"Software": None})
        plt.close(fig)
        written.append(out)
        if baseline is not None:
            fig = plot_speedup.speedup_figure(results, metric, baseline)
            out = os.path.join(os.path.dirname(path) or ".", f"{metric}_speedup.png")
            fig.savefig(out, dpi=DPI, metadata={"Software": None})
            plt.close(fig)
            written.append(out)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", metavar="RESULTS_DIR_OR_FILE")
    args = parser.parse_args(argv)
    files = find_results(args.paths)
    if not files:
        print("plot: no results.json found under " + " ".join(args.paths), file=sys.stderr)
        return 2
    failed = False
    for path in files:
        try:
            for out in plot_file(path):
                print(out)
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"plot: {path}: {e}", file=sys.stderr)
            failed = True
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
