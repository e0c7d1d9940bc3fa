"""The code each rank of `ddp_retrain` runs: DistributedDataParallel on this node's processes.

Kept apart from the pipeline file so that the ranks import PyTorch only. Each rank is
started by `DistributedTraining` with torchrun's environment (RANK, WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT), so `init_process_group` needs no arguments; the backend
is NCCL on GPUs and gloo on a CPU.
"""

from __future__ import annotations

from typing import Any

CLASSES, FEATURES, SAMPLES = 4, 24, 2048
CENTRES_SEED, SPREAD = 7, 0.7
"""Four Gaussian blobs in 24 dimensions around centres fixed once for all days."""


def train_rank(run: Any, day: str) -> dict[str, float] | None:
    """One rank: its share of ``day``'s sample at ``run.per_rank_batch_size``; the gradient
    all-reduce makes the step global. Rank 0's accuracy is the run's metric."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from zeus_airflow.examples import classifier

    torch.set_num_threads(1)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", run.local_rank) if cuda else torch.device("cpu")
    seed = int(day.replace("-", ""))
    data = TensorDataset(
        *classifier.clusters(
            CENTRES_SEED, seed, SAMPLES, features=FEATURES, classes=CLASSES, spread=SPREAD
        )
    )
    validation = classifier.clusters(
        CENTRES_SEED, seed + 1, SAMPLES // 4, features=FEATURES, classes=CLASSES, spread=SPREAD
    )
    sampler = DistributedSampler(data, seed=seed)
    loader = DataLoader(data, batch_size=run.per_rank_batch_size, sampler=sampler)
    torch.manual_seed(seed)
    net = classifier.mlp(FEATURES, 32, CLASSES).to(device)
    model = DistributedDataParallel(net, device_ids=[run.local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * (run.batch_size / 64) ** 0.5)

    def epoch_batches(epoch: int) -> Any:
        sampler.set_epoch(epoch)  # each epoch shuffles the ranks' shares anew
        return ((x.to(device), y.to(device)) for x, y in loader)

    accuracy = classifier.fit(
        run,
        model,
        optimizer,
        epoch_batches,
        (validation[0].to(device), validation[1].to(device)),
        evaluated=net,
    )
    dist.destroy_process_group()
    return {"accuracy": accuracy} if run.rank == 0 else None
