"""The core's shared vocabulary: the records every layer exchanges, and the rules about them
that are facts rather than algorithms (a trial's allowed status changes, which phases are
exploration). It imports only the ground floor (config, cost, the device vocabulary); the
store, the policy, the profiler, the engine and the reports all build on it.
"""

from zeus_airflow.core.domain.carbon import RunCarbon
from zeus_airflow.core.domain.decision import (
    ArmStats,
    BudgetLedger,
    BudgetStatus,
    Decision,
    DriftFound,
    ExplorationStep,
    JobSnapshot,
    SizeEvidence,
)
from zeus_airflow.core.domain.figures import (
    ACCOUNTED,
    FIGURES,
    RUN_FACTS,
    RUN_FIGURES,
    TRY_FIGURES,
    Figure,
    Shown,
    TrainingFigures,
    run_of,
)
from zeus_airflow.core.domain.job import (
    Decide,
    DeviceInfo,
    FleetKey,
    ForeignObservation,
    JobRef,
    JobState,
    Observed,
    Successes,
    Version,
)
from zeus_airflow.core.domain.outbox import PendingResult, outbox_from_json, outbox_to_json
from zeus_airflow.core.domain.outcome import (
    ObserverReport,
    PowerProfile,
    RunOutcome,
    SliceInProgress,
    StopReason,
)
from zeus_airflow.core.domain.phases import EXPLORATION_PHASES, Phase, counts_as_observation
from zeus_airflow.core.domain.trials import (
    LIVE_STATUSES,
    REPLACED_STATUSES,
    SHOWN_STATUSES,
    STATUS_SHOWN,
    TRANSITIONS,
    VOID_STATUSES,
    RecurrenceKey,
    TrialRecord,
    TrialStatus,
    may_become,
    takes_result,
)

__all__ = [
    "ACCOUNTED",
    "EXPLORATION_PHASES",
    "FIGURES",
    "LIVE_STATUSES",
    "REPLACED_STATUSES",
    "RUN_FACTS",
    "RUN_FIGURES",
    "SHOWN_STATUSES",
    "STATUS_SHOWN",
    "TRANSITIONS",
    "TRY_FIGURES",
    "VOID_STATUSES",
    "ArmStats",
    "BudgetLedger",
    "BudgetStatus",
    "Decide",
    "Decision",
    "DeviceInfo",
    "DriftFound",
    "ExplorationStep",
    "Figure",
    "FleetKey",
    "ForeignObservation",
    "JobRef",
    "JobSnapshot",
    "JobState",
    "Observed",
    "ObserverReport",
    "PendingResult",
    "Phase",
    "PowerProfile",
    "RecurrenceKey",
    "RunCarbon",
    "RunOutcome",
    "Shown",
    "SizeEvidence",
    "SliceInProgress",
    "StopReason",
    "Successes",
    "TrainingFigures",
    "TrialRecord",
    "TrialStatus",
    "Version",
    "counts_as_observation",
    "may_become",
    "outbox_from_json",
    "outbox_to_json",
    "run_of",
    "takes_result",
]
