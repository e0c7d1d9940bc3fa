"""Rank functions for the multi-process tests: real DDP on the gloo backend, two CPU processes.

Loaded by path inside each rank (``DistributedTraining("<this file>:train_rank")``), so it
imports nothing from the tests. Each rank writes what it saw to ``<record_dir>/rank<N>.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SAMPLES, FEATURES = 128, 8


def train_rank(
    run: Any,
    record_dir: str,
    fail_rank: int = -1,
    fail_epoch: int = 0,
    metrics: list[float] | None = None,
    send: list[Any] | None = None,
) -> Any:
    """Train a linear classifier with DistributedDataParallel. ``fail_rank`` raises at its
    ``fail_epoch``; ``metrics`` scripts the reported metric per epoch; ``send`` writes raw
    messages on the rank's channel (what a rogue rank could try)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    draw = torch.Generator().manual_seed(0)
    labels = torch.arange(SAMPLES) % 2
    data = TensorDataset(
        torch.randn(SAMPLES, FEATURES, generator=draw) + labels[:, None] * 2, labels
    )
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=run.per_rank_batch_size, sampler=sampler)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(FEATURES, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[int] = []
    for message in send or []:
        run._conn.send(tuple(message))
    for epoch in run.epochs():
        sampler.set_epoch(epoch)
        for features, target in run.steps(loader):
            if run.rank == fail_rank and epoch == fail_epoch:
                raise RuntimeError(f"rank {run.rank} ran out of memory in epoch {epoch}")
            seen.append(len(target))
            loss = torch.nn.functional.cross_entropy(model(features), target)
            optimizer.zero_grad()
            loss.backward()  # an all-reduce across the ranks
            optimizer.step()
        with torch.no_grad():
            accuracy = (model(data.tensors[0]).argmax(1) == labels).float().mean().item()
        run.report_metric(metrics[epoch - 1] if metrics else accuracy)
    record = {
        "rank": run.rank,
        "world_size": dist.get_world_size(),
        "batches": seen,
        "epochs": run.epoch,
        "stop_reason": run.stop_reason,
        "pid": os.getpid(),
        "master_addr": os.environ["MASTER_ADDR"],
        "has_device": hasattr(run, "device") or hasattr(run, "profiler"),
    }
    Path(record_dir, f"rank{run.rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()
    return {"accuracy": accuracy, "world_size": record["world_size"]}
