"""The package's layering, read from its source with ``ast``: no import cycles, the store below
the domain's users, and the domain on the ground floor."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import zeus_airflow

ROOT = Path(zeus_airflow.__file__).parent
STORE = "zeus_airflow.core.store"
ABOVE_THE_STORE = (
    "zeus_airflow.core.train.run",
    "zeus_airflow.core.train.profiler",
    "zeus_airflow.core.train.engine",
    "zeus_airflow.core.decide.policy",
    "zeus_airflow.core.decide.translation",
    "zeus_airflow.core.decide.snapshot",
    "zeus_airflow.core.train.monitor",
    "zeus_airflow.core.reports",
)
GROUND_FLOOR = (
    "zeus_airflow.core.common.config",
    "zeus_airflow.core.common.cost",
    "zeus_airflow.core.common.limit_search",
    "zeus_airflow.core.devices.base",
    "zeus_airflow.core.domain",
    "zeus_airflow.core.common.units",
)
"""What the domain may import (besides itself); ``units`` formats figures for people, so that
a record can say how it reads."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


@cache
def imports(module: str) -> frozenset[str]:
    """The package's modules ``module`` imports when it runs (any depth of its code, except
    ``if TYPE_CHECKING:`` blocks)."""
    tree = ast.parse(MODULES[module].read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from package import module`` needs the module; the package is its parent,
            # imported with any of its modules, so it counts only for names defined in it.
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in MODULES else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return frozenset(m for m in found if m in MODULES and m != module)


def reachable(module: str) -> set[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        for m in imports(todo.pop()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_import_graph_has_no_cycle() -> None:
    cycles = sorted(m for m in MODULES if m in reachable(m))
    assert not cycles, f"modules that import themselves through others: {cycles}"


def test_the_store_imports_nothing_above_the_domain() -> None:
    store = [m for m in MODULES if within(m, (STORE,))]
    assert len(store) > 5  # the walk found the store's modules
    wrong = {m: sorted(d for d in reachable(m) if within(d, ABOVE_THE_STORE)) for m in store}
    assert not {m: d for m, d in wrong.items() if d}


def test_the_domain_stands_on_the_ground_floor() -> None:
    domain = [m for m in MODULES if within(m, ("zeus_airflow.core.domain",))]
    assert len(domain) >= 5
    wrong = {m: sorted(d for d in reachable(m) if not within(d, GROUND_FLOOR)) for m in domain}
    assert not {m: d for m, d in wrong.items() if d}


def test_the_check_sees_a_cycle_and_an_upward_import() -> None:
    """The walk itself: the engine reaches the store and the policy; the store used to reach
    the policy through store/base.py, which this test would have caught."""
    engine = reachable("zeus_airflow.core.train.engine")
    assert {"zeus_airflow.core.store.base", "zeus_airflow.core.decide.policy"} <= engine
    assert "zeus_airflow.core.domain.trials" in imports("zeus_airflow.core.store.tables")


SQL_WRITERS = ("zeus_airflow.core.store", "zeus_airflow.migrations", "zeus_airflow.airflow_db")
"""The only modules that import SQLAlchemy: the store (and its migrations) writes every
statement on the store's tables; ``airflow_db`` reads Airflow's own metadata tables through
Airflow's models (the UI's logical dates, the demo's XComs)."""
THROUGH_THE_STORE = ("zeus_airflow.core.train.gpu_lease", "zeus_airflow.core.reports")
"""Read and write the store through its protocol (``store/base.py``) and its read-model
(``store/reads``), never the SQL implementation."""


@cache
def imported_packages(module: str) -> frozenset[str]:
    """The top-level packages ``module`` imports anywhere, ``TYPE_CHECKING`` blocks too."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return frozenset(found)


CORE = "zeus_airflow.core"
DECISIONS = "zeus_airflow.core.decide"


def test_the_core_never_imports_airflow() -> None:
    """Not even for types: the engine, the simulator and the CLI's reports run without Airflow,
    and a core module reaching anything of the package outside ``core/`` would bring it in."""
    core = [m for m in MODULES if within(m, (CORE,))]
    assert len(core) > 60  # the walk found the core's modules
    airflow = sorted(m for m in core if "airflow" in imported_packages(m))
    outside = {m: sorted(d for d in reachable(m) if not within(d, (CORE,))) for m in core}
    assert airflow == []
    assert not {m: d for m, d in outside.items() if d}


def core_unit(module: str) -> str:
    """The folder of ``core/`` a module belongs to (``train`` for ``core.train.engine``)."""
    return module.split(".")[2]


def test_the_core_folders_import_one_way() -> None:
    """The folders of ``core/`` form layers: no import between two folders, lazy ones
    included, runs back the other way (docs/architecture.md draws them)."""
    core = [m for m in MODULES if within(m, (CORE,)) and m.count(".") >= 3]
    edges = {(core_unit(m), core_unit(d)) for m in core for d in imports(m) if within(d, (CORE,))}
    edges = {(a, b) for a, b in edges if a != b}
    assert ("train", "decide") in edges  # the walk sees the folders

    def reached_from(unit: str) -> set[str]:
        seen: set[str] = set()
        todo = [unit]
        while todo:
            here = todo.pop()
            for b in {b for a, b in edges if a == here} - seen:
                seen.add(b)
                todo.append(b)
        return seen

    above = {unit: reached_from(unit) for unit, _ in edges}
    assert sorted(unit for unit, reached in above.items() if unit in reached) == []


def test_decisions_are_pure() -> None:
    """``core/decide/`` reads records and returns decisions: no device, no store, no training."""
    decide = [m for m in MODULES if within(m, (DECISIONS,))]
    assert len(decide) >= 8
    wrong = {
        m: sorted(d for d in reachable(m) if not within(d, (DECISIONS, *GROUND_FLOOR)))
        for m in decide
    }
    assert not {m: d for m, d in wrong.items() if d}


def test_the_ground_floor_imports_nothing_above_it() -> None:
    ground = [m for m in MODULES if within(m, ("zeus_airflow.core.common",))]
    assert len(ground) >= 5
    wrong = {m: sorted(d for d in reachable(m) if not within(d, GROUND_FLOOR)) for m in ground}
    assert not {m: d for m, d in wrong.items() if d}


def test_only_the_store_writes_sql() -> None:
    writing = [m for m in MODULES if "sqlalchemy" in imported_packages(m)]
    assert "zeus_airflow.core.store.reads.jobs" in writing  # the check sees the store's
    assert sorted(m for m in writing if not within(m, SQL_WRITERS)) == []


def test_leases_and_reports_use_the_store_through_its_interface() -> None:
    users = [m for m in MODULES if within(m, THROUGH_THE_STORE)]
    assert len(users) >= 8
    reaching = {m: "zeus_airflow.core.store.sql" in reachable(m) for m in users}
    assert not [m for m, bad in reaching.items() if bad]
    assert "zeus_airflow.core.store.base" in imports("zeus_airflow.core.train.gpu_lease")


def test_planning_never_imports_the_reports() -> None:
    """The carbon service plans from what the store reads for it (``core/store/reads/history.py``)
    and the policy's own outlook, never from the reporting code."""
    for module in ("zeus_airflow.core.carbon.service", "zeus_airflow.core.carbon.expected"):
        found = reachable(module)
        assert "zeus_airflow.core.decide.outlook" in found  # the walk found the planning side
        assert not [d for d in found if within(d, ("zeus_airflow.core.reports",))], module


def test_the_operator_module_is_airflow_glue() -> None:
    """operators/train.py stays short (issue 24): parse-time checks, carbon planning and
    accounting, the outbox and the recording live elsewhere (its functions' length is
    checked with every module's, below)."""
    assert len(MODULES["zeus_airflow.operators.train"].read_text().splitlines()) <= 350


MAX_FUNCTION_LINES = 60
"""A function's lines, from its ``def`` to its last line, docstring included."""


def long_functions(module: str) -> dict[str, int]:
    """``module``'s functions and methods (nested ones too) over :data:`MAX_FUNCTION_LINES`,
    by qualified name, with their lengths."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{prefix}{child.name}"] = lines
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(MODULES[module].read_text()), "")
    return found


def test_no_function_is_over_60_lines() -> None:
    """Every module of the package (the migrations' revisions aside: generated, one
    ``upgrade`` each): a longer function is split into named steps."""
    checked = [m for m in MODULES if not within(m, ("zeus_airflow.migrations.versions",))]
    assert len(checked) > 150  # the walk found the package's modules
    offenders = {
        f"{m}:{name}": lines for m in sorted(checked) for name, lines in long_functions(m).items()
    }
    assert offenders == {}


AIRFLOW_LAYER = (
    "zeus_airflow.operators",
    "zeus_airflow.decorators",
    "zeus_airflow.hooks",
    "zeus_airflow.plugins",
    "zeus_airflow.airflow_db",
    "zeus_airflow.get_provider_info",
)
TOOLS = (
    "zeus_airflow.cli",
    "zeus_airflow.sim",
    "zeus_airflow.capriccio",
    "zeus_airflow.integrations",
    "zeus_airflow.examples",
    "zeus_airflow.plotting",
    "zeus_airflow.testing",
)
TOOLS_INTO_AIRFLOW = {
    "zeus_airflow.cli.store": {"zeus_airflow.hooks.store", "zeus_airflow.airflow_db"},
    "zeus_airflow.cli.demo_runs": {"zeus_airflow.airflow_db"},
    "zeus_airflow.integrations.published": {"zeus_airflow.operators.summary"},
    "zeus_airflow.integrations.publishing": {"zeus_airflow.operators.instances"},
}
"""The tool layer's only imports of the Airflow layer, each inside the function that needs
it (docs/architecture.md, "Layers")."""


def _runs_later(node: ast.AST) -> bool:
    """Code that does not run when its module is imported (a function's body), or runs only
    for the type checker."""
    lazy = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    return lazy or _type_checking_only(node)


def eager_airflow_imports(module: str) -> list[str]:
    """The Airflow layer's modules ``module`` names in an import that runs when it is
    imported (outside its functions and ``if TYPE_CHECKING:`` blocks)."""
    named: list[str] = []
    todo: list[ast.AST] = [ast.parse(MODULES[module].read_text())]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            named += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            named += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif not _runs_later(node):
            todo.extend(ast.iter_child_nodes(node))
    return sorted(n for n in named if within(n, AIRFLOW_LAYER))


def test_the_tools_import_the_airflow_layer_only_where_documented() -> None:
    """The CLI, the simulator and the integrations run without Airflow: what of the Airflow
    layer they need is the documented list, imported lazily by the command or the operator's
    hook that needs it."""
    tools = [m for m in MODULES if within(m, TOOLS)]
    assert len(tools) > 30  # the walk found the tool layer
    into_airflow = {m: {d for d in imports(m) if within(d, AIRFLOW_LAYER)} for m in tools}
    assert {m: d for m, d in into_airflow.items() if d} == TOOLS_INTO_AIRFLOW
    assert not {m: eager_airflow_imports(m) for m in tools if eager_airflow_imports(m)}
    documented = (ROOT.parent / "docs" / "architecture.md").read_text()
    for module, targets in TOOLS_INTO_AIRFLOW.items():
        for target in sorted({module, *targets}):
            path = target.removeprefix("zeus_airflow.").replace(".", "/") + ".py"
            assert f"`{path}`" in documented, path


SQL_STORE = "zeus_airflow.core.store.sql"
BUILDS_THE_SQL_STORE = (
    "zeus_airflow.cli.capriccio",
    "zeus_airflow.cli.store",
    "zeus_airflow.sim.carbon",
    "zeus_airflow.sim.drift",
    "zeus_airflow.sim.simulator",
)
"""The only modules outside the store that name ``SQLStore``: they build one (the simulators'
and capriccio's in-memory stores), or hand it to the store's admin functions (the CLI's
``db``/``jobs``/``reset``). Everything else types against ``Store`` (``store/base.py``) and
gets its store from ``open_store`` or the hook."""


def imports_any(module: str) -> frozenset[str]:
    """The package's modules ``module`` imports, ``if TYPE_CHECKING:`` blocks included (a type
    is a dependency on the contract too). ``SQLStore`` taken from the package's re-export
    counts as importing ``sql``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{a.name}" for a in node.names)
            found.add(node.module)
            if any(a.name == "SQLStore" for a in node.names):
                found.add(SQL_STORE)
    return frozenset(m for m in found if m in MODULES)


def test_only_construction_sites_import_the_sql_store() -> None:
    """Callers use the store through its protocol: every method they call is on ``Store``."""
    outside = [m for m in MODULES if not within(m, (STORE, "zeus_airflow.migrations"))]
    importing = sorted(m for m in outside if SQL_STORE in imports_any(m))
    assert "zeus_airflow.sim.simulator" in importing  # the check sees a construction site
    assert importing == sorted(BUILDS_THE_SQL_STORE)


def test_the_tests_mirror_the_package_folders() -> None:
    """A folder of tests is named as the package's folder its tests are about
    (tests/core/decide/ for zeus_airflow/core/decide/); tests of the whole project (its
    structure, DAGs, deployment, bench scripts) stay at the top of tests/."""
    tests = ROOT.parent / "tests"
    folders = {p.parent.relative_to(tests) for p in tests.rglob("test_*.py")} - {Path(".")}
    assert len(folders) >= 10  # the walk found the test folders
    assert sorted(str(f) for f in folders if not (ROOT / f).is_dir()) == []
