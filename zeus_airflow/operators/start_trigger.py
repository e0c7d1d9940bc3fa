"""The trigger a carbon-aware start defers on: a date-time trigger whose event carries the
start plan, so the resumed task records the delay it waited.

The plan travels in the event, not only in the deferral's ``next_kwargs``: ``dag.test()``
(Airflow 3) replaces those with the event when it runs the trigger in line, and a resumed
run that lost its plan recorded no delay (issue 37)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.triggers.base import TriggerEvent


class PlannedStartTrigger(DateTimeTrigger):
    """Fires at ``moment`` (tz-aware) with ``plan`` (``StartPlan.to_json()``) as its payload."""

    def __init__(self, moment: datetime, plan: str) -> None:
        super().__init__(moment=moment)
        self.plan = plan

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.{type(self).__name__}", {"moment": self.moment, "plan": self.plan})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        async for _ in super().run():  # waits until the moment
            yield TriggerEvent(self.plan)
