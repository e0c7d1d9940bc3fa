"""Multi-process training on one node (torchrun-style DDP) under the operator.

```python
from zeus_airflow.integrations.distributed import DistributedTraining

def train_rank(run):                       # runs in every rank: run is a RankRun
    dist.init_process_group("nccl")        # MASTER_ADDR/PORT, RANK, WORLD_SIZE are set
    loader = DataLoader(data, batch_size=run.per_rank_batch_size,
                        sampler=DistributedSampler(data))
    for epoch in run.epochs():             # every rank gets the same decision
        for batch in run.steps(loader):
            ...
        run.report_metric(evaluate(model)) # rank 0's value counts
    return save(model) if run.rank == 0 else None

ZeusTrainOperator(task_id="train", train=DistributedTraining("my_pkg.ddp:train_rank"), ...)
```

**Design.** The task process stays the one place that holds the ``TrainingRun``, the GPUs and
their power limits; :class:`DistributedTraining` is the train function it runs. It starts one
Python process per rank on this node with torchrun's environment (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT``), and each
rank connects back over a Unix socket in a private (0700) temporary folder: nothing listens
on a network interface. Every rank asks the task before each epoch and all get the same
answer (go on, or stop and why), so they stop together; rank 0 alone reports its steps and
metrics, which drive the run's step/epoch API exactly as a single-process loop does. Hence:

- the **power limit** is set by the task only, once for all the node's GPUs (the device
  group is the GPUs the task sees); a rank has no device handle and the channel has no
  message that touches a limit (an unknown message fails the try);
- the **energy** is the whole group's: the task measures every GPU of the node while all
  ranks train;
- the **batch size** the bandit learns is the *global* one: ``run.batch_size`` in a rank is
  the global size and ``run.per_rank_batch_size = batch_size / world_size`` what its DataLoader
  takes; a candidate the world size does not divide is refused before anything starts;
- a **crashed rank** (an exception, a signal, a non-zero exit) ends the others and fails the
  try with the rank's traceback; the engine restores the limits on that path as on any other.
  A rank also dies with the task (``PR_SET_PDEATHSIG``), so none trains on after a kill.

Why not torchrun itself: its agent restarts failed workers and runs its own rendezvous,
which here would either retry a failed try behind the engine's back or add a TCP store; the
launch torchrun does for a single node (the environment above, one process per rank) is a
few lines, and the task keeps control of every process it started.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from zeus_airflow.core.common.config import ConfigError

__all__ = ["DistributedTraining", "RankFailedError", "RankProtocolError", "RankRun"]

if TYPE_CHECKING:
    from zeus_airflow.core.train.run import TrainingRun

T = TypeVar("T")

_ENV_CHANNEL = "ZEUS_RANK_CHANNEL"
_ENV_PARENT = "ZEUS_RANK_PARENT_PID"
_POLL_S = 0.2
_STOP_GRACE_S = 10.0


class RankFailedError(RuntimeError):
    """A rank of a distributed training failed; the message holds its exit and traceback."""


class RankProtocolError(RuntimeError):
    """A rank sent the task something it does not accept (a limit change, say)."""


# --- the task's side ---------------------------------------------------------------------------
class DistributedTraining:
    """A train function that runs ``target`` in ``nproc_per_node`` processes on this node.

    :param target: ``"package.module:function"`` or ``"/path/to/file.py:function"``; the
        function takes a :class:`RankRun` (and the operator's ``train_kwargs``). Imported in
        the ranks only, never at DAG-parse time.
    :param nproc_per_node: how many ranks (default: one per GPU of the task's device group).
    :param env: extra environment variables for the ranks.
    """

    def __init__(
        self,
        target: str,
        nproc_per_node: int | None = None,
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        module, _, function = target.partition(":")
        if not module or not function.isidentifier():
            raise ConfigError(
                f"target={target!r} is invalid: expected 'package.module:function' "
                "or '/path/to/file.py:function'"
            )
        if nproc_per_node is not None and (
            isinstance(nproc_per_node, bool)
            or not isinstance(nproc_per_node, int)
            or nproc_per_node < 1
        ):
            raise ConfigError(
                f"nproc_per_node={nproc_per_node!r} is invalid: expected None (one "
                "rank per GPU) or an integer >= 1"
            )
        self.target = target
        self.nproc_per_node = nproc_per_node
        self.env = dict(env or {})
        self.__name__ = f"DistributedTraining({target})"

    def __call__(self, run: TrainingRun, **train_kwargs: Any) -> Any:
        world_size = self.nproc_per_node or run.device.count
        if run.batch_size % world_size:
            raise ConfigError(
                f"batch_sizes: batch size {run.batch_size} is invalid for {world_size} ranks: "
                "expected a multiple of the world size, since the batch size Zeus chooses is "
                "the global one (each rank takes batch_size / world_size)"
            )
        folder = Path(tempfile.mkdtemp(prefix="zeus-ranks-"))  # 0700: this user only
        try:
            with _RankGroup(self, run, world_size, folder, train_kwargs) as group:
                return group.serve()
        finally:
            shutil.rmtree(folder, ignore_errors=True)


@dataclass
class _Rank:
    rank: int
    process: subprocess.Popen[bytes]
    conn: Connection | None = None
    done: bool = False
    error: str | None = None
    asked: int | None = None
    """The epoch this rank waits to hear about."""


class _RankGroup:
    """The ranks of one try, their channel, and the decisions they are told."""

    def __init__(
        self,
        launch: DistributedTraining,
        run: TrainingRun,
        world_size: int,
        folder: Path,
        train_kwargs: Mapping[str, Any],
    ) -> None:
        self.launch, self.run, self.world_size = launch, run, world_size
        self.address = str(folder / "channel")
        self.hello = {
            "batch_size": run.batch_size,
            "world_size": world_size,
            "kwargs": dict(train_kwargs),
        }
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen(world_size)
        self.ranks: list[_Rank] = []
        self.decisions: dict[int, tuple[str, Any]] = {}
        self.value: Any = None

    def __enter__(self) -> _RankGroup:
        port = _free_port()
        package_root = str(Path(__file__).resolve().parents[2])
        base = {
            **os.environ,
            **self.launch.env,
            "PYTHONPATH": os.pathsep.join(
                p for p in (package_root, os.environ.get("PYTHONPATH")) if p
            ),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.world_size),
            _ENV_CHANNEL: self.address,
            _ENV_PARENT: str(os.getpid()),
        }
        for rank in range(self.world_size):
            env = {
                **base,
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "GROUP_RANK": "0",
                "ROLE_RANK": str(rank),
            }
            process = subprocess.Popen(
                [sys.executable, "-m", __name__, self.launch.target], env=env
            )
            self.ranks.append(_Rank(rank, process))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_all()
        self.listener.close()
        for rank in self.ranks:
            if rank.conn is not None:
                rank.conn.close()

    # --- the loop ----------------------------------------------------------------------------
    def serve(self) -> Any:
        """Answer the ranks until all have finished; rank 0's return value is the result."""
        while not all(rank.done for rank in self.ranks):
            conns = {rank.conn: rank for rank in self.ranks if rank.conn is not None}
            for ready in wait([self.listener, *conns], timeout=_POLL_S):
                if ready is self.listener:
                    self._accept()
                else:
                    self._receive(conns[ready])  # type: ignore[index]
            self._check_processes()
        self._wait_for_exits()
        return self.value

    def _accept(self) -> None:
        sock, _ = self.listener.accept()
        conn = Connection(sock.detach())
        kind, rank_number = conn.recv()
        if (
            kind != "hello"
            or not 0 <= rank_number < self.world_size
            or self.ranks[rank_number].conn is not None
        ):
            conn.close()
            raise RankProtocolError(
                f"a process sent {kind!r} for rank {rank_number!r} on the "
                "ranks' channel: expected each rank's hello once"
            )
        self.ranks[rank_number].conn = conn
        conn.send(("welcome", self.hello))

    def _receive(self, rank: _Rank) -> None:
        assert rank.conn is not None
        try:
            message = rank.conn.recv()
        except (EOFError, OSError):
            rank.conn.close()
            rank.conn = None
            return  # the process's exit status tells the rest
        kind, payload = message
        reporting = rank.rank == 0
        if kind == "epoch?":
            rank.asked = int(payload)
            if reporting and payload not in self.decisions:
                self.decisions[payload] = self._decide()
            self._answer_waiting()
        elif kind == "steps" and reporting:
            self.run.end_step(int(payload))
        elif kind == "metric" and reporting:
            self.run.report_metric(payload)
        elif kind == "done":
            rank.done = True
            if reporting:
                self.value = payload
        elif kind == "error":
            rank.error = str(payload)
        else:
            raise RankProtocolError(
                f"rank {rank.rank} sent {kind!r}, which the task does not accept: a rank may "
                "ask for the next epoch and report steps, metrics and its end; the power limit "
                "is the task's alone"
            )

    def _decide(self) -> tuple[str, Any]:
        run = self.run
        if run.in_epoch:
            run.end_epoch()
        stop = run.should_stop()
        if stop is not None:
            return ("stop", stop)
        return ("go", run.begin_epoch())

    def _answer_waiting(self) -> None:
        for rank in self.ranks:
            if rank.asked is not None and rank.asked in self.decisions and rank.conn is not None:
                rank.conn.send(self.decisions[rank.asked])
                rank.asked = None

    def _check_processes(self) -> None:
        for rank in self.ranks:
            code = rank.process.poll()
            if code is None:
                continue
            # What it said before exiting may still be in the channel ("done", its error).
            while rank.conn is not None and rank.conn.poll():
                self._receive(rank)
            if code == 0 and rank.done:
                continue
            if code == 0:
                code_text = "exited without finishing its train function"
            elif code < 0:
                code_text = f"was killed by {signal.Signals(-code).name}"
            else:
                code_text = f"exited with status {code}"
            detail = f":\n{rank.error}" if rank.error else ""
            raise RankFailedError(
                f"rank {rank.rank} of {self.world_size} {code_text}; the "
                f"other ranks were stopped{detail}"
            )

    def _wait_for_exits(self) -> None:
        """Every rank has finished its function: let the processes end by themselves."""
        deadline = time.monotonic() + _STOP_GRACE_S
        for rank in self.ranks:
            with contextlib.suppress(subprocess.TimeoutExpired):
                rank.process.wait(max(0.0, deadline - time.monotonic()))

    def _stop_all(self) -> None:
        alive = [rank.process for rank in self.ranks if rank.process.poll() is None]
        for process in alive:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        deadline = time.monotonic() + _STOP_GRACE_S
        for process in alive:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- a rank's side -----------------------------------------------------------------------------
class RankRun:
    """What a rank's train function drives: the same loop API as ``TrainingRun``, answered
    by the task. It holds no device: a rank cannot read or change a power limit."""

    def __init__(
        self, conn: Connection, rank: int, local_rank: int, world_size: int, batch_size: int
    ) -> None:
        self._conn = conn
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size
        self.batch_size = batch_size
        """The global batch size Zeus chose (samples per step over every rank)."""
        self.per_rank_batch_size = batch_size // world_size
        """What this rank's DataLoader takes."""
        self.epoch = 0
        self.stop_reason: str | None = None

    def epochs(self) -> Iterator[int]:
        """Yield epoch numbers while the task says go on; every rank hears the same."""
        while True:
            self._conn.send(("epoch?", self.epoch + 1))
            answer, detail = self._conn.recv()
            if answer == "stop":
                self.stop_reason = str(detail)
                return
            self.epoch = int(detail)
            yield self.epoch

    def steps(self, batches: Iterable[T]) -> Iterator[T]:
        """Yield each batch; rank 0 reports every step to the task's profiler."""
        for batch in batches:
            yield batch
            if self.rank == 0:
                self._conn.send(("steps", 1))

    def report_metric(self, value: float) -> None:
        """The epoch's validation metric; rank 0's is the run's (others are ignored)."""
        if self.rank == 0:
            self._conn.send(("metric", value))


def _load(target: str) -> Callable[..., Any]:
    module_name, _, function = target.rpartition(":")
    if module_name.endswith(".py"):
        spec = importlib.util.spec_from_file_location("zeus_rank_target", module_name)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {module_name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    return getattr(module, function)


def _die_with_parent(parent_pid: int) -> None:
    """Linux: SIGKILL this rank when the task's process dies (it holds the limits)."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the call above
        os._exit(1)


def _rank_main(target: str) -> int:
    _die_with_parent(int(os.environ[_ENV_PARENT]))
    rank = int(os.environ["RANK"])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ[_ENV_CHANNEL])
    conn = Connection(sock.detach())
    conn.send(("hello", rank))
    _, hello = conn.recv()
    run = RankRun(
        conn, rank, int(os.environ["LOCAL_RANK"]), hello["world_size"], hello["batch_size"]
    )
    try:
        value = _load(target)(run, **hello["kwargs"])
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
        traceback.print_exc()
        return 1
    conn.send(("done", value if rank == 0 else None))
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(_rank_main(sys.argv[1]))
