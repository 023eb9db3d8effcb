"""Profiles fused against unfused, from Python: the report as a dict, the table, traces."""

import json

import ferrite
from conftest import EXAMPLES


def test_cpu_profile_report_and_trace(tmp_path):
    prog = ferrite.compile(ferrite.load(EXAMPLES / "softmax_rows.fg"), threads=1)
    trace = tmp_path / "trace.json"
    report = prog.profile(*prog.random_inputs(), runs=2, trace=trace)
    assert report["format"] == "ferrite-profile" and report["target"] == "cpu"
    assert report["threads"] == 1
    assert len(report["schedules"]["fused"]["kernels"]) < len(report["schedules"]["unfused"]["kernels"])
    events = json.loads(trace.read_text())
    events = events["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)


def test_sim_profile_counts_cycles_and_renders_a_table():
    prog = ferrite.compile(ferrite.load(EXAMPLES / "softmax_rows.fg"), target="sim")
    inputs = prog.random_inputs(seed=3)
    report = prog.profile(*inputs)
    assert report["target"] == "sim"
    fused = report["schedules"]["fused"]["kernels"]
    assert fused and all(k["cycles"] > 0 for k in fused)
    # Simulated cycles are deterministic.
    assert prog.profile(*inputs) == report
    table = prog.profile(*inputs, table=True)
    assert "fused vs unfused: " in table.splitlines()[-1]


def test_threads_option_reaches_the_program():
    g = ferrite.load(EXAMPLES / "mlp.fg")
    for threads in [1, 2, 3]:
        prog = ferrite.compile(g, threads=threads)
        assert prog.profile(*prog.random_inputs(), runs=1)["threads"] == threads


def test_dump_writes_every_stage(tmp_path):
    ferrite.compile(ferrite.load(EXAMPLES / "mlp.fg"), dump=tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"00-parsed.fg", "02-optimized.fg", "03-kernels.loop", "graph.dot"} <= names
