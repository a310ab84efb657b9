"""Speedup figures for scripts/plot.py: each strategy's metric divided by a baseline strategy's.

Requires a results file (schema_version 1) whose spec has the hint `plot.speedup_over`, a strategy
label; `speedup_series` computes the ratios, `speedup_figure` draws <metric>_speedup.png's figure.
Note: a point is compared only with the baseline's point at the same case and grid point; a pair
where either side is not ok (or the baseline's value is 0) is skipped and counted in a note.
"""
import math

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

import plot


def strategy_labels(results):
    """Strategy labels in spec order, then any others seen in points."""
    lay = plot.Layout(results)
    return lay.values("strategy", lay.known["strategy"])


def check_baseline(results):
    """The hint's baseline label; ValueError when it is not a string or names no strategy."""
    baseline = ((results.get("spec") or {}).get("plot") or {}).get("speedup_over")
    if not isinstance(baseline, str):
        raise ValueError(f"plot.speedup_over: expected a strategy label, got {baseline!r}")
    labels = strategy_labels(results)
    if baseline not in labels:
        raise ValueError(f"plot.speedup_over: no strategy labelled '{baseline}' "
                         f"(strategies: {', '.join(map(str, labels))})")
    return baseline


def place(record):
    """A point's case and grid point: everything but its strategy."""
    return (plot.hashable(record.get("case")), plot.hashable(record.get("params") or {}))


def ok_value(point, metric):
    v = (point.get("metrics") or {}).get(metric)
    return v if point.get("status") == "ok" and plot.is_number(v) else None


class Speedup:
    """One figure's data. `series` is [(key, label, ratios)], ratios aligned with `x_values`
    (None where the pair was skipped or absent); `skipped` counts the skipped pairs."""

    def __init__(self, lay, baseline, x_values, series, skipped):
        self.lay, self.baseline, self.x_values = lay, baseline, x_values
        self.series, self.skipped = series, skipped

    def by_label(self):
        return {label: ratios for _, label, ratios in self.series}


def speedup_series(results, metric, baseline):
    """metric(strategy) / metric(baseline) for every non-baseline point, grouped as the main
    figure groups its series (baseline left out); x as in the main figure."""
    lay = plot.Layout(results)
    base = {place(p): ok_value(p, metric) for p in lay.points
            if plot.dim_value(p, "strategy") == baseline}
    ratios, present, skipped = {}, set(), 0
    for p in lay.points:
        if plot.dim_value(p, "strategy") == baseline:
            continue
        cell = (lay.series_of(p), plot.dim_value(p, lay.x))
        present.add(cell[0])
        num, den = ok_value(p, metric), base.get(place(p))
        if num is None or den is None or den == 0:
            skipped += 1
            continue
        ratios.setdefault(cell, num / den)
    strategy_at = lay.series_dims.index("strategy") if "strategy" in lay.series_dims else None
    keys = [k for k in lay.series if k in present
            and (strategy_at is None or k[strategy_at] != baseline)]
    x_values = [x for x in lay.x_values if lay.x != "strategy" or x != baseline]
    series = [(k, lay.series_label(k), [ratios.get((k, x)) for x in x_values]) for k in keys]
    return Speedup(lay, baseline, x_values, series, skipped)


def published_ratios(results, metric, baseline):
    """Ratio comparisons of this metric whose numerator is another strategy and whose denominator
    is the baseline at the same case and grid point: [(comparison, numerator selector)]."""
    out = []
    for c in results.get("comparisons") or []:
        if c.get("kind") != "ratio" or c.get("metric") != metric:
            continue
        if not plot.is_number(c.get("published")):
            continue  # a direction-only claim has no value to draw
        sel = c.get("select") or {}
        num, den = sel.get("numerator") or {}, sel.get("denominator") or {}
        if den.get("strategy") != baseline or num.get("strategy") in (None, baseline):
            continue
        rest = ("case", "params")
        if all((num.get(k) or None) == (den.get(k) or None) for k in rest):
            out.append((c, num))
    return out


def speedup_figure(results, metric, baseline):
    """The <metric>_speedup.png figure (a matplotlib Figure; the caller saves it)."""
    s = speedup_series(results, metric, baseline)
    lay = s.lay
    fig = plt.figure(figsize=(7.5, 5.0))
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(f"{results.get('experiment', '?')}: {metric} speedup over {baseline}",
                 fontsize=10)
    notes = []
    if s.skipped:
        notes.append(f"{s.skipped} point{'s' if s.skipped != 1 else ''} skipped: the strategy's "
                     f"or the baseline's point is not ok")
    if not any(r is not None for _, _, ratios in s.series for r in ratios):
        ax.text(0.5, 0.5, f"no point comparable with {baseline}", ha="center", va="center",
                transform=ax.transAxes, fontsize=12)
        ax.set_axis_off()
        plot._footer(fig, notes)
        return fig
    n_series = len(s.series)
    width = 0.8 / max(n_series, 1)
    if lay.kind == "bar":
        xpos = {x: i for i, x in enumerate(s.x_values)}
        offset = {k: (i - (n_series - 1) / 2) * width for i, (k, _, _) in enumerate(s.series)}
    else:
        xpos = {x: x for x in s.x_values}
        offset = {k: 0.0 for k, _, _ in s.series}
    for i, (key, label, ratios) in enumerate(s.series):
        color = f"C{i % 10}"
        px = [xpos[x] + offset[key] for x in s.x_values]
        if lay.kind == "bar":
            shown = [(p, r) for p, r in zip(px, ratios) if r is not None]
            ax.bar([p for p, _ in shown], [r for _, r in shown], width=width, color=color,
                   label=label, hatch=["", "//", "..", "xx"][(i // 10) % 4])
        else:
            ax.plot(px, [math.nan if r is None else r for r in ratios], marker="o", color=color,
                    linestyle=["-", "--", ":", "-."][(i // 10) % 4], label=label)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1.0)
    published = 0
    for c, num in published_ratios(results, metric, baseline):
        x = plot.dim_value(num, lay.x)
        if x not in xpos:
            notes.append(plot.ratio_note(c))
            continue
        key = tuple(plot.dim_value(num, d) for d in lay.series_dims)
        ax.scatter([xpos[x] + offset.get(key, 0.0)], [c["published"]], s=70, marker="o",
                   facecolors="none", edgecolors="black", linewidths=1.5, zorder=5)
        published += 1
    handles, _ = ax.get_legend_handles_labels()
    if published:
        handles.append(Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="black",
                              linestyle="none", label="published"))
    if len(handles) > 6:
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(handles=handles, fontsize=8)
    ax.set_xlabel(lay.x_label)
    ax.set_ylabel(f"{metric} speedup over {baseline}")
    if lay.kind == "bar":
        ax.set_xticks(range(len(s.x_values)), [plot.fmt(x) for x in s.x_values])
    else:
        if lay.logx:
            ax.set_xscale("log")
        ax.set_xticks(s.x_values, [plot.fmt(x) for x in s.x_values])
        ax.minorticks_off()
    ax.grid(True, axis="y", alpha=0.3)
    plot._footer(fig, notes)
    return fig
