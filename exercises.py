"""Classroom exercises: reimplement one idea of the paper in cram.py, then check it against the reference behaviour.

    python exercises.py                          # list the exercises
    python exercises.py masking                  # check cram.py's mask_tokens
    python exercises.py all --file my_cram.py    # check every exercise in a student's copy of cram.py

How to set one: copy cram.py (cp cram.py my_cram.py), delete the body of the function or class the exercise names,
write it again from the paper and the hint, and run the check with --file my_cram.py. Each check tests behaviour,
not code, so any correct version passes, and a failure says what differs. The lab notebook (docs/notes.md,
2026-11-22 afternoon) gives the measured effect of each idea on a tiny run.
"""
import argparse
import importlib.util
import math
import sys

import torch
import torch.nn.functional as F

from hardware import safe_console


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def close(a, b, what, atol=1e-5):
    diff = (a - b).abs().max().item()
    check(diff <= atol, f"{what}: largest difference {diff:.3g} (tolerance {atol:g})")


def small_cfg(cram, **kw):
    return cram.Config(**{**dict(n_layer=2, n_embd=32, n_head=4, ffn_hidden=64), **kw})


# ----------------------------------------------------------------------------------------------------------------
# One function per exercise. The docstring is the assignment; its first line is the title.

def ex_masking(cram):
    """MLM masking (paper 4.3): exactly 25% of each sequence is predicted, split 80/10/10.

    Reimplement `mask_tokens(ids, mask_id, vocab_size, rate, generator)`. Pick exactly k = round(rate * T) distinct
    positions per sequence, uniformly at random; of those slots 80% become [MASK], 10% a random token, 10% keep their
    token. Return (inputs, positions (B, k), targets (B, k) = the original tokens there). Use only `generator` for
    randomness, so the same seed gives the same masks.
    """
    B, T, V, mask_id = 64, 128, 1000, 4
    ids = torch.randint(5, V, (B, T), generator=torch.Generator().manual_seed(0))
    inputs, positions, targets = cram.mask_tokens(ids, mask_id, V, 0.25, torch.Generator().manual_seed(1))
    check(positions.shape == (B, 32) and targets.shape == (B, 32),
          f"positions/targets must be (B, k) = ({B}, 32) for T=128 at 25%, got {tuple(positions.shape)}")
    check(inputs.shape == ids.shape, f"inputs must keep the shape of ids {tuple(ids.shape)}")
    check(all(len(set(row.tolist())) == 32 for row in positions), "the k positions of a row must be distinct")
    check(len({tuple(sorted(row)) for row in positions.tolist()}) == B,
          "every sequence must get its own random positions (rows of one batch share them)")
    check(torch.equal(targets, ids.gather(1, positions)), "targets must be the original tokens at the positions")
    untouched = torch.ones_like(ids, dtype=torch.bool).scatter(1, positions, False)
    check(torch.equal(inputs[untouched], ids[untouched]), "tokens outside the positions must stay unchanged")
    at = inputs.gather(1, positions)
    n_mask = (at == mask_id).sum(1).float()
    n_kept = (at == targets).sum(1).float()
    check(n_mask.mean().item() > 0.75 * 32 and n_mask.mean().item() < 0.85 * 32,
          f"about 80% of the masked slots must be [MASK]; got {100 * n_mask.mean().item() / 32:.0f}%")
    check(0.05 * 32 < n_kept.mean().item() < 0.15 * 32,
          f"about 10% of the slots must keep their token; got {100 * n_kept.mean().item() / 32:.0f}%")
    again = cram.mask_tokens(ids, mask_id, V, 0.25, torch.Generator().manual_seed(1))
    check(all(torch.equal(a, b) for a, b in zip((inputs, positions, targets), again)),
          "the same generator seed must give the same masks (use only the generator you are given)")
    counts = torch.zeros(T)
    gen = torch.Generator().manual_seed(2)
    for _ in range(20):
        counts += torch.bincount(cram.mask_tokens(ids, mask_id, V, 0.25, gen)[1].flatten(), minlength=T)
    expected = 20 * B * 32 / T
    check(counts.min() > 0.7 * expected and counts.max() < 1.3 * expected,
          f"every position must be picked about equally often ({expected:.0f}); got {counts.min():.0f} to "
          f"{counts.max():.0f}")


def ex_lr_schedule(cram):
    """The time-based learning-rate schedule (paper 4.3): one cycle over the budget fraction t.

    Reimplement `lr_at(t, peak)`: lr = peak * min(0.25 + t, 4 (1 - t)), never below 0. It rises from a quarter
    of the peak at t = 0 to the peak at t = 0.75 and falls to 0 at t = 1.
    """
    for t, factor in [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0), (0.8, 0.8), (0.9, 0.4), (1.0, 0.0),
                      (1.1, 0.0)]:
        got = cram.lr_at(t, 1e-3)
        check(math.isclose(got, factor * 1e-3, rel_tol=1e-6, abs_tol=1e-12),
              f"lr_at({t}, 1e-3) should be {factor * 1e-3:.3g} ({factor} x peak), got {got:.3g}")


def ex_batch_ramp(cram):
    """The batch-size ramp (paper 4.3): grow the batch linearly in t by gradient accumulation.

    Reimplement `batch_size_at(t, unit, target, ramp_until)`: from one unit (the micro-batch) at t = 0 linearly to
    `target` at t = ramp_until, constant after; always a whole number of units (each unit is one micro-batch).
    """
    for t, want in [(0.0, 32), (0.6, 2048), (0.9, 2048), (1.0, 2048)]:
        got = cram.batch_size_at(t, 32, 2048, 0.6)
        check(got == want, f"batch_size_at({t}, unit=32, target=2048, ramp_until=0.6) should be {want}, got {got}")
    mid = cram.batch_size_at(0.3, 32, 2048, 0.6)
    check(abs(mid - (32 + 2048) / 2) <= 32, f"halfway (t=0.3) the batch should be about 1040, got {mid}")
    sizes = [cram.batch_size_at(i / 100, 32, 2048, 0.6) for i in range(101)]
    check(all(s % 32 == 0 for s in sizes), "every batch size must be a whole number of micro-batches (32)")
    check(all(a <= b for a, b in zip(sizes, sizes[1:])), "the batch size must never shrink as t grows")


def ex_positions(cram):
    """Scaled sinusoidal positions (paper 4.2): a fixed sin/cos table times one learnable scalar.

    Reimplement `sinusoidal_table(T, C)` (sin at even channels, cos at odd, frequencies 10000^(-2i/C)) and the
    position part of `Embeddings`: one scalar parameter `pos_scale` initialised to 1/sqrt(C), so
    x = LayerNorm(token_embedding + pos_scale * table).
    """
    T, C = 16, 8
    table = cram.sinusoidal_table(T, C)
    check(tuple(table.shape) == (T, C), f"sinusoidal_table(16, 8) must be (16, 8), got {tuple(table.shape)}")
    want = torch.zeros(T, C)
    for p in range(T):
        for i in range(0, C, 2):
            want[p, i] = math.sin(p / 10000 ** (i / C))
            want[p, i + 1] = math.cos(p / 10000 ** (i / C))
    close(table, want, "sinusoidal_table vs sin(p / 10000^(2i/C)) at even, cos at odd channels")
    emb = cram.Embeddings(small_cfg(cram, n_embd=C), 50, T)
    learned = [n for n, p in emb.named_parameters() if "tok" not in n and "norm" not in n]
    check(learned == ["pos_scale"] and emb.pos_scale.numel() == 1,
          f"besides the token embedding and LayerNorm, Embeddings must learn exactly one scalar pos_scale; "
          f"found {learned}")
    close(emb.pos_scale.detach(), torch.tensor(1 / math.sqrt(C)), "pos_scale must start at 1/sqrt(C)")
    ids = torch.randint(0, 50, (2, T))
    with torch.no_grad():
        emb.pos_scale.fill_(0.7)
        want = emb.norm(emb.tok(ids) + 0.7 * want)
    close(emb.eval()(ids), want, "Embeddings(ids) vs LayerNorm(tok(ids) + pos_scale * table)", atol=1e-4)


def ex_glu(cram):
    """The gated-GELU feed-forward (paper 4.2): GLU instead of a plain GELU MLP.

    Reimplement `GLUFeedForward`: `up` = Linear(d -> ffn_hidden, no bias); split its output in halves (x, gate);
    GELU(gate) * x; `down` = Linear(ffn_hidden / 2 -> d, no bias).
    """
    cfg = small_cfg(cram)
    ffn = cram.GLUFeedForward(cfg)
    shapes = {n: tuple(p.shape) for n, p in ffn.named_parameters()}
    check(shapes == {"up.weight": (64, 32), "down.weight": (32, 32)},
          f"expected up.weight (64, 32) and down.weight (32, 32), no biases; found {shapes}")
    x = torch.randn(3, 5, 32)
    h = x @ ffn.up.weight.T
    want = (h[..., :32] * F.gelu(h[..., 32:])) @ ffn.down.weight.T
    close(ffn(x), want, "GLUFeedForward(x) vs down(first_half * GELU(second_half))")


def ex_sparse_head(cram):
    """Sparse prediction (paper 4.2): run the tied vocabulary projection only at the masked positions.

    Reimplement `CrammedBERT.forward(ids, positions, targets=None)`: encode, take the hidden states at `positions`
    (B, k), and multiply them by the token-embedding matrix (tied decoder, no bias): logits (B, k, V). With targets
    (B, k), return their mean cross-entropy instead (training computes its loss inside the model).
    """
    torch.manual_seed(0)
    model = cram.CrammedBERT(small_cfg(cram), 100, 16).eval()
    ids, positions = torch.randint(0, 100, (3, 16)), torch.stack([torch.randperm(16)[:4] for _ in range(3)])
    logits = model(ids, positions)
    check(tuple(logits.shape) == (3, 4, 100), f"logits must be (B, k, V) = (3, 4, 100), got {tuple(logits.shape)}")
    dense = model.encode(ids) @ model.embed.tok.weight.T                        # (B, T, V): every position
    close(logits, dense.gather(1, positions[..., None].expand(-1, -1, 100)),
          "sparse logits vs the dense logits at the masked positions (is the decoder tied to embed.tok?)", 1e-4)
    targets = torch.randint(0, 100, (3, 4))
    close(model(ids, positions, targets), F.cross_entropy(logits.reshape(-1, 100), targets.reshape(-1)),
          "model(ids, positions, targets) vs the mean cross-entropy of the logits", 1e-4)


def ex_prenorm(cram):
    """Pre-LayerNorm blocks (paper 4.2): normalise the input of each sub-layer, keep the residual stream clean.

    Reimplement `Block.forward`: x = x + Attn(LN1(x)); x = x + FFN(LN2(x)) (pre-norm), not LN(x + Attn(x))
    (post-norm, the original BERT). With both sub-layers' output weights zeroed the block must be the identity.
    """
    torch.manual_seed(0)
    block = cram.Block(small_cfg(cram)).eval()
    x = 3 * torch.randn(2, 8, 32) + 1
    with torch.no_grad():
        block.attn.out.weight.zero_()
        block.ffn.down.weight.zero_()
    close(block(x), x, "with attn.out and ffn.down zeroed, a pre-LN block must return x unchanged")
    block = cram.Block(small_cfg(cram)).eval()
    with torch.no_grad():  # norm1 must feed the attention, norm2 the feed-forward
        block.norm1.weight.normal_()
        block.norm2.weight.normal_()
        h = x + block.attn(block.norm1(x))
        want = h + block.ffn(block.norm2(h))
    close(block(x), want, "Block(x) vs h = x + attn(norm1(x)); h + ffn(norm2(h))", 1e-4)


def ex_attention(cram):
    """Multi-head attention through one fused QKV matmul and F.scaled_dot_product_attention.

    Reimplement `Attention.forward(x, attn_mask)`: `qkv` (no bias) gives q, k, v split into n_head heads of
    d / n_head; softmax(q k^T / sqrt(d_head)) v per head, where attn_mask (B, 1, 1, T) is False on padded keys (or,
    in the tiny preset, a float bias added to the scores: exercise local_bias); heads concatenated and projected by
    `out` (no bias).
    """
    torch.manual_seed(0)
    cfg = small_cfg(cram)
    attn = cram.Attention(cfg).eval()
    B, T, C, H = 2, 6, 32, 4
    x = torch.randn(B, T, C)
    keep = torch.ones(B, T, dtype=torch.bool)
    keep[1, 4:] = False                                                            # row 1 has 2 pad tokens
    q, k, v = (x @ attn.qkv.weight.T).split(C, dim=-1)
    q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))        # (B, H, T, D)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    want = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C) @ attn.out.weight.T
    close(attn(x, keep[:, None, None, :]), want, "Attention vs softmax(q k^T / sqrt(d_head)) v with padding mask",
          1e-4)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)                        # no mask: pretraining's path
    want = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C) @ attn.out.weight.T
    close(attn(x), want, "Attention with no mask (pretraining) vs softmax over every key: no causal mask", 1e-4)
    bias = torch.randn(H, T, T)                                                   # a float mask is added
    want = ((scores + bias).softmax(-1) @ v).transpose(1, 2).reshape(B, T, C) @ attn.out.weight.T
    close(attn(x, bias), want, "Attention with a float attn_mask (H, T, T) vs softmax(scores + mask)", 1e-4)


def ex_local_bias(cram):
    """A local attention bias (ALiBi, Press et al. 2022): how the tiny preset sees word order in 5 minutes.

    Reimplement the `attn_bias` buffer of `CrammedBERT.__init__` and its use in `CrammedBERT.encode`. For
    cfg.local_bias = s > 0, head h adds -s / 2^h * |i - j| to the score of query i on key j, except the last head,
    which adds nothing (it sees the whole row, as [CLS] must to classify a sentence): a (n_head, T, T) float tensor
    (s = 0: attn_bias is None, the paper's model). `encode` passes it to every block as the attention mask, with the
    padded keys at -inf when a pad_mask is given (SDPA adds a float mask to the scores).
    """
    T = 16
    check(cram.CrammedBERT(small_cfg(cram), 50, T).attn_bias is None, "with local_bias 0, attn_bias must be None")
    torch.manual_seed(0)
    model = cram.CrammedBERT(small_cfg(cram, local_bias=2.0), 50, T).eval()
    i = torch.arange(T)
    want = -torch.tensor([2.0, 1.0, 0.5, 0.0])[:, None, None] * (i[:, None] - i[None, :]).abs()
    check(getattr(model, "attn_bias", None) is not None and tuple(model.attn_bias.shape) == (4, T, T),
          "with local_bias 2 and 4 heads, attn_bias must be a (4, 16, 16) tensor")
    close(model.attn_bias, want, "attn_bias vs -local_bias / 2^h * |i - j|, last head 0 (local_bias 2, 4 heads)")
    ids = torch.randint(5, 50, (2, T))
    pad = torch.ones(2, T, dtype=torch.bool)
    pad[1, 10:] = False                                                            # row 1 ends in 6 pad tokens
    with torch.no_grad():
        out, plain = model.encode(ids, pad), model.encode(ids)  # with padding (fine-tuning), without (pretraining)
        close(plain, model.encode(ids, torch.ones(2, T, dtype=torch.bool)),
              "encode without a pad_mask must equal encode with one that pads nothing (the bias in both)", 1e-4)
        model.attn_bias.zero_()
        check((model.encode(ids, pad) - out).abs().max().item() > 1e-3,
              "encode must use attn_bias: zeroing it changed nothing")
        check((model.encode(ids) - plain).abs().max().item() > 1e-3,
              "encode must use attn_bias when no pad_mask is given too (pretraining's path)")
        model.attn_bias.copy_(want)
        other = ids.clone()
        other[1, 10:] = 7                                                          # other tokens under the padding
        close(model.encode(other, pad)[1, :10], out[1, :10],
              "with the bias on, padded keys must still be ignored (-inf in the mask)", 1e-4)


def ex_narrow(cram):
    """NarrowBERT (Li et al. 2023): the last blocks compute only the positions whose output is needed.

    Reimplement the `kv` branch of `Attention.forward` (queries from x, keys and values from kv (B, S, C), with the
    same `qkv` weights) and the `positions` path of `CrammedBERT.encode`: the first n_layer - narrow blocks run on
    every position and their output is the context; then only the rows at `positions` (B, k) go on (with the local
    bias's rows for those queries), and each narrow block attends from them to the context, normalised by its own
    norm1. Without `positions` the narrow blocks run every row, the same way. As no narrow block reads another
    position's narrow state, both agree at those positions: skipping the rest is exact, and fine-tuning sees the
    model that pretraining trained.
    """
    torch.manual_seed(0)
    T, C, H = 16, 32, 4
    for bias in (0.0, 1.0):
        model = cram.CrammedBERT(small_cfg(cram, n_layer=3, narrow=2, local_bias=bias), 50, T).eval()
        ids, positions = torch.randint(5, 50, (2, T)), torch.stack([torch.randperm(T)[:4] for _ in range(2)])
        mask = model.attn_bias if bias else None
        with torch.no_grad():  # the reference, by hand: one wide block, then two narrow ones on every position
            x = context = model.blocks[0](model.embed(ids), mask)
            for block in model.blocks[1:]:
                w, (q_in, kv_in) = block.attn.qkv.weight, (block.norm1(x), block.norm1(context))
                q = (q_in @ w[:C].T).view(2, T, H, C // H).transpose(1, 2)
                k, v = ((kv_in @ w[i * C:(i + 1) * C].T).view(2, T, H, C // H).transpose(1, 2) for i in (1, 2))
                scores = q @ k.transpose(-1, -2) / math.sqrt(C // H) + (0 if mask is None else mask)
                x = x + (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, T, C) @ block.attn.out.weight.T
                x = x + block.ffn(block.norm2(x))
            want = model.final_norm(x)
            at = positions[..., None].expand(-1, -1, C)
            what = f"with local_bias {bias}"
            close(model.encode(ids), want, f"encode(ids) vs the narrow blocks run by hand on every position, {what}",
                  1e-4)
            close(model.encode(ids, positions=positions), want.gather(1, at),
                  f"encode(ids, positions=...) vs the same rows of the full computation, {what}", 1e-4)
            close(model(ids, positions), want.gather(1, at) @ model.embed.tok.weight.T,
                  f"the sparse logits of a narrow model vs the full computation's, {what}", 1e-4)


EXERCISES = {name[3:]: fn for name, fn in list(globals().items()) if name.startswith("ex_")}


def load_module(path):
    """Import a (student's) copy of cram.py from `path` under its own name."""
    spec = importlib.util.spec_from_file_location("student_cram", path)
    if spec is None:
        raise SystemExit(f"exercises.py: error: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except FileNotFoundError:
        raise SystemExit(f"exercises.py: error: no file {path}: pass --file your_copy_of_cram.py")
    return module


def run(names, module):
    """Run the named checks; print PASS/FAIL with the reason; return the number that failed."""
    failed = 0
    for name in names:
        try:
            EXERCISES[name](module)
            print(f"PASS  {name}")
        except AssertionError as e:
            failed += 1
            print(f"FAIL  {name}: {e}")
        except Exception as e:  # a crash in the student's code is a failure with its reason, not a traceback
            failed += 1
            print(f"FAIL  {name}: your code raised {type(e).__name__}: {e}")
    return failed


def main(argv=None):
    safe_console()  # a student's error message is printed escaped where the console lacks a character (Windows)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("exercise", nargs="?", help=f"one of: {', '.join(EXERCISES)}, or all")
    p.add_argument("--file", default="cram.py", help="the copy of cram.py to check")
    args = p.parse_args(argv)
    if args.exercise is None:
        for name, fn in EXERCISES.items():
            print(f"{name:12s} {fn.__doc__.splitlines()[0]}")
        return 0
    if args.exercise != "all" and args.exercise not in EXERCISES:
        raise SystemExit(f"exercises.py: error: unknown exercise {args.exercise!r}; choose one of "
                         f"{', '.join(EXERCISES)}, or all")
    names = list(EXERCISES) if args.exercise == "all" else [args.exercise]
    failed = run(names, load_module(args.file))
    print(f"{len(names) - failed} of {len(names)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
