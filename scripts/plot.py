#!/usr/bin/env python3
"""Draw one PNG per reported metric of each cpbench results file (schema_version 1).

Usage: scripts/plot.py RESULTS_DIR_OR_FILE...   (folders are searched for results.json)

Each figure is written beside its results.json as <metric>.png. The x axis is the spec's
`plot.x` hint, else the case names when the spec has cases, else the first grid axis, else the
strategy. A numeric x gives a line plot, anything else a grouped bar plot (`plot.kind` overrides).
There is one series per strategy label and per value of every other axis. Infeasible and failed
points are gaps marked with an 'x' at the bottom of the axes and counted in the legend; published
values (comparisons of kind "value") are black hollow markers at their x; ratio comparisons are
listed under the axes ("published 1.48x, reproduced 1.45x"). `plot.x_label` replaces the x axis
label (the dimension's name). With `plot.speedup_over: LABEL` each metric also gets
<metric>_speedup.png: every other strategy's value over LABEL's at the same case and grid point
(scripts/plot_speedup.py). Output is deterministic: same results file, same bytes (no
timestamps, no software version in the PNG).
"""
import argparse
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.lines import Line2D  # noqa: E402

# plot_speedup builds on this module: run as a script, this module is also the `plot` it imports.
sys.modules.setdefault("plot", sys.modules[__name__])
import plot_speedup  # noqa: E402

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
NOT_OK_STYLE = {"infeasible": "x", "error": "X"}


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


def short(dim):
    return dim.rsplit(".", 1)[-1]


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
        self.x_label = hints.get("x_label") or self.x
        rest = [d for d in dims if d != self.x]
        if hints.get("series") in rest:
            rest.remove(hints["series"])
            rest.insert(0, hints["series"])
        # A dimension with a single value everywhere says nothing in a legend.
        self.series_dims = [d for d in rest if len(self.values(d, known.get(d, []))) > 1
                            or d == "strategy"]
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

    def series_label(self, key):
        parts = [str(v) if d == "strategy" else f"{short(d)}={fmt(v)}"
                 for d, v in zip(self.series_dims, key)]
        return ", ".join(parts) or "value"

    def where(self, record):
        """A point's place in the figure, for notes: 'ptdp, seq=4096'."""
        dims = [self.x] + self.series_dims
        return ", ".join(str(dim_value(record, d)) if d in ("case", "strategy")
                         else f"{short(d)}={fmt(dim_value(record, d))}" for d in dims)


def ratio_note(c):
    """'label: published 1.48×, reproduced 1.45×'; a ratio published only as a direction says so."""
    if is_number(c.get("published")):
        published = f"published {fmt(c['published'])}×"
    else:
        published = {"above_one": "expected > 1", "below_one": "expected < 1"}.get(c.get("expect"), "published n/a")
    return (f"{c.get('label', c.get('metric'))}: {published}, "
            f"reproduced {fmt(c.get('reproduced')) if is_number(c.get('reproduced')) else 'n/a'}×")


def plot_metric(results, metric):
    """One figure for one metric of a results file (a matplotlib Figure; the caller saves it)."""
    lay = Layout(results)
    unit = metric_unit(metric)
    title = f"{results.get('experiment', '?')}: {metric}" + (f" [{unit}]" if unit else "")
    comps = [c for c in results.get("comparisons") or [] if c.get("metric") == metric]
    notes = [ratio_note(c) for c in comps if c.get("kind") == "ratio"]
    cells = {}  # (series key, x value) -> point
    for p in lay.points:
        cells.setdefault((lay.series_of(p), dim_value(p, lay.x)), p)
    value = {k: p["metrics"][metric] for k, p in cells.items() if p.get("status") == "ok"
             and is_number((p.get("metrics") or {}).get(metric))}
    reasons = []  # the first few, so a reader sees why there are gaps
    for p in lay.points:
        if p.get("status") != "ok" and p.get("reason") and len(reasons) < 3:
            reasons.append(f"{p.get('status')} at {lay.where(p)}: {str(p['reason'])[:80]}")
    fig = plt.figure(figsize=(7.5, 4.8 + 0.18 * (len(notes) + len(reasons))))
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(title, fontsize=10)
    if not value:
        counts = {}
        for p in lay.points:
            counts[p.get("status", "?")] = counts.get(p.get("status", "?"), 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no points"
        ax.text(0.5, 0.5, f"no feasible points\n({summary})", ha="center", va="center",
                transform=ax.transAxes, fontsize=12)
        ax.set_axis_off()
        _footer(fig, notes + reasons)
        return fig
    n_series = len(lay.series)
    width = 0.8 / max(n_series, 1)
    if lay.kind == "bar":
        xpos = {x: i for i, x in enumerate(lay.x_values)}
        offset = {k: (i - (n_series - 1) / 2) * width for i, k in enumerate(lay.series)}
    else:
        xpos = {x: x for x in lay.x_values}
        offset = {k: 0.0 for k in lay.series}
    not_ok = {}
    handles = []
    for i, key in enumerate(lay.series):
        color = f"C{i % 10}"  # past 10 series the colours repeat; the line style does not
        style = ["-", "--", ":", "-."][(i // 10) % 4]
        xs = [x for x in lay.x_values if (key, x) in cells]
        if not xs:
            continue
        ys = [value.get((key, x), math.nan) for x in xs]
        px = [xpos[x] + offset[key] for x in xs]
        label = lay.series_label(key)
        if lay.kind == "bar":
            ax.bar(px, [0 if math.isnan(y) else y for y in ys], width=width, color=color,
                   label=label, hatch=["", "//", "..", "xx"][(i // 10) % 4])
        else:
            ax.plot(px, ys, marker="o", color=color, linestyle=style, label=label)
        for x, y, xp in zip(xs, ys, px):
            status = cells[(key, x)].get("status", "error")
            if math.isnan(y):
                status = status if status in NOT_OK_STYLE else "error"
                not_ok[status] = not_ok.get(status, 0) + 1
                ax.plot([xp], [0.03], marker=NOT_OK_STYLE[status], color=color, markersize=9,
                        linestyle="none", transform=ax.get_xaxis_transform(), clip_on=False)
    published = 0
    for c in comps:
        if c.get("kind", "value") != "value" or not is_number(c.get("published")):
            continue
        x = dim_value(c, lay.x)
        if x not in xpos:
            notes.append(f"{c.get('label', metric)}: published {fmt(c['published'])}, reproduced "
                         f"{fmt(c.get('reproduced')) if is_number(c.get('reproduced')) else 'n/a'}")
            continue
        key = lay.series_of(c)
        ax.scatter([xpos[x] + offset.get(key, 0.0)], [c["published"]], s=70, marker="o",
                   facecolors="none", edgecolors="black", linewidths=1.5, zorder=5)
        published += 1
    if published:
        handles.append(Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="black",
                              linestyle="none", label="published"))
    for status, n in sorted(not_ok.items()):
        handles.append(Line2D([], [], marker=NOT_OK_STYLE[status], color="grey",
                              linestyle="none", label=f"{status} ({n})"))
    series_handles, _ = ax.get_legend_handles_labels()
    if len(series_handles) > 6:  # a long legend would cover the data: put it on the right
        ax.legend(handles=series_handles + handles, fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(handles=series_handles + handles, fontsize=8)
    ax.set_xlabel(lay.x_label)
    ax.set_ylabel(metric + (f" [{unit}]" if unit else ""))
    if lay.kind == "bar":
        ax.set_xticks(range(len(lay.x_values)), [fmt(x) for x in lay.x_values])
    else:
        if lay.logx:
            ax.set_xscale("log")
        ax.set_xticks(lay.x_values, [fmt(x) for x in lay.x_values])
        ax.minorticks_off()
    if lay.logy:
        ax.set_yscale("log")
    ax.grid(True, axis="y", alpha=0.3)
    _footer(fig, notes + reasons)
    return fig


def _footer(fig, lines):
    """Notes under the axes, so they never hide data."""
    bottom = 0.0
    if lines:
        bottom = min(0.4, (0.18 * len(lines) + 0.1) / fig.get_figheight())
        fig.text(0.01, 0.01, "\n".join(lines), fontsize=7.5, va="bottom", ha="left")
    fig.tight_layout(rect=(0, bottom, 1, 1))


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
    metrics = metrics_to_plot(results)
    if not metrics:
        print(f"plot: {path}: no metrics to plot, skipped", file=sys.stderr)
    for metric in metrics:
        fig = plot_metric(results, metric)
        out = os.path.join(os.path.dirname(path) or ".", f"{metric}.png")
        fig.savefig(out, dpi=110, metadata={"Software": None})
        plt.close(fig)
        written.append(out)
        if baseline is not None:
            fig = plot_speedup.speedup_figure(results, metric, baseline)
            out = os.path.join(os.path.dirname(path) or ".", f"{metric}_speedup.png")
            fig.savefig(out, dpi=110, metadata={"Software": None})
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
