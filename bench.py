"""Benchmark one training step (forward + backward + AdamW) of the crammed BERT on this machine.

    python bench.py --preset paper                               # GPU: tokens/s, TFLOP/s, MFU, peak memory
    python bench.py --preset paper --micro_batch 32 --rounds 3   # CPU: also the fp32 matmul ceiling, same run
    python bench.py --preset tiny --hf                           # + Hugging Face BertForMaskedLM, same shape
    python bench.py --preset paper --official ../cramming        # + the paper's own model (a clone of its repository)
    python bench.py --preset paper --narrow 4,8,12               # + NarrowBERT: the last N blocks narrow, each N
    python bench.py --preset paper --profile                     # + where the step's time goes, kernel by kernel
    python bench.py --memory                                     # per-GPU bytes of DDP and --shard, by arithmetic
    python bench.py --preset paper --finetune 1,5 --seq_len 64   # fine-tuning: 1 seed, 5 seeds as one model

Every candidate runs in the precision train() would pick here (hardware.amp_dtype: bf16 from Ampere on, mostly fp16
before it, fp32 on a CPU), so a ratio compares code, not precisions; on a GPU each also gets its own peak memory.

Timings on a shared CPU are noisy, so the candidates (ours, the matmul ceiling, transformers' BERT) are run
interleaved, `--rounds` times, and only ratios taken within one round are reported (their median).
FLOPs per token follow docs/recipe.md: 6 * non-embedding parameters + 12 * L * d * T + 6 * d * V * mask_rate.
"""
import argparse
import os
import statistics
import sys
import time
from dataclasses import replace

import torch

import cram
import hardware


def autocast(device):
    return hardware.autocast(device, hardware.amp_dtype(device))


def timed(fn, warmup, steps, device):
    """Seconds per call of fn, after warm-up (compile, allocator, caches)."""
    for _ in range(warmup):
        fn()
    getattr(torch, device.type).synchronize()  # a GPU (CUDA, Apple's mps) runs queued work later: wait for it
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    getattr(torch, device.type).synchronize()
    return (time.perf_counter() - t0) / steps


KINDS = {"matmul": ("gemm", "nvjet", "cutlass", "xmma", "addmm", "aten::mm", "aten::bmm", "linear"),
         "attention": ("flash", "fmha", "sdpa", "attention"), "optimizer": ("adam", "multi_tensor", "foreach"),
         "fused by torch.compile (Triton)": ("triton",),
         "copies and casts": ("copy", "memcpy", "memset", "fill", "clone", "catarray", "aten::cat")}


def kind_of(name):
    """A kernel's (an operator's) kind, by the words in its name: KINDS, else "other"."""
    return next((k for k, words in KINDS.items() if any(w in name.lower() for w in words)), "other")


def profile(fn, device, steps=3):
    """Where a step's time goes (torch.profiler): on a GPU its kernels' time, on a CPU its operators' own time, summed
    by name and by kind (matmuls, attention, optimizer, compiled fusions, copies and casts, the rest), and how many a
    step (a small step's kernels can cost more in number than in bytes). The first step of a change."""
    from torch.profiler import ProfilerActivity
    gpu = device.type == "cuda"
    with torch.profiler.profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * gpu) as prof:
        for _ in range(steps):
            fn()
        getattr(torch, device.type).synchronize()
    if gpu:  # kernels; the optimizer's own range ("Optimizer.step#...") is a label over its kernels, not one
        times = [(e.name, e.time_range.elapsed_us()) for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA and "#" not in e.name]
        count = len(times)
    else:
        times = [(e.key, e.self_cpu_time_total) for e in prof.key_averages()]
        count = sum(e.count for e in prof.key_averages())
    by_name, by_kind = {}, {}
    for name, us in times:
        kind = kind_of(name)
        by_name[name], by_kind[kind] = by_name.get(name, 0) + us / steps, by_kind.get(kind, 0) + us / steps
    total = sum(by_kind.values())
    print(f"profile: {total / 1e3:.2f} ms of {'GPU kernels' if gpu else 'CPU operators'} a step ({count / steps:,.0f} "
          "of them), by kind: " +
          ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])))
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1])
    for name, us in ranked[:12]:
        print(f"  {100 * us / total:5.1f}%  {us / 1e3:8.3f} ms  {name[:110]}")
    for kind in sorted(set(by_kind) - {kind_of(name) for name, _ in ranked[:12]}):  # a kind without a top-12 line:
        name, us = next((n, us) for n, us in ranked if kind_of(n) == kind)          # its largest
        print(f"  {100 * us / total:5.1f}%  {us / 1e3:8.3f} ms  {name[:110]} (the largest of {kind})")


def max_rss_gib():
    """The process's peak resident memory in GiB, or None on Windows, which has no resource module."""
    try:
        import resource  # Unix only: imported here, so that bench.py starts on Windows too
    except ImportError:
        return None
    unit = 2**30 if sys.platform == "darwin" else 2**20  # ru_maxrss counts bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / unit


def train_step(model, optimizer, cfg, vocab, T, device, compile_, accum, loss_of):
    """A closure running one optimizer step (accum micro-batches) of model on random tokens, as train() does: masked
    by cram.mask_tokens, in train()'s precision, clipped, AdamW. loss_of(compiled model, inputs, positions, targets)."""
    step_model = torch.compile(model) if compile_ else model
    scaler = torch.amp.GradScaler(device.type, enabled=hardware.amp_dtype(device) == torch.float16)
    ids = torch.randint(5, vocab, (cfg.micro_batch, T), device=device)
    gen = torch.Generator(device=device).manual_seed(0)

    def step():
        for _ in range(accum):
            inputs, positions, targets = cram.mask_tokens(ids, 4, vocab, cfg.mask_rate, gen)
            with autocast(device):
                loss = loss_of(step_model, inputs, positions, targets) / accum
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    return step


def ours(cfg, vocab, T, device, compile_, accum):
    """cram.py's model and optimizer in train_step; returns (step, FLOPs per token)."""
    model = cram.CrammedBERT(cfg, vocab, T).to(device)
    step = train_step(model, cram.make_optimizer(model, cfg, device), cfg, vocab, T, device, compile_, accum,
                      lambda m, inputs, positions, targets: m(inputs, positions, targets))
    return step, cram.flops_per_token(model, cfg, T)


def hf_bert(cfg, vocab, T, device, accum):
    """transformers' BertForMaskedLM at the same depth, width and batch (SDPA attention, no dropout)."""
    from transformers import BertConfig, BertForMaskedLM
    bert_cfg = BertConfig(vocab_size=vocab, hidden_size=cfg.n_embd, num_hidden_layers=cfg.n_layer,
                          num_attention_heads=cfg.n_head, intermediate_size=cfg.ffn_hidden, max_position_embeddings=T,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
    model = BertForMaskedLM(bert_cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, vocab, (cfg.micro_batch, T), device=device)
    labels = torch.where(torch.rand(ids.shape, device=device) < cfg.mask_rate, ids, -100)

    scaler = torch.amp.GradScaler(device.type, enabled=hardware.amp_dtype(device) == torch.float16)

    def step():
        for _ in range(accum):
            with autocast(device):  # the same precision, and loss scaling, as ours
                loss = model(input_ids=ids, labels=labels).loss / accum
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    return step


def official_model(cfg, vocab, T, device, folder, compile_, accum):
    """The paper's own model class, read from its source folder (github.com/JonasGeiping/cramming: cloned by the user,
    never copied here), at our shape: its crammed-bert.yaml with our depth, width, heads and FFN, dropout off, sparse
    prediction at our mask rate; its step as ours (compiled alike, the same precision). Its package's __init__ imports
    hydra and its data code, so only the architectures folder is imported, as a package of its own."""
    import importlib
    import types
    try:
        from omegaconf import OmegaConf
        for name, path in (("cramming", ""), ("cramming.architectures", "architectures")):
            package = sys.modules.setdefault(name, types.ModuleType(name))  # __path__ only: no __init__ runs
            package.__path__ = [os.path.join(folder, "cramming", path)]
        crammed = importlib.import_module("cramming.architectures.crammed_bert")
        root = OmegaConf.create({"arch": OmegaConf.load(os.path.join(folder, "cramming/config/arch/crammed-bert.yaml")),
                                 "train": {"objective": {"mlm_probability": cfg.mask_rate}}})
    except (ImportError, OSError) as e:
        raise SystemExit(f"bench.py: error: --official {folder}: {e} (it needs the cramming repository's folder, and "
                         "pip install transformers omegaconf einops)")
    arch = root.arch
    arch.update(num_transformer_layers=cfg.n_layer, hidden_size=cfg.n_embd, intermed_size=cfg.ffn_hidden,
                hidden_dropout_prob=0.0)
    arch.embedding.update(dropout_prob=0.0, max_seq_length=T)
    arch.attention.update(num_attention_heads=cfg.n_head, dropout_prob=0.0)
    model = crammed.construct_crammed_bert(arch, vocab).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type in ("cuda", "cpu"))

    def loss_of(m, inputs, positions, targets):  # its labels: the target at each masked position, -100 elsewhere
        return m(inputs, labels=torch.full_like(inputs, -100).scatter(1, positions, targets))["loss"]
    return train_step(model, optimizer, cfg, vocab, T, device, compile_, accum, loss_of)


def finetune_runs(cfg, vocab, T, device, seeds, warmup, steps, compile_):
    """--finetune: the step of `seeds` fine-tuning runs trained as one model, as finetune_glue.py steps them
    (hardware.together, finetune_glue.training_step: the checkpoint's encoder and a fresh head, the paper's recipe:
    batch 16, dropout 0.1, AdamW; on a CUDA GPU a graph) on a batch of T-token pairs. Seconds a step, divided by
    `seeds`: the cost of one run's step. compile_: under torch.compile, as finetune_glue.py --compile (its default for
    a long run: hardware.fine_tuning_plan). Returns (seconds, seconds of the warm-up steps: compiling, recording
    graphs, the step on its batch: for profile)."""
    import finetune_glue
    from classifier import GlueModel
    args, models = argparse.Namespace(**finetune_glue.PAPER), []
    for seed in range(seeds):
        torch.manual_seed(seed)
        encoder = cram.CrammedBERT(replace(cfg, dropout=args.dropout), vocab, T)
        models.append(GlueModel(encoder, cfg.n_embd, 2, args.head_hidden, args.dropout, "cls", 3, True))
    params, forward, _ = hardware.together(models, device)
    step = finetune_glue.training_step(hardware.compile_forward(forward) if compile_ else forward, params, args,
                                       device)[0]
    shape = (seeds, args.batch_size, T)
    batch = (torch.randint(5, vocab, shape, device=device), torch.ones(shape, dtype=torch.bool, device=device),
             torch.randint(0, 2, shape[:2], device=device), torch.ones(shape[:2], device=device))
    t0 = time.perf_counter()
    seconds = timed(lambda: step(*batch), warmup, steps, device)
    return seconds / seeds, time.perf_counter() - t0 - steps * seconds, lambda: step(*batch)


def matmul(device, n=4096):
    """The device's own ceiling: an n x n matmul in the training precision; returns (fn, FLOPs per call). Tests pass a
    small n: a CPU without native bf16 emulates it (a 1024^3 bf16 matmul: 2.1 s vs 0.007 s with AMX, notes)."""
    dtype = hardware.amp_dtype(device) or torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    return (lambda: a @ b), 2 * n ** 3


def memory(pcie=25e9, reserved=3e9):
    """Per-GPU bytes of the training state, by arithmetic: fp32 weights (4 bytes a parameter), gradients (4) and
    AdamW's two moments (8); activations come on top. DDP holds all of them on every GPU; cram.py --shard holds
    1/world of each, plus the whole gradient (4 bytes a parameter) that sums, unsharded, over a step's micro-batches
    before the last (FSDP2's set_requires_gradient_sync). --offload moves the shards to CPU memory: each micro-batch
    copies them to the GPU for its forward and again for its backward (PCIe: `pcie` bytes/s, 25e9 for 4.0 x16)."""
    print(f"memory by arithmetic, not measured (GB = 1e9 bytes; PCIe at {pcie / 1e9:.0f} GB/s): weights + gradients + "
          "Adam moments per GPU")
    shapes = {"16 x 768 (paper)": {}, "24 x 1024": dict(n_layer=24, n_embd=1024, n_head=16, ffn_hidden=4096)}
    for name, shape in shapes.items():
        with torch.device("meta"):
            n = sum(p.numel() for p in cram.CrammedBERT(replace(cram.Config(), **shape), 32768, 128).parameters())
        print(f"{name}: {n / 1e6:.1f}M parameters | 1 GPU, or DDP on any number: {16 * n / 1e9:.2f} GB")
        for world in (2, 4, 8):
            weights, grads, adam = 4 * n / world, 4 * n / world + 4 * n, 8 * n / world
            print(f"  --shard on {world}: {weights / 1e9:.2f} + {grads / 1e9:.2f} + {adam / 1e9:.2f} = "
                  f"{(weights + grads + adam) / 1e9:.2f} GB, {4 * n / 1e9:.2f} of it the whole gradient | --offload: "
                  f"{4 * n / 1e9:.2f} GB, {1e3 * 8 * n / world / pcie:.0f} ms of PCIe per micro-batch")
    print(f"the largest model whose training state fits beside {reserved / 1e9:.0f} GB of CUDA context and allocator "
          "(no room left for activations):")
    for gb in (16, 24, 48, 80):
        free = gb * 1e9 - reserved
        print(f"  {gb} GB: DDP {free / 16 / 1e9:.2f}B parameters | --shard " +
              ", ".join(f"on {w} {free / (4 + 16 / w) / 1e9:.2f}B" for w in (2, 4, 8)))


def main(argv=None):
    hardware.safe_console()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--preset", default="auto", choices=["auto", *cram.PRESETS],
                   help="cram.py preset whose model shape is timed")
    p.add_argument("--micro_batch", type=int, default=None, help="sequences per step (default: the preset's, "
                   "the paper's 0: as many as the GPU allows, as cram.py picks)")
    p.add_argument("--vocab_size", type=int, default=32768)
    p.add_argument("--seq_len", type=int, default=128)
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="default: on for CUDA where torch can compile, not on Windows")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step (training: batch / micro)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1, help="interleaved repetitions; medians are reported")
    p.add_argument("--hf", action="store_true", help="also time transformers' BertForMaskedLM (if installed)")
    p.add_argument("--official", metavar="DIR", help="also time the paper's own model: DIR is a clone of "
                   "github.com/JonasGeiping/cramming (needs transformers, omegaconf, einops)")
    p.add_argument("--narrow", default="", help="also time these NarrowBERT depths, e.g. 1 or 4,8,12 (cram --narrow)")
    p.add_argument("--matmul_size", type=int, default=4096, help="n of the n x n matmul that measures the ceiling")
    p.add_argument("--memory", action="store_true", help="print the memory arithmetic of DDP and --shard, and stop")
    p.add_argument("--profile", action="store_true", help="also profile our step: its time by kernel and by kind")
    p.add_argument("--finetune", default="", help="instead: fine-tuning steps of 1 or more seeds as one model, "
                   "e.g. 1,5 (batch 16 of --seq_len tokens each, as finetune_glue.py trains a task's seeds; "
                   "compiled only with --compile), and stop")
    args = p.parse_args(argv)
    if args.memory:
        return memory()
    cfg = cram.parse_config(["--preset", args.preset, "--device", args.device] + (
        ["--micro_batch", str(args.micro_batch)] if args.micro_batch is not None else []))
    cfg.batch_size = max(cfg.batch_size, cfg.micro_batch)  # bench times micro-batches, whatever the preset's target
    try:
        cram.check_config(cfg)
        device = cram.pick_device(args.device)
        compile_ = hardware.wants_compile(args.compile, device)
    except cram.CramError as e:
        raise SystemExit(f"bench.py: error: {e}")
    if min(args.accum, args.matmul_size, args.steps, args.rounds) < 1 or args.warmup < 0:
        raise SystemExit(f"bench.py: error: --accum, --matmul_size, --steps and --rounds must be >= 1, --warmup >= 0 "
                         f"(got {args.accum}, {args.matmul_size}, {args.steps}, {args.rounds}, {args.warmup})")
    try:
        narrow = [int(n) for n in args.narrow.split(",") if n.strip()]
        for n in narrow:
            cram.check_config(replace(cfg, narrow=n))
    except (ValueError, cram.CramError) as e:
        raise SystemExit(f"bench.py: error: --narrow {args.narrow!r}: {e}")
    if args.finetune:
        return finetune(cfg, args, device)
    if not cfg.micro_batch:  # the preset's 0: as many as the GPU allows, as cram.py picks (the model's size on "meta")
        with torch.device("meta"):
            model = cram.CrammedBERT(cfg, args.vocab_size, args.seq_len)
        cfg.micro_batch = hardware.fit_micro_batch(device, model, cfg, args.seq_len, compiled=compile_)
        if args.hf or args.official:  # half: HF's BERT took 2.1x our memory (27.2 vs 12.8 GiB at 256, docs/gpu.md)
            cfg.micro_batch = max(1, cfg.micro_batch // 2)  # 256 on an 80 GB GPU, 64 on a 16 GB T4
    T, tokens = args.seq_len, args.accum * cfg.micro_batch * args.seq_len
    print(f"bench: preset {cfg.preset} | L{cfg.n_layer} d{cfg.n_embd} V{args.vocab_size} T{T} | micro-batch "
          f"{cfg.micro_batch} x {args.accum} | {device} | compile {compile_} | torch {torch.__version__} | "
          f"{torch.get_num_threads()} threads")
    cuda = device.type == "cuda"
    allocated = lambda: torch.cuda.memory_allocated(device) if cuda else 0  # noqa: E731
    makers = {"ours": lambda: ours(cfg, args.vocab_size, T, device, compile_, args.accum),
              "matmul": lambda: matmul(device, args.matmul_size)}
    if args.hf:
        makers["hf"] = lambda: (hf_bert(cfg, args.vocab_size, T, device, args.accum), None)
    if args.official:
        makers["official"] = lambda: (official_model(cfg, args.vocab_size, T, device, args.official, compile_,
                                                     args.accum), None)
    for n in narrow:  # the same model with its last n blocks narrow
        makers[f"narrow{n}"] = lambda n=n: ours(replace(cfg, narrow=n), args.vocab_size, T, device, compile_,
                                                args.accum)
    candidates, work, mem = {}, {}, {}  # work: FLOPs per token (ours) or per call (matmul); mem: CUDA bytes
    for name, make in makers.items():
        before = allocated()
        try:
            candidates[name], work[name] = make()
        except ImportError:
            print("bench: transformers is not installed; skipping the BertForMaskedLM comparison")
            continue
        mem[name] = [allocated() - before]  # its weights; each round adds the peak of its steps
    flops, mm_flops = work["ours"], work["matmul"]
    results = {name: [] for name in candidates}
    for r in range(args.rounds):
        for name, fn in candidates.items():
            steps = args.steps if name != "matmul" else 50 if cuda else 3  # a CPU matmul takes ~1 s
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            base = allocated()
            results[name].append(timed(fn, args.warmup if r == 0 else 1, steps, device))
            mem[name].append(mem[name][0] + (torch.cuda.max_memory_allocated(device) - base if cuda else 0))
    med = {name: statistics.median(v) for name, v in results.items()}
    tok_s = tokens / med["ours"]
    achieved = tok_s * flops
    ceiling = mm_flops / med["matmul"]
    peak = hardware.device_peak_flops(device)
    print(f"ours:   {tok_s:12,.0f} tokens/s | {flops / 1e6:.0f} MFLOP/token | {achieved / 1e12:.3f} TFLOP/s | "
          f"{'MFU %.1f%%' % (100 * achieved / peak) if peak else 'MFU n/a (no known peak)'}")
    ratios = [(tokens * flops / o) / (mm_flops / m) for o, m in zip(results["ours"], results["matmul"])]
    mm_dtype = str(hardware.amp_dtype(device) or torch.float32)[6:]
    print(f"matmul: {ceiling / 1e12:.3f} TFLOP/s ({args.matmul_size}^2, {mm_dtype}) | "
          f"model FLOP/s over matmul ceiling: {100 * statistics.median(ratios):.1f}% (median of {args.rounds})")
    if "hf" in results:
        speedups = [h / o for h, o in zip(results["hf"], results["ours"])]
        print(f"hf:     {tokens / med['hf']:12,.0f} tokens/s | ours is {statistics.median(speedups):.2f}x faster "
              f"(median of {args.rounds}; per round {', '.join(f'{s:.2f}' for s in speedups)})")
    if "official" in results:
        speedups = [x / o for x, o in zip(results["official"], results["ours"])]
        print(f"official: {tokens / med['official']:10,.0f} tokens/s | the paper's own model (its code, this shape) | "
              f"ours at {statistics.median(speedups):.2f}x its tokens/s (median of {args.rounds}; per round "
              f"{', '.join(f'{s:.2f}' for s in speedups)})")
    for n in narrow:
        speedups = [o / x for o, x in zip(results["ours"], results[f"narrow{n}"])]
        print(f"narrow {n}: {tokens / med[f'narrow{n}']:10,.0f} tokens/s | {statistics.median(speedups):.2f}x the "
              f"tokens/s of narrow 0, {flops / work[f'narrow{n}']:.2f}x by FLOP count (median of {args.rounds}; "
              f"per round {', '.join(f'{s:.2f}' for s in speedups)})")
    if args.profile:
        profile(candidates["ours"], device)
    if cuda:  # what a training run with this micro-batch needs: weights, gradients, Adam moments, activations
        print("peak memory: " + ", ".join(f"{n} {max(m[1:]) / 2**30:.2f} GiB" for n, m in mem.items()) +
              " (CUDA allocated: each candidate's weights + the peak of its own steps)")
    else:
        rss = max_rss_gib()
        print(f"peak memory: {rss:.2f} GiB (process max RSS)" if rss is not None else "peak memory: n/a (Windows)")
    return tok_s


def finetune(cfg, args, device):
    """--finetune 1,5: ms a fine-tuning step of one run, for each number of seeds trained as one, and the paper's GLUE
    protocol at that pace (arithmetic: its 8 tasks' rows, 5 epochs, 5 seeds, batch 16, all at --seq_len tokens)."""
    import finetune_glue
    try:
        counts = [int(n) for n in args.finetune.split(",")]
        assert counts and min(counts) >= 1
    except (ValueError, AssertionError):
        raise SystemExit(f"bench.py: error: --finetune {args.finetune!r}: give seed counts >= 1, e.g. 1,5") from None
    protocol = finetune_glue.PROTOCOL_STEPS
    print(f"bench --finetune: preset {cfg.preset} | L{cfg.n_layer} d{cfg.n_embd} V{args.vocab_size} | batch 16 x "
          f"{args.seq_len} tokens | {device} | compile {bool(args.compile)} | torch {torch.__version__}")
    paces = {}
    for seeds in counts:
        if seeds > 1 and hardware.amp_dtype(device) == torch.float16:  # T4, V100: finetune_glue.py refuses it too
            print(f"{seeds} seeds as one model: not in fp16 (one loss scale would skip every seed's step)")
            continue
        paces[seeds], warm, step = finetune_runs(cfg, args.vocab_size, args.seq_len, device, seeds, args.warmup,
                                                 args.steps, bool(args.compile))
        first = next(iter(paces.values()))
        print(f"{seeds} seed{'s as one model' if seeds > 1 else ''}: {1e3 * paces[seeds]:.2f} ms a step of one run "
              f"({first / paces[seeds]:.2f}x the first) | the paper's protocol ({protocol:,} steps of one "
              f"run) at this pace ~ {protocol * paces[seeds] / 3600:.1f} h | its {args.warmup} warm-up steps "
              f"{warm:.1f} s" + " (compiling or recording graphs)" * (args.compile or hardware.use_cuda_graphs(device)))
        if args.profile:  # the whole step of all `seeds`, not one run's share
            profile(step, device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return paces


if __name__ == "__main__":
    main()
