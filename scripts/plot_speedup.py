"""Speedup figures for scripts/plot.py: each strategy against a baseline strategy, > 1 is better.

Requires a results file (schema_version 1) whose spec has the hint `plot.speedup_over`, a strategy
label; `speedup_series` computes the ratios, `speedup_figure` draws <metric>_speedup.png's figure.
The ratio is strategy / baseline for a higher-is-better metric (TFLOP/s) and baseline / strategy
for a lower-is-better one (step time, bubble fraction, exposed communication, memory, padding:
plot.lower_is_better), so that above 1 always means the strategy is better; published ratios are
inverted the same way. A point is compared only with the baseline's point at the same case and
grid point; a pair where either side is not ok (or the divisor is 0) is skipped and counted in a
note, and a series with no comparable pair is left out of the figure and named in a note.
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
    (None where the pair was skipped or absent), only for series with at least one ratio;
    `left_out` are the keys of the series with none; `skipped` counts the pairs skipped for a
    point that is not ok, `zero` those skipped because the divisor is 0 (no ratio);
    `inverted` says the ratio is baseline / strategy (a lower-is-better metric)."""

    def __init__(self, lay, baseline, x_values, series, skipped, zero, left_out, inverted):
        self.lay, self.baseline, self.x_values = lay, baseline, x_values
        self.series, self.skipped, self.zero, self.left_out = series, skipped, zero, left_out
        self.inverted = inverted

    def by_label(self):
        return {label: ratios for _, label, ratios in self.series}


def speedup_series(results, metric, baseline):
    """The speedup of every non-baseline point over the baseline's at the same place, grouped
    as the main figure groups its series (baseline left out); x as in the main figure."""
    lay = plot.Layout(results)
    inverted = plot.lower_is_better(metric)
    base = {place(p): ok_value(p, metric) for p in lay.points
            if plot.dim_value(p, "strategy") == baseline}
    ratios, present, skipped, zero = {}, set(), 0, 0
    for p in lay.points:
        if plot.dim_value(p, "strategy") == baseline:
            continue
        cell = (lay.series_of(p), plot.dim_value(p, lay.x))
        present.add(cell[0])
        num, den = ok_value(p, metric), base.get(place(p))
        if inverted:
            num, den = den, num
        if num is None or den is None:
            skipped += 1
            continue
        if den == 0:
            zero += 1
            continue
        ratios.setdefault(cell, num / den)
    strategy_at = lay.series_dims.index("strategy") if "strategy" in lay.series_dims else None
    keys = [k for k in lay.series if k in present
            and (strategy_at is None or k[strategy_at] != baseline)]
    x_values = [x for x in lay.x_values if lay.x != "strategy" or x != baseline]
    series, left_out = [], []
    for k in keys:
        row = [ratios.get((k, x)) for x in x_values]
        if any(r is not None for r in row):
            series.append((k, lay.series_label(k), row))
        else:
            left_out.append(k)
    return Speedup(lay, baseline, x_values, series, skipped, zero, left_out, inverted)


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
    name = plot.metric_label(metric)
    how = (f"{baseline} / strategy" if s.inverted else f"strategy / {baseline}")
    title = f"{results.get('experiment', '?')}: {name}, speedup over {baseline}"
    y_label = f"speedup over {baseline}\n({how}, > 1 is better)"
    notes = []
    if s.inverted:
        notes.append(f"{name}: lower is better, so the speedup is {baseline}'s value over the "
                     "strategy's (above 1: the strategy is better).")
    if s.skipped:
        notes.append(f"{s.skipped} point{'s' if s.skipped != 1 else ''} skipped: the strategy's "
                     f"or the baseline's point is not ok")
    if s.zero:
        divisor = "the strategy's" if s.inverted else f"{baseline}'s"
        notes.append(f"{s.zero} point{'s' if s.zero != 1 else ''} skipped: {divisor} value is 0, "
                     "so there is no ratio")
    if s.left_out:
        notes.append(f"Not drawn, no point with a ratio to {baseline}: "
                     + plot.describe_keys(lay.series_dims, s.left_out) + ".")
    if not s.series:
        fig = plt.figure(figsize=(7.5, 4.2))
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, f"no point comparable with {baseline}", ha="center", va="center",
                transform=ax.transAxes, fontsize=12)
        ax.set_axis_off()
        plot.finish(fig, title, [], notes)
        return fig
    keys = [k for k, _, _ in s.series]
    ratios_of = {k: ratios for k, _, ratios in s.series}
    panels = plot.Panels(lay, keys)
    fig, axes, _ = plot.new_figure(len(panels.panels))
    xpos = plot.x_positions(lay, s.x_values)
    n_slots = len(panels.inner_keys)
    drawn = [(c, num) for c, num in published_ratios(results, metric, baseline)
             if plot.dim_value(num, lay.x) in xpos
             and tuple(plot.dim_value(num, d) for d in lay.series_dims) in keys]
    for c, num in published_ratios(results, metric, baseline):
        if (c, num) not in drawn:
            notes.append(plot.ratio_note(c))
    for ax, (pk, series) in zip(axes, panels.panels):
        if len(panels.panels) > 1 or pk:
            ax.set_title(panels.title(pk), fontsize=9)
        for key in series:
            ys = [math.nan if r is None else r for r in ratios_of[key]]
            plot.draw_series(ax, lay.kind, panels.slot(key), n_slots,
                             [xpos[x] for x in s.x_values], ys, panels.label(key))
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1.0)
        for c, num in drawn:
            key = tuple(plot.dim_value(num, d) for d in lay.series_dims)
            if key not in series:
                continue
            published = 1.0 / c["published"] if s.inverted else c["published"]
            x = xpos[plot.dim_value(num, lay.x)]
            ax.scatter([x + plot.bar_offset(lay, panels.slot(key), n_slots)], [published], s=70,
                       marker="o", facecolors="none", edgecolors="black", linewidths=1.5,
                       zorder=5)
        plot.set_x_axis(ax, lay, s.x_values)
        ax.grid(True, axis="y", alpha=0.3)
    plot.label_axes(fig, axes, lay.x_label, y_label)
    handles = [plot.series_handle(lay.kind, panels.slot(k), panels.label(k))
               for k in plot.first_of_each_slot(panels, keys)]
    handles = [h for h in handles if h.get_label()]
    if drawn:
        handles.append(Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="black",
                              linestyle="none", label="published"))
    plot.finish(fig, title, handles, panels.note() + notes)
    return fig
