"""What the noise acceptance test asserts about the jobs (issue 11, "Do no harm"), read from
the store: shared by the full 20-day run through the real scheduler
(tests/operators/test_acceptance_noise.py) and the same criteria through the real engine on a
virtual
clock (tests/core/train/test_acceptance_engine.py).

* each region has its own job, fed by one map index, on every day;
* no job ends infeasible (the phase the UI and ``zeus-airflow jobs`` show);
* each job's last five runs reach the target, with a mean cost within 1.3x of the mean cost
  of its cheapest size. A run's cost is the sum of its tries' costs (failed tries included);
  a size's mean cost is the mean over the job's tries of that size that reached the target.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from zeus_airflow.core.reports.jobs import current
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore

LAST = 5
COST_BOUND = 1.3


@dataclass
class Try:
    batch_size: int
    status: str
    phase: str
    cost: float | None
    epochs: int | None
    reached: bool
    stop_reason: str | None
    setup_time_s: float | None = None
    """Before training started: measured apart, never in the cost."""

    def __str__(self) -> str:
        cost = "-" if self.cost is None else f"{self.cost:.0f}"
        outcome = "ok" if self.reached else (self.stop_reason or self.status)
        return f"{self.batch_size}:{cost}/{self.epochs}ep/{outcome}/{self.phase}"


@dataclass
class Run:
    """One recurrence of a job: one mapped task instance."""

    run_id: str
    map_index: int
    tries: list[Try] = field(default_factory=list)

    @property
    def cost(self) -> float:
        return sum(t.cost or 0.0 for t in self.tries)

    @property
    def reached(self) -> bool:
        return any(t.reached for t in self.tries)


@dataclass
class Job:
    job_id: str
    phase: str
    runs: list[Run]

    def size_costs(self) -> dict[int, list[float]]:
        """Costs of the tries that reached the target, by batch size."""
        found: dict[int, list[float]] = {}
        for run in self.runs:
            for t in run.tries:
                if t.reached and t.cost is not None:
                    found.setdefault(t.batch_size, []).append(t.cost)
        return found

    def cheapest_mean(self) -> tuple[int, float]:
        means = {b: statistics.fmean(c) for b, c in self.size_costs().items()}
        best = min(means, key=means.__getitem__)
        return best, means[best]

    def last_mean(self) -> float:
        return statistics.fmean(run.cost for run in self.runs[-LAST:])


def read_jobs(store_url: str, dag_id: str, run_order: list[str]) -> dict[str, Job]:
    """Every job the DAG's task fed, with its runs in ``run_order`` (logical-date order)."""
    store = SQLStore(store_url)
    try:
        counted = ("succeeded", "failed", "expired", "error")
        rows = sorted(
            (t for t in list_trials(store) if t.dag_id == dag_id and t.status in counted),
            key=lambda t: t.decision_seq,
        )
        job_ids = sorted({r.job_id for r in rows})
        with store.reader() as reader:
            latest = {
                job_id: current(history).pk for job_id, history in reader.versions(job_ids).items()
            }
            tries = reader.latest_tries(list(latest.values()))
            # The phase every surface shows: the one recorded after the latest try.
            phases = {job_id: tries[pk].shown_phase for job_id, pk in latest.items()}
    finally:
        store.engine.dispose()
    found: dict[str, dict[tuple[str, int], Run]] = {}
    for r in rows:
        run = found.setdefault(r.job_id, {}).setdefault(
            (r.run_id, r.map_index), Run(r.run_id, r.map_index)
        )
        run.tries.append(
            Try(
                r.batch_size,
                r.status,
                r.phase,
                r.cost,
                r.epochs,
                bool(r.reached_target),
                r.stop_reason,
                r.setup_time_s,
            )
        )
    return {
        job_id: Job(
            job_id,
            phases[job_id],
            sorted(by_run.values(), key=lambda run: (run_order.index(run.run_id), run.map_index)),
        )
        for job_id, by_run in found.items()
    }


def summary(found: dict[str, Job]) -> str:
    lines = []
    for job in found.values():
        sizes = ", ".join(
            f"b={b}: {len(c)} x {statistics.fmean(c):.0f}"
            for b, c in sorted(job.size_costs().items())
        )
        lines.append(
            f"job {job.job_id} (phase {job.phase}): {len(job.runs)} runs; mean cost "
            f"of tries that reached the target: {sizes or 'none'}"
        )
        for n, run in enumerate(job.runs, start=1):
            lines.append(
                f"  {n:2d} {run.run_id[-25:]:25} map {run.map_index} "
                f"cost {run.cost:7.0f}  " + "  ".join(map(str, run.tries))
            )
        if job.size_costs():
            best, best_mean = job.cheapest_mean()
            lines.append(
                f"  last {LAST} runs' mean cost {job.last_mean():.0f} = "
                f"{job.last_mean() / best_mean:.2f}x the cheapest size's "
                f"(b={best}, {best_mean:.0f})"
            )
    return "\n".join(lines)


def job_problems(found: dict[str, Job], runs: int, regions: int) -> list[str]:
    """What breaks the criteria above, one line each; empty when the jobs pass."""
    return layout_problems(found, runs, regions) + convergence_problems(found)


def layout_problems(found: dict[str, Job], runs: int, regions: int) -> list[str]:
    """One job per region, each fed by one map index on each of ``runs`` days."""
    problems: list[str] = []
    # Each region has its own job: one job per region, each fed by one map index, every day.
    by_map_index = {
        i: sorted(
            job.job_id for job in found.values() if any(run.map_index == i for run in job.runs)
        )
        for i in range(regions)
    }
    if len(found) != regions or any(len(ids) != 1 for ids in by_map_index.values()):
        problems.append(f"expected one job per region; job ids by map index: {by_map_index}")
    for job in found.values():
        map_indexes = sorted({run.map_index for run in job.runs})
        if len(job.runs) != runs or len(map_indexes) != 1:
            problems.append(f"{job.job_id}: {len(job.runs)} runs of map indexes {map_indexes}")
    return problems


def convergence_problems(found: dict[str, Job]) -> list[str]:
    """No job infeasible; each job's last five runs reach the target within the bound."""
    problems: list[str] = []
    for job in found.values():
        # No job ends infeasible.
        if job.phase == "infeasible":
            problems.append(f"{job.job_id} ends infeasible")
        # The last five runs reach the target, within 1.3x of the cheapest size's mean cost.
        if not all(run.reached for run in job.runs[-LAST:]):
            problems.append(f"{job.job_id}: a run of the last {LAST} missed the target")
        if not job.size_costs():
            problems.append(f"{job.job_id}: no try reached the target")
            continue
        best, best_mean = job.cheapest_mean()
        if job.last_mean() > COST_BOUND * best_mean:
            problems.append(
                f"{job.job_id}: the last {LAST} runs' mean cost "
                f"{job.last_mean():.0f} is {job.last_mean() / best_mean:.2f}x "
                f"the cheapest size's (b={best}, {best_mean:.0f}); bound "
                f"{COST_BOUND}x"
            )
    return problems
