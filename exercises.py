"""Classroom exercises: write one idea of the paper again in your own copy of cram.py, then check it.

    python exercises.py                                   # the exercises: name, paper section, minutes, title
    python exercises.py show masking                      # the assignment
    python exercises.py stub masking                      # write my_cram.py: cram.py with mask_tokens left to write
    python exercises.py check masking --file my_cram.py   # PASS, or FAIL with what differs (or your file and line)
    python exercises.py all                               # check every exercise in cram.py (the reference passes)

`stub` copies cram.py with the exercise's function (or class) emptied: its signature and docstring stay, its body
raises NotImplementedError until you write it (--out names another file; an existing file is never replaced
unless you add --overwrite). A check tests behaviour, not code: any correct version passes, whichever way it is
written, and a FAIL names the slip. docs/exercises.md is the classroom page; the lab notebook (docs/notes.md,
2026-11-22 afternoon) measures what each idea is worth on a tiny run.

The file reads in three parts: the assignments, the checks (one function per exercise), the command line.
"""
import argparse
import ast
import importlib.util
import math
import numbers
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from hardware import safe_console

REFERENCE = Path(__file__).resolve().parent / "cram.py"


# ----------------------------------------------------------------------------------------------------------------
# Part 1: the assignments.

@dataclass
class Exercise:
    title: str
    paper: str      # where it is described: Cramming and its section, or another paper
    minutes: int    # about how long a student takes
    write: tuple    # what `stub` empties in the student's copy: a function, Class.method, or a whole class
    text: str       # the assignment


CRAMMING = 'Geiping & Goldstein 2022, "Cramming: Training a Language Model on a Single GPU in One Day"'

EXERCISES = {
    "masking": Exercise(
        "MLM masking: exactly 25% of each sequence is predicted, split 80/10/10", "Cramming 4.3", 30,
        ("mask_tokens",), """\
Write `mask_tokens(ids, mask_id, vocab_size, rate, generator)`. Pick exactly k = round(rate * T) distinct positions
in every sequence, uniformly at random over all T (special tokens too) and independently per sequence. Of those k
slots, 80% become [MASK] (mask_id), 10% a random token of the vocabulary (any id from 0 to vocab_size - 1 inclusive,
one draw per slot) and 10% keep their token: round(0.8 k) and round(0.1 k) slots (26 / 3 / 3 of k = 32); which slot
gets which must not depend on where it is in the sequence. Return (inputs (B, T), positions (B, k),
targets (B, k) = the original tokens at the positions). Leave the caller's `ids` as they were (work on a copy), and
use only `generator` for randomness, so the same seed gives the same masks."""),
    "lr_schedule": Exercise(
        "The time-based learning-rate schedule: one cycle over the budget fraction t", "Cramming 4.3", 10,
        ("lr_at",), """\
Write `lr_at(t, peak)`, where t is the fraction of the time budget used: lr = peak * min(0.25 + t, 4 (1 - t)),
never below 0. It rises from a quarter of the peak at t = 0 to the peak at t = 0.75 and falls to 0 at t = 1
(the last step can pass t = 1 a little: the lr stays 0 there). Return a number."""),
    "batch_ramp": Exercise(
        "The batch-size ramp: grow the batch linearly in t by gradient accumulation", "Cramming 4.3", 15,
        ("batch_size_at",), """\
Write `batch_size_at(t, unit, target, ramp_until)`: from one unit (a micro-batch) at t = 0 linearly to `target` at
t = ramp_until, constant after. Return an int that is a whole number of units (the training loop runs
batch // unit micro-batches per step). ramp_until = 0 means no ramp: the target from the first step."""),
    "positions": Exercise(
        "Scaled sinusoidal positions: a fixed sin/cos table times one learnable scalar", "Cramming 4.2", 25,
        ("sinusoidal_table", "Embeddings"), """\
Write `sinusoidal_table(T, C)`: table[p, 2i] = sin(p / 10000^(2i/C)), table[p, 2i+1] = cos(p / 10000^(2i/C)), for
positions p = 0 .. T-1. Then the class `Embeddings(cfg, vocab_size, seq_len)`: `tok` = nn.Embedding(vocab_size,
cfg.n_embd); the table as a buffer (not learned); one scalar parameter `pos_scale` starting at
cfg.pos_scale_init / sqrt(C); `norm` = nn.LayerNorm(C, eps=cfg.norm_eps); `drop` = nn.Dropout(cfg.dropout).
forward(ids (B, T)): drop(norm(tok(ids) + pos_scale * table[:T])); T may be shorter than seq_len (fine-tuning)."""),
    "glu": Exercise(
        "The gated-GELU feed-forward: GLU instead of a plain GELU MLP", "Cramming 4.2", 15,
        ("GLUFeedForward",), """\
Write the class `GLUFeedForward(cfg)`: `up` = Linear(d -> cfg.ffn_hidden, no bias); `down` = Linear(ffn_hidden / 2
-> d, no bias). forward(x): split up(x) in halves (x first, gate second) and return down(GELU(gate) * x)."""),
    "sparse_head": Exercise(
        "Sparse prediction: the tied vocabulary projection only at the masked positions", "Cramming 4.2", 20,
        ("CrammedBERT.forward",), """\
Write `CrammedBERT.forward(ids, positions, targets=None)`: the hidden states at `positions` (B, k) only
(self.encode(ids, positions=positions) gives them), times the token-embedding matrix (tied decoder, no bias):
logits (B, k, V). With targets (B, k), return their mean cross-entropy instead, a scalar (training computes its
loss inside the model)."""),
    "prenorm": Exercise(
        "Pre-LayerNorm blocks: normalise each sub-layer's input, keep the residual stream clean", "Cramming 4.2", 10,
        ("Block.forward",), """\
Write `Block.forward(x, attn_mask=None, context=None)`: x = x + Attn(LN1(x)); x = x + FFN(LN2(x)) (pre-norm), not
LN(x + Attn(x)) (post-norm, the original BERT). The sub-layers are self.attn, self.ffn, self.norm1, self.norm2,
self.drop (dropout on each sub-layer's output). `context` is NarrowBERT's (exercise narrow): when it is given, the
attention reads its keys and values from norm1(context): self.attn(norm1(x), attn_mask, norm1(context))."""),
    "attention": Exercise(
        "Multi-head attention: one fused QKV matmul, softmax(q k^T / sqrt(d_head)) v", "Cramming 4.2", 30,
        ("Attention.forward",), """\
Write `Attention.forward(x, attn_mask=None, kv=None)`: `qkv` (no bias) gives q, k, v, each split into n_head heads
of d / n_head; softmax(q k^T / sqrt(d_head)) v per head; the heads concatenated and projected by `out` (no bias).
attn_mask is either (B, 1, 1, T), False on padded keys, or a float bias added to the scores (the tiny preset's,
exercise local_bias); None: every key, no causal mask (BERT sees both sides). F.scaled_dot_product_attention does
the softmax part; in eval mode nothing is dropped. `kv` (B, S, C) is NarrowBERT's (exercise narrow): queries from x,
keys and values from kv, with the same qkv weights."""),
    "local_bias": Exercise(
        "A local attention bias: how the tiny preset sees word order in 5 minutes",
        "ALiBi (Press et al. 2022)", 35,
        ("CrammedBERT.__init__", "CrammedBERT.encode"), """\
Write `CrammedBERT.__init__(cfg, vocab_size, seq_len)` and `CrammedBERT.encode(ids, pad_mask=None,
positions=None)`. __init__: embed = Embeddings; wide, narrow = n_layer - cfg.narrow, cfg.narrow; blocks = wide
Blocks then narrow NarrowBlocks; final_norm = LayerNorm; every Linear and Embedding weight drawn from N(0, 0.02);
and the `attn_bias` buffer: for
cfg.local_bias = s > 0, head h adds -s / 2^h * |i - j| to the score of query i on key j, except the last head,
which adds nothing (it sees the whole row, as [CLS] must to classify a sentence): a (n_head, T, T) float tensor,
registered with persistent=False (it follows from the config: checkpoints don't hold it); s = 0: None (the paper's
model). encode: embed, the blocks, final_norm, with the bias (its first T rows and columns) as every block's
attention mask, padded keys at -inf when a pad_mask (B, T) is given (True on real tokens); `positions` (B, k): the
hidden states at those positions only (with narrow blocks, hand them to narrow_blocks: exercise narrow)."""),
    "narrow": Exercise(
        "NarrowBERT: the last blocks compute only the positions whose output is needed",
        "NarrowBERT (Li et al. 2023)", 45,
        ("NarrowBlock.forward", "narrow_blocks"), """\
Write `NarrowBlock.forward(x, attn_mask=None, context=None)`: a pre-LN Block whose queries come from x (B, k, C) and
whose keys and values come from context (B, T, C) (x itself when context is None), both through norm1, with the
Block's own fused `qkv` weight split into its q rows and its k, v rows; attend with `self.attn.attend`, then the
feed-forward as in Block. And `narrow_blocks(blocks, context, attn_mask, positions)`: take the rows of context at
positions (B, k) (None: every row), with the local bias's rows for those queries, then run each narrow block from
them against the same context: the first n_layer - narrow blocks ran on every position and made it. As no narrow
block reads another position's narrow state, skipping the other rows is exact,
and fine-tuning sees the model that pretraining trained."""),
}


# ----------------------------------------------------------------------------------------------------------------
# Part 2: the checks, one function per exercise. Each calls the student's module `cram` and raises Slip with what
# differs; randomness is checked by statistics and structure, never against the reference's own draws.

class Slip(Exception):
    """The student's code runs but does not do what the assignment says; the message names the slip."""


def expect(condition, message):
    if not condition:
        raise Slip(message)


def close(a, b, what, atol=1e-5):
    diff = (a - b).abs().max().item()
    expect(diff <= atol, f"{what}: largest difference {diff:.3g} (tolerance {atol:g})")


def matches(a, b, atol=1e-4):
    return a.shape == b.shape and (a - b).abs().max().item() <= atol


def kind(value, fn=None):
    """What the student's function `fn` returned, in words: None is the usual sign of a missing return statement."""
    if value is not None:
        return type(value).__name__
    code = getattr(fn, "__code__", None)
    at = f" ({Path(code.co_filename).name} line {code.co_firstlineno}: {fn.__qualname__})" if code else ""
    return f"None: is a return statement missing?{at}"


def tensor(value, what, shape=None, fn=None):
    """`value`, returned by the student's `fn`, must be a tensor (of `shape`)."""
    expect(isinstance(value, torch.Tensor), f"{what} must return a tensor; it returned {kind(value, fn)}")
    expect(shape is None or tuple(value.shape) == shape, f"{what} must be {shape}, got {tuple(value.shape)}")
    return value


def small_cfg(cram, **kw):
    return cram.Config(**{**dict(n_layer=2, n_embd=32, n_head=4, ffn_hidden=64), **kw})


def holds_mask_id(at, mask_id):
    """The masked slots' tokens `at` (B, k): the most common one, if most slots hold it, must be mask_id."""
    top = at.flatten().mode().values.item()
    expect(top == mask_id or (at == top).float().mean() < 0.5, f"the [MASK] slots must hold mask_id, the argument "
           f"({mask_id} in this check), not {top}: is a [MASK] id written into your code?")


def check_masking(cram):
    B, T, V, mask_id, k = 64, 128, 1000, 2, 32  # not the tokenizer's [MASK] id (4): the argument must be used
    ids = torch.randint(5, V, (B, T), generator=torch.Generator().manual_seed(0))
    original = ids.clone()
    out = cram.mask_tokens(ids, mask_id, V, 0.25, torch.Generator().manual_seed(1))
    expect(torch.equal(ids, original), "the caller's ids tensor was changed: work on a copy (ids.clone())")
    expect(isinstance(out, (tuple, list)) and len(out) == 3,
           f"mask_tokens must return (inputs, positions, targets); it returned {kind(out, cram.mask_tokens)}")
    inputs, positions, targets = (tensor(x, f"mask_tokens's {w}") for x, w in zip(out, ("inputs", "positions",
                                                                                        "targets")))
    expect(positions.shape == (B, k) and targets.shape == (B, k),
           f"positions/targets must be (B, k) = ({B}, {k}) for T={T} at 25%, got {tuple(positions.shape)}")
    expect(inputs.shape == ids.shape and inputs.dtype == ids.dtype,
           f"inputs must keep the shape and dtype of ids {tuple(ids.shape)} {ids.dtype}")
    expect(positions.dtype == torch.long and positions.min() >= 0 and positions.max() < T,
           f"positions must be indices into the sequence: torch.long in 0..{T - 1}")
    expect(all(len(set(row.tolist())) == k for row in positions), "the k positions of a row must be distinct")
    expect(len({tuple(sorted(row)) for row in positions.tolist()}) == B,
           "every sequence must get its own random positions (rows of one batch share them)")
    expect(torch.equal(targets, ids.gather(1, positions)), "targets must be the original tokens at the positions")
    untouched = torch.ones_like(ids, dtype=torch.bool).scatter(1, positions, False)
    expect(torch.equal(inputs[untouched], ids[untouched]), "tokens outside the positions must stay unchanged")
    at = inputs.gather(1, positions)
    holds_mask_id(at, mask_id)
    share = {"[MASK]": (at == mask_id).float().mean().item(), "keep their token": (at == targets).float().mean().item()}
    share["a random token"] = 1 - sum(share.values())
    for what, want in [("[MASK]", 0.8), ("keep their token", 0.1), ("a random token", 0.1)]:
        expect(abs(share[what] - want) < 0.05, f"about {100 * want:.0f}% of the masked slots must be {what}; got "
                                               f"{100 * share[what]:.0f}%")
    again = cram.mask_tokens(ids, mask_id, V, 0.25, torch.Generator().manual_seed(1))
    expect(all(torch.equal(a, b) for a, b in zip((inputs, positions, targets), again)),
           "the same generator seed must give the same masks (use only the generator you are given)")
    gen = torch.Generator().manual_seed(5)
    first, second = (cram.mask_tokens(ids, mask_id, V, 0.25, gen)[1] for _ in range(2))
    expect(not torch.equal(first, second), "two calls with one generator gave the same masks: draw from the "
                                           "generator you are given, don't seed one of your own")
    short = tensor(cram.mask_tokens(ids[:4, :64], mask_id, V, 0.25, gen)[1], "mask_tokens's positions")
    expect(short.shape == (4, 16), f"k = round(rate * T): for 4 sequences of T=64 at 25% positions must be (4, 16), "
                                   f"got {tuple(short.shape)}")

    # many rows, a large vocabulary, ids from a small part of it, another mask_id (BERT's): the counts of the split,
    # the random tokens' range and the slots' roles
    B, V, mask_id = 256, 10_000, 103
    ids = torch.randint(5, 50, (B, T), generator=torch.Generator().manual_seed(3))
    for rows in (ids[:, :64], ids):  # k = 16 and 32: round() and int() differ (13/2/1 vs 12/1/3, 26/3/3 vs 25/3/4)
        inputs, positions, targets = cram.mask_tokens(rows, mask_id, V, 0.25, torch.Generator().manual_seed(4))
        at, k = inputs.gather(1, positions), positions.shape[1]
        holds_mask_id(at, mask_id)
        n = torch.stack([(at == mask_id).sum(1), (at == targets).sum(1)])           # per row: [MASK], kept
        common = n.mode(dim=1).values
        if (n == common[:, None]).all(0).float().mean() > 0.9:  # one split in every row (not a die per slot)
            got, want = (common[0].item(), k - common.sum().item()), (round(0.8 * k), round(0.1 * k))
            expect(got == want, f"of k = {k} slots, round(0.8 * k) = {want[0]} become [MASK], round(0.1 * k) = "
                   f"{want[1]} a random token, {k - sum(want)} keep theirs; yours {got[0]}/{got[1]}/{common[1]}"
                   + (": int() rounds down, use round()" if got == (int(0.8 * k), int(0.1 * k)) else ""))
    drawn = at[(at != mask_id) & (at != targets)]                                 # the random slots' tokens
    expect(len(drawn) > 0, "about 10% of the masked slots must be a random token; got none")
    n, distinct, low, high = len(drawn), len(drawn.unique()), drawn.min().item(), drawn.max().item()
    expect(distinct > 1, "the random slots all hold one token: draw one per slot")
    expect(0 <= low and high < V, f"random tokens must be ids in 0..vocab_size-1 ({V - 1}); got {low} to {high}")
    vocabulary = (f"random tokens must come from the whole vocabulary, 0..vocab_size-1: with vocab_size {V} yours "
                  f"ranged over {low}..{high}")
    expect(high >= V // 10, vocabulary + " (the special tokens, the sequence's own tokens or positions?)")
    expect(distinct > 0.8 * n, f"the random slots repeat their tokens ({distinct} different in {n} slots of a "
                               f"{V}-token vocabulary): draw one per slot")
    expect(0.35 < (drawn >= V // 2).float().mean().item() < 0.65, vocabulary + ", not evenly")
    # a vocabulary of 8 and rows of one token (5): every other id in a slot was drawn; all of 0..7 must be, the last too
    inputs_small, positions_small, _ = cram.mask_tokens(torch.full((B, T), 5), 2, 8, 0.25,
                                                        torch.Generator().manual_seed(6))
    small = inputs_small.gather(1, positions_small)
    for end, slip in [(0, "the low bound is 0, the special tokens' ids are drawn too"),
                      (7, "the high bound is exclusive: vocab_size, not vocab_size - 1")]:
        expect(bool((small == end).any()), f"random tokens never drew id {end} of a vocabulary of 8: draw from 0 to "
               f"vocab_size - 1 inclusive, torch.randint(0, vocab_size, ...): {slip}")
    quarter = positions * 4 // T                                                   # (B, k): where each slot is
    masked = [(at == mask_id)[quarter == q].float().mean().item() for q in range(4)]
    expect(all(0.7 < m < 0.9 for m in masked),
           "whether a slot becomes [MASK], random or kept must not depend on where it is in the sequence: in the "
           f"four quarters of the sequence {', '.join(f'{100 * m:.0f}%' for m in masked)} of the slots are [MASK], "
           "not 80% each (were the positions sorted before the first 80% became [MASK]?)")

    # rows with [CLS] first, [SEP] last and the special ids 0..4 inside too: every position is picked alike
    ids = torch.randint(0, 50, (64, T), generator=torch.Generator().manual_seed(7))
    ids[:, 0], ids[:, -1] = 2, 3
    special = ids < 5
    special[:, [0, -1]] = False                                         # the first and last: the counts below
    counts, picked, gen = torch.zeros(T), 0, torch.Generator().manual_seed(2)
    for _ in range(20):
        positions = cram.mask_tokens(ids, mask_id, V, 0.25, gen)[1]
        counts += torch.bincount(positions.flatten(), minlength=T)
        picked += special.gather(1, positions).sum().item()
    rate = picked / (20 * special.sum().item())
    expect(abs(rate - k / T) < 0.03, f"positions are uniform over all T positions, the special tokens' too: yours "
           f"picked {100 * rate:.0f}% of those holding ids 0..4 ([PAD] [UNK] [CLS] [SEP] [MASK]), not "
           f"{100 * k / T:.0f}%: don't skip special tokens")
    expected, low, high = 20 * 64 * k / T, counts.argmin().item(), counts.argmax().item()
    expect(counts[low] > 0.7 * expected and counts[high] < 1.3 * expected,
           f"every position must be picked about equally often ({expected:.0f} times here), the first and the last "
           f"([CLS], [SEP]) too: position {low} was picked {counts[low]:.0f} times, position {high} "
           f"{counts[high]:.0f} times")


def check_lr_schedule(cram):
    for peak_text in ("1e-3", "0.5"):
        peak = float(peak_text)
        for t, factor, part in [(0.0, 0.25, "the start"), (0.25, 0.5, "the rise"), (0.5, 0.75, "the rise"),
                                (0.75, 1.0, "the peak"), (0.8, 0.8, "the decay"), (0.9, 0.4, "the decay"),
                                (1.0, 0.0, "the end"), (1.1, 0.0, "past the end: never below 0")]:
            got = cram.lr_at(t, peak)
            try:
                got = float(got)  # a Python or NumPy float, or a one-element tensor
            except (TypeError, ValueError):
                raise Slip(f"lr_at must return a number; it returned {kind(got, cram.lr_at)}") from None
            expect(not (math.isclose(got, factor, abs_tol=1e-12) and factor), f"lr_at({t}, {peak_text}) returned "
                   f"the factor {got:g}, not the learning rate: multiply by peak")
            expect(math.isclose(got, factor * peak, rel_tol=1e-6, abs_tol=1e-12),
                   f"lr_at({t}, {peak_text}) should be {factor * peak:.3g} ({factor} x peak, {part}), got {got:.3g}")


def check_batch_ramp(cram):
    def size(t, unit=32, target=2048, ramp_until=0.6):
        got = cram.batch_size_at(t, unit, target, ramp_until)
        expect(isinstance(got, numbers.Integral) and not isinstance(got, bool),
               "batch_size_at must return an int (the loop runs batch // unit micro-batches); it returned "
               + (kind(got, cram.batch_size_at) if got is None else f"{kind(got)} {got!r}"))
        return got

    for t, want, part in [(0.0, 32, "one micro-batch at the start"), (0.6, 2048, "the target at ramp_until"),
                          (0.9, 2048, "the target after ramp_until"), (1.0, 2048, "the target after ramp_until")]:
        got = size(t)
        expect(got == want, f"batch_size_at({t}, unit=32, target=2048, ramp_until=0.6) should be {want} ({part}), "
                            f"got {got}")
    mid = size(0.3)
    expect(abs(mid - (32 + 2048) / 2) <= 32, f"halfway (t=0.3) the batch should be about 1040, got {mid}")
    sizes = [size(i / 100) for i in range(101)]
    expect(all(s % 32 == 0 for s in sizes), "every batch size must be a whole number of micro-batches (32)")
    expect(all(a <= b for a, b in zip(sizes, sizes[1:])), "the batch size must never shrink as t grows")
    tiny = [size(t, 16, 64, 0.5) for t in (0.0, 0.25, 0.5, 1.0)]
    expect(tiny[0] == 16 and tiny[1] in (32, 48) and tiny[2:] == [64, 64],
           f"with unit 16, target 64, ramp_until 0.5 the batch should be 16, 40 in whole units, 64, 64 at t = 0, "
           f"0.25, 0.5, 1; got {tiny}")
    try:
        got = size(0.0, ramp_until=0.0)
    except ZeroDivisionError:
        raise Slip("batch_size_at(0.0, 32, 2048, ramp_until=0) divided by zero: ramp_until 0 means no ramp "
                   "(--ramp_until 0 is allowed): the target from the first step") from None
    expect(got == 2048, f"with ramp_until 0 there is no ramp: batch_size_at(0.0, 32, 2048, 0) should be 2048, "
                        f"got {got}")


def check_positions(cram):
    T, C = 16, 8
    table = tensor(cram.sinusoidal_table(T, C), "sinusoidal_table(16, 8)", (T, C), cram.sinusoidal_table)
    p, i = torch.arange(T, dtype=torch.float64)[:, None], torch.arange(0, C, 2, dtype=torch.float64)
    angle = p / 10000 ** (i / C)                                                    # (T, C/2): pair i/2 at p
    want = torch.stack([angle.sin(), angle.cos()], -1).view(T, C).float()           # sin, cos, sin, cos, ...
    half_freq, from_one = p / 10000 ** (i / 2 / C), (p + 1) / 10000 ** (i / C)
    slips = {"sin and cos are swapped: sin at the even channels (0, 2, ...), cos at the odd":
             torch.stack([angle.cos(), angle.sin()], -1).view(T, C),
             "sin and cos interleave (sin at channel 2i, cos at 2i+1), not a first half of sin and a second of cos":
             torch.cat([angle.sin(), angle.cos()], -1),
             "channels 2i and 2i+1 share the frequency 10000^(-2i/C): the exponent counts channels, not pairs":
             torch.stack([half_freq.sin(), half_freq.cos()], -1).view(T, C),
             "positions count from 0: row 0 is sin(0) = 0, cos(0) = 1":
             torch.stack([from_one.sin(), from_one.cos()], -1).view(T, C)}
    for slip, wrong in slips.items():
        expect(not matches(table.double(), wrong), slip)
    close(table, want, "sinusoidal_table vs sin(p / 10000^(2i/C)) at even, cos at odd channels")
    emb = cram.Embeddings(small_cfg(cram, n_embd=C), 50, T)
    learned = [n for n, p in emb.named_parameters() if "tok" not in n and "norm" not in n]
    expect(learned == ["pos_scale"] and emb.pos_scale.numel() == 1,
           f"besides the token embedding and LayerNorm, Embeddings must learn exactly one scalar pos_scale; "
           f"found {learned}")
    close(emb.pos_scale.detach(), torch.tensor(1 / math.sqrt(C)), "pos_scale must start at 1/sqrt(C)")
    started = cram.Embeddings(small_cfg(cram, n_embd=C, pos_scale_init=0.5), 50, T).pos_scale.item()
    expect(math.isclose(started, 0.5 / math.sqrt(C), rel_tol=1e-5),
           f"pos_scale must start at cfg.pos_scale_init / sqrt(C) (the tiny preset starts it at 0): with "
           f"pos_scale_init 0.5 it should be {0.5 / math.sqrt(C):.4f}, got {started:.4f}")
    ids = torch.randint(0, 50, (2, T))
    with torch.no_grad():
        emb.pos_scale.fill_(0.7)
        tok = emb.tok(ids)
        got = tensor(emb.eval()(ids), "Embeddings(ids)", (2, T, C), cram.Embeddings.forward)
        expect(not matches(got, emb.norm(tok) + 0.7 * want), "the positions are added before the LayerNorm: "
                                                             "norm(tok(ids) + pos_scale * table)")
        close(got, emb.norm(tok + 0.7 * want), "Embeddings(ids) vs LayerNorm(tok(ids) + pos_scale * table)", 1e-4)
        short = tensor(emb(ids[:, :12]), "Embeddings(ids) for 12 of its 16 positions", (2, 12, C))
        close(short, emb.norm(tok[:, :12] + 0.7 * want[:12]),
              "Embeddings on a sequence shorter than seq_len (12 of 16): the first 12 rows of the table", 1e-4)


def check_glu(cram):
    cfg = small_cfg(cram)
    ffn = cram.GLUFeedForward(cfg)
    shapes = {n: tuple(p.shape) for n, p in ffn.named_parameters()}
    expect(shapes == {"up.weight": (64, 32), "down.weight": (32, 32)},
           f"expected up.weight (64, 32) and down.weight (32, 32) (down takes the ffn_hidden / 2 gated values), no "
           f"biases; found {shapes}")
    x = torch.randn(3, 5, 32)
    h = x @ ffn.up.weight.T
    first, second, down = h[..., :32], h[..., 32:], ffn.down.weight.T
    with torch.no_grad():
        got = tensor(ffn(x), "GLUFeedForward(x)", (3, 5, 32), cram.GLUFeedForward.forward)
    slips = {"the first half is x, the second the gate: down(first_half * GELU(second_half))":
             (second * F.gelu(first)) @ down,
             "the gate goes through GELU (GEGLU), not SiLU (SwiGLU) or a sigmoid (the first GLU)":
             (first * F.silu(second)) @ down,
             "the gate goes through GELU: down(x * GELU(gate)), not down(x * gate)": (first * second) @ down}
    for slip, wrong in slips.items():
        expect(not matches(got, wrong, 1e-5), slip)
    if not matches(got, (first * F.gelu(second, approximate="tanh")) @ down, 1e-5):  # tanh's GELU is right too
        close(got, (first * F.gelu(second)) @ down, "GLUFeedForward(x) vs down(first_half * GELU(second_half))")


def check_sparse_head(cram):
    torch.manual_seed(0)
    model = cram.CrammedBERT(small_cfg(cram), 100, 16).eval()
    ids, positions = torch.randint(0, 100, (3, 16)), torch.stack([torch.randperm(16)[:4] for _ in range(3)])
    logits = tensor(model(ids, positions), "model(ids, positions)", fn=cram.CrammedBERT.forward)
    expect(tuple(logits.shape) == (3, 4, 100), f"logits must be (B, k, V) = (3, 4, 100), got {tuple(logits.shape)}")
    dense = model.encode(ids) @ model.embed.tok.weight.T                        # (B, T, V): every position
    close(logits, dense.gather(1, positions[..., None].expand(-1, -1, 100)),
          "sparse logits vs the dense logits at the masked positions (is the decoder tied to embed.tok?)", 1e-4)
    targets = torch.randint(0, 100, (3, 4))
    loss = tensor(model(ids, positions, targets), "model(ids, positions, targets)", fn=cram.CrammedBERT.forward)
    expect(loss.dim() == 0, f"with targets, forward returns the loss: a scalar, not {tuple(loss.shape)}")
    want = F.cross_entropy(logits.reshape(-1, 100), targets.reshape(-1))
    expect(not math.isclose(loss.item(), targets.numel() * want.item(), rel_tol=1e-4),
           "the loss is the mean cross-entropy over the B * k targets, not their sum")
    close(loss, want, "model(ids, positions, targets) vs the mean cross-entropy of the logits", 1e-4)


def check_prenorm(cram):
    torch.manual_seed(0)
    block = cram.Block(small_cfg(cram)).eval()
    x = 3 * torch.randn(2, 8, 32) + 1
    with torch.no_grad():
        block.attn.out.weight.zero_()
        block.ffn.down.weight.zero_()
        close(tensor(block(x), "Block(x)", (2, 8, 32), cram.Block.forward), x,
              "with attn.out and ffn.down zeroed, a pre-LN block must return x unchanged: the residual stream "
              "carries x itself, the LayerNorms only feed the sub-layers")
    block = cram.Block(small_cfg(cram)).eval()
    with torch.no_grad():  # norm1 must feed the attention, norm2 the feed-forward
        block.norm1.weight.normal_()
        block.norm2.weight.normal_()
        h = x + block.attn(block.norm1(x))
        got, want = block(x), h + block.ffn(block.norm2(h))
        expect(not matches(got, h + block.ffn(block.norm1(h))), "each sub-layer has its own LayerNorm: norm1 feeds "
                                                                "the attention, norm2 the feed-forward")
        close(got, want, "Block(x) vs h = x + attn(norm1(x)); h + ffn(norm2(h))", 1e-4)


def check_attention(cram):
    torch.manual_seed(0)
    attn = cram.Attention(small_cfg(cram, dropout=0.5)).eval()
    B, T, C, H = 2, 6, 32, 4
    x = torch.randn(B, T, C)
    keep = torch.ones(B, T, dtype=torch.bool)
    keep[1, 4:] = False                                                            # row 1 has 2 pad tokens
    qkv = (x @ attn.qkv.weight.T).split(C, dim=-1)
    q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in qkv)               # (B, H, T, D)

    def attend(scores, v=v):                                                       # (B, H, T, T) -> (B, T, C)
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C) @ attn.out.weight.T

    with torch.no_grad():
        got = tensor(attn(x, keep[:, None, None, :]), "Attention(x, mask)", (B, T, C), cram.Attention.forward)
        again = attn(x, keep[:, None, None, :])
    expect(got.isfinite().all(), "the output holds NaN or inf: is the mask inverted? (True means: attend to this key)")
    expect(torch.equal(got, again), "in eval mode nothing is dropped: dropout_p=self.dropout only while training")
    scores = (q @ k.transpose(-1, -2)).masked_fill(~keep[:, None, None, :], float("-inf"))
    expect(not matches(got, attend(scores / math.sqrt(C))), "scale the scores by 1/sqrt(d_head), the width of one "
                                                            "head (C / n_head), not 1/sqrt(C)")
    expect(not matches(got, attend(scores)), "scale the scores by 1/sqrt(d_head) before the softmax")
    q2, k2, v2 = (z.reshape(B, H, T, C // H) for z in qkv)                        # heads cut the wrong way
    mixed = (q2 @ k2.transpose(-1, -2) / math.sqrt(C // H)).masked_fill(~keep[:, None, None, :], float("-inf"))
    expect(not matches(got, attend(mixed, v2)),
           "split the heads with view(B, T, H, D).transpose(1, 2): view(B, H, T, D) cuts across positions")
    close(got, attend(scores / math.sqrt(C // H)),
          "Attention vs softmax(q k^T / sqrt(d_head)) v with padding mask", 1e-4)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)                        # no mask: pretraining's path
    with torch.no_grad():
        close(attn(x), attend(scores),
              "Attention with no mask (pretraining) vs softmax over every key: no causal mask", 1e-4)
        bias = torch.randn(H, T, T)                                               # a float mask is added
        close(attn(x, bias), attend(scores + bias), "Attention with a float attn_mask (H, T, T) vs softmax(scores + "
                                                    "mask)", 1e-4)


def check_local_bias(cram):
    T = 16
    paper = cram.CrammedBERT(small_cfg(cram), 50, T).eval()
    expect(paper.attn_bias is None, "with local_bias 0, attn_bias must be None")
    torch.manual_seed(0)
    model = cram.CrammedBERT(small_cfg(cram, local_bias=2.0), 50, T).eval()
    i = torch.arange(T)
    distance = (i[:, None] - i[None, :]).abs()
    want = -torch.tensor([2.0, 1.0, 0.5, 0.0])[:, None, None] * distance
    expect(getattr(model, "attn_bias", None) is not None and tuple(model.attn_bias.shape) == (4, T, T),
           "with local_bias 2 and 4 heads, attn_bias must be a (4, 16, 16) tensor")
    expect(not matches(model.attn_bias, -want), "the bias is a penalty: -s / 2^h * |i - j|, negative away from i")
    expect(not (matches(model.attn_bias[:3], want[:3]) and model.attn_bias[3].abs().max() > 0),
           "the last head adds nothing (slope 0): it sees the whole row")
    close(model.attn_bias, want, "attn_bias vs -local_bias / 2^h * |i - j|, last head 0 (local_bias 2, 4 heads)")
    expect("attn_bias" not in dict(model.named_parameters()) and "attn_bias" not in model.state_dict(),
           "attn_bias must be a buffer registered with persistent=False: it follows from the config, checkpoints "
           "don't hold it (and old ones would not load)")
    ids = torch.randint(5, 50, (2, T))
    pad = torch.ones(2, T, dtype=torch.bool)
    pad[1, 10:] = False                                                            # row 1 ends in 6 pad tokens
    with torch.no_grad():
        out, plain = model.encode(ids, pad), model.encode(ids)  # with padding (fine-tuning), without (pretraining)
        close(plain, model.encode(ids, torch.ones(2, T, dtype=torch.bool)),
              "encode without a pad_mask must equal encode with one that pads nothing (the bias in both)", 1e-4)
        short = cram.CrammedBERT(small_cfg(cram, local_bias=2.0), 50, 12).eval()
        short.load_state_dict(model.state_dict())
        close(model.encode(ids[:, :12]), short.encode(ids[:, :12]),
              "encode on 12 tokens of a 16-position model vs a 12-position model: use the bias's first T rows and "
              "columns", 1e-4)
        model.attn_bias.zero_()
        expect((model.encode(ids, pad) - out).abs().max().item() > 1e-3,
               "encode must use attn_bias: zeroing it changed nothing")
        model.attn_bias.copy_(want)
        other = ids.clone()
        other[1, 10:] = 7                                                          # other tokens under the padding
        close(model.encode(other, pad)[1, :10], out[1, :10],
              "with the bias on, padded keys must still be ignored (-inf in the mask)", 1e-4)
    positions = torch.stack([torch.randperm(T)[:4] for _ in range(2)])
    for m in (paper, model):  # encode by hand, the paper's model and the tiny preset's: each piece of it is pinned
        expect(isinstance(getattr(m, "final_norm", None), torch.nn.LayerNorm),
               "CrammedBERT needs final_norm = nn.LayerNorm(C): pre-LN blocks leave the residual stream unnormalised")
        with torch.no_grad():
            m.final_norm.weight.normal_()
            m.final_norm.bias.normal_()
            x = m.embed(ids)
            for block in m.blocks:
                x = block(x, None if m.attn_bias is None else m.attn_bias[:, :T, :T])
            got, by_hand = m.encode(ids), m.final_norm(x)
            what = f"local_bias {0 if m is paper else 2}"
            expect(not matches(got, x), f"encode must end with final_norm, the LayerNorm after the last block "
                                        f"({what}): yours returns the last block's output as it is")
            close(got, by_hand, f"encode(ids) vs final_norm(every block(embed(ids), attn_bias)), {what}", 1e-4)
            close(m.encode(ids, positions=positions), by_hand.gather(1, positions[..., None].expand(-1, -1, 32)),
                  f"encode(ids, positions=...) vs the same rows of encode(ids), {what}", 1e-4)


def check_narrow(cram):
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


CHECKS = {name[len("check_"):]: fn for name, fn in list(globals().items()) if name.startswith("check_")}
assert list(CHECKS) == list(EXERCISES), "every exercise needs its check, in the same order"


# ----------------------------------------------------------------------------------------------------------------
# Part 3: the command line: list, show, stub (write a student's file), check.

def find(tree, name):
    """The def or class `name` ("f", "Class", "Class.method") at the top of a parsed module, or None."""
    node = tree
    for part in name.split("."):
        node = next((n for n in node.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            return None
    return node


def blank(source, exercise):
    """cram.py's `source` with the body of each def the exercise writes replaced by a raise (the docstring stays)."""
    tree, lines = ast.parse(source), source.splitlines(keepends=True)
    defs = []  # (def, its name as the student reads it)
    for name in EXERCISES[exercise].write:
        node = find(tree, name)
        if node is None:
            raise SystemExit(f"exercises.py: error: cram.py has no {name} for exercise {exercise} (was it renamed? "
                             "update its `write` in exercises.py)")
        if isinstance(node, ast.ClassDef):
            defs += [(n, f"{name}.{n.name}") for n in node.body if isinstance(n, ast.FunctionDef)]
        else:
            defs.append((node, name))
    for node, where in sorted(defs, key=lambda d: d[0].lineno, reverse=True):  # bottom up: line numbers above hold
        body = node.body
        has_doc = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str)
        first = body[0].end_lineno + 1 if has_doc else body[0].lineno  # 1-based line where the code starts
        indent = " " * (body[0].col_offset if body[0].lineno > node.lineno else node.col_offset + 4)
        while not has_doc and first - 1 > node.lineno and lines[first - 2].strip().startswith("#"):
            first -= 1  # the comments above the first statement go too
        stub = f'{indent}raise NotImplementedError("exercise {exercise}: write {where} (python exercises.py show ' \
               f'{exercise})")\n'
        if body[0].lineno == node.lineno and not has_doc:  # a one-line def: `def f(x): return x`
            head = lines[node.lineno - 1].encode()[:body[0].col_offset].decode()
            lines[node.lineno - 1:body[-1].end_lineno] = [head.rstrip() + "\n", stub]
        elif len(body) == 1 and has_doc:
            lines[first - 1:first - 1] = [stub]
        else:
            lines[first - 1:body[-1].end_lineno] = [stub]
    return "".join(lines)


def write_stub(names, out, overwrite):
    out = Path(out)
    if out.suffix != ".py":
        raise SystemExit(f"exercises.py: error: --out {out} must name a .py file (python imports it to check it)")
    if not out.parent.is_dir():
        raise SystemExit(f"exercises.py: error: --out {out}: no folder {out.parent}: make it first, or name another")
    if out.exists() and not overwrite:
        raise SystemExit(f"exercises.py: error: {out} exists already: pass --out another.py, or --overwrite to "
                         "replace it (your work in it would be lost)")
    if out.resolve() == REFERENCE:
        raise SystemExit("exercises.py: error: --out must not be the reference cram.py itself: name a copy")
    source = REFERENCE.read_text(encoding="utf-8")
    for name in names:
        source = blank(source, name)
    header = f"# {out.name}: cram.py, your copy for exercise {', '.join(names)}: python exercises.py show {names[0]}\n"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(header + source, encoding="utf-8")
    os.replace(tmp, out)  # whole or not at all
    todo = ", ".join(w for name in names for w in EXERCISES[name].write)
    print(f"wrote {out}: cram.py with {todo} to write (each raises NotImplementedError until you do)")
    print(f"check it: python exercises.py check {' '.join(names)} --file {out}")


def show(name):
    ex = EXERCISES[name]
    print(f"{name}: {ex.title}")
    print(f"paper: {ex.paper}" + (f" ({CRAMMING})" if ex.paper.startswith("Cramming") else ""))
    print(f"about {ex.minutes} minutes; you write: {', '.join(ex.write)} in your copy of cram.py\n")
    print(ex.text + "\n")
    print(f"{'start: python exercises.py stub ' + name:63s} # writes my_cram.py")
    print(f"{'check: python exercises.py check ' + name + ' --file my_cram.py':63s} # PASS, or FAIL with what differs")


def listing():
    print("The exercises: write one idea of the paper again in your copy of cram.py (docs/exercises.md).\n")
    print(f"  {'name':12s} {'paper':28s} {'minutes':>7s}  title")
    for name, ex in EXERCISES.items():
        print(f"  {name:12s} {ex.paper:28s} {ex.minutes:7d}  {ex.title.split(':')[0]}")
    print(f"\n  Cramming: {CRAMMING}:\n  section 4.2 is its architecture, 4.3 its training recipe.")
    print("\n  python exercises.py show NAME                     # read the assignment")
    print("  python exercises.py stub NAME                     # write my_cram.py: cram.py with NAME left to write")
    print("  python exercises.py check NAME --file my_cram.py  # PASS, or FAIL with what differs (NAME all: every one)")


def load_module(path):
    """Import a (student's) copy of cram.py from `path` under its own name; a file that does not import is one line."""
    if not Path(path).is_file():
        raise SystemExit(f"exercises.py: error: no file {path}: pass --file your_copy_of_cram.py "
                         "(python exercises.py stub NAME writes one)")
    spec = importlib.util.spec_from_file_location("student_cram", path)
    if spec is None:
        raise SystemExit(f"exercises.py: error: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise SystemExit(f"exercises.py: error: {path} line {e.lineno}: SyntaxError: {e.msg} (nothing was checked)")
    except Exception as e:
        at = in_file(e, path)
        raise SystemExit(f"exercises.py: error: {path}{at}: {type(e).__name__}: {e} (it does not import; nothing was "
                         "checked)")
    return module


def in_file(error, path):
    """' line N in F' of the deepest frame of the error's traceback that runs in the file `path`, or ''."""
    target, found = os.path.realpath(path), ""
    for frame, line in traceback.walk_tb(error.__traceback__):
        if os.path.realpath(frame.f_code.co_filename) == target:
            found = f" line {line} in {getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}"  # 3.11: Class.f
    return found


def run(names, module, path):
    """Run the named checks; print PASS/FAIL with the reason; return the number that failed."""
    failed = 0
    for name in names:
        try:
            CHECKS[name](module)
            print(f"PASS  {name}")
        except Slip as e:
            failed += 1
            print(f"FAIL  {name}: {e}")
        except Exception as e:  # raised in the student's code (its file and line), or by what it returned
            failed += 1
            at = in_file(e, path)
            if at:
                print(f"FAIL  {name}: {path}{at}: {type(e).__name__}: {e}")
            else:  # in the check, on what the student's code returned or built
                print(f"FAIL  {name}: {type(e).__name__}: {e} (exercises.py{in_file(e, __file__)}, checking what "
                      "your code returned or built)")
    return failed


def main(argv=None):
    safe_console()  # a student's error message is printed escaped where the console lacks a character (Windows)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="NAME: " + ", ".join(EXERCISES) +
                                ", or all. Without a command, check.")
    p.add_argument("words", nargs="*", metavar="[show|stub|check] NAME", help="what to do, and which exercises")
    p.add_argument("--file", default=str(REFERENCE), help="check: the copy of cram.py to check (default: cram.py)")
    p.add_argument("--out", default="my_cram.py", help="stub: the student file to write (default: my_cram.py)")
    p.add_argument("--overwrite", action="store_true", help="stub: replace --out if it exists")
    args = p.parse_args(argv)
    if not args.words:
        listing()
        return 0
    command, names = (args.words[0], args.words[1:]) if args.words[0] in ("show", "stub", "check") \
        else ("check", args.words)
    if not names:
        raise SystemExit(f"exercises.py: error: {command} needs an exercise: one of {', '.join(EXERCISES)}, or all")
    for name in names:
        if name != "all" and name not in EXERCISES:
            raise SystemExit(f"exercises.py: error: unknown exercise {name!r}; choose one of "
                             f"{', '.join(EXERCISES)}, or all")
    names = list(EXERCISES) if "all" in names else list(dict.fromkeys(names))
    if command == "show":
        for name in names:
            show(name)
        return 0
    if command == "stub":
        write_stub(names, args.out, args.overwrite)
        return 0
    failed = run(names, load_module(args.file), args.file)
    print(f"{len(names) - failed} of {len(names)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
