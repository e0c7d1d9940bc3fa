"""One rule for a saving too small to be a finding (``units.SAVING_RESOLUTION``): it reads
"0", without a sign, in neutral colour, on every surface that shows savings."""

from __future__ import annotations

import pytest

from zeus_airflow.core.common.units import (
    SAVING_RESOLUTION,
    negligible_saving,
    saving_tone,
    show_saved_share,
    show_saving,
)


@pytest.mark.parametrize("noise_j", [7.11e-15, -2.84e-14, 0.0, -0.0])
def test_float_noise_reads_as_zero_in_neutral_colour(noise_j: float) -> None:
    default_j = 120e3
    assert negligible_saving(noise_j, default_j)
    assert saving_tone(noise_j, default_j) == "even"
    assert show_saving(noise_j, default_j) == "0 J"
    assert show_saved_share(noise_j / default_j) == "0 %"


def test_the_resolution_is_half_the_last_digit_a_share_is_shown_with() -> None:
    """0.05 % of the reference: anything below would read 0.0 % or -0.0 % anyway."""
    below, above = 0.99 * SAVING_RESOLUTION, 1.01 * SAVING_RESOLUTION
    assert (show_saved_share(below), show_saved_share(-below)) == ("0 %", "0 %")
    assert (show_saved_share(above), show_saved_share(-above)) == ("0.1 %", "-0.1 %")
    assert (saving_tone(above), saving_tone(-above), saving_tone(None)) == ("saved", "lost", "even")
    assert show_saving(-0.002 * 1e6, 1e6) == "-2 kJ" and saving_tone(-2e3, 1e6) == "lost"


def test_without_a_reference_only_an_exact_zero_is_negligible() -> None:
    assert negligible_saving(0.0, None) and not negligible_saving(1e-14, None)
    assert show_saving(None, 1.0) == "—" and show_saved_share(None) == "—"
