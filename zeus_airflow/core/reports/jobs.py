"""Jobs: each version at a glance or in full (the store's reader lists jobs, their versions
and the DAGs they ran in)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime

from zeus_airflow.core.devices.base import MeasurementKind
from zeus_airflow.core.domain.phases import shown_job_phase
from zeus_airflow.core.reports.arms import arms, best_batch_size, profile_points
from zeus_airflow.core.reports.default import default_estimates
from zeus_airflow.core.reports.records import JobDetail, JobSummary, JobTotals, Version
from zeus_airflow.core.reports.runs import runs
from zeus_airflow.core.store.reads import LatestTry, Reader


def current(history: Sequence[Version]) -> Version:
    """The version decisions use now: the active one (the newest if none is)."""
    return next((v for v in history if v.active), history[-1])


def totals(
    reader: Reader, chosen: Sequence[Version], since: datetime | None = None
) -> dict[int, JobTotals]:
    """Each chosen version's totals, by its key, in a few reads for them all; with
    ``since``, of the tries started at or after it only (the Default estimate still learns
    from every run)."""
    pks = [v.pk for v in chosen]
    # Per job and place (DAG, task, measurement): the sums, added up per job below.
    sums: dict[int, list[float]] = {}
    places: dict[int, set[tuple[str, str, MeasurementKind]]] = {}
    for pk, dag_id, task_id, measurement, *figures in reader.place_sums(pks, since):
        places.setdefault(pk, set()).add((dag_id, task_id, measurement))
        total = sums.setdefault(pk, [0.0, 0.0, 0.0])
        for i, value in enumerate(figures):
            total[i] += float(value)
    counts = reader.run_counts(pks, since)
    defaults = default_estimates(reader, chosen)
    result = {}
    for v in chosen:
        seen, count = places.get(v.pk, set()), counts.get(v.pk)
        energy_j, time_s, cost = sums.get(v.pk, (0.0, 0.0, 0.0))
        result[v.pk] = JobTotals(
            version=v,
            tasks=tuple(sorted({(d, t) for d, t, _ in seen})),
            runs=count.runs if count else 0,
            finished_runs=count.finished if count else 0,
            energy_j=energy_j,
            time_s=time_s,
            cost=cost,
            measurements=tuple(sorted({m for *_, m in seen})),
            default=defaults[v.pk],
        )
    return result


def job_phase_of(last: LatestTry | None) -> str:
    """The phase every surface shows for a version whose latest try is ``last``
    (``domain.phases.shown_job_phase``; None: no try yet)."""
    return last.shown_phase if last else shown_job_phase(None, None)


def summaries(
    reader: Reader,
    chosen: Sequence[Version],
    history: dict[str, list[Version]],
    since: datetime | None = None,
) -> list[JobSummary]:
    """One summary per chosen version, in the order given (``since``: as :func:`totals`)."""
    observed = reader.observe_sums([v.pk for v in chosen], since)
    summed = totals(reader, chosen, since)
    latest = reader.latest_tries([v.pk for v in chosen])
    result = []
    for v in chosen:
        last, best = latest.get(v.pk), best_batch_size(reader, v)
        result.append(
            JobSummary(
                **{f.name: getattr(summed[v.pk], f.name) for f in fields(JobTotals)},
                versions=tuple(h.version for h in history[v.job_id]),
                phase=job_phase_of(last),
                best_batch_size=best,
                best_power_limit_w=reader.last_limit(v.pk, best),
                observed=observed.get(v.pk),
            )
        )
    return result


def detail(reader: Reader, summary: JobSummary) -> JobDetail:
    v = summary.version
    return JobDetail(summary, runs(reader, v.pk), arms(reader, v), profile_points(reader, v.pk))
