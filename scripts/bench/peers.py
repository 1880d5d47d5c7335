"""Python peers of libtrain's workload benchmark (mnist, resnet18, transformer, gru): DDP with the
data resident on the device, in three modes, printing one JSON line per run. Not part of libtrain;
torch only.

  eager    plain DDP, torch.optim's default optimizers
  graph    the whole step (forward, backward with DDP's all-reduce, optimizer) captured in one CUDA
           graph, as PyTorch's CUDA Graphs notes do it: DDP built under a side stream, 11 eager
           warm-up iterations there, capturable fused optimizers (SGD fused, AdamW fused+capturable,
           Adadelta capturable) with the rate in a device tensor that the per-step schedule fills
           before each replay
  compile  torch.compile(DDP(model), mode="max-autotune"); a failure is reported, not fatal

usage (one process per rank: torchrun, or --spawn N which starts N ranks itself):
  torchrun --nproc_per_node 2 scripts/bench/peers.py --workload resnet18 --mode eager,graph \\
      --precision fp32,bf16 --batch-size 128,512 --steps 50 --warmup 15 --device cuda
--mode, --precision and --batch-size take comma lists: every combination runs in this one process
group (one start-up for many rows). Throughput: samples/s over the timed `--steps` steps after
`--warmup` steps (graph: after the 11 eager warm-up iterations and the capture, --warmup replays).
The transformer rows add tokens_per_sec and mfu (FLOPs per sequence: bench_models.py); the gru
rows add model_params (--features, --hidden and --seq-len size it, as gru_bench's flags do):
  torchrun --nproc_per_node 2 scripts/bench/peers.py --workload gru --mode eager,graph \
      --precision fp32,bf16 --batch-size 64,512 --steps 300 --warmup 30 --device cuda
On the CPU (--device cpu, Gloo: validation only) graph mode runs its step uncaptured and says so.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models as bm  # noqa: E402

GRAPH_WARMUP_ITERS = 11  # what the CUDA Graphs notes ask of DDP before capture

# Dense peaks in TFLOP/s by card (NVIDIA's datasheets, without sparsity): bf16 tensor, tf32 tensor,
# fp32 non-tensor. The first name that the device's name contains wins.
PEAK_TFLOPS = [
    ("H100 PCIe", {"bf16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("H100 NVL", {"bf16": 835.0, "tf32": 417.5, "fp32": 60.0}),
    ("H100", {"bf16": 989.0, "tf32": 494.7, "fp32": 67.0}),  # SXM
    ("H200", {"bf16": 989.0, "tf32": 494.7, "fp32": 67.0}),
    ("H20", {"bf16": 148.0, "tf32": 74.0, "fp32": 44.0}),
    ("A100", {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.05, "tf32": 183.0, "fp32": 91.6}),
]


def peak_tflops(device_name, precision):
    """The card's dense peak for the precision the matmuls ran in (fp32 = no TF32), or None."""
    for key, peaks in PEAK_TFLOPS:
        if key in device_name:
            return peaks[precision]
    return None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=["mnist", "resnet18", "transformer", "gru"], required=True)
    p.add_argument("--mode", default="eager", help="comma list of eager, graph, compile")
    p.add_argument("--precision", default="fp32", help="comma list of fp32, bf16 (bf16 autocast)")
    p.add_argument("--batch-size", default="64", help="per rank; comma list")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--samples", type=int, default=0, help="resident training samples per rank "
                   "(default: enough for the run without repeats, at most 50000)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--lr", type=float, default=0.0, help="base rate (default: the recipe's)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="CPU threads per rank")
    p.add_argument("--compile-mode", default="max-autotune")
    p.add_argument("--spawn", type=int, default=0, help="start this many ranks here (instead of torchrun)")
    p.add_argument("--profile", default="", help="folder: a torch-profiler trace of the timed steps per row "
                   "and rank (scripts/bench/trace_summary.py sums its kernels)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--seq-len", type=int, default=0, help="transformer: tokens per sequence (default 256); "
                   "gru: time steps per sequence (default 32)")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--features", type=int, default=4, help="gru: features per time step")
    p.add_argument("--hidden", type=int, default=32, help="gru: hidden units")
    a = p.parse_args(argv)
    a.modes = [m for m in a.mode.split(",") if m]
    a.precisions = [m for m in a.precision.split(",") if m]
    for m in a.modes:
        if m not in ("eager", "graph", "compile"):
            p.error(f"--mode: expected eager, graph or compile, found '{m}'")
    for m in a.precisions:
        if m not in ("fp32", "bf16"):
            p.error(f"--precision: expected fp32 or bf16, found '{m}'")
    try:
        a.batch_sizes = [int(b) for b in a.batch_size.split(",") if b]
    except ValueError:
        p.error(f"--batch-size: expected positive integers separated by commas, found '{a.batch_size}'")
    if not a.batch_sizes or min(a.batch_sizes) < 1:
        p.error(f"--batch-size: expected positive integers, found '{a.batch_size}'")
    if a.steps < 1 or a.warmup < 0:
        p.error(f"--steps must be >= 1 and --warmup >= 0, found {a.steps} and {a.warmup}")
    if a.workload == "transformer" and a.d_model % a.heads:
        p.error(f"--d-model {a.d_model} must be a multiple of --heads {a.heads}")
    a.seq_len = a.seq_len or (32 if a.workload == "gru" else 256)
    if a.workload == "gru" and (a.seq_len < 2 or a.features < 1 or a.hidden < 1):
        p.error(f"gru: expected --seq-len >= 2 (the rule compares two halves), --features and --hidden >= 1, "
                f"found {a.seq_len}, {a.features} and {a.hidden}")
    return a


class Run:
    """One mode x precision x batch size on this rank: builds the model, the DDP wrapper, the
    optimizer and the step, runs warm-up + timed steps, returns the row (rank 0) or None."""

    def __init__(self, a, wl, mode, precision, batch, world, rank, dev):
        self.a, self.wl, self.mode, self.precision, self.batch = a, wl, mode, precision, batch
        self.world, self.rank, self.dev = world, rank, dev
        self.total = GRAPH_WARMUP_ITERS + a.warmup + a.steps + 1
        n = a.samples or min(50000, max(batch * 4, batch * self.total))
        self.n = max(n, batch)
        self.x, self.y = wl.data(self.n, dev, a.seed + 17 * rank)
        self.steps_per_epoch = max(1, self.n // batch)
        self.step_no = 0

    def autocast(self):
        # A captured graph can't keep autocast's cast cache (PyTorch's CUDA Graphs notes): off in graph mode.
        return torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.precision == "bf16",
                              cache_enabled=self.mode != "graph")

    def batch_at(self, i):
        j = (i % self.steps_per_epoch) * self.batch
        return self.x[j:j + self.batch], self.y[j:j + self.batch]

    def ddp(self, model):
        if self.world == 1:
            return model
        ids = [self.dev.index] if self.dev.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def set_lr(self, opt):
        lr = self.wl.lr_at(self.step_no, self.total, self.steps_per_epoch)
        for g in opt.param_groups:
            if torch.is_tensor(g["lr"]):
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr

    def eager_step(self, net, opt, x, y):
        self.set_lr(opt)
        opt.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.wl.loss(net(x), y)
        loss.backward()
        opt.step()
        self.step_no += 1
        return loss

    def build(self):
        """Returns (step function of the step number, note)."""
        torch.manual_seed(self.a.seed)
        model = self.wl.model().to(self.dev)
        if self.mode == "graph":
            return self.build_graph(model)
        net = self.ddp(model)
        note = ""
        if self.mode == "compile":
            net = torch.compile(net, mode=self.a.compile_mode)
            note = f"torch.compile mode={self.a.compile_mode}"
        opt = self.wl.optimizer(model.parameters(), graph=False, dev=self.dev)
        return (lambda i: self.eager_step(net, opt, *self.batch_at(i))), note

    def build_graph(self, model):
        sx, sy = (t.clone() for t in self.batch_at(0))
        if self.dev.type != "cuda":
            net = self.ddp(model)
            opt = self.wl.optimizer(model.parameters(), graph=True, dev=self.dev)
            return (lambda i: self.eager_step(net, opt, *self.batch_at(i))), \
                "cpu: no CUDA graphs, the graph mode's optimizers run uncaptured (validation only)"
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            net = self.ddp(model)  # DDP built under a side stream
            opt = self.wl.optimizer(model.parameters(), graph=True, dev=self.dev)
            for i in range(GRAPH_WARMUP_ITERS):
                x, y = self.batch_at(i)
                sx.copy_(x), sy.copy_(y)
                self.eager_step(net, opt, sx, sy)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            with self.autocast():
                static_loss = self.wl.loss(net(sx), sy)
            static_loss.backward()
            opt.step()

        def replay(i):
            x, y = self.batch_at(i)
            sx.copy_(x), sy.copy_(y)
            self.set_lr(opt)  # the schedule's rate, into the device tensor the graph reads
            graph.replay()
            self.step_no += 1
            return static_loss

        return replay, f"CUDA graph after {GRAPH_WARMUP_ITERS} eager DDP iterations under a side stream"

    def sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)

    def run(self):
        t_build = time.perf_counter()
        step, note = self.build()
        first = last = None
        for i in range(self.a.warmup):
            loss = step(self.step_no)
            first = loss.detach().float().item() if first is None else first
        self.sync()
        if self.world > 1:
            dist.barrier()
        setup_s = time.perf_counter() - t_build
        prof = self.profiler()
        t0 = time.perf_counter()
        for i in range(self.a.steps):
            loss = step(self.step_no)
        self.sync()
        seconds = time.perf_counter() - t0
        if prof is not None:
            prof.__exit__(None, None, None)
            os.makedirs(self.a.profile, exist_ok=True)
            prof.export_chrome_trace(os.path.join(
                self.a.profile, f"{self.wl.name}-{self.mode}-{self.precision}-b{self.batch}-rank{self.rank}.json"))
        last = loss.detach().float().item()
        return self.row(seconds, setup_s, first, last, note)

    def profiler(self):
        """A started torch profiler over the timed steps when --profile is given (the timed rate
        then includes the profiler's cost: compare kernels, not that row's rate)."""
        if not self.a.profile:
            return None
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.dev.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(activities=acts)
        prof.__enter__()
        return prof

    def row(self, seconds, setup_s, first, last, note):
        sps = self.a.steps * self.batch * self.world / seconds
        r = {"workload": self.wl.name, "impl": "python", "mode": self.mode, "precision": self.precision,
             "world_size": self.world, "batch_size": self.batch, "images_per_sec": round(sps, 1),
             "steps": self.a.steps, "warmup": self.a.warmup, "seconds": round(seconds, 4),
             "setup_seconds": round(setup_s, 2), "first_loss": first, "last_loss": last,
             "device": torch.cuda.get_device_name(self.dev) if self.dev.type == "cuda" else "cpu",
             "torch": torch.__version__}
        if note:
            r["note"] = note
        if self.wl.name == "transformer":
            r["tokens_per_sec"] = round(sps * self.a.seq_len, 1)
            r["flops_per_seq"] = self.wl.flops_per_sample()
            peak = peak_tflops(r["device"], self.precision)
            # per card: each rank's sequences/s x FLOPs per sequence / the card's dense peak
            r["mfu"] = round(sps / self.world * r["flops_per_seq"] / (peak * 1e12), 4) if peak else None
            r["model_params"] = bm.transformer_params(*self.wl.dims)[0]
        if self.wl.name == "gru":
            r["model_params"] = bm.gru_params(*self.wl.dims)
            r["seq_len"] = self.a.seq_len
        return r


def set_precision_flags(dev):
    """fp32 is fp32: no TF32 in cuBLAS or cuDNN (libtrain's --precision fp32 does the same)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = False


def emit(rank, row):
    if rank == 0 and row is not None:
        print(json.dumps(row), flush=True)


def run_all(a, world, rank, dev):
    wl = bm.Workload(a.workload, a)
    set_precision_flags(dev)
    for mode in a.modes:
        for precision in a.precisions:
            for batch in a.batch_sizes:
                r = Run(a, wl, mode, precision, batch, world, rank, dev)
                try:
                    row = r.run()
                except Exception as e:  # compile's failures are reported, not fatal; the rest re-raise
                    if mode != "compile":
                        raise
                    msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                    print(f"peers.py: torch.compile failed for {a.workload} {precision} batch {batch}: {msg}; "
                          "no row for it", file=sys.stderr, flush=True)
                    row = {"workload": a.workload, "impl": "python", "mode": mode, "precision": precision,
                           "world_size": world, "batch_size": batch, "images_per_sec": None, "error": msg}
                emit(rank, row)
                del r
                if dev.type == "cuda":
                    torch.cuda.empty_cache()


def rank_main(a, world, rank, local_rank):
    torch.set_num_threads(a.threads)
    dev = torch.device(f"cuda:{local_rank}" if a.device == "cuda" else "cpu")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("peers.py: --device cuda but torch sees no GPU; pass --device cpu to validate on the CPU")
        torch.cuda.set_device(dev)
    if world > 1:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=world,
                                device_id=dev if dev.type == "cuda" else None)
    try:
        run_all(a, world, rank, dev)
    finally:
        if world > 1:
            dist.destroy_process_group()


def spawned(rank, a, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    rank_main(a, world, rank, rank)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = parse_args()
    if a.spawn > 1:
        import torch.multiprocessing as mp
        mp.spawn(spawned, args=(a, a.spawn, free_port()), nprocs=a.spawn, join=True)
        return
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank_main(a, world, int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")))


if __name__ == "__main__":
    main()
