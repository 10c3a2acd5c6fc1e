"""Data-parallel training with pyvkgrad's backward: the digits CNN of train_digits.py wrapped in
torch.nn.parallel.DistributedDataParallel (gloo), each rank backpropagating on its own Vulkan
device. Every step, each rank takes its slice of one global batch; DDP averages the gradients.

    # N processes on this machine, rank r on Vulkan device r (see --devices):
    python examples/train_digits_ddp.py --nproc 2 --steps 50
    # or under torchrun (one process per GPU; RANK, WORLD_SIZE, LOCAL_RANK from torchrun):
    torchrun --nproc_per_node=4 examples/train_digits_ddp.py --steps 50
    # all ranks on device 0 (lavapipe, as CI does), compared with one process over the same
    # global batches:
    python examples/train_digits_ddp.py --nproc 2 --steps 4 --devices 0,0 --check --out r.json

--devices lists a Vulkan device index per local rank (python -m pyvkgrad info lists them); by
default local rank r uses the r-th GPU, or lavapipe when there are fewer GPUs than ranks.
--check makes rank 0 train the same model in one process on the same global batches, each
rank's slice as a separate forward (so BatchNorm sees the same per-rank statistics), the loss
averaged over the slices, and report how far its parameters are from the data-parallel ones.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_digits  # noqa: E402

import pyvkgrad  # noqa: E402
import pyvkgrad.torch as vt  # noqa: E402


def vulkan_device_for(local_rank: int, devices):
    """The Vulkan device of a local rank: --devices[local_rank], else the local_rank-th GPU,
    else the default device (lavapipe on a machine without enough GPUs)."""
    if devices:
        return pyvkgrad.devices()[devices[local_rank]]
    gpus = [d for d in pyvkgrad.devices() if d.info.device_type != "cpu"]
    return gpus[local_rank] if local_rank < len(gpus) else pyvkgrad.default_device()


def global_batches(n_train: int, steps: int, batch_size: int, seed: int):
    batches = torch.Generator().manual_seed(seed)
    return [torch.randint(n_train, (batch_size,), generator=batches) for _ in range(steps)]


def flat_parameters(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def leave() -> None:
    """End this rank's process now that its output is flushed, skipping the interpreter's
    shutdown: there PyTorch's gloo process group aborts about one process in twenty
    ("terminate called without an active exception", SIGABRT), also in a two-rank DDP script
    without pyvkgrad. The rank has destroyed its process group and written its report."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def worker(rank: int, world: int, args, port: int) -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
    device = vulkan_device_for(local_rank, args.devices)
    vt.set_device(device)
    (x_train, y_train), (x_test, y_test) = train_digits.load_data(args.seed)
    torch.manual_seed(args.seed)
    initial = train_digits.build_model()
    model = torch.nn.parallel.DistributedDataParallel(vt.convert(copy.deepcopy(initial)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    per_rank = args.batch_size // world
    losses = []
    for step, index in enumerate(global_batches(len(x_train), args.steps, args.batch_size,
                                                args.seed)):
        mine = index[rank * per_rank:(rank + 1) * per_rank]
        loss = F.cross_entropy(model(x_train[mine]), y_train[mine])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if rank == 0 and not args.quiet:
            print(f"step {step:4d} loss (rank 0 slice) {loss.item():.6f}")
    params = flat_parameters(model.module)
    gathered = [torch.empty_like(params) for _ in range(world)]
    dist.all_gather(gathered, params)
    names = [None] * world
    dist.all_gather_object(names, device.name)
    if rank == 0:
        report = {"world": world, "devices": names, "steps": args.steps,
                  "identical_across_ranks": all(torch.equal(g, gathered[0]) for g in gathered),
                  "rank0_losses": losses}
        net = model.module  # not the DDP wrapper: its forward is a collective
        net.eval()
        with torch.no_grad():
            report["accuracy"] = (net(x_test).argmax(1) == y_test).float().mean().item()
        if args.check:
            ref = single_process(initial, x_train, y_train, args, world)
            diff = (params - ref).abs()
            report["max_abs_difference_to_single_process"] = diff.max().item()
            report["max_parameter"] = ref.abs().max().item()
        print(json.dumps({k: v for k, v in report.items() if k != "rank0_losses"}))
        if args.out:
            Path(args.out).write_text(json.dumps(report))
    dist.destroy_process_group()
    leave()


def single_process(initial, x_train, y_train, args, world: int) -> torch.Tensor:
    """The same training in one process: per global batch, one forward per rank's slice (the
    statistics each rank's BatchNorm saw), the mean of the slice losses (DDP averages the
    gradients), PyTorch's own backward."""
    model = copy.deepcopy(initial)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    per_rank = args.batch_size // world
    for index in global_batches(len(x_train), args.steps, args.batch_size, args.seed):
        loss = sum(F.cross_entropy(model(x_train[s]), y_train[s])
                   for s in index[:per_rank * world].split(per_rank)) / world
        opt.zero_grad()
        loss.backward()
        opt.step()
    return flat_parameters(model)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2, help="processes to spawn (not torchrun)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=64, help="global batch (split evenly)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--devices", type=lambda s: [int(v) for v in s.split(",")], default=None,
                    help="Vulkan device index per local rank, e.g. 0,1,2,3 or 0,0")
    ap.add_argument("--check", action="store_true",
                    help="compare with one process over the same global batches")
    ap.add_argument("--out", help="write rank 0's report (JSON) here")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.nproc < 1 or args.steps < 1:
        ap.error("--nproc and --steps must be at least 1")
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    found = len(pyvkgrad.devices())
    if args.devices is not None and (not all(0 <= d < found for d in args.devices)
                                     or (not torchrun and len(args.devices) < args.nproc)):
        ap.error(f"--devices needs an index in [0, {found}) for each process, got "
                 f"{args.devices}")
    if torchrun:
        dist.init_process_group("gloo")
        worker(dist.get_rank(), dist.get_world_size(), args, 0)
        return 0
    torch.multiprocessing.spawn(worker, args=(args.nproc, args, free_port()),
                                nprocs=args.nproc, join=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
