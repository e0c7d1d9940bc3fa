"""``zeus-airflow gpu leases | restore``: power limits that tasks left on this host's GPUs.

A task records a lease (the GPU's original limit) before changing it and deletes it after
restoring it. A lease whose process is gone means a task died (SIGKILL, out of memory) with
its GPU still capped; the next task on that GPU restores it, and ``gpu restore`` does it now.
Run it on the GPU host, as a user allowed to set power limits (root or CAP_SYS_ADMIN).
"""

from __future__ import annotations

import argparse
import logging
import sys

from zeus_airflow.cli import help_of
from zeus_airflow.cli.store import add_location_options, reporting_errors, store_from_args, write
from zeus_airflow.core.train.gpu_lease import GPULeases, holder_alive, restore_host_leases

LEASE_COLUMNS = (
    "id",
    "host",
    "gpu_index",
    "gpu_uuid",
    "original_limit_w",
    "pid",
    "holder",
    "acquired_at",
)
log = logging.getLogger(__name__)


def register(commands: argparse._SubParsersAction) -> None:
    gpu = commands.add_parser("gpu", help=help_of("gpu"))
    gpu_commands = gpu.add_subparsers(dest="gpu_command", required=True, metavar="COMMAND")
    leases = gpu_commands.add_parser("leases", help="list this host's power-limit leases")
    add_location_options(leases)
    leases.set_defaults(handler=reporting_errors(_leases))
    restore = gpu_commands.add_parser(
        "restore",
        help="put back the original power limits that dead tasks left on this host's GPUs",
    )
    add_location_options(restore)
    restore.add_argument(
        "--all",
        action="store_true",
        help="also the leases of tasks still running (a stuck task); the "
        "task may change the limit again",
    )
    restore.set_defaults(handler=reporting_errors(_restore))


def _leases(args: argparse.Namespace) -> int:
    leases = GPULeases(store_from_args(args))
    rows = [
        {**vars(lease), "holder": "running" if holder_alive(lease) else "dead"}
        for lease in leases.on_host()
    ]
    write(rows, LEASE_COLUMNS, "table", sys.stdout)
    return 0


def _restore(args: argparse.Namespace) -> int:
    leases = GPULeases(store_from_args(args))
    done = restore_host_leases(leases, log, include_live=args.all)
    for lease in done.restored:
        print(
            f"GPU {lease.gpu_index} ({lease.gpu_uuid}): power limit restored to "
            f"{lease.original_limit_w} W (left by pid {lease.pid})"
        )
    for lease, why in done.failed:
        print(
            f"zeus-airflow gpu restore: error: GPU {lease.gpu_index} ({lease.gpu_uuid}): {why}",
            file=sys.stderr,
        )
    if not done.restored and not done.failed:
        print(f"nothing to restore on {leases.host}")
    return 1 if done.failed else 0
