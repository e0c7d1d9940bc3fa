"""The server-side SVG charts and the units they are labelled in."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from itertools import pairwise

import pytest

from zeus_airflow.core.common.units import energy_unit, show_energy, show_kwh, show_time, time_unit
from zeus_airflow.core.domain import TrialStatus
from zeus_airflow.core.reports.records import RunRecord
from zeus_airflow.plugins.charts import Plot, linear_axis, log2_axis, nice_step
from zeus_airflow.plugins.job_charts import batch_size_chart, energy_chart


def test_nice_steps_are_one_two_or_five_times_a_power_of_ten() -> None:
    assert [nice_step(x) for x in (0.013, 0.3, 1.0, 1.5, 3.2, 7, 4200)] == [
        0.02,
        0.5,
        1.0,
        2.0,
        5.0,
        10.0,
        5000.0,
    ]


def test_a_linear_axis_covers_its_values_with_round_ticks() -> None:
    axis = linear_axis("energy", [3.2, 17.9, 41.0])
    assert axis.lo == 0 and axis.hi >= 41.0 and axis.ticks[0] == 0 and axis.ticks[-1] == axis.hi
    steps = {round(b - a, 9) for a, b in pairwise(axis.ticks)}
    assert len(steps) == 1
    assert linear_axis("run", [5.0, 9.0], zero=False).lo > 0


def test_a_log2_axis_spaces_batch_sizes_evenly() -> None:
    place = log2_axis("batch size", [8, 16, 32, 64]).scale(0, 1000)
    positions = [place(b) for b in (8, 16, 32, 64)]
    gaps = [round(b - a) for a, b in pairwise(positions)]
    assert len(set(gaps)) == 1 and 0 < positions[0] < positions[-1] < 1000


def test_a_plot_draws_one_mark_per_point_inside_its_area() -> None:
    plot = Plot("t", linear_axis("x", [1, 10], zero=False), linear_axis("y", [0, 5]))
    points = [(float(x), x / 2) for x in range(1, 11)]
    plot.line(points, "s0")
    plot.dots(points, "s0", [f"<point {x}>" for x, _ in points])
    plot.error_bar(5, 1, 2, "s1", "bar")
    svg = str(plot.svg())
    assert svg.count("<circle") == 10 and svg.count('class="line s0"') == 1
    assert "&lt;point 1.0&gt;" in svg  # tooltips are escaped
    left, top, width, height = plot.area
    assert plot.py(0) == pytest.approx(top + height)  # y runs upwards
    assert plot.py(plot.y.hi) == pytest.approx(top)
    for cx, cy in re.findall(r'cx="([\d.]+)" cy="([\d.]+)"', svg):
        assert left <= float(cx) <= left + width and top <= float(cy) <= top + height


def test_units_fit_the_largest_value() -> None:
    assert energy_unit([12.0, 3.5e6]).name == "MJ" and energy_unit([999.0]).name == "J"
    assert time_unit([90.0]).name == "s" and time_unit([600.0]).name == "min"
    assert time_unit([3 * 3600.0]).name == "h"
    assert show_energy(247_752.0) == "248 kJ" and show_time(None) == "—"
    assert show_kwh(3.6e6) == "1 kWh" and show_kwh(247_752.0) == "0.0688 kWh"


@pytest.mark.parametrize("values", [[], [0.0], [5.0, 5.0]])
def test_degenerate_ranges_still_make_an_axis(values: list[float]) -> None:
    axis = linear_axis("y", values)
    assert axis.hi > axis.lo and len(axis.ticks) >= 2


def _run(
    index: int,
    energy_j: float,
    reached_target: bool | None = True,
    status: TrialStatus | None = None,
) -> RunRecord:
    return RunRecord(
        index=index,
        dag_id="d",
        task_id="t",
        run_id=f"r{index}",
        map_index=-1,
        try_number=1,
        batch_sizes=(64,),
        status=status or ("running" if reached_target is None else "succeeded"),
        phase="pruning",
        power_limit_w=250,
        energy_j=energy_j,
        time_s=3.0,
        cost=energy_j,
        epochs=2,
        reached_target=reached_target,
        measurement="simulated",
        gpu_model="V100",
        started_at=datetime(2026, 1, index, tzinfo=UTC),
        finished_at=datetime(2026, 1, index, 1, tzinfo=UTC),
    )


def test_a_young_jobs_run_axis_has_whole_run_numbers_only() -> None:
    """Two runs once drew ticks at run 1.2, 1.4, ...: runs are counted, never fractional."""
    runs = [_run(1, 900.0), _run(2, 2900.0)]
    svg = str(energy_chart(runs, {1: "run 1", 2: "run 2"}).svg)
    x_ticks = re.findall(r'<text class="tick" x="[\d.]+" y="([\d.]+)"[^>]*>([^<]+)</text>', svg)
    bottom = max(float(y) for y, _ in x_ticks)
    labels = [label for y, label in x_ticks if float(y) == bottom]
    assert labels == ["1", "2"]


def test_a_run_still_training_is_not_drawn_as_a_missed_target() -> None:
    runs = [_run(1, 900.0), _run(2, 2900.0, reached_target=False), _run(3, 1500.0, None)]
    chart = energy_chart(runs, {1: "run 1", 2: "run 2", 3: "run 3"})
    svg = str(chart.svg)
    assert svg.count('class="dot bad"') == 1  # run 2 only
    assert svg.count('class="dot hollow s0"') == 1 and "still training" in svg
    assert [text for text, _ in chart.legend] == [
        "reached target",
        "target not reached",
        "still training",
    ]


def test_a_run_whose_train_function_broke_is_neither_missed_nor_still_training() -> None:
    """A try that raised keeps its energy without a verdict, and an invalid one (no metric
    reported) says nothing about its target: drawn apart, not as the batch size's miss."""
    runs = [
        _run(1, 900.0),
        _run(2, 400.0, None, status="error"),
        _run(3, 700.0, False, status="invalid"),
    ]
    chart = energy_chart(runs, {1: "run 1", 2: "run 2", 3: "run 3"})
    svg = str(chart.svg)
    assert svg.count('class="dot hollow warn"') == 2
    assert 'class="dot bad"' not in svg and "still training" not in svg
    assert [text for text, _ in chart.legend] == [
        "reached target",
        "no verdict (the train function raised or broke its contract)",
    ]


def test_the_batch_size_chart_draws_a_run_without_a_verdict_apart_from_its_phase() -> None:
    """An invalid or raised try leaves the learning state untouched: drawn as a pruning
    step, it read as exploration the job never did."""
    runs = [
        _run(1, 900.0),
        _run(2, 400.0, None, status="error"),
        _run(3, 700.0, False, status="invalid"),
    ]
    chart = batch_size_chart(runs, (32, 64, 128), {1: "run 1", 2: "run 2", 3: "run 3"})
    svg = str(chart.svg)
    assert svg.count('class="dot s1"') == 1  # the pruning colour: run 1 only
    assert svg.count('class="dot hollow warn"') == 2
    assert [text for text, _ in chart.legend] == [
        "pruning",
        "no verdict (the train function raised or broke its contract)",
    ]


def test_a_try_stopped_at_the_budgets_cap_is_drawn_as_capped_not_failed() -> None:
    """A try the exploration budget's cap stopped was stopped on purpose, with no verdict on
    its size (issue 47): it is drawn and keyed as capped, never as a failed try."""
    capped = dataclasses.replace(_run(1, 900.0), batch_sizes=(128, 64), capped_sizes=(128,))
    failed = dataclasses.replace(_run(2, 900.0), batch_sizes=(32, 64))
    chart = batch_size_chart([capped, failed], (32, 64, 128), {1: "run 1", 2: "run 2"})
    svg = str(chart.svg)
    assert svg.count('class="dot hollow muted"') == 1 and svg.count('class="dot hollow bad"') == 1
    keys = [text for text, _ in chart.legend]
    assert "try capped by the budget" in keys and "failed try" in keys
    alone = batch_size_chart([capped], (32, 64, 128), {1: "run 1"})
    assert "failed try" not in [text for text, _ in alone.legend]


def test_a_label_at_the_top_or_an_end_of_its_axes_stays_inside_the_chart() -> None:
    """The arms chart's "n=" labels sit above each bar: the highest bar reaches the top of the
    axis, the largest batch size its right end; their labels must not be clipped."""
    from zeus_airflow.plugins.charts import LABEL_CHAR_PX, LABEL_PX

    plot = Plot("t", linear_axis("x", [1, 10], zero=False), linear_axis("y", [0, 5]))
    for x in (plot.x.lo, plot.x.hi):
        plot.label(x, plot.y.hi, "n=123")
    for x, y in re.findall(r'<text class="note" x="([\d.]+)" y="([\d.]+)"', str(plot.svg())):
        half = LABEL_CHAR_PX * len("n=123") / 2
        assert half - 0.1 <= float(x) <= plot.width - half + 0.1 and float(y) >= LABEL_PX


def test_the_fleet_chart_places_dag_runs_at_their_logical_dates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backfill runs 60 days in one afternoon: by wall-clock time the fleet chart drew it as
    an afternoon. Each DAG run is placed at its logical date (Airflow's database, else its
    run id's), the runs of one date added up (issue 47)."""
    from zeus_airflow.core.store.reads.fleet import RunEnergy
    from zeus_airflow.plugins import fleet_page

    now = datetime(2026, 11, 29, 4, tzinfo=UTC)
    runs = [
        RunEnergy("d", "manual_a", now, 10.0, 12.0),
        RunEnergy("d", "scheduled__2026-01-02T00:00:00+00:00", now, 5.0, 6.0),
        RunEnergy("e", "manual_b", now, 1.0, 2.0),
    ]
    known = {("d", "manual_a"): datetime(2026, 1, 5, tzinfo=UTC)}
    known[("e", "manual_b")] = known[("d", "manual_a")]
    monkeypatch.setattr(fleet_page, "_logical_dates", lambda _: known)
    assert fleet_page.by_logical_date(runs) == [
        (datetime(2026, 1, 2, tzinfo=UTC), 5.0, 6.0),
        (datetime(2026, 1, 5, tzinfo=UTC), 11.0, 14.0),
    ]
    chart = fleet_page.energy_chart(fleet_page.by_logical_date(runs))
    assert chart is not None and "logical date (UTC)" in str(chart.svg)
