"""Frontier figures for scripts/plot.py: a frontier run (spec "frontier", plot kind "frontier").

Draws frontier.png beside results.json: step time against peak memory per GPU, one curve per GPU
budget — for each GPU count B of the run, the time-memory Pareto curve of the simulated points
using at most B GPUs (a step: no point of the budget is both leaner and faster than a point on
it). Every simulated point is a grey dot; the GPU's memory, when the hardware says it, a dashed
line. Points the frontier search pruned were never simulated and are counted in a note.
"""
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

import plot


def gpus(point):
    params = point.get("params") or {}
    return params.get("parallel.num_gpus") or ((point.get("spec_parallel") or {}).get("num_gpus"))


def pareto_2d(points):
    """The points no other point beats in both memory and time (ties kept once), by memory."""
    best, out = float("inf"), []
    for p in sorted(points, key=lambda p: (p["metrics"]["peak_memory_gib"], p["metrics"]["step_time_s"])):
        if p["metrics"]["step_time_s"] < best:
            out.append(p)
            best = p["metrics"]["step_time_s"]
    return out


def frontier_figure(results):
    spec = results.get("spec") or {}
    base_gpus = (spec.get("parallel") or {}).get("num_gpus")
    ran = [p for p in results.get("points") or []
           if p.get("status") == "ok" and {"step_time_s", "peak_memory_gib"} <= set(p.get("metrics") or {})]
    for p in ran:
        p["_gpus"] = gpus(p) or base_gpus
    budgets = sorted({p["_gpus"] for p in ran if p["_gpus"] is not None})
    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    ax.scatter([p["metrics"]["peak_memory_gib"] for p in ran], [p["metrics"]["step_time_s"] for p in ran],
               s=8, color="0.8", zorder=1)
    handles = [Line2D([], [], marker="o", linestyle="", color="0.8", label=f"simulated points ({len(ran)})")]
    colors = plt.get_cmap("viridis")
    for k, b in enumerate(budgets):
        curve = pareto_2d([p for p in ran if p["_gpus"] <= b])
        xs = [p["metrics"]["peak_memory_gib"] for p in curve]
        ys = [p["metrics"]["step_time_s"] for p in curve]
        color = colors(k / max(1, len(budgets) - 1) * 0.85)
        ax.step(xs, ys, where="post", color=color, zorder=2)
        ax.plot(xs, ys, "o", color=color, markersize=4, zorder=3)
        handles.append(Line2D([], [], marker="o", color=color, label=f"≤ {b} GPUs ({len(curve)} on the curve)"))
    hbm = plot.hbm_capacities(results)
    for cap in hbm:
        ax.axvline(cap, color="0.4", linestyle="--", linewidth=0.8)
    if hbm:
        handles.append(Line2D([], [], color="0.4", linestyle="--", label="GPU memory"))
    ax.set_xlabel(plot.metric_label("peak_memory_gib"))
    ax.set_ylabel(plot.metric_label("step_time_s"))
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    counts = {}
    for p in results.get("points") or []:
        counts[p.get("status")] = counts.get(p.get("status"), 0) + 1
    note = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    fig.suptitle(f"{results.get('experiment', '')}: step time vs memory per GPU budget", fontsize=10)
    fig.text(0.01, 0.01, f"points: {note} (pruned: dominated, never simulated)", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    return fig
