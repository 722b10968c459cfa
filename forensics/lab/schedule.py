"""When each episode happens: a deterministic plan from the settings and the seed.

The plan is made before the engine starts, in periods of the audio clock: episode i of the shuffled list
starts in the first callback at or after `lead_in + i * spacing + jitter_i`, where jitter_i is drawn from
[0, spacing / 4). The jitter keeps episodes from sharing a phase with a sampler's tick; the shuffle mixes the
causes so no cause always follows another. Same settings and seed, same plan, on any machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from forensics.lab.settings import CAUSES, LabSettings

# A cut-off schedule drops episodes that would not end this long before --duration.
_END_MARGIN_NS = 50_000_000


@dataclass(frozen=True)
class PlannedEpisode:
    index: int  # 0-based, in time order
    cause: str
    period: int  # the callback it is injected into: the first at or after offset_ns
    offset_ns: int  # planned start, ns after the clock origin


@dataclass(frozen=True)
class Schedule:
    episodes: tuple[PlannedEpisode, ...]
    periods: int  # callbacks 0 .. periods-1 run; the lab ends at the start of period `periods`
    end_ns: int  # offset of the end, ns after the clock origin
    dropped: int  # episodes cut off by --duration

    def counts(self) -> dict[str, int]:
        return {cause: sum(1 for e in self.episodes if e.cause == cause) for cause in CAUSES}


def build_schedule(settings: LabSettings) -> Schedule:
    causes = [cause for cause in CAUSES for _ in range(settings.episodes.get(cause, 0))]
    rng = random.Random(settings.seed)
    rng.shuffle(causes)
    spacing = settings.spacing_ns
    offsets = [settings.lead_in_ns + i * spacing + int(rng.random() * spacing / 4) for i in range(len(causes))]
    if settings.duration_ns is not None:
        end_ns = settings.duration_ns
        keep = [i for i, off in enumerate(offsets) if off + settings.episode_ns + _END_MARGIN_NS <= end_ns]
    else:
        keep = list(range(len(causes)))
        last = offsets[-1] + settings.episode_ns if offsets else settings.lead_in_ns
        end_ns = last + settings.tail_ns
    episodes = tuple(
        PlannedEpisode(index=n, cause=causes[i], period=settings.first_period_at(offsets[i]), offset_ns=offsets[i])
        for n, i in enumerate(keep)
    )
    periods = settings.first_period_at(end_ns)
    return Schedule(episodes=episodes, periods=periods, end_ns=end_ns, dropped=len(causes) - len(keep))
