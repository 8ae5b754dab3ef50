"""The DDP test: what one rank of ``torchrun`` runs (clustercert's probe.ddp_allreduce and probe.ddp_step).

Started by torchrun on every node of the launch, one process per rank, as ``python3 -c <this text> ARGS``
(``torchrun --no_python``): it initialises torch.distributed from torchrun's environment (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), checks the world size, the ranks and the
local ranks against what the profile expects (and, for a GPU backend, one GPU per process: the node's
GPU count), all-reduces a tensor filled with ``rank + 1`` ``--steps`` times, checks that every element
came back as ``world * (world + 1) / 2`` and times each step. Then (``--train-steps`` > 0) it trains: a
small MLP it builds itself (no download; ``--width``, ``--depth``, seeded so every rank starts alike) wrapped
in ``torch.nn.parallel.DistributedDataParallel`` (gradient buckets all-reduced during backward), forward +
backward + SGD step on a batch of its own (``--batch``), bf16 autocast on a GPU that supports it, float32
on the CPU. Each step is timed in two parts: the forward pass, which is the rank's own work (no collective:
broadcast_buffers=False), and the whole step (backward waits for the slowest rank's gradients); after the
last step the ranks compare a checksum of their parameters (DDP keeps the replicas identical). Every figure
it reports comes from torch itself (torch.__version__, torch.distributed.get_world_size/get_rank/get_backend,
the tensors' values, time.perf_counter around synchronised steps).

Each rank prints one line, ``CLUSTERCERT_DDP <json>``, and exits 0 when it found nothing wrong, 1 when
it did (the line's ``problems`` say what), 2 when torch.distributed could not start (``error``), 3 when
torch cannot be imported. Python 3.6 syntax, stdlib besides torch.
"""

import argparse
import datetime
import json
import os
import socket
import sys
import time
import traceback

MARK = "CLUSTERCERT_DDP "
ENV_KEYS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def _args(argv):
    p = argparse.ArgumentParser(prog="clustercert-ddp-smoke")
    p.add_argument("--backend", required=True)
    p.add_argument("--nnodes", type=int, required=True)
    p.add_argument("--ranks-per-node", type=int, required=True)
    p.add_argument("--gpus", type=int, default=0, help="GPUs per node a GPU backend must see (one per rank)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--numel", type=int, default=1 << 20)
    p.add_argument(
        "--timeout", type=float, default=120.0, help="init_process_group and collective timeout (s)"
    )
    p.add_argument(
        "--train-steps", type=int, default=0, help="DDP training steps after a warm-up one (0: none)"
    )
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    return p.parse_args(argv)


def _emit(report):
    sys.stdout.write(MARK + json.dumps(report, sort_keys=True) + "\n")
    sys.stdout.flush()


def _problems(args, report, gathered):
    """What is wrong with the launch, in words (an empty list: nothing)."""
    out = []
    world, local_world = report["world_size"], report["local_world_size"]
    expected = args.nnodes * args.ranks_per_node
    if world != expected:
        out.append(f"world size {world} (torch.distributed.get_world_size), expected {args.nnodes} nodes x "
                   f"{args.ranks_per_node} ranks = {expected}")
    if local_world != args.ranks_per_node:
        out.append(f"{local_world} processes on {report['host']} (LOCAL_WORLD_SIZE, torchrun "
                   f"--nproc_per_node), the profile expects {args.ranks_per_node} per node")
    ranks = sorted(g["rank"] for g in gathered)
    if ranks != list(range(world)):
        out.append(f"ranks {ranks}, expected 0..{world - 1} once each")
    by_host = {}
    for g in gathered:
        by_host.setdefault(g["host"], []).append(g["local_rank"])
    for host, locals_ in sorted(by_host.items()):
        n = len(locals_)
        if sorted(locals_) != list(range(n)):
            out.append(f"local ranks {sorted(locals_)} on {host}, expected 0..{n - 1}")
    if len(by_host) != args.nnodes:
        out.append(
            f"ranks on {len(by_host)} hosts ({', '.join(sorted(by_host))}), expected {args.nnodes} nodes"
        )
    return out


def _train(torch, dist, args, device):
    """DDP steps on a small MLP: per step the forward time (the rank's own work) and the whole step's."""
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    layers = []
    for _ in range(args.depth):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.width, 1)).to(device)
    on_gpu = device != "cpu"
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[torch.cuda.current_device()] if on_gpu else None, broadcast_buffers=False)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1 + dist.get_rank())  # each rank its own shard of data
    x = torch.randn(args.batch, args.width, generator=gen).to(device)
    y = torch.randn(args.batch, 1, generator=gen).to(device)
    bf16 = on_gpu and torch.cuda.is_bf16_supported()

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    forward_ms, step_ms, losses = [], [], []
    for step in range(args.train_steps + 1):  # the first is a warm-up (DDP builds its buckets), not timed
        sync()
        t0 = time.perf_counter()
        opt.zero_grad()
        if bf16:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(ddp(x).float(), y)
        else:
            loss = torch.nn.functional.mse_loss(ddp(x), y)
        sync()
        t1 = time.perf_counter()
        loss.backward()  # DDP's hooks all-reduce the gradient buckets here
        opt.step()
        sync()
        t2 = time.perf_counter()
        if step:
            forward_ms.append(round((t1 - t0) * 1000.0, 3))
            step_ms.append(round((t2 - t0) * 1000.0, 3))
            losses.append(float(loss.item()))
    with torch.no_grad():
        checksum = torch.stack([p.double().sum() for p in model.parameters()]).sum().reshape(1)
    lo, hi = checksum.clone(), checksum.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return {"steps": args.train_steps, "forward_ms": forward_ms, "step_ms": step_ms, "loss_first": losses[0],
            "loss_last": losses[-1], "dtype": "bfloat16" if bf16 else "float32", "device": device,
            "params": sum(p.numel() for p in model.parameters()),
            "checksum_min": float(lo.item()), "checksum_max": float(hi.item()),
            "replicas_in_sync": float(lo.item()) == float(hi.item())}


def _cuda_device(torch, args, local_rank, report):
    """This rank's GPU (set as torch's device), or None when the node has fewer GPUs than processes; a GPU
    count other than the profile's is a problem."""
    gpus = torch.cuda.device_count()
    report["cuda_devices"] = gpus
    if args.gpus and gpus != args.gpus:
        report["problems"].append(f"torch sees {gpus} GPUs on {report['host']}, the profile says {args.gpus}")
    if local_rank >= gpus:
        report["problems"].append(f"local rank {local_rank} has no GPU of its own on {report['host']} "
                                  f"({gpus} GPUs): more processes than GPUs")
        return None
    torch.cuda.set_device(local_rank)
    return f"cuda:{local_rank}"


def _allreduce(torch, dist, args, device, rank, world):
    """all_reduce of rank+1 over every rank, ``args.steps`` times timed (after a warm-up): the result each
    rank holds, what it should be, and the step times."""
    expected = world * (world + 1) / 2.0
    t = torch.empty(args.numel, dtype=torch.float32, device=device)
    step_ms = []
    for step in range(args.steps + 1):  # the first is a warm-up, not timed
        t.fill_(float(rank + 1))
        if device != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        if device != "cpu":
            torch.cuda.synchronize()
        if step:
            step_ms.append(round((time.perf_counter() - t0) * 1000.0, 3))
    got_min, got_max = float(t.min().item()), float(t.max().item())
    ok = got_min == expected and got_max == expected
    return {"expected": expected, "min": got_min, "max": got_max, "ok": ok, "numel": args.numel,
            "bytes": args.numel * 4, "step_ms": step_ms}


def _exercise(torch, dist, args, env, report, device, local_rank):
    """With the process group up: who is who (ranks, local ranks, hosts), the all_reduce and the DDP steps,
    each wrong answer a problem in ``report``."""
    rank, world = dist.get_rank(), dist.get_world_size()
    report.update(rank=rank, world_size=world, local_rank=local_rank, backend=str(dist.get_backend()),
                  local_world_size=int(env.get("LOCAL_WORLD_SIZE", "0")), device=device)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "local_rank": local_rank, "host": report["host"]})
    report["problems"] += _problems(args, report, gathered)
    ar = report["allreduce"] = _allreduce(torch, dist, args, device, rank, world)
    if not ar["ok"]:
        report["problems"].append(f"all_reduce of rank+1 over {world} ranks gave "
                                  f"{ar['min']:g}..{ar['max']:g}, expected {ar['expected']:g}")
    if args.train_steps > 0:
        report["ddp"] = _train(torch, dist, args, device)
        if not report["ddp"]["replicas_in_sync"]:
            report["problems"].append(f"parameters differ between ranks after {args.train_steps} DDP steps "
                                      f"(checksums {report['ddp']['checksum_min']:g}.."
                                      f"{report['ddp']['checksum_max']:g})")
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None):
    args = _args(sys.argv[1:] if argv is None else argv)
    env = os.environ
    report = {"host": socket.gethostname(), "pid": os.getpid(), "env": {k: env.get(k) for k in ENV_KEYS},
              "problems": [], "source": "torch.distributed"}
    try:
        import torch
        import torch.distributed as dist
    except Exception as exc:  # noqa: BLE001 - said in the report
        report["error"] = f"cannot import torch: {type(exc).__name__}: {exc}"
        _emit(report)
        return 3
    report["torch"] = torch.__version__
    device = "cpu"
    try:
        local_rank = int(env.get("LOCAL_RANK", "0"))
        if args.backend == "nccl":
            device = _cuda_device(torch, args, local_rank, report)
            if device is None:
                _emit(report)
                return 1
        dist.init_process_group(backend=args.backend, timeout=datetime.timedelta(seconds=args.timeout))
    except Exception as exc:  # noqa: BLE001 - said in the report
        report["error"] = f"init_process_group({args.backend}) failed: {type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()[-2000:]
        _emit(report)
        return 2
    try:
        _exercise(torch, dist, args, env, report, device, local_rank)
    except Exception as exc:  # noqa: BLE001 - said in the report
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()[-2000:]
        _emit(report)
        return 2
    _emit(report)
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
