"""The job page's charts, drawn from a :class:`~zeus_airflow.core.reports.JobDetail`.

Per run: energy, time, the batch size chosen (the paper's Fig. 10 view) and cumulative energy
against the Default estimate. Per batch size: the posterior of its mean cost, and its power
profile (power and throughput versus limit). Units are picked to fit the data (J, kJ, MJ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup

from zeus_airflow.core.common.units import Unit, emissions_unit, energy_unit, time_unit
from zeus_airflow.core.domain import VOID_STATUSES
from zeus_airflow.core.reports import (
    Arm,
    JobDetail,
    ProfilePoint,
    RunRecord,
    emitted,
)
from zeus_airflow.plugins.charts import Plot, linear_axis, log2_axis

PALETTE = 8
"""Series colours the stylesheet defines (classes s0..s7); later series are dashed."""
PHASE_CLASS = {"pruning": "s1", "sampling": "s0", "concurrent": "s2", "calibrate": "s3"}


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    caption: str
    svg: Markup
    legend: tuple[tuple[str, str], ...]
    """(text, CSS class) per series, drawn by the page under the chart."""


def _chart(key: str, title: str, caption: str, plot: Plot) -> Chart:
    return Chart(key, title, caption, plot.svg(), tuple(plot.legend_items))


def job_charts(detail: JobDetail) -> list[Chart]:
    done = [r for r in detail.runs if r.energy_j is not None]
    energy = energy_unit([r.energy_j or 0.0 for r in done])
    time = time_unit([r.time_s or 0.0 for r in done])
    tips = {r.index: _tip(r, energy, time) for r in detail.runs}  # shared by the charts
    charts = [
        energy_chart(done, tips),
        time_chart(done, tips),
        batch_size_chart(detail.runs, detail.summary.version.config.batch_sizes, tips),
        cumulative_chart(detail, done),
    ]
    if any(r.has_carbon for r in done):
        charts.append(emissions_chart(detail, done))
    if any(a.observations for a in detail.arms):
        charts.append(arms_chart(detail.arms, detail.runs[-1].gpu_model))
    if detail.profile:
        charts.extend(profile_charts(detail.profile))
    return charts


def _tip(r: RunRecord, energy: Unit, time: Unit) -> str:
    """A run's tooltip: short, as a long job draws thousands of them."""
    verdict = {
        _REACHED: "",
        _MISSED: ", target missed",
        _RUNNING: "",
        _NO_VERDICT: f", {r.status}: no verdict on its target",
    }[_mark(r)]
    return (
        f"run {r.index}: b={r.batch_size}, {r.power_limit_w} W, {energy.show(r.energy_j)}, "
        f"{time.show(r.time_s)}{verdict}"
    )


_REACHED, _MISSED, _RUNNING, _NO_VERDICT = "reached", "missed", "running", "no verdict"
NO_VERDICT_LEGEND = "no verdict (the train function raised or broke its contract)"


def _mark(r: RunRecord) -> str:
    """How a run is drawn. A run whose train function raised or broke its contract (or whose
    worker died) says nothing about its target: drawing it as a missed target, or as still
    training, would misread the batch size or the run."""
    if r.status == "running":
        return _RUNNING
    if r.status in VOID_STATUSES or r.reached_target is None:
        return _NO_VERDICT
    return _REACHED if r.reached_target else _MISSED


def _per_run(
    title: str,
    runs: Sequence[RunRecord],
    values: list[float],
    label: str,
    scale: float,
    tips: Mapping[int, str],
) -> Plot:
    plot = Plot(
        title,
        linear_axis("run", [r.index for r in runs], zero=False, integer=True),
        linear_axis(label, [v / scale for v in values]),
    )
    points = [(r.index, v / scale) for r, v in zip(runs, values, strict=True)]
    plot.line(points, "s0 faint")
    marks = [_mark(r) for r in runs]
    styles = (
        (_REACHED, "s0", "reached target"),
        (_MISSED, "bad", "target not reached"),
        (_RUNNING, "hollow s0", "still training"),
        (_NO_VERDICT, "hollow warn", NO_VERDICT_LEGEND),
    )
    for mark, style, legend in styles:
        shown = [i for i, m in enumerate(marks) if m == mark]
        note = " (still training: the tries finished so far)" if mark == _RUNNING else ""
        plot.dots([points[i] for i in shown], style, [tips[runs[i].index] + note for i in shown])
        if shown or mark == _REACHED:
            plot.legend(legend, style)
    return plot


def energy_chart(runs: Sequence[RunRecord], tips: Mapping[int, str]) -> Chart:
    values = [r.energy_j or 0.0 for r in runs]
    unit = energy_unit(values)
    plot = _per_run("Energy per run", runs, values, f"energy ({unit.name})", unit.scale, tips)
    return _chart(
        "energy",
        "Energy per run",
        "Energy of every try of the run, summed (profiling and failed tries included).",
        plot,
    )


def time_chart(runs: Sequence[RunRecord], tips: Mapping[int, str]) -> Chart:
    values = [r.time_s or 0.0 for r in runs]
    unit = time_unit(values)
    plot = _per_run("Time per run", runs, values, f"time ({unit.name})", unit.scale, tips)
    return _chart("time", "Time per run", "Training time of every try of the run, summed.", plot)


CAPPED_TIP = (
    "an earlier try of this run stopped at the exploration budget's cap: on purpose, "
    "no verdict on the size"
)


def _earlier_tries(
    runs: Sequence[RunRecord],
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """The points of each run's earlier tries: those that failed their size, and those
    stopped at the budget's cap (``RunRecord.capped_sizes``), which are not failures."""
    failed: list[tuple[int, float]] = []
    capped: list[tuple[int, float]] = []
    for r in runs:
        left = list(r.capped_sizes)
        for size in r.batch_sizes[:-1]:
            (capped if size in left else failed).append((r.index, float(size)))
            if size in left:
                left.remove(size)
    return failed, capped


def batch_size_chart(
    runs: Sequence[RunRecord], sizes: Sequence[int], tips: Mapping[int, str]
) -> Chart:
    """The size each run trained with, by the decision's phase; ``sizes``: the job's batch
    sizes (the axis). A run without a verdict (its train function raised or broke the
    contract) is drawn apart: it neither explored nor exploited, as the learning state
    ignores it."""
    run_axis = linear_axis("run", [r.index for r in runs] or [1], zero=False, integer=True)
    plot = Plot("Batch size per run", run_axis, log2_axis("batch size", sizes))
    failed, capped = _earlier_tries(runs)
    plot.dots(failed, "hollow bad", ["an earlier try of this run failed"] * len(failed))
    plot.dots(capped, "hollow muted", [CAPPED_TIP] * len(capped))
    judged = [r for r in runs if _mark(r) != _NO_VERDICT]
    for phase in sorted({r.phase for r in judged}):
        chosen = [r for r in judged if r.phase == phase]
        cls = PHASE_CLASS.get(phase, "s3")
        plot.dots(
            [(r.index, float(r.batch_size)) for r in chosen], cls, [tips[r.index] for r in chosen]
        )
        plot.legend(phase, cls)
    if failed:
        plot.legend("failed try", "bad")
    if capped:
        plot.legend("try capped by the budget", "muted")
    void = [r for r in runs if _mark(r) == _NO_VERDICT]
    if void:
        plot.dots(
            [(r.index, float(r.batch_size)) for r in void],
            "hollow warn",
            [tips[r.index] for r in void],
        )
        plot.legend(NO_VERDICT_LEGEND, "hollow warn")
    return _chart(
        "batch-size",
        "Batch size per run",
        "The batch size each run trained with, coloured by the decision's phase "
        "(the paper's Fig. 10 view); hollow marks are earlier tries of the same run "
        "that missed the target.",
        plot,
    )


def cumulative_chart(detail: JobDetail, runs: Sequence[RunRecord]) -> Chart:
    total, actual = 0.0, []
    for r in runs:
        total += r.energy_j or 0.0
        actual.append(total)
    default = detail.summary.default
    expected = [default.energy_j * (i + 1) for i in range(len(runs))] if default else []
    unit = energy_unit(actual + expected)
    plot = Plot(
        "Cumulative energy",
        linear_axis("run", [r.index for r in runs] or [1], zero=False, integer=True),
        linear_axis(f"energy ({unit.name})", [v / unit.scale for v in actual + expected]),
    )
    plot.line([(r.index, e / unit.scale) for r, e in zip(runs, actual, strict=True)], "s0")
    plot.legend("these runs", "s0")
    if default:
        plot.line(
            [(r.index, e / unit.scale) for r, e in zip(runs, expected, strict=True)],
            "s1",
            dashed=True,
        )
        plot.legend("Default (estimate)", "s1")
    return _chart(
        "cumulative",
        "Cumulative energy against Default",
        "Solid: energy the runs used. Dashed: the Default estimate (see the note "
        "above) times the number of runs.",
        plot,
    )


def emissions_chart(detail: JobDetail, runs: Sequence[RunRecord]) -> Chart:
    """Cumulative gCO2e of the runs with carbon figures, against the Default way."""
    counted = emitted(detail.summary.default, runs)
    total, actual = 0.0, []
    for _, grams, _ in counted:
        total += grams
        actual.append(total)
    expected: list[float] = []
    if all(d is not None for _, _, d in counted):
        running = 0.0
        for _, _, d in counted:
            running += d or 0.0
            expected.append(running)
    unit = emissions_unit(actual + expected)
    xs = [r.index for r, _, _ in counted]
    plot = Plot(
        "Cumulative emissions",
        linear_axis("run", xs or [1], zero=False),
        linear_axis(f"emissions ({unit.name})", [v / unit.scale for v in actual + expected]),
    )
    plot.line([(x, v / unit.scale) for x, v in zip(xs, actual, strict=True)], "s0")
    tips = [
        f"run {r.index}: {unit.show(grams)} at "
        f"{r.carbon_intensity_g_per_kwh or 0:.0f} gCO2e/kWh ({r.carbon_provenance}, "
        f"{r.carbon_zone})"
        + (f", started {r.start_delay_s / 3600:.2g} h late" if r.start_delay_s else "")
        for r, grams, _ in counted
    ]
    plot.dots([(x, v / unit.scale) for x, v in zip(xs, actual, strict=True)], "s0", tips)
    plot.legend("these runs", "s0")
    if expected:
        plot.line(
            [(x, v / unit.scale) for x, v in zip(xs, expected, strict=True)], "s1", dashed=True
        )
        plot.legend("Default (estimate)", "s1")
    return _chart(
        "emissions",
        "Cumulative emissions against Default",
        "Solid: gCO2e of the runs' training and setup energy, each try at the grid's "
        "intensity over its own span. Dashed: Default's energy estimate (plus the same "
        "setup) at the intensity each run would have met on schedule (the forecast "
        "for its slot when the start was shifted).",
        plot,
    )


def arms_chart(arms: Sequence[Arm], gpu_model: str) -> Chart:
    seen = [
        (a, a.posterior_mean, a.posterior_sd)
        for a in arms
        if a.posterior_mean is not None and a.posterior_sd is not None
    ]
    unit = energy_unit([m + sd for _, m, sd in seen])
    plot = Plot(
        "Posterior mean cost per batch size",
        log2_axis("batch size", [a.batch_size for a in arms]),
        linear_axis(
            f"cost ({unit.name}-eq.)",
            [(m + k * sd) / unit.scale for _, m, sd in seen for k in (-1, 1)],
        ),
    )
    for a, m, s in seen:
        mean, sd = m / unit.scale, s / unit.scale
        cls = "muted" if a.pruned else "s0"
        tip = (
            f"b={a.batch_size}: {mean:.4g} ± {sd:.2g} {unit.name}-eq. over "
            f"{a.observations} runs{' (pruned)' if a.pruned else ''}"
        )
        plot.error_bar(a.batch_size, mean - sd, mean + sd, cls, tip)
        plot.dots([(a.batch_size, mean)], cls, [tip])
        plot.label(a.batch_size, mean + sd, f"n={a.observations}")
    plot.legend("in play", "s0")
    if any(a.pruned for a, _, _ in seen):
        plot.legend("pruned", "muted")
    return _chart(
        "arms",
        "Arms: posterior mean cost ± 1 sd",
        "What Thompson sampling draws from: the posterior of each batch size's mean "
        f"cost over its observation window on {gpu_model} (the latest run's GPU), "
        "with the number of observations.",
        plot,
    )


def profile_charts(points: Sequence[ProfilePoint]) -> list[Chart]:
    groups: dict[tuple[int, str, int], list[ProfilePoint]] = {}
    for p in points:
        groups.setdefault((p.batch_size, p.gpu_model, p.gpu_count), []).append(p)
    models = {(m, n) for _, m, n in groups}
    limits = [float(p.power_limit_w) for p in points]
    power = Plot(
        "Average power versus power limit",
        linear_axis("power limit (W)", limits, zero=False),
        linear_axis("average power (W)", [p.avg_power_w for p in points]),
    )
    speed = Plot(
        "Throughput versus power limit",
        linear_axis("power limit (W)", limits, zero=False),
        linear_axis("throughput (samples/s)", [p.samples_per_s for p in points]),
    )
    for i, ((b, model, count), group) in enumerate(sorted(groups.items())):
        cls = f"s{i % PALETTE}"
        name = f"b={b}" + (f" · {count}× {model}" if len(models) > 1 else "")
        for plot, values in (
            (power, [p.avg_power_w for p in group]),
            (speed, [p.samples_per_s for p in group]),
        ):
            pts = [(float(p.power_limit_w), v) for p, v in zip(group, values, strict=True)]
            plot.line(pts, cls, dashed=i >= PALETTE)
            plot.dots(pts, cls, [f"{name} at {x:g} W: {v:.4g}" for x, v in pts])
            plot.legend(name, cls)
    gpus = ", ".join(f"{n}× {m}" for m, n in sorted(models))
    return [
        _chart(
            "profile-power",
            "Power profile: average power",
            f"Profiled on {gpus}, per batch size.",
            power,
        ),
        _chart(
            "profile-throughput",
            "Power profile: throughput",
            "Samples per second (steps per second × batch size) at each limit.",
            speed,
        ),
    ]
