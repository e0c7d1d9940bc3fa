"""docs/operator.md's parameter table names every parameter the operator takes."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "operator.md"


def _documented_parameters() -> set[str]:
    text = DOC.read_text()
    table = text.split("## Parameters", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            names.update(re.findall(r"`([a-z_]+)`", first_cell))
    return names


def test_every_operator_parameter_has_a_row_in_the_docs_table() -> None:
    from zeus_airflow import ZeusTrainOperator

    own = [
        name
        for name, p in inspect.signature(ZeusTrainOperator.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert len(own) > 20
    missing = sorted(set(own) - _documented_parameters())
    assert not missing, f"docs/operator.md's parameter table lacks {missing}"
