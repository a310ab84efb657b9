#!/usr/bin/env python3
"""Test of scripts/plot.py and scripts/report.py on synthetic results files.

Builds, in a temporary folder, a results file with cases (bar plot, a ratio comparison), one with
a numeric grid axis and two strategies where one point is infeasible (line plot, published values)
and one with no ok point; runs both scripts as the CTest `unit` test does (`python3
scripts/plot_test.py`) and checks the PNGs, the figure contents and the report's numbers.
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

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
             "strategies": [strategy("ptdp", "ptdp")]},
    "points": [
        {"id": "case=1.7B/strategy=ptdp", "case": "1.7B", "params": {}, "strategy": "ptdp",
         "status": "ok", "metrics": {"tflops_per_gpu": 137.5}},
        {"id": "case=18.4B/strategy=ptdp", "case": "18.4B", "params": {}, "strategy": "ptdp",
         "status": "ok", "metrics": {"tflops_per_gpu": 150.0}}],
    "comparisons": [
        {"label": "1.7B TFLOP/s per GPU", "metric": "tflops_per_gpu", "kind": "value",
         "published": 137, "reproduced": 137.5, "rel_error": 0.00365, "pass": True,
         "tolerance": {"rel": 0.1}, "case": "1.7B", "strategy": "ptdp", "params": {}},
        {"label": "18.4B TFLOP/s per GPU", "metric": "tflops_per_gpu", "kind": "value",
         "published": 135, "reproduced": 150.0, "rel_error": 0.1111, "pass": False,
         "tolerance": {"rel": 0.1}, "case": "18.4B", "strategy": "ptdp", "params": {}},
        {"label": "18.4B over 1.7B", "metric": "tflops_per_gpu", "kind": "ratio",
         "published": 1.48, "reproduced": 1.45, "rel_error": -0.02027, "pass": None}]}

AXIS = "workload.max_sequence_tokens"
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
        self.assertEqual(ax.get_title(), "dynamic_cp/github: step_time_s [s]")
        self.assertEqual(ax.get_xlabel(), AXIS)
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        self.assertEqual(legend, ["dynamic_cp", "static_cp (cp=8)", "published", "infeasible (1)"])
        static = [ln for ln in ax.get_lines() if ln.get_label() == "static_cp (cp=8)"][0]
        ys = list(static.get_ydata())
        self.assertEqual(ys[:2], [1.2, 2.5])
        self.assertNotEqual(ys[2], ys[2], "the infeasible point is a NaN gap")
        marks = [tuple(map(float, o.get_offsets()[0])) for o in ax.collections]
        self.assertEqual(sorted(marks), [(16384.0, 2.1), (65536.0, 5.0)])
        self.assertEqual(ax.get_xscale(), "log")
        texts = " ".join(t.get_text() for t in fig.texts)
        self.assertIn("infeasible", texts)
        self.assertIn("out of memory", texts)

    def test_cases_figure_is_a_bar_plot_with_ratio_note(self):
        fig = plot.plot_metric(CASES, "tflops_per_gpu")
        ax = fig.axes[0]
        self.assertEqual(ax.get_title(), "ptdp/weak_scaling: tflops_per_gpu [TFLOP/s per GPU]")
        self.assertEqual([t.get_text() for t in ax.get_xticklabels()], ["1.7B", "18.4B"])
        self.assertEqual([p.get_height() for p in ax.patches], [137.5, 150.0])
        texts = " ".join(t.get_text() for t in fig.texts)
        self.assertIn("18.4B over 1.7B: published 1.48×, reproduced 1.45×", texts)

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
        self.assertIn("| step time at 64k | step_time_s | 5 | 4 | -20 % | **no** |", text)
        self.assertIn("| step time at 16k | step_time_s | 2.1 | 2 | -4.762 % | yes |", text)
        self.assertIn("| 1.7B TFLOP/s per GPU | tflops_per_gpu | 137 | 137.5 | 0.365 % | "
                      "yes (rel 0.1) |", text)
        self.assertIn("| 18.4B over 1.7B | tflops_per_gpu | 1.48× | 1.45× | -2.027 % | — |", text)
        # mean |rel_error| of step_time_s: (0.047619 + 0.2) / 2 = 12.38 %
        self.assertIn("- step_time_s: 12.38 % over 2 comparisons", text)
        # tflops_per_gpu: (0.00365 + 0.1111 + 0.02027) / 3 = 4.501 %
        self.assertIn("- tflops_per_gpu: 4.501 % over 3 comparisons", text)
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


if __name__ == "__main__":
    unittest.main()
