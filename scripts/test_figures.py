#!/usr/bin/env python3
"""Renders every figure of every results.json under a folder and checks that a reader can use it.

Usage: scripts/test_figures.py RESULTS_DIR   (CTest `figures`, label unit)

Each figure scripts/plot.py draws (<metric>.png and, with `plot.speedup_over`, <metric>_speedup.png)
is saved into a temporary folder with the Agg backend, then checked:
  - every text (titles, notes, axis labels, tick labels, legend entries) lies inside the canvas;
  - every legend lies inside the canvas, and a legend drawn inside a panel is smaller than it;
  - no panel draws more than 8 series (lines or bar groups with a label; reference lines such as
    "HBM capacity" are not series).
Exits 1 listing every problem, 0 when there is none.
"""
import json
import os
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
from matplotlib.container import BarContainer  # noqa: E402
from matplotlib.text import Text  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import plot  # noqa: E402
import plot_frontier  # noqa: E402
import plot_speedup  # noqa: E402

MAX_SERIES = 8
REFERENCE_LABELS = {"HBM capacity"}
SLACK_PX = 1.0  # rounding of text extents


def inside(box, canvas):
    return (box.x0 >= canvas.x0 - SLACK_PX and box.y0 >= canvas.y0 - SLACK_PX
            and box.x1 <= canvas.x1 + SLACK_PX and box.y1 <= canvas.y1 + SLACK_PX)


def series_count(ax):
    """Labelled lines and bar groups of one panel: the series a reader has to tell apart."""
    labels = [ln.get_label() for ln in ax.get_lines()]
    labels += [c.get_label() for c in ax.containers if isinstance(c, BarContainer)]
    return len({lab for lab in labels if lab and not lab.startswith("_")
                and lab not in REFERENCE_LABELS})


def tick_labels(fig):
    ids = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ids.update((id(tick.label1), id(tick.label2)))
    return ids


def problems_of(fig, name):
    """Every problem of one drawn figure, as readable lines."""
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    out = []
    ticks = tick_labels(fig)
    for t in fig.findobj(Text):
        if id(t) in ticks or not t.get_visible() or not t.get_text().strip():
            continue
        box = t.get_window_extent(renderer)
        if not inside(box, canvas):
            out.append(f"{name}: text {t.get_text()[:60]!r} at {fmt_box(box)} is outside the "
                       f"canvas {fmt_box(canvas)}")
    for i, ax in enumerate(fig.axes):
        for axis in (ax.xaxis, ax.yaxis) if ax.axison else ():  # an axis-off panel draws none
            box = axis.get_tightbbox(renderer)
            if box is not None and not inside(box, canvas):
                out.append(f"{name}: panel {i}: the {axis.axis_name} axis (ticks and label) at "
                           f"{fmt_box(box)} is outside the canvas {fmt_box(canvas)}")
        n = series_count(ax)
        if n > MAX_SERIES:
            out.append(f"{name}: panel {i} draws {n} series (at most {MAX_SERIES})")
        legend = ax.get_legend()
        if legend is not None:
            box, panel = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
            if box.width > panel.width or box.height > panel.height:
                out.append(f"{name}: panel {i}: legend {fmt_box(box)} is larger than the panel "
                           f"{fmt_box(panel)}")
    for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
        box = legend.get_window_extent(renderer)
        if not inside(box, canvas):
            out.append(f"{name}: legend at {fmt_box(box)} is outside the canvas {fmt_box(canvas)}")
    return out


def fmt_box(b):
    return f"[{b.x0:.0f},{b.y0:.0f}..{b.x1:.0f},{b.y1:.0f}]"


def figures(results):
    """(file name, figure) for every figure scripts/plot.py draws from one results file."""
    hints = (results.get("spec") or {}).get("plot") or {}
    if hints.get("kind") == "frontier":  # a frontier run draws one figure (plot.plot_file)
        yield "frontier.png", plot_frontier.frontier_figure(results)
        return
    baseline = plot_speedup.check_baseline(results) if "speedup_over" in hints else None
    for metric in plot.metrics_to_plot(results):
        yield f"{metric}.png", plot.plot_metric(results, metric)
        if baseline is not None:
            yield f"{metric}_speedup.png", plot_speedup.speedup_figure(results, metric, baseline)


def main(argv):
    if len(argv) != 2:
        print(__doc__.split("\n")[2], file=sys.stderr)
        return 2
    files = plot.find_results([argv[1]])
    if not files:
        print(f"test_figures: no results.json under {argv[1]}", file=sys.stderr)
        return 1
    problems, drawn = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            with open(path, encoding="utf-8") as f:
                results = json.load(f)
            where = os.path.relpath(os.path.dirname(path), argv[1])
            for name, fig in figures(results):
                # Saved as plot.py saves it, then measured.
                fig.savefig(os.path.join(tmp, where.replace(os.sep, "_") + "_" + name), dpi=110)
                fig.canvas.draw()  # savefig drew at its own dpi: measure at the figure's
                problems += problems_of(fig, os.path.join(where, name))
                plt.close(fig)
                drawn += 1
    for p in problems:
        print(p)
    print(f"test_figures: {drawn} figures from {len(files)} results files, "
          f"{len(problems)} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
