"""What a decision reads: the job's exploration walk, its in-flight trials, its arm windows.

Arm windows hold the runs on this GPU model and count only; a job that also ran elsewhere
gets those runs and its power profiles read apart, for the engine to translate into this
model's cost units (``core/decide/translation.py``, paper §7). The store reads; it never decides.

Every query is an index range scan over the one job's rows (see docs/store.md for the
plans). With a ``window_size``, each arm's window is read as its own ``ORDER BY id DESC LIMIT
window`` scan, so a decision reads at most ``window x arms`` observations however long the
job's history grows; with drift detection, the same scan reads ``DRIFT_MEMORY`` (or the
window, if smaller) per arm one by one; otherwise the arms are aggregated in the database.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Connection,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    func,
    or_,
    select,
    union_all,
)
from sqlalchemy.sql.elements import BindParameter

from zeus_airflow.core.common.config import DRIFT_MEMORY, JobConfig
from zeus_airflow.core.common.cost import LimitMeasurement
from zeus_airflow.core.domain import (
    EXPLORATION_PHASES,
    FIGURES,
    ArmStats,
    BudgetLedger,
    CensoredTry,
    DeviceInfo,
    ExplorationStep,
    FleetKey,
    ForeignObservation,
    JobRef,
    JobState,
    Observed,
    PowerProfile,
    RecurrenceKey,
    SizeEvidence,
    StepsAtLimit,
)
from zeus_airflow.core.domain.figures import (
    MAX_GPU_POWER_W,
    MAX_HOST_POWER_W,
    POWER_BOUND_SLACK_S,
    TIME,
    figure_problem,
    power_problem,
)
from zeus_airflow.core.domain.trials import STARTED, WALK_STATUSES
from zeus_airflow.core.store.clock import fits_wall_clock
from zeus_airflow.core.store.tables import power_profiles, trials

# Statements are built once: building SQLAlchemy expressions costs more than running them on
# SQLite, and the simulator makes tens of thousands of decisions.
_job: BindParameter[int] = bindparam("job_key", type_=Integer)
# The job's few exploration trials, through ix_zeus_trials_phase. Filtered by status and
# sorted here, not by the database: either tempts SQLite's planner into an index that walks
# the job's whole history (by status, or in decision order).
_EXPLORATION = select(
    trials.c.decision_seq,
    trials.c.status,
    trials.c.batch_size,
    trials.c.reached_target,
    trials.c.cost,
    trials.c.power_limit_w,
    trials.c.stop_reason,
    trials.c.early_stop_cost,
    trials.c.dag_id,
    trials.c.task_id,
    trials.c.run_id,
    trials.c.map_index,
    trials.c.time_s,
    trials.c.gpu_count,
).where(trials.c.job_pk == _job, trials.c.phase.in_(EXPLORATION_PHASES))
_HERE = (trials.c.gpu_model == bindparam("gpu_model"), trials.c.gpu_count == bindparam("gpu_count"))


def plausible(name: str, column: ColumnElement[Any] | None = None) -> ColumnElement[bool]:
    """The try figure ``name`` (or ``column``, priced as it) is within its declared bounds
    (``domain.figures``), on both databases: not NULL (unknown in a comparison), NaN
    (PostgreSQL keeps it, above every number), infinite or absurd (1e308, negative); an
    energy or a cost also within what the row's GPUs and host can spend in its time
    (``figures.power_bound``: a forged 1e15 J in 1e9 s is not), and a measured try's time
    within its own wall clock (``Figure.within_wall_clock``)."""
    figure = FIGURES[name]
    low, high = figure.bounds or (-sys.float_info.max, sys.float_info.max)
    value = trials.c[name] if column is None else column
    if figure.within_wall_clock:
        return and_(value.between(low, high), _within_wall_clock(value))
    if figure.per_second_of is None:
        return value.between(low, high)
    seconds = trials.c[figure.per_second_of]
    watts = trials.c.gpu_count * MAX_GPU_POWER_W + MAX_HOST_POWER_W
    return and_(
        value.between(low, high),
        seconds.between(*TIME),  # NaN seconds would bound nothing on PostgreSQL
        _within_wall_clock(seconds),  # seconds that cannot be bound nothing either
        value <= (seconds + POWER_BOUND_SLACK_S) * watts,
    )


def _within_wall_clock(seconds: ColumnElement[Any]) -> ColumnElement[bool]:
    """A measured try's ``seconds`` fit in its row's start-to-finish span (with
    ``WALL_CLOCK_SLACK_S``); a replayed or simulated try's virtual time, or a try not
    finished, is not bounded so."""
    return fits_wall_clock(
        seconds,
        trials.c.measurement,
        trials.c.started_at,
        trials.c.finished_at,
    )


def known(name: str, column: ColumnElement[Any] | None = None) -> ColumnElement[Any]:
    """The try figure ``name`` (or ``column``) where :func:`plausible`, else NULL: what sums
    and maxima read, so that a garbage figure neither counts nor overflows them."""
    return case((plausible(name, column), trials.c[name] if column is None else column))


MEASURED = (plausible("energy_j"), plausible("time_s"), plausible("cost"))
"""A finished try whose figures are known. One written before its figures were checked (an
outbox entry of NaN, a store of an older version) reads as missing: as a try that has not
finished, never as a crash of the decision or of a report (issue 35)."""
# The exploration budget's books (core/decide/budget.py): what the job spent on this GPU setup, in
# how many recurrences, and what the default batch size's complete runs cost at full power.
_RECURRENCE = (trials.c.dag_id, trials.c.task_id, trials.c.run_id, trials.c.map_index)
_SPENT = select(func.coalesce(func.sum(trials.c.cost), 0.0)).where(
    trials.c.job_pk == _job, *_HERE, plausible("cost")
)
_RECURRENCES = select(func.count()).select_from(
    select(*_RECURRENCE).where(trials.c.job_pk == _job, *_HERE).distinct().subquery()
)
_THIS_RECURRENCE = (
    trials.c.job_pk == _job,
    *_HERE,
    trials.c.dag_id == bindparam("ti_dag"),
    trials.c.task_id == bindparam("ti_task"),
    trials.c.run_id == bindparam("ti_run"),
    trials.c.map_index == bindparam("ti_map_index"),
)
_IN_RECURRENCE = select(func.count(), func.coalesce(func.sum(known("cost")), 0.0)).where(
    *_THIS_RECURRENCE
)
RAN_TO_ITS_END = (
    trials.c.stop_reason.in_(("target", "max_epochs")),
    trials.c.status.in_(WALK_STATUSES),
    *MEASURED,
)
"""A try that ran until the target or max_epochs: of the default batch size, what Default
would have run too (the budget's books and the reports' Default figures both count these)."""
_DEFAULT_RUN = (
    trials.c.job_pk == _job,
    *_HERE,
    trials.c.batch_size == bindparam("b0"),
    *RAN_TO_ITS_END,
)
DEFAULT_COST = func.coalesce(trials.c.default_cost, trials.c.cost)
"""What Default would have paid for a try (its steps at the maximum limit), by the try's own
reckoning; a try that did not say (older ones, measure mode) paid Default's price."""
_DEFAULT_COSTS = (
    select(DEFAULT_COST)
    .where(*_DEFAULT_RUN, plausible("default_cost", DEFAULT_COST))
    .order_by(trials.c.id.desc())
    .limit(DRIFT_MEMORY)
)
# Tries stopped at the exploration budget's cap: censored, no step of the walk.
_CENSORED = (
    select(trials.c.batch_size, trials.c.early_stop_cost, trials.c.cost, trials.c.epochs)
    .where(
        trials.c.job_pk == _job,
        *_HERE,
        trials.c.stop_reason == "budget_cap",
        *MEASURED,
        plausible("early_stop_cost"),
        plausible("epochs"),
    )
    .order_by(trials.c.id)
)
_SUCCESS_EPOCHS = (
    select(trials.c.batch_size, func.avg(trials.c.epochs))
    .where(trials.c.job_pk == _job, *_HERE, trials.c.reached_target, plausible("epochs"))
    .group_by(trials.c.batch_size)
)
_SUCCESS_EPOCH_S = (
    select(trials.c.batch_size, func.avg(trials.c.time_s / trials.c.epochs))
    .where(
        trials.c.job_pk == _job,
        *_HERE,
        trials.c.reached_target,
        trials.c.epochs > 0,
        plausible("epochs"),
        plausible("time_s"),
    )
    .group_by(trials.c.batch_size)
)
# Steps at a limit nobody moved: a probe's own steps price its size where no profile can.
_FIXED_LIMIT_STEPS = (
    select(
        trials.c.batch_size,
        trials.c.power_limit_w,
        func.sum(trials.c.cost),
        func.sum(trials.c.steps),
    )
    .where(
        trials.c.job_pk == _job,
        *_HERE,
        trials.c.steps > 0,
        plausible("steps"),
        plausible("power_limit_w"),
        *MEASURED,
        or_(trials.c.power_control == "none", bindparam("limits_fixed", type_=Boolean)),
    )
    .group_by(trials.c.batch_size, trials.c.power_limit_w)
)
_KNOWN_DEFAULT = select(func.coalesce(func.sum(DEFAULT_COST), 0.0), func.count()).where(
    *_DEFAULT_RUN, plausible("default_cost", DEFAULT_COST)
)
_SUCCESS_COST = case((trials.c.reached_target, trials.c.cost))
_ARM_TOTALS = (
    select(
        trials.c.batch_size,
        func.count(),
        func.avg(trials.c.cost),
        func.sum(trials.c.cost * trials.c.cost),
        func.sum(_SUCCESS_COST),
        func.count(_SUCCESS_COST),
    )
    .where(trials.c.job_pk == _job, trials.c.observed, *_HERE, *MEASURED)
    .group_by(trials.c.batch_size)
)
# Evidence about sizes that failed an exploration step: rare sizes, few rows. ``observed IN
# (true, false)`` lets both databases range-scan ix_zeus_trials_arm by (job, size).
_EVIDENCE = (
    select(
        trials.c.batch_size,
        func.max(case((trials.c.reached_target, trials.c.decision_seq))),
        func.max(
            case(
                (
                    trials.c.stop_reason == "early_stop",
                    func.coalesce(known("early_stop_cost"), known("cost")),
                )
            )
        ),
    )
    .where(
        trials.c.job_pk == _job,
        trials.c.observed.in_([True, False]),
        trials.c.batch_size.in_(bindparam("sizes", expanding=True)),
        trials.c.status.in_(WALK_STATUSES),
    )
    .group_by(trials.c.batch_size)
)
# The job's profiles are few (sizes x limits x GPU models) and tell which models it ran on,
# so a job that never moved reads no foreign trial at all.
# Slices in progress (measured_steps set) are no measurements yet.
_PROFILES = select(power_profiles).where(
    power_profiles.c.job_pk == _job, power_profiles.c.measured_steps.is_(None)
)
_FOREIGN = (
    select(
        trials.c.gpu_model,
        trials.c.gpu_count,
        trials.c.batch_size,
        trials.c.cost,
        trials.c.reached_target,
    )
    .where(trials.c.job_pk == _job, trials.c.observed, ~and_(*_HERE), *MEASURED)
    .order_by(trials.c.id.desc())
    .limit(bindparam("most"))
)


def _arm_window(arm: str) -> Select[Any]:
    """One arm's newest observations on this GPU setup (the arm: bound parameter ``arm``),
    through the per-arm index."""
    return (
        select(trials.c.batch_size, trials.c.cost, trials.c.reached_target, trials.c.decision_seq)
        .where(
            trials.c.job_pk == _job,
            trials.c.observed,
            *_HERE,
            trials.c.batch_size == bindparam(arm),
            *MEASURED,
        )
        .order_by(trials.c.id.desc())
        .limit(bindparam("window"))
    )


_ARM_WINDOW = _arm_window("arm")


@cache
def _arm_windows(arms: int) -> Select[Any]:
    """One statement reading each of ``arms`` arms' newest observations, arm by arm."""
    per_arm = [_arm_window(f"arm_{i}").subquery() for i in range(arms)]
    windows = union_all(*(select(arm) for arm in per_arm)).subquery()
    return select(
        windows.c.batch_size, windows.c.cost, windows.c.reached_target, windows.c.decision_seq
    )


UNION_AFTER_READS = 25
"""Reads of the arms' windows on one database connection after which they are read by one
UNION ALL of every arm's statement (:func:`_arm_windows`), not by one statement per arm.
Each task compiles its statements afresh (a new process, a new engine), and the union, with
every arm's plausibility checks, was half of a task's compiling (about 10 of 22 ms): a task
reads a few times, arm by arm, from one statement compiled once. The simulator reads tens of
thousands of times on one connection, where the union, once compiled, saves a statement's
execution per arm and read (a third of its time)."""
_READS = "zeus_arm_window_reads"


def _arm_rows(
    conn: Connection, here: dict[str, Any], arms: tuple[int, ...], window: int
) -> list[Any]:
    """Each of ``arms``' ``window`` newest observations, arm by arm, newest first."""
    reads = conn.info.get(_READS, 0)
    conn.info[_READS] = reads + 1
    if reads >= UNION_AFTER_READS:
        params: dict[str, Any] = {f"arm_{i}": b for i, b in enumerate(arms)}
        return list(conn.execute(_arm_windows(len(arms)), dict(params, **here, window=window)))
    rows: list[Any] = []
    for b in arms:
        rows.extend(conn.execute(_ARM_WINDOW, dict(here, arm=b, window=window)))
    return rows


def read_state(
    conn: Connection,
    job: JobRef,
    device: DeviceInfo,
    excluded: frozenset[int],
    *,
    missed: frozenset[int] = frozenset(),
    key: RecurrenceKey | None = None,
) -> JobState:
    """The job's state as one decision on ``device`` reads it (inside its transaction), in
    the recurrence ``key`` (None: a recurrence not begun yet)."""
    config = job.config
    rows = sorted(
        conn.execute(_EXPLORATION, dict(job_key=job.id)).all(), key=lambda r: r.decision_seq
    )
    exploration, deferred = _walk_steps(rows)
    in_flight = tuple(r.batch_size for r in rows if r.status == STARTED)
    here = dict(job_key=job.id, gpu_model=device.model, gpu_count=device.count)
    observations, successes, history = _arm_costs(conn, here, config)
    profiles = _profiles(conn, job.id, FleetKey(device.model, device.count), device)
    return JobState(
        job=job,
        device=device,
        excluded=excluded,
        exploration=exploration,
        deferred=deferred,
        in_flight=in_flight,
        observations=observations,
        successes=successes,
        evidence=_evidence(conn, job.id, exploration),
        profiles=profiles,
        foreign=_foreign(conn, job, device, profiles),
        history=history,
        missed=missed,
        ledger=_ledger(conn, here, config, key),
    )


def _walk_steps(
    rows: Sequence[Any],
) -> tuple[tuple[ExplorationStep, ...], tuple[ExplorationStep, ...]]:
    """The pruning walk's steps from the job's exploring tries, in decision order: those the
    walk judged, and those stopped at the budget's cap (deferred: no verdict)."""
    steps = [
        (
            r.stop_reason == "budget_cap",
            ExplorationStep(
                r.batch_size,
                bool(r.reached_target),
                r.cost,
                r.power_limit_w,
                r.decision_seq,
                r.stop_reason,
                r.early_stop_cost,
                _recurrence_name(r),
            ),
        )
        for r in rows
        if r.status in WALK_STATUSES and _known_cost(r)
    ]
    exploration = tuple(step for capped, step in steps if not capped)
    deferred = tuple(step for capped, step in steps if capped)
    return exploration, deferred


def _arm_costs(
    conn: Connection, here: dict[str, Any], config: JobConfig
) -> tuple[dict[int, ArmStats], Successes, dict[int, tuple[Observed, ...]]]:
    """Each arm's costs on this GPU setup, as the job's settings read them: all of them, its
    window's, or (with drift detection) one by one, which the history keeps for the
    engine's detection."""
    history: dict[int, tuple[Observed, ...]] = {}
    if config.drift_detection:
        memory = min(config.window_size or DRIFT_MEMORY, DRIFT_MEMORY)
        history = _history(conn, here, config.batch_sizes, memory)
        observations = {b: ArmStats.of([o.cost for o in seen]) for b, seen in history.items()}
        successes: Successes = {}
        for b, seen in history.items():
            for o in seen:
                if o.reached_target:
                    _add_success(successes, b, o.cost)
    elif config.window_size is None:
        observations, successes = _totals(conn, here)
    else:
        observations, successes = _windows(conn, here, config.batch_sizes, config.window_size)
    return observations, successes, history


def _known_cost(row: Any) -> bool:
    """A try's cost read from the store is known (:func:`plausible`, in Python)."""
    values = dict(cost=row.cost, time_s=row.time_s)
    return all(figure_problem(n, v, required=True) is None for n, v in values.items()) and (
        power_problem(values, row.gpu_count) is None
    )


def _recurrence_name(row: Any) -> str:
    return f"{row.dag_id}/{row.task_id}/{row.run_id}/{row.map_index}"


def _ledger(
    conn: Connection, here: dict[str, Any], config: JobConfig, key: RecurrenceKey | None
) -> BudgetLedger:
    recurrences = conn.execute(_RECURRENCES, here).scalar() or 0
    tries, spent_here = 0, 0.0
    if key is not None:
        this = dict(
            here,
            ti_dag=key.dag_id,
            ti_task=key.task_id,
            ti_run=key.run_id,
            ti_map_index=key.map_index,
        )
        tries, spent_here = conn.execute(_IN_RECURRENCE, this).one()
    begun = tries > 0
    default_runs = dict(here, b0=config.default_batch_size)
    defaults = conn.execute(_DEFAULT_COSTS, default_runs).scalars()
    known_cost, known = conn.execute(_KNOWN_DEFAULT, default_runs).one()
    return BudgetLedger(
        spent_cost=float(conn.execute(_SPENT, here).scalar() or 0.0),
        recurrence_spent=float(spent_here),
        recurrences=recurrences + (0 if begun else 1),
        default_costs=tuple(reversed([float(c) for c in defaults])),
        known_default_cost=float(known_cost),
        known_recurrences=int(known),
        censored={
            int(r.batch_size): CensoredTry(float(r.early_stop_cost), float(r.cost), int(r.epochs))
            for r in conn.execute(_CENSORED, here)
            if r.early_stop_cost
        },
        success_epochs={int(b): float(e) for b, e in conn.execute(_SUCCESS_EPOCHS, here)},
        success_epoch_s={int(b): float(s) for b, s in conn.execute(_SUCCESS_EPOCH_S, here)},
        fixed_limit_steps=tuple(
            StepsAtLimit(int(b), int(limit), float(cost), int(steps))
            for b, limit, cost, steps in conn.execute(
                _FIXED_LIMIT_STEPS, dict(here, limits_fixed=config.profiler.mode == "measure")
            )
        ),
    )


Successes = dict[int, tuple[float, int]]
"""``domain.Successes``, as it is built up here."""


def _evidence(
    conn: Connection, job_pk: int, exploration: tuple[ExplorationStep, ...]
) -> dict[int, SizeEvidence]:
    failed = sorted({s.batch_size for s in exploration if not s.succeeded})
    if not failed:
        return {}
    rows = conn.execute(_EVIDENCE, dict(job_key=job_pk, sizes=failed))
    return {b: SizeEvidence(last_success, max_stop) for b, last_success, max_stop in rows}


def _add_success(successes: Successes, batch_size: int, cost: float) -> None:
    total, n = successes.get(batch_size, (0.0, 0))
    successes[batch_size] = (total + cost, n + 1)


def _foreign(
    conn: Connection,
    job: JobRef,
    device: DeviceInfo,
    profiles: dict[tuple[FleetKey, int], PowerProfile],
) -> tuple[ForeignObservation, ...]:
    """Observed costs on other GPU setups, newest first: as many as the windows of every
    setup the job has profiles for could hold. None when the job never moved."""
    here = FleetKey(device.model, device.count)
    if all(key == here for key, _ in profiles):
        return ()
    config = job.config
    most = (config.window_size or 10**6) * len(config.batch_sizes) * len({k for k, _ in profiles})
    return tuple(
        ForeignObservation(
            FleetKey(r.gpu_model, r.gpu_count), r.batch_size, r.cost, bool(r.reached_target)
        )
        for r in conn.execute(
            _FOREIGN,
            dict(job_key=job.id, gpu_model=device.model, gpu_count=device.count, most=most),
        )
    )


def _profiles(
    conn: Connection, job_pk: int, here: FleetKey, device: DeviceInfo
) -> dict[tuple[FleetKey, int], PowerProfile]:
    measured: dict[tuple[FleetKey, int], dict[int, LimitMeasurement]] = {}
    for r in conn.execute(_PROFILES, dict(job_key=job_pk)):
        key = (FleetKey(r.gpu_model, r.gpu_count), r.batch_size)
        measured.setdefault(key, {})[r.power_limit_w] = LimitMeasurement(
            r.power_limit_w, r.avg_power_w, r.steps_per_s
        )
    return {
        (fleet, b): PowerProfile(
            b,
            fleet.gpu_model,
            fleet.gpu_count,
            device.power_limits_w if fleet == here else tuple(sorted(m, reverse=True)),
            m,
        )
        for (fleet, b), m in measured.items()
    }


def _totals(conn: Connection, here: dict[str, Any]) -> tuple[dict[int, ArmStats], Successes]:
    """Each arm's statistics over all its observations: one aggregate row per arm."""
    totals = conn.execute(_ARM_TOTALS, here).all()
    stats = {
        b: ArmStats(n, mean, max(sum_sq - n * mean * mean, 0.0))
        for b, n, mean, sum_sq, _, _ in totals
    }
    return stats, {b: (total, n) for b, *_, total, n in totals if n}


def _windows(
    conn: Connection, here: dict[str, Any], arms: tuple[int, ...], window: int
) -> tuple[dict[int, ArmStats], Successes]:
    """Each arm's statistics over its ``window`` newest observations."""
    rows = _arm_rows(conn, here, arms, window)
    costs: dict[int, list[float]] = {}
    successes: Successes = {}
    for b, cost, reached, _ in rows:
        costs.setdefault(b, []).append(cost)
        if reached:
            _add_success(successes, b, cost)
    return {b: ArmStats.of(c) for b, c in costs.items()}, successes


def _history(
    conn: Connection, here: dict[str, Any], arms: tuple[int, ...], memory: int
) -> dict[int, tuple[Observed, ...]]:
    """Each arm's ``memory`` newest observations, oldest first."""
    rows = _arm_rows(conn, here, arms, memory)
    seen: dict[int, list[Observed]] = {}
    for b, cost, reached, seq in rows:
        seen.setdefault(b, []).append(Observed(seq, cost, bool(reached)))
    return {b: tuple(sorted(o, key=lambda x: x.seq)) for b, o in seen.items()}


# The rows that weigh most in the books: where a forged or restored row that broke them is.
_COSTLIEST = (
    select(trials.c.id)
    .where(trials.c.job_pk == _job, *_HERE, plausible("cost"))
    .order_by(trials.c.cost.desc())
    .limit(bindparam("most"))
)
_DEFAULTS_BY_COST = select(trials.c.id).where(
    *_DEFAULT_RUN, plausible("default_cost", DEFAULT_COST)
)


def books_suspects(
    conn: Connection, job_pk: int, device: DeviceInfo, default_batch_size: int, most: int
) -> list[int]:
    """Ids of the trials that weigh most in the job's books on ``device``: its ``most``
    costliest tries, and the default size's runs of the highest and the lowest Default
    cost, in that order, each once."""
    here = dict(job_key=job_pk, gpu_model=device.model, gpu_count=device.count)
    defaults = dict(here, b0=default_batch_size)
    found = list(conn.execute(_COSTLIEST, dict(here, most=most)).scalars())
    for order in (DEFAULT_COST.desc(), DEFAULT_COST.asc()):
        found += conn.execute(_DEFAULTS_BY_COST.order_by(order).limit(1), defaults).scalars()
    return list(dict.fromkeys(found))
