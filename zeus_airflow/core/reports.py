"""What the store says about a job, for people: runs, arms, power profiles, and the energy
saved against the Default configuration. Reads only; Airflow-free (the UI adds Airflow's
dates, links and access rules on top).

A *run* is one recurrence: the live tries (``attempt`` 1, 2, ...) of one Airflow task instance
``(dag_id, task_id, run_id, map_index)`` in one job version, from its latest Airflow try.
Tries a later Airflow try of the same task instance replaced are history, never shown.
Energy in J, time in s, power in W, cost in the paper's J-equivalents.

The arms and the phase are what the policy itself sees: the same snapshot
(``store.snapshot.read_snapshot``), the same pruning replay and posterior math.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, NamedTuple

from sqlalchemy import Connection, Integer, func, select

from zeus_airflow.core.config import JobConfig
from zeus_airflow.core.cost import LimitMeasurement
from zeus_airflow.core.devices.base import MeasurementKind
from zeus_airflow.core.policy import NoFeasibleBatchSizeError, best_known, pruning_state
from zeus_airflow.core.posterior import ArmStats, arm_posterior, pooled_cost_cv
from zeus_airflow.core.store.base import DeviceInfo, JobRef
from zeus_airflow.core.store.snapshot import read_snapshot
from zeus_airflow.core.store.tables import LIVE_STATUSES, jobs, power_profiles, trials

SHOWN_STATUSES = (*LIVE_STATUSES, "error")
"""Tries shown as part of a run: the live ones, and those whose train function raised."""
_SHOWN = trials.c.status.in_(SHOWN_STATUSES)
_RUN_KEY = (trials.c.dag_id, trials.c.task_id, trials.c.run_id, trials.c.map_index)
# The snapshot reader wants the device only for the grid baseline's limits.
_NO_DEVICE = DeviceInfo(model="", count=1, kind="measured", power_limits_w=())
_DOCUMENTED = {"use_attribute_docstrings": True}
"""Records the UI's JSON API returns as they are: pydantic (which this module does not import)
documents their fields from the attribute docstrings."""


@dataclass(frozen=True)
class Version:
    """One version of a job (a changed configuration or a reset starts a new one)."""

    pk: int
    job_id: str
    version: int
    active: bool
    created_at: datetime
    config: JobConfig


@dataclass(frozen=True)
class DefaultEstimate:
    """What one run of the Default configuration (b0 at the maximum power limit) costs,
    estimated from this job's successful runs of b0, scaled to the maximum limit with b0's
    power profile where it has both limits (``scaled_runs`` of ``runs``)."""

    __pydantic_config__: ClassVar[dict[str, bool]] = _DOCUMENTED

    batch_size: int
    power_limit_w: int | None
    """The maximum limit of b0's profile; None without a profile."""
    energy_j: float
    """Per run."""
    time_s: float
    """Per run."""
    runs: int
    """Successful runs of b0 averaged."""
    scaled_runs: int
    """Of those, the runs scaled to the maximum limit (the others count as measured)."""


@dataclass(frozen=True)
class JobSummary:
    """A job version at a glance. ``energy_j``/``time_s`` sum every live try."""

    version: Version
    versions: tuple[int, ...]
    tasks: tuple[tuple[str, str], ...]
    """(dag_id, task_id) pairs that ran the job; ("", "") for runs outside Airflow."""
    runs: int
    finished_runs: int
    """Runs with at least one finished try (the ones with energy figures)."""
    energy_j: float
    time_s: float
    measurements: tuple[MeasurementKind, ...]
    """measured / replayed / simulated: where the figures come from."""
    phase: str
    """pruning, sampling, infeasible, or the last decision's phase for other policies."""
    best_batch_size: int | None
    best_power_limit_w: int | None
    default: DefaultEstimate | None

    @property
    def job_id(self) -> str:
        return self.version.job_id

    @property
    def default_energy_j(self) -> float | None:
        """Estimated energy of the finished runs, had they all run the Default way."""
        return None if self.default is None else self.default.energy_j * self.finished_runs

    @property
    def energy_saved_j(self) -> float | None:
        estimate = self.default_energy_j
        return None if estimate is None else estimate - self.energy_j


@dataclass(frozen=True)
class RunRecord:
    """One run. Figures sum its finished tries (None while none has finished); batch size,
    power limit, phase and status are the last try's."""

    __pydantic_config__: ClassVar[dict[str, bool]] = _DOCUMENTED

    index: int
    """1-based position among the version's runs, in decision order."""
    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    """Airflow's try number of the task instance."""
    batch_sizes: tuple[int, ...]
    """Batch size of each try, in order; the last is the run's."""
    status: str
    """The last try's: running, succeeded, failed (target missed), error, expired."""
    phase: str
    """The decision's: pruning, sampling, or concurrent (pruning was busy elsewhere)."""
    power_limit_w: int | None
    """W, the limit the last try trained at."""
    energy_j: float | None
    time_s: float | None
    cost: float | None
    """J-equivalents: eta * energy_j + (1 - eta) * max power * time_s."""
    epochs: int | None
    reached_target: bool | None
    measurement: MeasurementKind
    """measured (a real GPU), replayed (the paper's traces) or simulated (a power model)."""
    gpu_model: str
    started_at: datetime
    finished_at: datetime | None

    @property
    def batch_size(self) -> int:
        return self.batch_sizes[-1]

    @property
    def tries(self) -> int:
        return len(self.batch_sizes)


@dataclass(frozen=True)
class Arm:
    """One batch size as the policy sees it: its windowed observations and the posterior of
    its mean cost (``posterior_sd`` is the spread Thompson sampling draws from)."""

    __pydantic_config__: ClassVar[dict[str, bool]] = _DOCUMENTED

    batch_size: int
    observations: int
    """Observed costs in the arm's window."""
    mean_cost: float | None
    """J-equivalents, as ``cost`` of a run."""
    posterior_mean: float | None
    posterior_sd: float | None
    pruned: bool
    """Dropped by pruning: no longer sampled."""


@dataclass(frozen=True)
class ProfilePoint:
    """Power and speed measured at one limit for one batch size and GPU setup."""

    __pydantic_config__: ClassVar[dict[str, bool]] = _DOCUMENTED

    batch_size: int
    gpu_model: str
    gpu_count: int
    power_limit_w: int
    avg_power_w: float
    """Summed over the GPUs."""
    steps_per_s: float
    """Training steps per second; samples per second are steps_per_s * batch_size."""

    @property
    def samples_per_s(self) -> float:
        return self.steps_per_s * self.batch_size


@dataclass(frozen=True)
class JobDetail:
    summary: JobSummary
    runs: tuple[RunRecord, ...]
    arms: tuple[Arm, ...]
    profile: tuple[ProfilePoint, ...]


# --- jobs --------------------------------------------------------------------------------------
def job_dags(conn: Connection, job_id: str | None = None) -> dict[str, frozenset[str]]:
    """Every job id (or just ``job_id``) with the DAG ids its trials ran in, over all its
    versions ("" never counts)."""
    ids = select(jobs.c.job_id).distinct()
    pairs = (select(jobs.c.job_id, trials.c.dag_id).distinct()
             .join(trials, trials.c.job_pk == jobs.c.id).where(trials.c.dag_id != ""))
    if job_id is not None:
        ids, pairs = ids.where(jobs.c.job_id == job_id), pairs.where(jobs.c.job_id == job_id)
    found: dict[str, set[str]] = {j: set() for j in conn.execute(ids).scalars()}
    for job, dag_id in conn.execute(pairs):
        found[job].add(dag_id)
    return {job: frozenset(dags) for job, dags in found.items()}


def job_of_task(conn: Connection, dag_id: str, task_id: str) -> str | None:
    """The job the task's latest trial belongs to (a task runs one job, unless renamed)."""
    return conn.execute(select(jobs.c.job_id).join(trials, trials.c.job_pk == jobs.c.id)
                        .where(trials.c.dag_id == dag_id, trials.c.task_id == task_id)
                        .order_by(trials.c.started_at.desc(), trials.c.id.desc()).limit(1)
                        ).scalar()


def versions(conn: Connection, job_ids: Iterable[str]) -> dict[str, list[Version]]:
    """Each job's versions, oldest first."""
    rows = conn.execute(select(jobs).where(jobs.c.job_id.in_(list(job_ids)))
                        .order_by(jobs.c.job_id, jobs.c.version))
    found: dict[str, list[Version]] = {}
    for r in rows:
        found.setdefault(r.job_id, []).append(Version(
            r.id, r.job_id, r.version, bool(r.active), _utc(r.created_at),
            JobConfig.from_json(r.config_json)))
    return found


def current(history: Sequence[Version]) -> Version:
    """The version decisions use now: the active one (the newest if none is)."""
    return next((v for v in history if v.active), history[-1])


def summaries(conn: Connection, chosen: Sequence[Version],
              history: dict[str, list[Version]]) -> list[JobSummary]:
    """One summary per chosen version, in the order given."""
    pks = [v.pk for v in chosen]
    totals = {r.job_pk: r for r in conn.execute(
        select(trials.c.job_pk, func.coalesce(func.sum(trials.c.energy_j), 0.0).label("energy"),
               func.coalesce(func.sum(trials.c.time_s), 0.0).label("time"))
        .where(trials.c.job_pk.in_(pks), _SHOWN).group_by(trials.c.job_pk))}
    per_run = (select(trials.c.job_pk,
                      func.max(trials.c.energy_j.is_not(None).cast(Integer)).label("done"))
               .where(trials.c.job_pk.in_(pks), _SHOWN)
               .group_by(trials.c.job_pk, *_RUN_KEY).subquery())
    counts = {r.job_pk: r for r in conn.execute(
        select(per_run.c.job_pk, func.count().label("runs"),
               func.coalesce(func.sum(per_run.c.done), 0).label("done"))
        .group_by(per_run.c.job_pk))}
    kinds: dict[int, set[tuple[str, str, MeasurementKind]]] = {}
    for r in conn.execute(select(trials.c.job_pk, trials.c.dag_id, trials.c.task_id,
                                 trials.c.measurement).distinct()
                          .where(trials.c.job_pk.in_(pks), _SHOWN)):
        kinds.setdefault(r.job_pk, set()).add((r.dag_id, r.task_id, r.measurement))
    result = []
    for v in chosen:
        seen = kinds.get(v.pk, set())
        total, count = totals.get(v.pk), counts.get(v.pk)
        phase, best = _decision_state(conn, v)
        result.append(JobSummary(
            version=v, versions=tuple(h.version for h in history[v.job_id]),
            tasks=tuple(sorted({(d, t) for d, t, _ in seen})),
            runs=count.runs if count else 0, finished_runs=int(count.done) if count else 0,
            energy_j=float(total.energy) if total else 0.0,
            time_s=float(total.time) if total else 0.0,
            measurements=tuple(sorted({m for *_, m in seen})), phase=phase,
            best_batch_size=best, best_power_limit_w=_last_limit(conn, v.pk, best),
            default=default_estimate(conn, v)))
    return result


def _decision_state(conn: Connection, v: Version) -> tuple[str, int | None]:
    """The job's phase and its best batch size so far, as the Zeus policy reckons them."""
    snapshot = read_snapshot(conn, JobRef(v.pk, v.job_id, v.version, v.config), _NO_DEVICE,
                             frozenset())
    try:
        state = pruning_state(v.config, snapshot.exploration)
    except NoFeasibleBatchSizeError:
        return "infeasible", None
    except RuntimeError:  # a history another policy (the simulator's baselines) wrote
        last = conn.execute(select(trials.c.phase).where(trials.c.job_pk == v.pk)
                            .order_by(trials.c.decision_seq.desc()).limit(1)).scalar()
        return str(last or "none"), None
    phase = "pruning" if state.next_batch_size is not None else "sampling"
    if not any(arm.count for arm in snapshot.observations.values()):
        return phase, None
    return phase, best_known(snapshot, state.survivors)


def _last_limit(conn: Connection, job_pk: int, batch_size: int | None) -> int | None:
    """The power limit the latest finished try of ``batch_size`` trained at."""
    if batch_size is None:
        return None
    return conn.execute(
        select(trials.c.power_limit_w)
        .where(trials.c.job_pk == job_pk, trials.c.batch_size == batch_size,
               trials.c.energy_j.is_not(None), trials.c.power_limit_w.is_not(None))
        .order_by(trials.c.decision_seq.desc()).limit(1)).scalar()


# --- the Default estimate ------------------------------------------------------------------------
def default_estimate(conn: Connection, v: Version) -> DefaultEstimate | None:
    """Mean energy and time of b0's successful runs, each scaled from the limit it trained at
    to b0's maximum profiled limit by the profile's energy and time per step. None until b0
    has succeeded once. Failed b0 runs are left out, which can only make Default look cheaper,
    so the savings shown are conservative."""
    b0 = v.config.default_batch_size
    successes = conn.execute(
        select(trials.c.energy_j, trials.c.time_s, trials.c.power_limit_w, trials.c.gpu_model,
               trials.c.gpu_count)
        .where(trials.c.job_pk == v.pk, trials.c.batch_size == b0,
               trials.c.status == "succeeded")).all()
    if not successes:
        return None
    profiles: dict[tuple[str, int], dict[int, LimitMeasurement]] = {}
    for p in profile_points(conn, v.pk, b0):
        profiles.setdefault((p.gpu_model, p.gpu_count), {})[p.power_limit_w] = \
            LimitMeasurement(p.power_limit_w, p.avg_power_w, p.steps_per_s)
    energy, time, scaled, top = 0.0, 0.0, 0, None
    for s in successes:
        measured = profiles.get((s.gpu_model, s.gpu_count), {})
        top = max(measured, default=top)
        at, at_max = measured.get(s.power_limit_w), measured.get(max(measured, default=-1))
        if at is None or at_max is None:
            energy, time = energy + s.energy_j, time + s.time_s
            continue
        energy += s.energy_j * at_max.energy_per_step_j / at.energy_per_step_j
        time += s.time_s * at_max.time_per_step_s / at.time_per_step_s
        scaled += 1
    n = len(successes)
    return DefaultEstimate(b0, top, energy / n, time / n, n, scaled)


# --- one job in full -----------------------------------------------------------------------------
def detail(conn: Connection, summary: JobSummary) -> JobDetail:
    v = summary.version
    return JobDetail(summary, runs(conn, v.pk), arms(conn, v), profile_points(conn, v.pk))


class _Try(NamedTuple):
    """One try as a run shows it (a plain tuple: a long job has thousands to group)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    status: str
    phase: str
    batch_size: int
    power_limit_w: int | None
    energy_j: float | None
    time_s: float | None
    cost: float | None
    epochs: int | None
    reached_target: bool | None
    measurement: MeasurementKind
    gpu_model: str
    started_at: datetime
    finished_at: datetime | None


_TRY_COLUMNS = select(*(trials.c[name] for name in _Try._fields))


def runs(conn: Connection, job_pk: int) -> tuple[RunRecord, ...]:
    """The version's runs in decision order (of their first try)."""
    rows = conn.execute(_TRY_COLUMNS.where(trials.c.job_pk == job_pk, _SHOWN)
                        .order_by(trials.c.decision_seq))
    grouped: dict[tuple[str, str, str, int], list[_Try]] = {}
    for row in rows:
        t = _Try._make(row)
        tries = grouped.setdefault((t.dag_id, t.task_id, t.run_id, t.map_index), [])
        if tries and tries[-1].try_number < t.try_number:
            tries.clear()  # an Airflow retry after an error: the earlier try is history
        tries.append(t)
    return tuple(_run(i, tries) for i, tries in enumerate(grouped.values(), start=1))


def _run(index: int, tries: list[_Try]) -> RunRecord:
    last = tries[-1]
    done = [t for t in tries if t.energy_j is not None]
    finished = [t.finished_at for t in tries if t.finished_at is not None]
    return RunRecord(
        index, last.dag_id, last.task_id, last.run_id, last.map_index, last.try_number,
        batch_sizes=tuple(t.batch_size for t in tries), status=last.status, phase=last.phase,
        power_limit_w=last.power_limit_w,
        energy_j=_sum([t.energy_j for t in done]), time_s=_sum([t.time_s for t in done]),
        cost=_sum([t.cost for t in done]), epochs=_sum([t.epochs for t in done]),
        reached_target=None if not done else bool(last.reached_target),
        measurement=last.measurement, gpu_model=last.gpu_model,
        started_at=_utc(tries[0].started_at),
        finished_at=_utc(max(finished)) if finished else None)


def arms(conn: Connection, v: Version) -> tuple[Arm, ...]:
    """Every batch size of the configuration with the posterior the policy would sample."""
    snapshot = read_snapshot(conn, JobRef(v.pk, v.job_id, v.version, v.config), _NO_DEVICE,
                             frozenset())
    try:
        survivors = pruning_state(v.config, snapshot.exploration).survivors
    except RuntimeError:  # infeasible, or another policy's history: nothing is pruned
        survivors = v.config.batch_sizes
    stats = {b: snapshot.observations.get(b, ArmStats(0, 0.0, 0.0))
             for b in v.config.batch_sizes}
    cv = pooled_cost_cv(stats[b] for b in survivors)
    result = []
    for b, arm in stats.items():
        belief = arm_posterior(arm, cv) if arm.count else None
        result.append(Arm(b, arm.count, arm.mean if arm.count else None,
                          belief.mean if belief else None,
                          belief.variance ** 0.5 if belief else None, b not in survivors))
    return tuple(result)


def profile_points(conn: Connection, job_pk: int,
                   batch_size: int | None = None) -> tuple[ProfilePoint, ...]:
    """Measured profile points, by batch size, GPU setup and limit (highest first)."""
    p = power_profiles.c
    query = (select(p.batch_size, p.gpu_model, p.gpu_count, p.power_limit_w, p.avg_power_w,
                    p.steps_per_s).where(p.job_pk == job_pk)
             .order_by(p.batch_size, p.gpu_model, p.gpu_count, p.power_limit_w.desc()))
    if batch_size is not None:
        query = query.where(p.batch_size == batch_size)
    rows = conn.execute(query)
    return tuple(ProfilePoint(*r) for r in rows)


def _sum(values: list[Any]) -> Any:
    """The sum; None when there is nothing to add up or a figure is missing."""
    return None if not values or None in values else sum(values)


def _utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; the store writes UTC only."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
