"""Exports: a Perfetto/Chrome JSON trace that follows the Trace Event Format's rules, and CSV/Parquet
tables that pandas, pyarrow and DuckDB read back with the analyses' numbers."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import forensics
from analyses.stalls import find_stalls
from analyses.threads import thread_profiles
from forensics.export.frames import export_windows, flat_verdicts
from forensics.export.perfetto import MACHINE_PID, SYNTHETIC, perfetto_trace, thread_slices
from forensics.export.schemas import EXPORT_VERSION, RECORDED, TABLES, VERSION_KEY, export_schema, undeclared
from forensics.export.tables import write_tables
from tests.artefact_captures import EPISODES, with_markers
from tests.helpers import REPO

PHASES = {"B", "E", "X", "i", "I", "C", "M", "b", "e", "n", "s", "t", "f", "P", "N", "O", "D", "R", "c"}
METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index", "process_labels"}


def check_trace_event_format(trace: dict) -> None:
    """The Trace Event Format's rules for the events we write (JSON object form)."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit") in (None, "ms", "ns")
    named_threads = set()
    complete = defaultdict(list)
    for event in trace["traceEvents"]:
        assert event["ph"] in PHASES, event
        assert isinstance(event["name"], str) and event["name"], event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int), event
        assert isinstance(event["ts"], int | float) and event["ts"] >= 0, event
        if "args" in event:
            assert isinstance(event["args"], dict)
        if event["ph"] == "X":
            assert isinstance(event["dur"], int | float) and event["dur"] >= 0, event
            complete[(event["pid"], event["tid"])].append((event["ts"], event["ts"] + event["dur"]))
        elif event["ph"] == "C":
            assert event["args"] and all(isinstance(v, int | float) for v in event["args"].values()), event
        elif event["ph"] in ("i", "I"):
            assert event.get("s", "t") in ("g", "p", "t"), event
        elif event["ph"] == "M":
            assert event["name"] in METADATA, event
            key = "sort_index" if event["name"].endswith("sort_index") else "name"
            assert key in event["args"], event
            if event["name"] == "thread_name":
                named_threads.add((event["pid"], event["tid"]))
    # Complete events on one thread must nest or be disjoint (ours never overlap at all).
    for track, spans in complete.items():
        spans.sort()
        stack: list[float] = []
        for start, end in spans:
            while stack and start >= stack[-1] - 1e-6:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-6, (track, start, end)
            stack.append(end)
        assert track in named_threads, track  # every track has a name


@pytest.fixture(scope="module")
def trace():
    cap = with_markers()
    return cap, json.loads(perfetto_trace(cap, "lab-episodes"))


def test_perfetto_trace_follows_the_format(trace):
    _, data = trace
    check_trace_event_format(data)
    assert data["otherData"]["capture"] == "lab-episodes"


def test_perfetto_tracks_hold_the_windows_amounts(trace):
    cap, data = trace
    profiles = thread_profiles(cap)
    windows = pd.concat(list(export_windows(cap, profiles)))
    events = data["traceEvents"]
    for tid, mine in windows.groupby("tid"):
        for column, name in (("on_cpu_ns", "running"), ("runqueue_ns", "runnable (waiting for a CPU)"),
                             ("blocked_ns", "blocked (D)")):  # fmt: skip
            total_us = sum(e["dur"] for e in events if e["ph"] == "X" and e["tid"] == tid and e["name"] == name)
            assert total_us == pytest.approx(mine[column].sum() / 1e3, abs=1.0), (tid, name)
    counters = {e["name"].split(" ")[0] for e in events if e["ph"] == "C"}
    assert {"faults", "cpu", "CPU"} <= counters  # per-thread faults and CPU; the machine's CPU busy %


def test_perfetto_has_verdicts_and_markers(trace):
    cap, data = trace
    events = data["traceEvents"]
    stalls = find_stalls(cap)
    instants = [e for e in events if e["ph"] == "i" and e.get("cat") == "verdict"]
    assert sorted(e["args"]["verdict"] for e in instants) == sorted(stalls["verdict"])
    assert all(e["s"] == "t" for e in instants)
    spans = [e for e in events if e["ph"] == "X" and e.get("cat") == "verdict"]
    assert {e["tid"] for e in spans} == {SYNTHETIC + t for t in stalls["tid"]}
    markers = [e for e in events if e.get("cat") == "marker"]
    assert [e["name"] for e in markers] == ["marker: load", "marker: loaded"]
    assert all(e["ph"] == "i" and e["s"] == "g" and e["pid"] == MACHINE_PID for e in markers)


def test_slices_merge_only_touching_same_kind():
    windows = pd.DataFrame(
        {"tid": [1, 1, 1], "start_ns": [0, 2000, 4000], "on_cpu_ns": [2000, 1500, 0], "runqueue_ns": [0, 500, 1000],
         "blocked_ns": [0, 0, 500]}
    )  # fmt: skip
    slices = thread_slices(windows)
    assert slices[["kind", "start_ns", "end_ns", "windows"]].values.tolist() == [
        [0, 0, 3500, 2], [1, 3500, 5000, 2], [2, 5000, 5500, 1]
    ]  # fmt: skip


def test_perfetto_cli_json_gz_and_errors(run_module, tmp_path):
    out = tmp_path / "t.json.gz"
    result = run_module("forensics", "export", str(EPISODES), "--format", "perfetto", "-o", str(out))
    assert result.returncode == 0, result.stderr
    check_trace_event_format(json.loads(gzip.decompress(out.read_bytes())))
    bad = run_module("forensics", "export", str(EPISODES), "--format", "perfetto", "-o", str(tmp_path / "t.txt"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    unknown = run_module("forensics", "export", str(EPISODES), "--format", "xml", "-o", str(tmp_path / "x"))
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "forensics: error: unknown --format 'xml'; choose one of: perfetto, csv, parquet"
    ]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_tables_round_trip(tmp_path, fmt):
    cap = forensics.load(EPISODES)
    rows = write_tables(cap, tmp_path / "out", fmt)
    read = pd.read_parquet if fmt == "parquet" else pd.read_csv
    samples = read(tmp_path / "out" / f"samples.{fmt}")
    assert len(samples) == rows["samples"] == len(cap.samples)
    assert samples.sort_values(["tid", "tick"])["run_ns"].to_numpy().tolist() == (
        cap.samples.sort_values(["tid", "tick"])["run_ns"].to_numpy().tolist()
    )
    windows = read(tmp_path / "out" / f"windows.{fmt}")
    expected = pd.concat(list(export_windows(cap, thread_profiles(cap))))
    for column in ("on_cpu_ns", "runqueue_ns", "off_cpu_ns", "blocked_ns"):
        assert windows.groupby("tid")[column].sum().to_dict() == expected.groupby("tid")[column].sum().to_dict()
    verdicts = read(tmp_path / "out" / f"verdicts.{fmt}")
    stalls = find_stalls(cap)
    assert verdicts["verdict"].tolist() == stalls["verdict"].tolist()
    assert verdicts["stall_ns"].tolist() == stalls["stall_ns"].tolist()
    if fmt == "parquet":
        assert pq.read_table(tmp_path / "out" / "windows.parquet").num_rows == len(expected)
        state = pq.read_schema(tmp_path / "out" / "samples.parquet").field("state").type
        assert "string" in str(state)  # plain text, not a dictionary


def test_parquet_reads_in_duckdb(tmp_path):
    duckdb = pytest.importorskip("duckdb", reason="duckdb is a test-time extra ([test]); not installed here")
    cap = forensics.load(EPISODES)
    write_tables(cap, tmp_path / "out", "parquet")
    got = duckdb.sql(
        f"SELECT verdict, count(*) AS n FROM '{tmp_path}/out/verdicts.parquet' GROUP BY verdict ORDER BY verdict"
    ).fetchall()
    counts = find_stalls(cap)["verdict"].value_counts().sort_index()
    assert got == list(zip(counts.index.tolist(), counts.tolist(), strict=True))
    on_cpu = duckdb.sql(f"SELECT sum(on_cpu_ns) FROM '{tmp_path}/out/windows.parquet'").fetchall()[0][0]
    assert on_cpu == int(np.sum(pd.concat(list(export_windows(cap, thread_profiles(cap))))["on_cpu_ns"]))


def test_table_export_into_a_file_is_an_error(run_module, tmp_path):
    target = tmp_path / "afile"
    target.write_text("x")
    result = run_module("forensics", "export", str(EPISODES), "--format", "csv", "-o", str(target))
    assert result.returncode == 2 and "is a file" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _exports_of_every_sample_capture(tmp_path):
    """Parquet exports of captures/*.ssf and of one with engine tables: {name: (capture, directory)}."""
    from tests.test_engine_views import engine_capture

    captures = {path.stem: forensics.load(path) for path in sorted((REPO / "captures").glob("*.ssf"))}
    assert len(captures) >= 3
    captures["engine"] = engine_capture(base=captures["lab-episodes"])
    out = {}
    for name, cap in captures.items():
        write_tables(cap, tmp_path / name, "parquet")
        out[name] = (cap, tmp_path / name)
    return out


def test_every_table_is_exported_with_its_one_schema(tmp_path):
    exports = _exports_of_every_sample_capture(tmp_path)
    for name, (cap, directory) in exports.items():
        assert sorted(p.stem for p in directory.iterdir()) == sorted(TABLES), name
        for table in TABLES:
            schema = pq.read_schema(directory / f"{table}.parquet")
            assert schema.remove_metadata() == export_schema(table).remove_metadata(), (name, table)
            assert schema.metadata[VERSION_KEY] == str(EXPORT_VERSION).encode()
        for table in RECORDED:  # as recorded: every row (no --thread, no --span)
            rows = pq.read_metadata(directory / f"{table}.parquet").num_rows
            assert rows == (len(cap.table(table)) if table in cap.table_names else 0), (name, table)
    # What the derived tables hold is declared: a new column of an analysis needs its export type.
    cap = exports["lab-ebpf"][0]
    assert undeclared("verdicts", flat_verdicts(find_stalls(cap))) == []
    assert undeclared("windows", pd.concat(list(export_windows(cap, thread_profiles(cap))))) == []
    assert undeclared("threads", cap.threads) == []
    assert pq.read_table(exports["engine"][1] / "engine_cycles.parquet").num_rows == 40
    assert pq.read_table(exports["lab-ebpf"][1] / "sched_switch.parquet").num_rows > 0


def test_exports_of_all_sample_captures_read_as_one_dataset(tmp_path):
    import pyarrow.dataset as ds

    duckdb = pytest.importorskip("duckdb", reason="duckdb is a test-time extra ([test]); not installed here")
    exports = _exports_of_every_sample_capture(tmp_path)
    for table in TABLES:
        files = [str(directory / f"{table}.parquet") for _, directory in exports.values()]
        expected = sum(pq.read_metadata(f).num_rows for f in files)
        # pyarrow: one dataset of all the files, read whole (a type that drifts between files fails here).
        assert ds.dataset(files, format="parquet").to_table().num_rows == expected, table
        # DuckDB: a glob over the directories, without union_by_name (the schemas must already agree).
        got = duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path}/*/{table}.parquet')").fetchall()[0][0]
        assert got == expected, table
    by_capture = duckdb.sql(
        f"SELECT regexp_extract(filename, '([^/]+)/verdicts', 1) AS c, count(*), sum(stall_ns) "
        f"FROM read_parquet('{tmp_path}/*/verdicts.parquet', filename=true) GROUP BY c ORDER BY c"
    ).fetchall()
    expected_rows = []
    for name, (cap, _) in sorted(exports.items()):
        stalls = find_stalls(cap)
        if len(stalls):
            expected_rows.append((name, len(stalls), int(stalls["stall_ns"].sum())))
    assert by_capture == expected_rows


def test_perfetto_has_the_exact_switch_record_where_the_capture_has_it():
    cap = forensics.load(REPO / "captures" / "lab-ebpf.ssf")
    data = json.loads(perfetto_trace(cap, "lab-ebpf"))
    check_trace_event_format(data)  # per track, the exact slices and the CPU slices never overlap
    events = data["traceEvents"]
    exact = [e for e in events if e["ph"] == "X" and e.get("cat") == "sched,exact"]
    assert {"Running", "Runnable", "Sleeping (S)", "Uninterruptible (D)"} <= {e["name"] for e in exact}
    # Threads with switch records have no 2 ms window slices beside their exact ones.
    exact_tids = {e["tid"] for e in exact}
    assert not [e for e in events if e["ph"] == "X" and e.get("cat") == "sched" and e["tid"] in exact_tids]
    # The injected io episode of lab-audio is D time in the kernel's own record.
    origin = data["otherData"]["origin_ns"]
    io = cap.truth[cap.truth["cause"] == "io"].iloc[0]
    t0, t1 = (io["start_ns"] - origin) / 1e3, (io["end_ns"] - origin) / 1e3
    d_us = sum(
        max(0.0, min(e["ts"] + e["dur"], t1) - max(e["ts"], t0))
        for e in exact
        if e["tid"] == io["tid"] and e["name"] == "Uninterruptible (D)"
    )
    assert d_us >= 0.3 * (t1 - t0), (d_us, t1 - t0)
    # Wake-ups: each arrow starts inside the waker's Running slice and ends at the wakee's switch-in.
    running = defaultdict(list)
    for e in exact:
        if e["name"] == "Running":
            running[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and set(starts) == set(ends)
    for flow_id, start in starts.items():
        end = ends[flow_id]
        assert end["bp"] == "e" and any(abs(a - end["ts"]) < 1e-3 for a, _ in running[end["tid"]])
        assert any(a - 1e-3 <= start["ts"] <= b + 1e-3 for a, b in running[start["tid"]]), start
    cpus = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"CPU 0", "CPU 1"} <= cpus


def test_perfetto_marks_each_incident_root(trace):
    from analyses.incidents import find_incidents
    from analyses.source import capture_interval_ns
    from analyses.threads import select_threads

    cap, data = trace
    episodes = find_stalls(cap)
    _, members = find_incidents(cap, episodes, select_threads(thread_profiles(cap)),
                                        interval_ns=capture_interval_ns(cap))  # fmt: skip
    roots = [e for e in data["traceEvents"] if e.get("cat") == "incident"]
    assert len(roots) == int((members["role"] == "root").sum()) >= 1
    assert sorted(e["args"]["incident"] for e in roots) == sorted(
        int(i) for i in members.loc[members["role"] == "root", "incident"]
    )
    for e in roots:
        assert (
            e["ph"] == "X"
            and e["tid"] >= SYNTHETIC
            and e["name"].startswith(f"incident {e['args']['incident']} root: ")
        )
