"""The code each rank of `ddp_retrain` runs: DistributedDataParallel on this node's processes.

Kept apart from the pipeline file so that the ranks import PyTorch only. Each rank is
started by `DistributedTraining` with torchrun's environment (RANK, WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT), so `init_process_group` needs no arguments; the backend
is NCCL on GPUs and gloo on a CPU.
"""

from __future__ import annotations

from typing import Any

CLASSES, FEATURES, SAMPLES = 4, 24, 2048


def blobs(seed: int, samples: int) -> Any:
    """Four Gaussian blobs in 24 dimensions around centres fixed once for all days."""
    import torch

    centres = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(7)) * 0.7
    draw = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (samples,), generator=draw)
    return centres[labels] + torch.randn(samples, FEATURES, generator=draw), labels


def train_rank(run: Any, day: str) -> dict[str, float] | None:
    """One rank: its share of ``day``'s sample at ``run.per_rank_batch_size``; the gradient
    all-reduce makes the step global. Rank 0's accuracy is the run's metric."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    torch.set_num_threads(1)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", run.local_rank) if cuda else torch.device("cpu")
    seed = int(day.replace("-", ""))
    data = TensorDataset(*blobs(seed, SAMPLES))
    val_features, val_labels = (t.to(device) for t in blobs(seed + 1, SAMPLES // 4))
    sampler = DistributedSampler(data, seed=seed)
    loader = DataLoader(data, batch_size=run.per_rank_batch_size, sampler=sampler)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, CLASSES)).to(device)
    model = DistributedDataParallel(net, device_ids=[run.local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * (run.batch_size / 64) ** 0.5)
    accuracy = 0.0
    for epoch in run.epochs():
        sampler.set_epoch(epoch)
        for features, labels in run.steps(loader):
            loss = torch.nn.functional.cross_entropy(model(features.to(device)),
                                                     labels.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            accuracy = (net(val_features).argmax(1) == val_labels).float().mean().item()
        run.report_metric(accuracy)
    dist.destroy_process_group()
    return {"accuracy": accuracy} if run.rank == 0 else None
