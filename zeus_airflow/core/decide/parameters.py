"""The Zeus policy's tuning: the same for every job (a job's own settings are its
``JobConfig``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicyParameters:
    """The Zeus policy's tuning: the same for every job (a job's own settings are its
    ``JobConfig``). The defaults are the values every figure in ``bench/`` was measured with."""

    pruning_rounds: int = 2
    """Rounds of the pruning walk (paper Alg. 3)."""
    dominance_probability: float = 0.05
    """Round 2 skips a size less likely than this to beat the best one seen (see
    :func:`pruning_state`)."""
    cannot_win_z: float = 4.0
    """A pruning step whose cost passes the best mean seen so far by this many run-to-run
    spreads cannot be the optimum: the walk ends its direction there (see
    :func:`cannot_win`)."""
    readmit_growth: float = 1.1
    """A size pruned only by early stops gets another try once the early-stop bound has
    grown past this many times the highest bound that stopped it (see
    :func:`earned_another_try`)."""
    readmit_z: float = 2.0
    """The growth must hold at the low edge of the best mean's interval, this many standard
    errors below it: a best mean that moved within its own noise says nothing about the old
    bound."""


DEFAULT_PARAMETERS = PolicyParameters()
