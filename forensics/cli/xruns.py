"""`forensics xruns CAPTURE`: each xrun the engine reported, or deadline a cycle missed, and its incident."""

from __future__ import annotations

import click

from capture.format import load
from forensics.cli.options import capture_argument
from forensics.cli.report_options import emit, output_options, span_option


@click.command()
@capture_argument
@span_option
@output_options
def xruns(capture: str, span: str | None, fmt: str | None, as_json: bool, output: str | None) -> None:
    """One row per xrun the engine reported (its xruns record: JACK's xrun callback or server log,
    PipeWire's profiler) or deadline a cycle missed (the engine's cycle ended after its period; in the
    lab, a callback that ended past its deadline), with the incident of `forensics stalls` it falls in:
    its root thread and verdict. An xrun with no incident is a late cycle whose cause the watched
    threads do not show (look at `forensics system` for the machine at that time).
    """
    from analyses.incidents import find_incidents
    from analyses.source import capture_interval_ns, capture_origin_ns
    from analyses.span import resolve_span
    from analyses.stalls import find_stalls
    from analyses.threads import select_threads, thread_profiles
    from forensics.views.incidents import xruns_report

    cap = load(capture)
    t_range = resolve_span(cap, span)
    profiles = thread_profiles(cap, t_range=t_range)
    episodes = find_stalls(cap, t_range=t_range, profiles=profiles)
    watched = select_threads(profiles)
    incidents, _ = find_incidents(cap, episodes, watched, interval_ns=capture_interval_ns(cap))
    emit(
        xruns_report(cap, capture, incidents, origin_ns=capture_origin_ns(cap)), fmt=fmt, as_json=as_json, output=output
    )
