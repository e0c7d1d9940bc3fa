"""Disk size of zeus-airflow's dependency closure, read from an installed environment.

Run with the environment's Python: it takes the requirements from this checkout's
pyproject.toml (with the extras given; the installed metadata may be an older version's),
walks them through the installed distributions' metadata, markers evaluated for this
interpreter, and sums the files each distribution's RECORD lists. No download, no install:
a measure of what ``pip install zeus-airflow[...]`` puts in site-packages, as installed here
(zeus-airflow's own files left out).

    .venv/bin/python bench/install_size.py                    # the base install
    .venv/bin/python bench/install_size.py --extras examples plots
"""

from __future__ import annotations

import argparse
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

MIB = 1024 * 1024
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
SELF = "zeus-airflow"


def own_requirements(extras: set[str]) -> list[Requirement]:
    """zeus-airflow's requirements with ``extras``, its extras that name itself expanded."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    lines, pending, done = list(project["dependencies"]), set(extras), set()
    while pending:
        extra = pending.pop()
        done.add(extra)
        for line in project["optional-dependencies"][extra]:
            req = Requirement(line)
            if canonicalize_name(req.name) == SELF:
                pending |= req.extras - done
            else:
                lines.append(line)
    return [Requirement(line) for line in lines]


def closure(roots: list[Requirement]) -> dict[str, metadata.Distribution]:
    """Every installed distribution ``roots`` need."""
    found: dict[str, metadata.Distribution] = {}
    pending = [
        (r.name, frozenset(r.extras)) for r in roots if r.marker is None or r.marker.evaluate()
    ]
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        current, wanted = pending.pop()
        key = (canonicalize_name(current), wanted)
        if key in seen:
            continue
        seen.add(key)
        dist = metadata.distribution(current)
        found[canonicalize_name(current)] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            # The requirement applies for no extra, or for one of those asked of this package.
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *wanted)):
                pending.append((req.name, frozenset(req.extras)))
    return found


def size_bytes(dist: metadata.Distribution) -> int:
    total = 0
    for file in dist.files or []:
        path = Path(file.locate())
        if path.is_file():
            total += path.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", nargs="*", default=[])
    parser.add_argument("--top", type=int, default=8, help="largest distributions to list")
    args = parser.parse_args()
    dists = closure(own_requirements(set(args.extras)))
    sizes = {name: size_bytes(d) for name, d in dists.items()}
    print(
        f"zeus-airflow[{','.join(args.extras)}]: {len(dists)} distributions, "
        f"{sum(sizes.values()) / MIB:.0f} MiB"
    )
    for name, size in sorted(sizes.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {size / MIB:8.1f} MiB  {name}")


if __name__ == "__main__":
    main()
