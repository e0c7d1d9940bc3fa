"""One number format per unit (issue 47): a figure never turns to an exponent, so a column of
kWh reads ``0.0000503 kWh`` beside ``0.000113 kWh``, not ``5.03e-05 kWh``."""

from __future__ import annotations

import pytest

from zeus_airflow.core.common.units import J_PER_KWH, show_energy, show_kwh, significant


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (5.03e-05, "0.0000503"),
        (0.000113, "0.000113"),
        (1.5, "1.5"),
        (0.0, "0"),
        (1234.0, "1230"),
        (9.996e-05, "0.0001"),
        (-2.5e-06, "-0.0000025"),
        (812.0, "812"),
    ],
)
def test_three_significant_digits_without_an_exponent(value: float, shown: str) -> None:
    assert significant(value) == shown


def test_a_column_of_kwh_reads_in_one_format() -> None:
    shown = [show_kwh(kwh * J_PER_KWH) for kwh in (5.03e-05, 0.000113, 0.0123, 4.2)]
    assert shown == ["0.0000503 kWh", "0.000113 kWh", "0.0123 kWh", "4.2 kWh"]
    assert not [s for s in shown if "e" in s.split()[0]]
    assert show_energy(2.5e12) == "2500 GJ"
