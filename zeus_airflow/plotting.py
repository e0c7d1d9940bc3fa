"""What every figure the CLI and the benchmarks draw needs: pyplot without a screen, and the
PNG written where it was asked for. Plots need the ``plots`` extra (matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zeus_airflow.core.common.extras import require


def pyplot(feature: str) -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files only: workers and CI have no screen), or
    an error naming the ``plots`` extra that ``feature`` needs."""
    require("matplotlib", feature).use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure: Any, path: Path, dpi: int = 80) -> None:
    """Lay ``figure`` out, write it to ``path`` (creating its folder) and free it."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
