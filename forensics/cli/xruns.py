"""`forensics xruns CAPTURE`: each xrun the engine reported, or deadline a cycle missed, and its incident."""

from __future__ import annotations

import click

from capture.format import load
from forensics.cli.options import capture_argument, tid_option
from forensics.cli.report_options import emit, output_options, span_option


@click.command()
@capture_argument
@span_option
@tid_option(
    "Only the xruns whose incident involves this thread, as its root or in one of its episodes "
    "(repeatable); the incidents are decided as without --tid."
)
@output_options
def xruns(
    capture: str, span: str | None, tids: tuple[int, ...], fmt: str | None, as_json: bool, output: str | None
) -> None:
    """One row per xrun the engine reported (its xruns record: JACK's xrun callbacks and server log,
    PipeWire's profiler; the reports of one xrun merged, the client the engine blamed where it named one)
    or deadline a cycle missed (the engine's cycle ended after its period; in the lab, a callback that
    ended past its deadline), with the incident of `forensics stalls` that covers it, by the same
    number: its root thread and verdict. An xrun with no incident is a late cycle whose cause the
    watched threads do not show (look at `forensics system` for the machine at that time).

    --tid N (repeatable) lists only the xruns whose incident has that thread as its root or among its
    episodes. Like --span, it picks the xruns shown, never what is decided: the incidents are those of
    the whole capture's watched threads.
    """
    from analyses.incidents import find_incidents
    from analyses.source import capture_interval_ns, capture_origin_ns
    from analyses.span import resolve_span
    from analyses.stalls import find_stalls
    from analyses.threads import check_tids, select_threads, thread_profiles
    from forensics.views.flight import flight_sections
    from forensics.views.incidents import xruns_report

    cap = load(capture)
    check_tids(cap, tids, capture)
    t_range = resolve_span(cap, span)
    # Incidents of the whole capture (a span picks the xruns shown, never what is decided).
    profiles = thread_profiles(cap)
    episodes = find_stalls(cap, profiles=profiles)
    watched = select_threads(profiles)
    incidents, members = find_incidents(cap, episodes, watched, interval_ns=capture_interval_ns(cap))
    report = xruns_report(
        cap, capture, incidents, origin_ns=capture_origin_ns(cap), t_range=t_range, members=members, tids=tids
    )
    report.sections += flight_sections(cap)  # a flight recording's counters and windows (README, "Flight recorder")
    emit(report, fmt=fmt, as_json=as_json, output=output)
