"""Benchmark one training step (forward + backward + AdamW) of the crammed BERT on this machine.

    python bench.py --preset paper --micro_batch 128             # GPU: tokens/s, TFLOP/s, MFU, peak memory
    python bench.py --preset paper --micro_batch 32 --rounds 3   # CPU: also the fp32 matmul ceiling, same run
    python bench.py --preset tiny --hf                           # + Hugging Face BertForMaskedLM, same shape

Timings on a shared CPU are noisy, so the candidates (ours, the matmul ceiling, transformers' BERT) are run
interleaved, `--rounds` times, and only ratios taken within one round are reported (their median).
FLOPs per token follow RECIPE.md: 6 * non-embedding parameters + 12 * L * d * T + 6 * d * V * mask_rate.
"""
import argparse
import resource
import statistics
import time

import torch

import cram


def timed(fn, warmup, steps, device):
    """Seconds per call of fn, after warm-up (compile, allocator, caches)."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def ours(cfg, vocab, T, device, compile_, accum):
    """A closure running one optimizer step (accum micro-batches) of cram.py's model on random tokens, as train()."""
    model = cram.CrammedBERT(cfg, vocab, T).to(device)
    optimizer = cram.make_optimizer(model, cfg, device)
    step_model = torch.compile(model) if compile_ else model
    amp_dtype = torch.bfloat16 if device.type == "cuda" else None
    ids = torch.randint(5, vocab, (cfg.micro_batch, T), device=device)
    gen = torch.Generator(device=device).manual_seed(0)

    def step():
        for _ in range(accum):
            inputs, positions, targets = cram.mask_tokens(ids, 4, vocab, cfg.mask_rate, gen)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = cram.mlm_loss(step_model, inputs, positions, targets) / accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
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

    def step():
        for _ in range(accum):
            (model(input_ids=ids, labels=labels).loss / accum).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def matmul(device, n=4096):
    """The device's own ceiling: a large square fp32 (CPU) or bf16 (GPU) matmul; returns (fn, FLOPs per call)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    return (lambda: a @ b), 2 * n ** 3


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="auto", help="cram.py preset whose model shape is timed")
    p.add_argument("--micro_batch", type=int, default=None, help="sequences per step (default: the preset's)")
    p.add_argument("--vocab_size", type=int, default=32768)
    p.add_argument("--seq_len", type=int, default=128)
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="default: on for CUDA")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step (training: batch / micro)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1, help="interleaved repetitions; medians are reported")
    p.add_argument("--hf", action="store_true", help="also time transformers' BertForMaskedLM (if installed)")
    args = p.parse_args(argv)
    cfg = cram.parse_config(["--preset", args.preset] + (["--micro_batch", str(args.micro_batch)]
                                                          if args.micro_batch is not None else []))
    cfg.batch_size = max(cfg.batch_size, cfg.micro_batch)  # bench times micro-batches, whatever the preset's target
    try:
        cram.check_config(cfg)
        device = cram.pick_device(args.device)
    except cram.CramError as e:
        raise SystemExit(f"bench.py: error: {e}")
    compile_ = device.type == "cuda" if args.compile is None else args.compile
    if args.accum < 1:
        raise SystemExit(f"bench.py: error: --accum must be >= 1 (got {args.accum})")
    T, tokens = args.seq_len, args.accum * cfg.micro_batch * args.seq_len
    print(f"bench: preset {cfg.preset} | L{cfg.n_layer} d{cfg.n_embd} V{args.vocab_size} T{T} | micro-batch "
          f"{cfg.micro_batch} x {args.accum} | {device} | compile {compile_} | torch {torch.__version__} | "
          f"{torch.get_num_threads()} threads")
    step, flops = ours(cfg, args.vocab_size, T, device, compile_, args.accum)
    candidates = {"ours": step}
    mm, mm_flops = matmul(device)
    candidates["matmul"] = mm
    if args.hf:
        try:
            candidates["hf"] = hf_bert(cfg, args.vocab_size, T, device, args.accum)
        except ImportError:
            print("bench: transformers is not installed; skipping the BertForMaskedLM comparison")
    results = {name: [] for name in candidates}
    for r in range(args.rounds):
        for name, fn in candidates.items():
            steps = args.steps if name != "matmul" else 50 if device.type == "cuda" else 3  # a CPU matmul takes ~1 s
            results[name].append(timed(fn, args.warmup if r == 0 else 1, steps, device))
    med = {name: statistics.median(v) for name, v in results.items()}
    tok_s = tokens / med["ours"]
    achieved = tok_s * flops
    ceiling = mm_flops / med["matmul"]
    peak = cram.device_peak_flops(device)
    print(f"ours:   {tok_s:12,.0f} tokens/s | {flops / 1e6:.0f} MFLOP/token | {achieved / 1e12:.3f} TFLOP/s | "
          f"{'MFU %.1f%%' % (100 * achieved / peak) if peak else 'MFU n/a (no known peak)'}")
    ratios = [(tokens * flops / o) / (mm_flops / m) for o, m in zip(results["ours"], results["matmul"])]
    print(f"matmul: {ceiling / 1e12:.3f} TFLOP/s (4096^2, {'bf16' if device.type == 'cuda' else 'fp32'}) | "
          f"model FLOP/s over matmul ceiling: {100 * statistics.median(ratios):.1f}% (median of {args.rounds})")
    if "hf" in results:
        speedups = [h / o for h, o in zip(results["hf"], results["ours"])]
        print(f"hf:     {tokens / med['hf']:12,.0f} tokens/s | ours is {statistics.median(speedups):.2f}x faster "
              f"(median of {args.rounds}; per round {', '.join(f'{s:.2f}' for s in speedups)})")
    mem = (torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda"
           else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    print(f"peak memory: {mem:.2f} GiB ({'CUDA allocated' if device.type == 'cuda' else 'process max RSS'})")
    return tok_s


if __name__ == "__main__":
    main()
