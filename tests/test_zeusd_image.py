"""docker/zeusd/: the zeusd image's recipe and its entrypoint, run for real.

No Docker engine here (docs/deployment.md, "The zeusd image"), so the image is not built; its
entrypoint is a shell script, run here with stand-ins for ``zeusd`` (prints the command line it
got) and ``nvidia-smi`` (prints a node's GPU table as the real one does) on the PATH. The
Python side then reads the table it wrote."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from zeus_airflow.core.devices.zeusd_client import ZeusdEndpoint
from zeus_airflow.core.devices.zeusd_discovery import gpu_table

ZEUSD = Path(__file__).resolve().parents[1] / "docker" / "zeusd"
NODE_TABLE = (
    "0, GPU-0f6e8a11-1111-4000-8000-000000000000, 00000000:17:00.0\n"
    "1, GPU-0f6e8a22-2222-4000-8000-000000000001, 00000000:65:00.0\n"
)
RAPL_HERE = Path("/sys/class/powercap/intel-rapl").is_dir()
"""What the entrypoint will find on this machine (it looks at fixed paths, as in the image; a
build without the image's record reads /sys only, as zeusd 0.5.0)."""


def stand_in(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def path_with_stand_ins(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "zeusd", 'echo "zeusd $*"')
    stand_in(
        bin_dir,
        "nvidia-smi",
        f'[ "$*" = "--query-gpu=index,uuid,pci.bus_id --format=csv,noheader" ] || exit 2\n'
        f"printf '{NODE_TABLE}'",
    )
    return bin_dir


def entrypoint(bin_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(ZEUSD / "entrypoint.sh"), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env},
        check=True,
    )


def test_serve_writes_the_gpu_table_beside_the_socket_and_picks_the_groups(
    path_with_stand_ins: Path, tmp_path: Path
) -> None:
    socket = tmp_path / "run" / "zeusd.sock"
    done = entrypoint(path_with_stand_ins, "serve", "--socket-path", str(socket))
    groups = "gpu-control,gpu-read,cpu-read" if RAPL_HERE else "gpu-control,gpu-read"
    assert done.stdout.strip() == f"zeusd serve --socket-path {socket} --enable {groups}"
    table_file = socket.parent / "gpus.csv"
    assert table_file.read_text() == NODE_TABLE and oct(table_file.stat().st_mode)[-3:] == "644"
    assert f"the node's GPU table is in {socket.parent}/gpus.csv" in done.stderr
    # What a task in a pod reads from it (zeusd 0.5.0 names GPUs by index only).
    table = gpu_table(ZeusdEndpoint(socket_path=str(socket)), env={})
    assert table is not None
    assert table.index_of_uuid("GPU-0f6e8a22-2222-4000-8000-000000000001") == 1
    assert table.pci_of == {0: "0000:17:00.0", 1: "0000:65:00.0"}


def test_the_groups_can_be_chosen_and_other_subcommands_pass_through(
    path_with_stand_ins: Path, tmp_path: Path
) -> None:
    socket = str(tmp_path / "zeusd.sock")
    chosen = entrypoint(
        path_with_stand_ins, "serve", "--socket-path", socket, ZEUSD_ENABLE="gpu-read"
    )
    assert chosen.stdout.strip().endswith("--enable gpu-read")
    given = entrypoint(
        path_with_stand_ins, "serve", "--socket-path", socket, "--enable", "gpu-read"
    )
    assert given.stdout.strip() == f"zeusd serve --socket-path {socket} --enable gpu-read"
    token = entrypoint(path_with_stand_ins, "token", "issue", "--user", "airflow")
    assert token.stdout.strip() == "zeusd token issue --user airflow" and token.stderr == ""


def test_without_nvidia_smi_no_table_is_written_and_zeusd_still_starts(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "zeusd", 'echo "zeusd $*"')
    socket = tmp_path / "zeusd.sock"
    done = entrypoint(bin_dir, "serve", "--socket-path", str(socket))
    assert done.stdout.startswith("zeusd serve") and not (tmp_path / "gpus.csv").exists()
    assert "no nvidia-smi here" in done.stderr


def test_the_recipe_builds_the_release_tag_from_source_with_the_locked_crates() -> None:
    dockerfile = (ZEUSD / "Dockerfile").read_text()
    assert re.search(r"^ARG ZEUSD_REF=zeusd-v0\.5\.0$", dockerfile, re.M)
    assert "https://github.com/ml-energy/zeus.git" in dockerfile
    assert "cargo build --release --locked" in dockerfile
    assert "COPY entrypoint.sh /usr/local/bin/zeusd-entrypoint" in dockerfile
    assert os.access(ZEUSD / "entrypoint.sh", os.X_OK)  # COPY keeps git's mode
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in dockerfile


# --- issue 49 --------------------------------------------------------------------------------
def test_a_socket_file_nothing_listens_on_is_removed_and_a_live_one_kept(
    path_with_stand_ins: Path, tmp_path: Path
) -> None:
    """zeusd 0.5.0 refuses to start while its socket file exists (zeusd/src/startup.rs,
    get_listener, tag zeusd-v0.5.0): a zeusd killed for memory left the pod crash-looping."""
    import socket as sockets

    path = tmp_path / "run" / "zeusd.sock"
    path.parent.mkdir()
    stale = sockets.socket(sockets.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays, nothing listens: what a killed zeusd leaves
    done = entrypoint(path_with_stand_ins, "serve", "--socket-path", str(path))
    assert not path.exists() and f"removed {path}, which nothing listens on" in done.stderr

    live = sockets.socket(sockets.AF_UNIX)
    live.bind(str(path))
    live.listen()
    try:
        done = entrypoint(path_with_stand_ins, "serve", "--socket-path", str(path))
    finally:
        live.close()
    assert path.exists() and "a zeusd already answers" in done.stderr


@pytest.mark.parametrize(
    ("rapl_under", "reads_zeus_sys", "served"),
    [("sys", "0", True), ("zeus_sys", "0", False), ("zeus_sys", "1", True), (None, "1", False)],
)
def test_cpu_read_is_enabled_only_where_this_zeusd_reads_rapl(
    path_with_stand_ins: Path,
    tmp_path: Path,
    rapl_under: str | None,
    reads_zeus_sys: str,
    served: bool,
) -> None:
    """zeusd 0.5.0 reads RAPL under /sys only: with the DaemonSet's /zeus_sys mounts it
    served 0 CPUs while the entrypoint enabled cpu-read. Follows upstream zeusd's
    ``zeusd/src/devices/cpu/rapl.rs``: ``RAPL_DIR`` is the fixed
    ``/sys/class/powercap/intel-rapl`` (0.3.0, commit bd12420, with a note that ``/zeus_sys``
    is yet to come), and the ``/zeus_sys`` fallback appears only after 0.5.0 (commit 026056e)."""
    root = tmp_path / "root"
    if rapl_under is not None:
        (root / rapl_under / "class" / "powercap" / "intel-rapl").mkdir(parents=True)
    done = entrypoint(
        path_with_stand_ins,
        "serve",
        "--socket-path",
        str(tmp_path / "zeusd.sock"),
        ZEUSD_ENTRYPOINT_ROOT=str(root),
        ZEUSD_READS_ZEUS_SYS=reads_zeus_sys,
    )
    assert done.stdout.strip().endswith("cpu-read") == served
    if rapl_under == "zeus_sys" and not served:
        assert "which this zeusd does not read" in done.stderr


def test_the_image_claims_no_gpu_vendor_whose_library_it_lacks() -> None:
    """debian-slim has no libamd_smi.so: the image says NVIDIA only, and where AMD's zeusd
    must be built instead. Follows upstream's ``zeusd/Cargo.toml`` (0.5.0, commit 00182ff),
    whose one GPU library is ``nvml-wrapper`` (the default ``nvml`` feature), while a later
    ``zeusd/build.rs`` (commit 34526a4) links ``amd_smi`` for its ``amdsmi`` feature."""
    dockerfile = (ZEUSD / "Dockerfile").read_text()
    assert "libamd_smi" not in dockerfile.split("FROM debian")[1]  # nothing installs it
    assert "AMD GPUs through AMD SMI" not in dockerfile
    assert "drives NVIDIA GPUs only" in dockerfile
    assert "COPY --from=build /reads-zeus-sys" in dockerfile
