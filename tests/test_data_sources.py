"""The table of data sources: the stalls' "undecided" and the report's "what could not be known" both
come from it, so a source described there is said in both places, and only when it is missing."""

from __future__ import annotations

from analyses.data_sources import SOURCES, undecided_for_lack, unknown_rows


def test_every_source_says_what_it_decides_and_how_to_record_it() -> None:
    for source in SOURCES:
        assert source.flag and source.decides, source.key
        assert source.undecided or source.what, f"{source.key}: missing it says nothing"


def test_a_missing_source_is_undecided_on_its_path_only() -> None:
    none = dict.fromkeys(("delayacct", "schedstats", "taskstats", "ts_blkio", "ebpf", "ebpf_faults"), False)
    proc = undecided_for_lack(none, exact=False)
    exact = undecided_for_lack({**none, "ebpf": True}, exact=True)
    for source in SOURCES:
        if source.undecided is None:
            continue
        assert (source.undecided in proc) == (source.undecided_path in ("proc", "both")), source.key
        assert (source.undecided in exact) == (source.undecided_path in ("exact", "both")), source.key
    everything = dict.fromkeys(none, True)
    assert undecided_for_lack(everything, exact=False) == []
    assert undecided_for_lack(everything, exact=True) == []
    # Either of delay accounting or schedstats sees short waits.
    assert not any("shorter than one sampling" in u for u in undecided_for_lack({"schedstats": True}, exact=False))


def test_the_report_lists_each_missing_source_once_and_the_kernels_reason() -> None:
    rows = unknown_rows({})
    whats = [what for what, _, _ in rows]
    assert whats == [s.what for s in SOURCES if s.what is not None]
    assert (
        unknown_rows({"schedstats_enabled": True, "delayacct": True, "taskstats": "rt", "ebpf": True, "psi": True})
        == []
    )
    sched = dict((w, why) for w, why, _ in unknown_rows({"schedstats_compiled": False}))
    assert sched["per-thread wait, sleep, block and iowait sums (sched file)"] == "the kernel has no CONFIG_SCHEDSTATS"
    with_ebpf = {w: so for w, _, so in unknown_rows({"ebpf": True})}
    assert with_ebpf["per-thread wait, sleep, block and iowait sums (sched file)"].startswith("none for io and lock")
