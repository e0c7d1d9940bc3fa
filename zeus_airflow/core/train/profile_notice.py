"""What a try says about its batch size's power profile when the try ends before the profile
does: a job too short to profile within a run is told so once, with the reason and the fix;
later runs only say how far the profile got.

"Once" is decided from the store, not from the process (each run is a task instance of its
own): the full explanation goes with the first run of the size's profile, the one that found
nothing of it stored. Each batch size has its own profile, so a short job that profiles
another size hears it again for that size, and only then.
"""

from __future__ import annotations

import logging

from zeus_airflow.core.common.config import ProfilerConfig
from zeus_airflow.core.common.units import show_time
from zeus_airflow.core.domain import RunOutcome
from zeus_airflow.core.train.profiler import SLICE_COUNTER_UPDATES, ProfileProgress


def step_s(outcome: RunOutcome) -> float:
    """The try's seconds per training step; 0 when it trained none."""
    return outcome.time_s / outcome.steps if outcome.steps else 0.0


def so_far(progress: ProfileProgress) -> str:
    """E.g. ``2 of up to 7 limits measured``."""
    return f"{progress.measured} of up to {progress.at_most} limits measured"


def profile_notice(
    outcome: RunOutcome,
    progress: ProfileProgress,
    config: ProfilerConfig,
    first: bool,
    progressed: bool = True,
) -> tuple[int, str]:
    """The log level and line for a try whose size's profile is unfinished. ``first``: the
    try began the profile (nothing of it was stored), so it explains why the profile spans
    runs and what would shorten it, once; later tries say only how far it got.
    ``progressed``: the try measured some of it; a profile that gets nowhere says why on each
    run, for it never will (each epoch warms up anew, by steps)."""
    size = outcome.batch_size
    if progress.waiting_for_budget:
        return logging.INFO, (
            f"batch size {size}'s power profile paused: the exploration budget could not pay "
            f"for its next slice; it continues when it can ({so_far(progress)})"
        )
    if not progressed:
        return logging.WARNING, _stuck(outcome, config, progress)
    if not first or outcome.time_s >= progress.need_s:
        return logging.INFO, f"batch size {size}'s power profile continues ({so_far(progress)})"
    return logging.WARNING, (
        f"batch size {size}'s power profile cannot finish within a run: this run trained "
        f"{show_time(outcome.time_s)} ({outcome.steps or 0} steps), and the profile takes at "
        f"least {show_time(progress.limit_s)} at each of up to {progress.at_most} limits "
        f"({show_time(progress.need_s)}): a warm-up of warmup_s={config.warmup_s:g} s and "
        f"warmup_steps={config.warmup_steps}, then a slice of profile_s={config.profile_s:g} s "
        f"and profile_steps={config.profile_steps} (and at least {SLICE_COUNTER_UPDATES} "
        "updates of a real GPU's energy counter). It goes on over the next runs of the size, "
        "a slice at a time, training at the limits it measures meanwhile "
        f"({so_far(progress)}). To profile in fewer runs, train longer per run, or pass the "
        "operator smaller warmup_s, profile_s, warmup_steps or profile_steps (shorter slices "
        "measure less precisely); power_limit_mode='measure' does not profile at all. Said "
        "once for this size; later runs say only how far it got."
    )


def _stuck(outcome: RunOutcome, config: ProfilerConfig, progress: ProfileProgress) -> str:
    per_epoch = (outcome.steps or 0) // max(outcome.epochs, 1)
    return (
        f"batch size {outcome.batch_size}'s power profile made no progress this run "
        f"({so_far(progress)}): every epoch starts with a warm-up of "
        f"warmup_steps={config.warmup_steps} steps before measuring, and this run's epochs "
        f"had about {per_epoch} steps, so it never will. Pass the operator a warmup_steps "
        "below an epoch's steps, or power_limit_mode='measure' not to profile."
    )
