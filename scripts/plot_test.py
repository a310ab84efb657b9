#!/usr/bin/env python3
"""Test of scripts/plot.py and scripts/report.py on synthetic results files.

Builds, in a temporary folder, a results file with cases (bar plot, a ratio comparison), one with
a numeric grid axis and two strategies where one point is infeasible (line plot, published values)
and one with no ok point; runs both scripts as the CTest `unit` test does (`python3
scripts/plot_test.py`) and checks the PNGs, the figure contents and the report's numbers. A fourth
file, with two grid axes, three strategies and the `speedup_over` hint, checks the speedup ratios
exactly, the skipped pairs, the published ratio markers and the error for an unknown baseline.
Exits non-zero on failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import plot  # noqa: E402
import plot_frontier  # noqa: E402
import plot_speedup  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def legend_texts(fig):
    """The entries of the figure's legends (plot.py puts them under the panels)."""
    return [t.get_text() for lg in fig.legends for t in lg.get_texts()]


def write_results(folder, results):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "results.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(results, f)
    return path


def strategy(name, label):
    return {"name": name, "label": label}


CASES = {
    "schema_version": 1, "experiment": "ptdp/weak_scaling",
    "spec": {"description": "PTD-P weak scaling (synthetic).", "metrics": ["tflops_per_gpu"],
             "grid": {}, "cases": [{"name": "1.7B"}, {"name": "18.4B"}],
             "strategies": [strategy("ptdp", "ptdp")],
             # Presets as a results file embeds them: one assumption, one measured constant.
             "presets": {"stacks": {"s": {"efficiency": {
                 "hbm_efficiency": {"value": 0.9, "source": "ASSUMPTION: none found", "kind": "assumption"},
                 "gemm_peak_fraction": {"value": 0.74, "source": "fitted", "kind": "device_measurement"}}}}}},
    "points": [
        {"id": "case=1.7B/strategy=ptdp", "case": "1.7B", "params": {}, "strategy": "ptdp",
         "status": "ok", "metrics": {"tflops_per_gpu": 137.5}},
        {"id": "case=18.4B/strategy=ptdp", "case": "18.4B", "params": {}, "strategy": "ptdp",
         "status": "ok", "metrics": {"tflops_per_gpu": 150.0}}],
    "comparisons": [
        {"label": "1.7B TFLOP/s per GPU", "metric": "tflops_per_gpu", "kind": "value",
         "published": 137, "reproduced": 137.5, "rel_error": 0.00365, "pass": True,
         "calibration": True,
         "tolerance": {"rel": 0.1}, "case": "1.7B", "strategy": "ptdp", "params": {}},
        {"label": "18.4B TFLOP/s per GPU", "metric": "tflops_per_gpu", "kind": "value",
         "published": 135, "reproduced": 150.0, "rel_error": 0.1111, "pass": False,
         "calibration": False,
         "tolerance": {"rel": 0.1}, "case": "18.4B", "strategy": "ptdp", "params": {}},
        {"label": "18.4B over 1.7B", "metric": "tflops_per_gpu", "kind": "ratio",
         "published": 1.48, "reproduced": 1.45, "rel_error": -0.02027, "pass": None}]}

AXIS = "workload.max_sequence_tokens"
CP = "parallel.cp"
GRID = {
    "schema_version": 1, "experiment": "dynamic_cp/github",
    "spec": {"description": "Dynamic-CP vs static CP (synthetic).",
             "metrics": ["step_time_s", "peak_memory_gib"], "grid": {AXIS: [4096, 16384, 65536]},
             "cases": [], "strategies": [strategy("dynamic_cp", "dynamic_cp"),
                                         strategy("static_cp", "static_cp (cp=8)")]},
    "points": [
        {"id": f"{AXIS}={n}/strategy={s}", "params": {AXIS: n}, "strategy": s,
         "status": "ok", "metrics": {"step_time_s": t, "peak_memory_gib": m}}
        for n, s, t, m in [(4096, "dynamic_cp", 1.0, 30.0), (16384, "dynamic_cp", 2.0, 40.0),
                           (65536, "dynamic_cp", 4.0, 60.0), (4096, "static_cp (cp=8)", 1.2, 20.0),
                           (16384, "static_cp (cp=8)", 2.5, 35.0)]] + [
        {"id": f"{AXIS}=65536/strategy=static_cp", "params": {AXIS: 65536},
         "strategy": "static_cp (cp=8)", "status": "infeasible",
         "reason": "out of memory: 91.2 GiB > 80 GiB", "metrics": {}}],
    "comparisons": [
        {"label": "step time at 16k", "metric": "step_time_s", "kind": "value",
         "published": 2.1, "reproduced": 2.0, "rel_error": -0.047619, "pass": True,
         "strategy": "dynamic_cp", "params": {AXIS: 16384}},
        {"label": "step time at 64k", "metric": "step_time_s", "kind": "value",
         "published": 5.0, "reproduced": 4.0, "rel_error": -0.2, "pass": False,
         "strategy": "dynamic_cp", "params": {AXIS: 65536}}]}

EMPTY = {
    "schema_version": 1, "experiment": "zz/all_infeasible",
    "spec": {"metrics": ["step_time_s"], "grid": {}, "cases": [],
             "strategies": [strategy("ptdp", "ptdp")]},
    "points": [{"id": "strategy=ptdp", "params": {}, "strategy": "ptdp", "status": "infeasible",
                "reason": "sizes do not divide", "metrics": {}}],
    "comparisons": []}


def speedup_point(n, cp, s, status, t):
    p = {"id": f"{AXIS}={n}/{CP}={cp}/strategy={s}", "params": {AXIS: n, CP: cp}, "strategy": s,
         "status": status, "metrics": {"step_time_s": t} if status == "ok" else {}}
    if status != "ok":
        p["reason"] = "out of memory"
    return p


def ratio(label, published, num, den):
    return {"label": label, "metric": "step_time_s", "kind": "ratio", "published": published,
            "reproduced": None, "rel_error": None, "pass": None,
            "select": {"numerator": num, "denominator": den}}


# Baseline "packing". Skipped pairs: packing infeasible at (16384, cp=4) takes both others there;
# static_cp failed at (4096, cp=2): 3 in all.
SPEEDUP = {
    "schema_version": 1, "experiment": "dynamic_cp/speedup",
    "spec": {"metrics": ["step_time_s"], "grid": {AXIS: [4096, 16384], CP: [2, 4]}, "cases": [],
             "strategies": [strategy("packing", "packing"), strategy("dynamic_cp", "dynamic_cp"),
                            strategy("static_cp", "static_cp")],
             "plot": {"x": AXIS, "x_label": "max sequence [tokens]", "speedup_over": "packing"}},
    "points": [speedup_point(n, cp, s, st, t) for n, cp, s, st, t in [
        (4096, 2, "packing", "ok", 2.0), (4096, 2, "dynamic_cp", "ok", 1.0),
        (4096, 2, "static_cp", "error", 0), (4096, 4, "packing", "ok", 4.0),
        (4096, 4, "dynamic_cp", "ok", 3.0), (4096, 4, "static_cp", "ok", 5.0),
        (16384, 2, "packing", "ok", 8.0), (16384, 2, "dynamic_cp", "ok", 4.0),
        (16384, 2, "static_cp", "ok", 10.0), (16384, 4, "packing", "infeasible", 0),
        (16384, 4, "dynamic_cp", "ok", 6.0), (16384, 4, "static_cp", "ok", 7.0)]],
    "comparisons": [
        ratio("drawn", 0.6, {"strategy": "dynamic_cp", "params": {AXIS: 16384, CP: 2}},
              {"strategy": "packing", "params": {AXIS: 16384, CP: 2}}),
        ratio("other denominator", 0.9, {"strategy": "dynamic_cp", "params": {AXIS: 4096, CP: 4}},
              {"strategy": "static_cp", "params": {AXIS: 4096, CP: 4}}),
        ratio("other grid point", 0.7, {"strategy": "dynamic_cp", "params": {AXIS: 4096, CP: 2}},
              {"strategy": "packing", "params": {AXIS: 4096, CP: 4}}),
        dict(ratio("direction only", None, {"strategy": "static_cp", "params": {AXIS: 4096, CP: 4}},
                   {"strategy": "packing", "params": {AXIS: 4096, CP: 4}}), expect="above_one"),
        ratio("no x", 0.8, {"strategy": "static_cp", "params": {CP: 4}},
              {"strategy": "packing", "params": {CP: 4}})]}


# Memory: an A100-80GB preset, one point out of memory with the need stated as cpbench states it.
MEMORY = json.loads(json.dumps(GRID))
MEMORY["spec"]["hardware"] = "a100"
MEMORY["spec"]["presets"] = {"hardware": {"a100": {"gpu": {"hbm_gib": {"value": 80}}}}}
MEMORY["points"][-1]["reason"] = ("out of memory: 91.2 GiB per GPU needed (weights+optimizer "
                                  "20.4, activations 68.8), 80 GiB on the GPU")

# 2 cases x 4 communication types x 3 strategies = 24 series over CP sizes on x.
COMM = "parallel.cp_comm_type"
MANY = {
    "schema_version": 1, "experiment": "dynamic_cp/many",
    "spec": {"metrics": ["tflops_per_gpu"],
             "grid": {CP: [2, 4, 8], COMM: ["p2p", "a2a", "ag", "mix"]},
             "cases": [{"name": "GitHub"}, {"name": "CommonCrawl"}],
             "strategies": [strategy(s, s) for s in ("ffd", "dp", "flops")],
             "plot": {"x": CP}},
    "points": [{"case": c, "params": {CP: cp, COMM: t}, "strategy": s, "status": "ok",
                "metrics": {"tflops_per_gpu": 100.0 + cp + i}}
               for c in ("GitHub", "CommonCrawl") for cp in (2, 4, 8)
               for t in ("p2p", "a2a", "ag", "mix") for i, s in enumerate(("ffd", "dp", "flops"))],
    "comparisons": []}


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(HERE, script), *args],
                          capture_output=True, text=True, check=False)


class PlotAndReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "results")
        self.cases = write_results(os.path.join(self.root, "ptdp", "weak_scaling"), CASES)
        self.grid = write_results(os.path.join(self.root, "dynamic_cp", "github"), GRID)
        self.empty = write_results(os.path.join(self.root, "zz", "all_infeasible"), EMPTY)

    def tearDown(self):
        self.tmp.cleanup()

    def png(self, results_path, metric):
        path = os.path.join(os.path.dirname(results_path), metric + ".png")
        self.assertTrue(os.path.isfile(path), path)
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], PNG_MAGIC)
        return data

    def test_units_come_from_the_metric_suffix(self):
        expected = {"step_time_s": "s", "plan_time_ms": "ms", "peak_memory_gib": "GiB",
                    "params_b": "billions", "tflops_per_gpu": "TFLOP/s per GPU",
                    "tokens_per_s_per_gpu": "tokens/s per GPU", "mfu": "fraction of peak",
                    "bubble_fraction": "fraction", "comm_bytes": "bytes",
                    "compute_imbalance": "max/mean"}
        self.assertEqual({m: plot.metric_unit(m) for m in expected}, expected)

    def test_plot_writes_one_deterministic_png_per_metric(self):
        result = run("plot.py", self.root)
        self.assertEqual(result.returncode, 0, result.stderr)
        first = {m: self.png(self.grid, m) for m in ("step_time_s", "peak_memory_gib")}
        first["cases"] = self.png(self.cases, "tflops_per_gpu")
        self.png(self.empty, "step_time_s")
        self.assertEqual(len(result.stdout.split()), 4)
        self.assertEqual(run("plot.py", self.grid).returncode, 0)
        for m in ("step_time_s", "peak_memory_gib"):
            self.assertEqual(self.png(self.grid, m), first[m], "same input must give same bytes")

    def test_grid_figure_is_a_line_plot_with_gap_and_published_markers(self):
        fig = plot.plot_metric(GRID, "step_time_s")
        ax = fig.axes[0]
        self.assertEqual(fig.get_suptitle(), "dynamic_cp/github: step time [s]")
        self.assertEqual(fig.axes[-1].get_xlabel(), "max sequence [tokens]", "readable, not a path")
        self.assertEqual(ax.get_ylabel(), "step time [s]")
        self.assertEqual(legend_texts(fig), ["dynamic_cp", "static_cp (cp=8)", "published",
                                             "infeasible (1): no value, marked at the top"])
        static = [ln for ln in ax.get_lines() if ln.get_label() == "static_cp (cp=8)"][0]
        ys = list(static.get_ydata())
        self.assertEqual(ys[:2], [1.2, 2.5])
        self.assertNotEqual(ys[2], ys[2], "the infeasible point is a NaN gap")
        marks = [tuple(map(float, o.get_offsets()[0])) for o in ax.collections]
        self.assertEqual(sorted(marks), [(16384.0, 2.1), (65536.0, 5.0)])
        infeasible = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
        self.assertEqual([list(ln.get_ydata()) for ln in infeasible], [[0.96]],
                         "an infeasible point is marked at the top of the panel, not at a value")
        self.assertEqual(ax.get_xscale(), "log")
        # One panel with published values: a second row with their errors in %.
        self.assertEqual(len(fig.axes), 2)
        errors = sorted(float(y) for ln in fig.axes[1].get_lines() for y in ln.get_ydata()
                        if ln.get_marker() != "None")
        self.assertEqual([round(e, 3) for e in errors], [-20.0, -4.762])
        texts = " ".join(t.get_text() for t in fig.texts)
        self.assertIn("infeasible", texts)
        self.assertIn("out of memory", texts)

    def test_memory_plot_has_the_hbm_line_and_draws_out_of_memory_at_its_need(self):
        fig = plot.plot_metric(MEMORY, "peak_memory_gib")
        ax = fig.axes[0]
        hbm = [ln for ln in ax.get_lines() if list(ln.get_ydata()) == [80, 80]]
        self.assertEqual(len(hbm), 1, "a horizontal line at the preset's 80 GiB")
        hollow = [ln for ln in ax.get_lines() if ln.get_markerfacecolor() == "none"]
        self.assertEqual([list(ln.get_ydata()) for ln in hollow], [[91.2]])
        self.assertEqual([list(ln.get_xdata()) for ln in hollow], [[65536]])
        self.assertGreater(ax.get_ylim()[1], 91.2)
        texts = legend_texts(fig)
        self.assertIn("HBM capacity (80 GiB)", texts)
        self.assertIn("out of memory (1): memory it would need", texts)

    def test_too_many_series_become_one_panel_per_communication_type(self):
        fig = plot.plot_metric(MANY, "tflops_per_gpu")
        titles = [ax.get_title() for ax in fig.axes]
        self.assertEqual(titles, ["CP communication = p2p", "CP communication = a2a",
                                  "CP communication = ag", "CP communication = mix"])
        for ax in fig.axes:
            self.assertEqual(len([ln for ln in ax.get_lines()
                                  if not ln.get_label().startswith("_")]), 6)
            colors = [ln.get_color() for ln in ax.get_lines()]
            self.assertEqual(len(set(colors)), len(colors), "distinct colours within a panel")
        self.assertEqual(legend_texts(fig)[:2], ["GitHub, ffd", "GitHub, dp"])
        self.assertEqual(fig.axes[2].get_xlabel(), "CP size")
        texts = " ".join(t.get_text() for t in fig.texts)
        self.assertIn("One panel per CP communication", texts.replace("\n", " "))
        self.assertIn("results.csv", texts)

    def test_labels_are_readable(self):
        self.assertEqual(plot.dim_name("parallel.tp"), "TP size")
        self.assertEqual(plot.dim_name("workload.some_new_axis"), "some new axis")
        self.assertEqual(plot.metric_label("peak_memory_gib"), "peak memory [GiB]")
        self.assertEqual(plot.metric_label("exposed_cp_comm_s"), "exposed CP communication [s]")
        for m in ("step_time_s", "bubble_fraction", "exposed_cp_comm_s", "peak_memory_gib",
                  "padding_fraction", "compute_imbalance"):
            self.assertTrue(plot.lower_is_better(m), m)
        for m in ("tflops_per_gpu", "tokens_per_s_per_gpu", "mfu", "aggregate_pflops"):
            self.assertFalse(plot.lower_is_better(m), m)

    def test_cases_figure_is_a_bar_plot_with_ratio_note(self):
        fig = plot.plot_metric(CASES, "tflops_per_gpu")
        ax = fig.axes[0]
        self.assertEqual(fig.get_suptitle(), "ptdp/weak_scaling: TFLOP/s per GPU")
        self.assertEqual(fig.axes[-1].get_xlabel(), "case")
        self.assertIn("±10%", fig.axes[1].get_ylabel(), "the tolerance band of the errors")
        self.assertEqual([t.get_text() for t in fig.axes[-1].get_xticklabels()], ["1.7B", "18.4B"])
        self.assertEqual([p.get_height() for p in ax.patches], [137.5, 150.0])
        texts = " ".join(t.get_text() for t in fig.texts)
        self.assertIn("18.4B over 1.7B: published 1.48×, reproduced 1.45×", texts)

    def test_a_ratio_published_as_a_direction_says_so(self):
        note = plot.ratio_note({"label": "a / b", "published": None, "expect": "below_one", "reproduced": 0.92})
        self.assertEqual(note, "a / b: expected < 1, reproduced 0.92×")

    def test_no_feasible_points_gives_a_figure_saying_so(self):
        fig = plot.plot_metric(EMPTY, "step_time_s")
        texts = " ".join(t.get_text() for t in fig.axes[0].texts)
        self.assertIn("no feasible points", texts)
        self.assertIn("1 infeasible", texts)

    def test_report_tables_published_vs_reproduced(self):
        self.assertEqual(run("plot.py", self.root).returncode, 0)
        out = os.path.join(self.tmp.name, "paper")
        result = run("report.py", self.root, "--out", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(out, "results.md"), encoding="utf-8") as f:
            text = f.read()
        # A results file without "calibration" (written before the field) reads as out of sample.
        self.assertIn("| step time at 64k | step_time_s | 5 | 4 | -20 % | **no** | out |", text)
        self.assertIn("| step time at 16k | step_time_s | 2.1 | 2 | -4.762 % | yes | out |", text)
        self.assertIn("| 1.7B TFLOP/s per GPU | tflops_per_gpu | 137 | 137.5 | 0.365 % | "
                      "yes (rel 0.1) | in (calibration) |", text)
        self.assertIn("| 18.4B over 1.7B | tflops_per_gpu | 1.48× | 1.45× | -2.027 % | — | out |", text)
        # mean |rel_error| of step_time_s: (0.047619 + 0.2) / 2 = 12.38 %, all out of sample
        self.assertIn("- step_time_s: 12.38 % over 2 comparisons", text)
        # tflops_per_gpu: the fitted 1.7B value apart from the two predictions:
        # in sample 0.365 %; out of sample (0.1111 + 0.02027) / 2 = 6.569 %
        section = text[text.index("## ptdp/weak_scaling"):]
        out_at = section.index("Mean absolute relative error per metric, out of sample")
        in_at = section.index("Mean absolute relative error per metric, in sample (calibration")
        self.assertIn("- tflops_per_gpu: 6.569 % over 2 comparisons", section[out_at:in_at])
        self.assertIn("- tflops_per_gpu: 0.365 % over 1 comparison\n", section[in_at:])
        self.assertNotIn("in sample", text[text.index("## dynamic_cp/github"):text.index("## ptdp/weak_scaling")])
        # The section names the assumptions its presets hold, and only those.
        self.assertIn("Rests on preset constants that are assumptions (`cpbench presets --audit`): "
                      "`s efficiency/hbm_efficiency = 0.9`.", section)
        self.assertNotIn("gemm_peak_fraction", text)
        # The summary keeps them apart too: out of sample first, then in sample, with counts.
        self.assertIn("| 2 / 0 / 0 | 3 | 1 / 2 | 6.569 % (2) | 0.365 % (1) |", text)
        self.assertIn("(../results/dynamic_cp/github/step_time_s.png)", text)
        order = [text.index("## " + n) for n in ("dynamic_cp/github", "ptdp/weak_scaling",
                                                   "zz/all_infeasible")]
        self.assertEqual(order, sorted(order), "experiments are sorted by name")
        self.assertEqual(run("report.py", self.root, "--out", out).returncode, 0)
        with open(os.path.join(out, "results.md"), encoding="utf-8") as f:
            self.assertEqual(f.read(), text, "same results must give the same report")

    def test_bad_results_file_is_an_error_naming_it(self):
        with open(os.path.join(self.root, "zz", "all_infeasible", "results.json"), "w") as f:
            f.write("{not json")
        result = run("report.py", self.root, "--out", os.path.join(self.tmp.name, "paper"))
        self.assertEqual(result.returncode, 2)
        self.assertIn(os.path.join("zz", "all_infeasible", "results.json"), result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "paper", "results.md")))


class SpeedupTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = write_results(os.path.join(self.tmp.name, "speedup"), SPEEDUP)

    def tearDown(self):
        self.tmp.cleanup()

    def test_series_are_exact_ratios_over_the_baseline_at_the_same_grid_point(self):
        s = plot_speedup.speedup_series(SPEEDUP, "step_time_s", "packing")
        self.assertEqual(s.x_values, [4096, 16384])
        # Step time: lower is better, so the speedup is baseline / strategy.
        self.assertTrue(s.inverted)
        self.assertEqual(s.by_label(), {
            "CP size = 2, dynamic_cp": [2.0 / 1.0, 8.0 / 4.0],
            "CP size = 2, static_cp": [None, 8.0 / 10.0],
            "CP size = 4, dynamic_cp": [4.0 / 3.0, None],
            "CP size = 4, static_cp": [4.0 / 5.0, None]})
        self.assertEqual(s.skipped, 3)

    def test_strategy_on_x_leaves_the_baseline_out(self):
        results = {"schema_version": 1, "spec": {
            "grid": {}, "strategies": ["a", strategy("b", "b"), strategy("c", "c")]},
            "points": [{"params": {}, "strategy": s, "status": "ok", "metrics": {"m": v}}
                       for s, v in [("a", 4.0), ("b", 2.0), ("c", 6.0)]]}
        s = plot_speedup.speedup_series(results, "m", "a")
        # "m" is not lower-is-better: strategy / baseline.
        self.assertEqual((s.lay.x, s.x_values, s.by_label()), ("strategy", ["b", "c"],
                                                                 {"": [0.5, 1.5]}))
        ax = plot_speedup.speedup_figure(results, "m", "a").axes[0]
        self.assertEqual([p.get_height() for p in ax.patches], [0.5, 1.5])

    def test_figure_draws_ratios_unity_line_and_matching_published_ratios(self):
        fig = plot_speedup.speedup_figure(SPEEDUP, "step_time_s", "packing")
        ax = fig.axes[0]
        self.assertEqual(ax.get_ylabel(),
                         "speedup over packing\n(packing / strategy, > 1 is better)")
        self.assertEqual(ax.get_xlabel(), "max sequence [tokens]")
        lines = {ln.get_label(): list(ln.get_ydata()) for ln in ax.get_lines()}
        self.assertEqual(lines["CP size = 2, dynamic_cp"], [2.0, 2.0])
        self.assertEqual(lines["CP size = 2, static_cp"][1], 0.8)
        self.assertNotEqual(lines["CP size = 2, static_cp"][0], lines["CP size = 2, static_cp"][0],
                            "NaN gap")
        unity = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"
                 and list(ln.get_ydata()) == [1.0, 1.0]]
        self.assertEqual(len(unity), 1)
        marks = [tuple(map(float, o.get_offsets()[0])) for o in ax.collections]
        self.assertEqual([(x, round(y, 6)) for x, y in marks], [(16384.0, round(1 / 0.6, 6))],
                         "only the ratio over packing at one point, inverted as the series are")
        self.assertIn("published", legend_texts(fig))
        texts = " ".join(t.get_text() for t in fig.texts)
        self.assertIn("3 points skipped", texts)
        self.assertIn("no x: published 0.8×", texts)
        self.assertNotIn("other denominator", texts)

    def test_legend_lists_only_the_series_it_draws(self):
        # dynamic_cp has no ratio at cp = 4 once its 4096 point fails too.
        results = json.loads(json.dumps(SPEEDUP))
        for p in results["points"]:
            if p["strategy"] == "dynamic_cp" and p["params"][CP] == 4:
                p["status"], p["metrics"] = "infeasible", {}
        fig = plot_speedup.speedup_figure(results, "step_time_s", "packing")
        drawn = [ln.get_label() for ln in fig.axes[0].get_lines()
                 if not ln.get_label().startswith("_")]
        self.assertNotIn("CP size = 4, dynamic_cp", drawn)
        self.assertEqual([t for t in legend_texts(fig) if t != "published"], drawn)
        texts = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
        self.assertIn("Not drawn, no point with a ratio to packing: CP size = 4, dynamic_cp", texts)

    def test_x_label_hint_names_the_main_figure_axis(self):
        ax = plot.plot_metric(SPEEDUP, "step_time_s").axes[0]
        self.assertEqual(ax.get_xlabel(), "max sequence [tokens]")

    def test_plot_writes_the_speedup_png_beside_the_main_one(self):
        result = run("plot.py", self.path)
        self.assertEqual(result.returncode, 0, result.stderr)
        folder = os.path.dirname(self.path)
        outs = [os.path.join(folder, n) for n in ("step_time_s.png", "step_time_s_speedup.png")]
        self.assertEqual(result.stdout.split(), outs)
        with open(outs[1], "rb") as f:
            first = f.read()
        self.assertEqual(first[:8], PNG_MAGIC)
        self.assertEqual(run("plot.py", self.path).returncode, 0)
        with open(outs[1], "rb") as f:
            self.assertEqual(f.read(), first, "same input must give same bytes")

    def test_unknown_baseline_is_an_error_naming_file_and_label(self):
        bad = json.loads(json.dumps(SPEEDUP))
        bad["spec"]["plot"]["speedup_over"] = "packnig"
        path = write_results(os.path.join(self.tmp.name, "bad"), bad)
        result = run("plot.py", path)
        self.assertEqual(result.returncode, 2)
        self.assertIn(f"plot: {path}: plot.speedup_over: no strategy labelled 'packnig' "
                      "(strategies: packing, dynamic_cp, static_cp)", result.stderr)
        self.assertEqual(os.listdir(os.path.dirname(path)), ["results.json"], "nothing drawn")


def frontier_point(gpus, time, memory, status="ok"):
    metrics = {"step_time_s": time, "peak_memory_gib": memory} if status == "ok" else {}
    return {"id": f"g{gpus}/t{time}/m{memory}", "params": {"parallel.num_gpus": gpus}, "strategy": "ptdp",
            "status": status, "reason": "", "metrics": metrics}


FRONTIER = {
    "schema_version": 1, "experiment": "t/frontier",
    "spec": {"description": "frontier", "hardware": "h100", "parallel": {"num_gpus": 8},
             "presets": {"hardware": {"h100": {"gpu": {"hbm_gib": {"value": 80}}}}},
             "frontier": {}, "plot": {"kind": "frontier"}, "metrics": ["step_time_s"]},
    "provenance": {}, "comparisons": [],
    "points": [frontier_point(8, 10, 70), frontier_point(8, 20, 40), frontier_point(8, 25, 50),
               frontier_point(16, 6, 60), frontier_point(16, 30, 20), frontier_point(16, 0, 0, "pruned")],
}


class FrontierTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def test_each_budget_curve_is_the_time_memory_pareto_set_of_its_points(self):
        ran = [p for p in FRONTIER["points"] if p["status"] == "ok"]
        eight = plot_frontier.pareto_2d([p for p in ran if p["params"]["parallel.num_gpus"] <= 8])
        self.assertEqual([(p["metrics"]["peak_memory_gib"], p["metrics"]["step_time_s"]) for p in eight],
                         [(40, 20), (70, 10)])  # (50, 25) is beaten by (40, 20)
        sixteen = plot_frontier.pareto_2d(ran)
        self.assertEqual([(p["metrics"]["peak_memory_gib"], p["metrics"]["step_time_s"]) for p in sixteen],
                         [(20, 30), (40, 20), (60, 6)])

    def test_a_frontier_run_draws_one_frontier_png(self):
        path = write_results(os.path.join(self.tmp.name, "f"), FRONTIER)
        result = run("plot.py", path)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sorted(os.listdir(os.path.dirname(path))), ["frontier.png", "results.json"])
        fig = plot_frontier.frontier_figure(json.loads(json.dumps(FRONTIER)))
        texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        self.assertIn("≤ 8 GPUs (2 on the curve)", texts)
        self.assertIn("≤ 16 GPUs (3 on the curve)", texts)
        self.assertIn("GPU memory", texts)


if __name__ == "__main__":
    unittest.main()
