"""Classroom exercises: write one idea of the paper again in your own copy of cram.py, then check it.

    python exercises.py                                   # the exercises: name, paper section, minutes, points
    python exercises.py show masking                      # the assignment
    python exercises.py stub masking                      # write my_cram.py: cram.py with mask_tokens left to write
    python exercises.py check masking --file my_cram.py   # PASS, or FAIL with what differs (or your file and line)
    python exercises.py all                               # check every exercise in cram.py (the reference passes)

For a class (classroom.py: what a student copy leaves out, and what isolation the grader gives and what it does not):

    python exercises.py release class/student --teacher class/teacher   # a student copy without the answers
    python exercises.py check masking --file alice.py --json            # one file in its own process, as JSON
    python exercises.py grade submissions --out grades.csv              # a class: a row per student

`stub` copies cram.py with the exercise's function (or class) emptied: its signature and docstring stay, its body
raises NotImplementedError until you write it (--out names another file; an existing file is never replaced
unless you add --overwrite). A check tests behaviour, not code: any correct version passes, whichever way it is
written, and a FAIL names the slip. Each check runs the student's code of its own exercise only: the other
exercises' functions are the reference's while it runs, so a stub or a slip elsewhere cannot fail it. A student
copy has no reference: there a check runs the copy's own other functions, and says which exercise to do first when
one of them is still a stub. docs/exercises.md is the classroom page; the lab notebook (docs/notes.md, 2026-11-22
afternoon) measures what each idea is worth on a tiny run.

The file reads in three parts: the assignments, the checks (one function per exercise), the command line.
"""
import argparse
import ast
import functools
import importlib.machinery
import importlib.util
import json
import math
import os
import re
import sys
import textwrap
import time
import traceback
import types
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import classroom
from errors import written_whole
from hardware import safe_console

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "cram.py"
STUDENT_COPY = ()  # a student copy (`release`) names its exercises here: its cram.py is the student's, no reference


# ----------------------------------------------------------------------------------------------------------------
# Part 1: the assignments.

@dataclass
class Exercise:
    title: str
    paper: str      # where it is described: Cramming and its section, or another paper
    minutes: int    # about how long a student takes
    write: tuple    # what `stub` empties in the student's copy: a function, Class.method, or a whole class
    text: str       # the assignment
    points: int = 1  # in grading: about one per 5 minutes of work
    needs: tuple = ()  # the exercises whose code its check runs too: in a student copy, write those first
    shown_by: tuple = ()  # exercises whose code shows this one's answer: a student copy empties theirs too


CRAMMING = 'Geiping & Goldstein, ICML 2023, "Cramming: Training a Language Model on a Single GPU in One Day"'

EXERCISES = {
    "masking": Exercise(
        "MLM masking: exactly 25% of each sequence is predicted, split 80/10/10", "Cramming 4.3", 30,
        ("mask_tokens",), """\
Write `mask_tokens(ids, mask_id, vocab_size, rate, generator)`. Pick exactly k = round(rate * T) distinct positions
in every sequence, uniformly at random over all T (special tokens too) and independently per sequence. Of those k
slots, 80% become [MASK] (mask_id), 10% a random token of the vocabulary (any id from 0 to vocab_size - 1 inclusive,
one draw per slot) and 10% keep their token: round(0.8 k) and round(0.1 k) slots (26 / 3 / 3 of k = 32); which slot
gets which must not depend on where it is in the sequence. Return (inputs (B, T), positions (B, k),
targets (B, k) = the original tokens at the positions), the [MASK] slots first in `positions`, then the random ones,
then the kept ones (the notebook reads them in that order). Leave the caller's `ids` as they were (work on a copy),
and use only `generator` for randomness, so the same seed gives the same masks. Make every new tensor on the
device of ids (device=ids.device): training runs on a GPU too.""", points=6),
    "lr_schedule": Exercise(
        "The time-based learning-rate schedule: one cycle over the budget fraction t", "Cramming 4.3", 10,
        ("lr_at",), """\
Write `lr_at(t, peak)`, where t is the fraction of the time budget used: lr = peak * min(0.25 + t, 4 (1 - t)),
never below 0. It rises from a quarter of the peak at t = 0 to the peak at t = 0.75 and falls to 0 at t = 1
(the last step can pass t = 1 a little: the lr stays 0 there). Return a number.""", points=2),
    "batch_ramp": Exercise(
        "The batch-size ramp: grow the batch linearly in t by gradient accumulation", "Cramming 4.3", 15,
        ("batch_size_at",), """\
Write `batch_size_at(t, unit, target, ramp_until)`: from one unit (a micro-batch) at t = 0 linearly to `target` at
t = ramp_until, constant after. Return an int that is a whole number of units, rounded to the nearest (the training
loop runs batch // unit micro-batches per step). ramp_until = 0 means no ramp: the target from the first step.""",
        points=3),
    "positions": Exercise(
        "Scaled sinusoidal positions: a fixed sin/cos table times one learnable scalar", "Cramming 4.2", 25,
        ("sinusoidal_table", "Embeddings"), """\
Write `sinusoidal_table(T, C)`: table[p, 2i] = sin(p / 10000^(2i/C)), table[p, 2i+1] = cos(p / 10000^(2i/C)), for
positions p = 0 .. T-1. Then the class `Embeddings(cfg, vocab_size, seq_len)`: `tok` = nn.Embedding(vocab_size,
cfg.n_embd); the table as a buffer (not learned; persistent=False: not in checkpoints); one scalar parameter
`pos_scale` starting at cfg.pos_scale_init / sqrt(C); `norm` = nn.LayerNorm(C, eps=cfg.norm_eps); `drop` =
nn.Dropout(cfg.dropout).
forward(ids (B, T)): drop(norm(tok(ids) + pos_scale * table[:T])); T may be shorter than seq_len (fine-tuning).""",
        points=5),
    "glu": Exercise(
        "The gated-GELU feed-forward: GLU instead of a plain GELU MLP", "Cramming 4.2", 15,
        ("GLUFeedForward",), """\
Write the class `GLUFeedForward(cfg)`: `up` = Linear(d -> cfg.ffn_hidden, no bias); `down` = Linear(ffn_hidden / 2
-> d, no bias). forward(x): split up(x) in halves (x first, gate second) and return down(GELU(gate) * x).""", points=3),
    "sparse_head": Exercise(
        "Sparse prediction: the tied vocabulary projection only at the masked positions", "Cramming 4.2", 20,
        ("CrammedBERT.forward",), """\
Write `CrammedBERT.forward(ids, positions, targets=None)`: the hidden states at `positions` (B, k) only
(self.encode(ids, positions=positions) gives them), times the token-embedding matrix (tied decoder, no bias):
logits (B, k, V). With targets (B, k), return their mean cross-entropy instead, a scalar (training computes its
loss inside the model).""", points=4,
        needs=("positions", "glu", "attention", "prenorm", "local_bias")),
    "prenorm": Exercise(
        "Pre-LayerNorm blocks: normalise each sub-layer's input, keep the residual stream clean", "Cramming 4.2", 10,
        ("Block.forward",), """\
Write `Block.forward(x, attn_mask=None)`: x = x + Attn(LN1(x)); x = x + FFN(LN2(x)) (pre-norm), not
LN(x + Attn(x)) (post-norm, the original BERT). The sub-layers are self.attn (it takes attn_mask), self.ffn,
self.norm1, self.norm2, self.drop (dropout on each sub-layer's output).""", points=2,
        needs=("glu", "attention"), shown_by=("narrow",)),
    "attention": Exercise(
        "Multi-head attention: one fused QKV matmul, softmax(q k^T / sqrt(d_head)) v", "Cramming 4.2", 30,
        ("Attention.forward",), """\
Write `Attention.forward(x, attn_mask=None)`: `qkv` (no bias) gives q, k, v, in that order along its 3 d outputs
(the layout the checkpoints hold), each split into n_head heads of d / n_head, (B, H, T, D); then
softmax(q k^T / sqrt(d_head)) v per head, the heads concatenated and projected by `out` (no bias).
`self.attend(q, k, v, attn_mask)` does that second half with F.scaled_dot_product_attention: use it, or write the
softmax yourself. attn_mask is either (B, 1, 1, T), False on padded keys, or a float bias added to the scores (the
tiny preset's, exercise local_bias); None: every key, no causal mask (BERT sees both sides). In eval mode nothing is
dropped.""",
        points=6, shown_by=("narrow",)),  # NarrowBlock splits heads and adds sub-layers
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
hidden states at those positions only (with narrow blocks, hand them to narrow_blocks: exercise narrow).""", points=7,
        needs=("positions", "glu", "attention", "prenorm")),
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
and fine-tuning sees the model that pretraining trained.""", points=9,
        needs=("positions", "glu", "attention", "prenorm", "local_bias", "sparse_head")),
}


# ----------------------------------------------------------------------------------------------------------------
# Part 2: the checks, one function per exercise. Each calls the student's module `cram` and raises Slip with what
# differs; randomness is checked by statistics and structure, never against the reference's own draws.

class Slip(Exception):
    """The student's code runs but does not do what the assignment says; the message names the slip."""


NO_CHECKS = "this copy has no checks: your teacher grades your cram.py"  # a --no_checks copy's every check says it


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


def on_another_device(run, what):
    """run() on torch's meta device (shapes, no values), standing in for a GPU: a tensor the student's code makes on
    the CPU meets the input's device and fails, as it would on a GPU. What that device cannot do (.item(), shapes
    that depend on values) gives no verdict."""
    fix = ("make new tensors on the input's device (device=ids.device, x.device) and fixed ones a buffer "
           "(register_buffer), which moves with the module")
    try:
        out = run()
    except Exception as e:  # noqa: BLE001  torch's own refusals there: RuntimeError, NotImplementedError, assert
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        expect(not ("device" in first and "cpu" in first), f"{what} on a GPU fails: a tensor of yours stays on the "
               f"CPU ({first[:90]}): {fix}")
        return
    out = out if isinstance(out, (tuple, list)) else [out]
    expect(all(t.device.type == "meta" for t in out if isinstance(t, torch.Tensor)),
           f"{what} on a GPU returns a tensor on the CPU: {fix}")


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
    for rate in (0.15, 0.2, 0.3):  # the rate is an argument (--mask_from's schedule): at 0.2, int() gives 25, not 26
        got = tuple(tensor(cram.mask_tokens(ids[:4], mask_id, V, rate, gen)[1], "mask_tokens's positions").shape)
        expect(got == (4, round(rate * T)), f"k = round(rate * T): at rate {rate}, T={T}, positions must be (4, "
               f"{round(rate * T)}), got {got}" + (": int() rounds down, use round()" if got == (4, int(rate * T))
                                                  else ": use the rate you are given, not 0.25"))

    # many rows, a large vocabulary, ids from a small part of it, another mask_id (BERT's): the counts of the split,
    # the random tokens' range and the slots' roles
    B, V, mask_id = 256, 10_000, 103
    ids = torch.randint(5, 50, (B, T), generator=torch.Generator().manual_seed(3))
    for rows in (ids[:, :64], ids):  # k = 16 and 32: round() and int() differ (13/2/1 vs 12/1/3, 26/3/3 vs 25/3/4)
        inputs, positions, targets = cram.mask_tokens(rows, mask_id, V, 0.25, torch.Generator().manual_seed(4))
        at, k = inputs.gather(1, positions), positions.shape[1]
        holds_mask_id(at, mask_id)
        n = torch.stack([(at == mask_id).sum(1), (at == targets).sum(1)])           # per row: [MASK], kept
        common, want = n.mode(dim=1).values, (round(0.8 * k), round(0.1 * k))
        same = (n == common[:, None]).all(0).float().mean().item()  # a random token may be its slot's own: rarely
        expect(same > 0.9, f"every row's k = {k} slots split alike: round(0.8 * k) = {want[0]} [MASK], round(0.1 * k) "
               f"= {want[1]} random, {k - sum(want)} kept; in yours only {100 * same:.0f}% of the rows share one split "
               "(a die cast per slot?)")
        got = (common[0].item(), k - common.sum().item())
        expect(got == want, f"of k = {k} slots, round(0.8 * k) = {want[0]} become [MASK], round(0.1 * k) = "
               f"{want[1]} a random token, {k - sum(want)} keep theirs; yours {got[0]}/{got[1]}/{common[1]}"
               + (": int() rounds down, use round()" if got == (int(0.8 * k), int(0.1 * k)) else ""))
        first, last = (at[:, :want[0]] == mask_id).float().mean(), (at[:, sum(want):] == targets[:, sum(want):])
        expect(bool(first == 1 and last.all()), f"the slots' order in positions, of k = {k}: the {want[0]} [MASK] "
               f"slots first, then the {want[1]} random, then the {k - sum(want)} kept (the docstring's order, "
               f"which the notebook reads); yours: {100 * first:.0f}% of the first {want[0]} are [MASK], "
               f"{100 * last.float().mean():.0f}% of the last {k - sum(want)} keep their token")
    drawn = at[(at != mask_id) & (at != targets)]                                 # the random slots' tokens
    expect(len(drawn) > 0, "about 10% of the masked slots must be a random token; got none")
    n, distinct, low, high = len(drawn), len(drawn.unique()), drawn.min().item(), drawn.max().item()
    expect(distinct > 1, "the random slots all hold one token: draw one per slot")
    expect(0 <= low and high < V, f"random tokens must be ids in 0..vocab_size-1 ({V - 1}); got {low} to {high}")
    vocabulary = (f"random tokens must come from the whole vocabulary, 0..vocab_size-1: with vocab_size {V} yours "
                  f"ranged over {low}..{high}")
    expect(high >= V // 10, vocabulary + " (the special tokens, the sequence's own tokens or positions?)")
    upper = (drawn >= V // 2).float().mean().item()
    fresh = "a fresh torch.randint(0, vocab_size, ...) from the generator, not values made from another draw"
    expect(0.35 < upper < 0.65, vocabulary + f", not evenly: {100 * upper:.0f}% in its upper half; use " + fresh +
           " (the positions' scores?)")
    expect(distinct > 0.8 * n, f"the random slots repeat their tokens ({distinct} different in {n} slots of a "
                               f"{V}-token vocabulary): draw one per slot, " + fresh)
    # the random tokens know nothing of which positions were picked: each one's correlation with "position j is
    # among the row's k" over 4,096 rows is ~N(0, 1/64) for a fresh draw (the largest of 3 x 128: ~0.06)
    rows = torch.randint(5, 50, (4096, T), generator=torch.Generator().manual_seed(8))
    rows_in, rows_at, _ = cram.mask_tokens(rows, mask_id, V, 0.25, torch.Generator().manual_seed(9))
    n_mask, n_rand = round(0.8 * k), round(0.1 * k)
    random_slots = rows_in.gather(1, rows_at[:, n_mask:n_mask + n_rand]).double()  # (rows, 3)
    picked = torch.zeros(rows.shape, dtype=torch.double).scatter(1, rows_at, 1.0)  # (rows, T)
    corr = torch.corrcoef(torch.cat([random_slots, picked], 1).T)[:n_rand, n_rand:].abs().nan_to_num()  # (3, T)
    expect(corr.max() < 0.2, f"the random tokens depend on which positions were picked (a correlation of "
           f"{corr.max():.2f} with position {corr.max(0).values.argmax().item()} being picked): " + fresh +
           " (the positions' scores?)")
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
    on_another_device(lambda: cram.mask_tokens(ids.to("meta"), mask_id, V, 0.25, torch.Generator()), "mask_tokens")


def check_lr_schedule(cram):
    for peak_text in ("1e-3", "0.5"):
        peak = float(peak_text)
        every = [(i / 100, min(0.25 + i / 100, 4 * (1 - i / 100)), "at every hundredth of t") for i in range(101)]
        for t, factor, part in [(0.0, 0.25, "the start"), (0.25, 0.5, "the rise"), (0.5, 0.75, "the rise"),
                                (0.75, 1.0, "the peak"), (0.8, 0.8, "the decay"), (0.9, 0.4, "the decay"),
                                (1.0, 0.0, "the end"), (1.1, 0.0, "past the end: it stays 0"), *every]:
            got = cram.lr_at(t, peak)  # a float: the loop logs it as JSON, which holds no tensor (a trial, 11-27)
            expect(isinstance(got, (int, float)) and not isinstance(got, bool), "lr_at must return a Python number "
                   f"(a tensor or a NumPy float32: float(...) it); it returned {kind(got, cram.lr_at)}")
            got = float(got)
            expect(not (math.isclose(got, factor, abs_tol=1e-12) and factor), f"lr_at({t}, {peak_text}) returned "
                   f"the factor {got:g}, not the learning rate: multiply by peak")
            expect(math.isclose(got, factor * peak, rel_tol=1e-6, abs_tol=1e-12),
                   f"lr_at({t}, {peak_text}) should be {factor * peak:.3g} ({factor} x peak, {part}), got {got:.3g}")


def check_batch_ramp(cram):
    def size(t, unit=32, target=2048, ramp_until=0.6):
        got = cram.batch_size_at(t, unit, target, ramp_until)
        expect(isinstance(got, int) and not isinstance(got, bool),  # a NumPy int64: the log's JSON holds none
               "batch_size_at must return an int (the loop runs batch // unit micro-batches, and logs it as JSON: "
               "int(...) a NumPy number); it returned " + (kind(got, cram.batch_size_at) if got is None else
                                                          f"{kind(got)} {got!r}"))
        return got

    for t, want, part in [(0.0, 32, "one micro-batch at the start"), (0.6, 2048, "the target at ramp_until"),
                          (0.9, 2048, "the target after ramp_until"), (1.0, 2048, "the target after ramp_until")]:
        got = size(t)
        expect(got == want, f"batch_size_at({t}, unit=32, target=2048, ramp_until=0.6) should be {want} ({part}), "
                            f"got {got}")
    mid = size(0.3)
    expect(abs(mid - (32 + 2048) / 2) <= 32, f"halfway (t=0.3) the batch should be about 1040, got {mid}")
    for unit, target, until in ((32, 2048, 0.6), (16, 512, 0.3)):  # the arguments, not the paper's numbers
        sizes = [size(i / 100, unit, target, until) for i in range(101)]
        expect(all(s % unit == 0 for s in sizes), f"every batch size must be a whole number of micro-batches "
                                                  f"({unit})")
        for i, got in enumerate(sizes):  # the nearest whole number of micro-batches (a tie may go either way)
            units = (unit + min(i / 100 / until, 1.0) * (target - unit)) / unit
            nearest = {math.floor(units), math.ceil(units)} if abs(units % 1 - 0.5) < 1e-9 else {round(units)}
            expect(got // unit in nearest, f"batch_size_at({i / 100}, unit={unit}, target={target}, ramp_until="
                   f"{until}) should be {unit * min(nearest)}: {units:.2f} micro-batches, rounded to the nearest; got "
                   f"{got}" + (": rounded down (int(), or // unit after rounding the sequences?): round the number of"
                               " micro-batches, round(size / unit) * unit" if got // unit == math.floor(units) else ""))
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
    emb = cram.Embeddings(small_cfg(cram, n_embd=C, norm_eps=0.5), 50, T)  # an eps that shows: cfg's, not 1e-5
    learned = [n for n, p in emb.named_parameters() if "tok" not in n and "norm" not in n]
    expect(learned == ["pos_scale"] and emb.pos_scale.numel() == 1,
           f"besides the token embedding and LayerNorm, Embeddings must learn exactly one scalar pos_scale; "
           f"found {learned} (the fixed table is a buffer, register_buffer, not a Parameter)")
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
        ln = functools.partial(F.layer_norm, normalized_shape=(C,), weight=emb.norm.weight, bias=emb.norm.bias)
        expect(not matches(got, ln(tok + 0.7 * want, eps=1e-5)), "the LayerNorm's eps is cfg.norm_eps (1e-12 in the "
                                                                 "presets), not nn.LayerNorm's default 1e-5")
        close(got, ln(tok + 0.7 * want, eps=0.5), "Embeddings(ids) vs LayerNorm(tok(ids) + pos_scale * table)", 1e-4)
        short = tensor(emb(ids[:, :12]), "Embeddings(ids) for 12 of its 16 positions", (2, 12, C))
        close(short, emb.norm(tok[:, :12] + 0.7 * want[:12]),
              "Embeddings on a sequence shorter than seq_len (12 of 16): the first 12 rows of the table", 1e-4)
    saved = sorted(set(emb.state_dict()) - {n for n, _ in emb.named_parameters()})
    expect(not saved, f"the table is a buffer registered with persistent=False (it follows from seq_len and C: "
                      f"checkpoints don't hold it, and a model of other length loads them); yours saves {saved}")
    dropping = cram.Embeddings(small_cfg(cram, n_embd=C, dropout=0.5), 50, T)
    with torch.no_grad():
        zeros = (dropping.train()(ids) == 0).float().mean()
        expect(torch.equal(dropping.eval()(ids), dropping(ids)), "in eval mode nothing is dropped: self.drop (an "
               "nn.Dropout follows .train() and .eval()), not F.dropout(..., p), which drops in eval mode too")
    on_another_device(lambda: emb.to("meta")(ids.to("meta")), "Embeddings")
    expect(0.3 < zeros < 0.7, f"in training Embeddings ends with self.drop, drop(norm(...)) (fine-tuning's dropout "
                              f"0.1): with dropout 0.5 about half its outputs are 0; yours {100 * zeros:.0f}%")


def check_glu(cram):
    cfg = small_cfg(cram, ffn_hidden=96)  # not 2 x n_embd, where d -> d and ffn_hidden / 2 -> d look alike
    ffn = cram.GLUFeedForward(cfg)
    shapes = {n: tuple(p.shape) for n, p in ffn.named_parameters()}
    expect(shapes == {"up.weight": (96, 32), "down.weight": (32, 48)},
           f"with n_embd 32 and ffn_hidden 96: expected up.weight (96, 32), d -> ffn_hidden, and down.weight (32, 48), "
           f"ffn_hidden / 2 -> d (it takes the gated half), no biases; found {shapes}")
    x = torch.randn(3, 5, 32)
    h = x @ ffn.up.weight.T
    first, second, down = h[..., :48], h[..., 48:], ffn.down.weight.T
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
    trains(lambda: ffn(x.clone().requires_grad_()), "GLUFeedForward")


def trains(forward, what):
    """forward() then backward, as training runs it: an in-place change (x *= ..., x += ...) of a tensor autograd
    saved for the backward passes a check under no_grad and fails here."""
    try:
        forward().float().pow(2).mean().backward()
    except RuntimeError as e:
        expect(False, f"{what}'s backward failed ({str(e).splitlines()[0][:120]}): an in-place operation (*=, +=, "
                      "[...] = on a tensor autograd saved)? write a new tensor, x = x * ..., x = x + ...")


def check_sparse_head(cram):
    torch.manual_seed(0)
    model = cram.CrammedBERT(small_cfg(cram), 100, 16).eval()
    ids, positions = torch.randint(0, 100, (3, 16)), torch.stack([torch.randperm(16)[:4] for _ in range(3)])
    logits = tensor(model(ids, positions), "model(ids, positions)", fn=cram.CrammedBERT.forward)
    expect(tuple(logits.shape) == (3, 4, 100), f"logits must be (B, k, V) = (3, 4, 100), got {tuple(logits.shape)}")
    dense = model.encode(ids) @ model.embed.tok.weight.T                        # (B, T, V): every position
    from torch.utils.flop_counter import FlopCounterMode
    counted = []
    for run in (lambda: model(ids, positions), lambda: model.encode(ids)):
        with torch.no_grad(), FlopCounterMode(display=False) as flops:
            run()
        counted.append(flops.get_total_flops())
    head, sparse = counted[0] - counted[1], 2 * logits.numel() * model.embed.tok.weight.shape[1]  # B*k x C x V
    expect(head < 2 * sparse, f"the head's logits at the k masked positions only: yours multiplied {head:,} FLOPs "
           f"beyond encode, where B * k rows x C x V is {sparse:,} (logits at every position, then gathered?)")
    close(logits, dense.gather(1, positions[..., None].expand(-1, -1, 100)),
          "sparse logits vs the dense logits at the masked positions (is the decoder tied to embed.tok?)", 1e-4)
    targets = torch.randint(0, 100, (3, 4))
    loss = tensor(model(ids, positions, targets), "model(ids, positions, targets)", fn=cram.CrammedBERT.forward)
    expect(loss.dim() == 0, f"with targets, forward returns the loss: a scalar, not {tuple(loss.shape)}")
    want = F.cross_entropy(logits.reshape(-1, 100), targets.reshape(-1))
    expect(not math.isclose(loss.item(), targets.numel() * want.item(), rel_tol=1e-4),
           "the loss is the mean cross-entropy over the B * k targets, not their sum")
    close(loss, want, "model(ids, positions, targets) vs the mean cross-entropy of the logits", 1e-4)
    weight = model.embed.tok.weight  # the tied decoder: the loss's gradient reaches it through the head and the input
    h = model.encode(ids, positions=positions)
    want = torch.autograd.grad(F.cross_entropy((h @ weight.T).reshape(-1, 100), targets.reshape(-1)), weight)[0]
    loss = model(ids, positions, targets)
    expect(loss.requires_grad, "the loss carries no gradient: training calls loss.backward() on it (no "
                               "torch.no_grad(), .detach() or .item() inside forward)")
    close(torch.autograd.grad(loss, weight)[0], want, "the gradient of the loss for embed.tok.weight (the head is "
          "tied to it: use the weight itself, not its .data or .detach(), which the backward would skip)", 1e-5)


def dropped_once(added, out):
    """What a block added to x is its sub-layer's `out` through one dropout at p = 0.5: each value 0 or 2 * out, about
    half of them 0."""
    dropped, doubled = added.abs() < 1e-6, (added - 2 * out).abs() < 1e-4
    return bool((dropped | doubled).all()) and 0.3 < dropped.float().mean() < 0.7


def check_prenorm(cram):
    torch.manual_seed(0)
    block = cram.Block(small_cfg(cram)).eval()
    x = 3 * torch.randn(2, 8, 32) + 1
    given = x.clone()
    with torch.no_grad():
        tensor(block(x), "Block(x)", (2, 8, 32), cram.Block.forward)
    expect(torch.equal(x, given), "Block.forward changed the caller's x in place (x += ...): write x = x + ..., a "
                                  "new tensor (the caller and autograd still need the x they gave)")
    trains(lambda: block(x.clone().requires_grad_()), "Block")
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
        keep = torch.arange(8) < torch.tensor([8, 5])[:, None, None, None]         # (2, 1, 1, 8): row 1 pads 3
        for mask, what in ((keep, "a padding mask"), (torch.randn(4, 8, 8), "a float bias")):
            h = x + block.attn(block.norm1(x), mask)  # fine-tuning's padding, the tiny preset's bias: both reach attn
            close(block(x, mask), h + block.ffn(block.norm2(h)), f"Block(x, attn_mask) with {what} vs h = x + "
                  "attn(norm1(x), attn_mask); h + ffn(norm2(h)): hand attn_mask on to self.attn", 1e-4)
    block = cram.Block(small_cfg(cram, dropout=0.5)).eval()
    with torch.no_grad():
        h = x + block.attn(block.norm1(x))
        close(block(x), h + block.ffn(block.norm2(h)), "in eval mode (dropout 0.5) nothing is dropped: self.drop (an "
              "nn.Dropout follows .train() and .eval()), not F.dropout(..., p), which drops in eval mode too", 1e-4)
    block = cram.Block(small_cfg(cram, dropout=0.5)).train()                       # training: dropout on
    with torch.no_grad():
        block.attn.out.weight.zero_()
        block.ffn.down.weight.zero_()
        close(block(x), x, "in training (dropout 0.5), with attn.out and ffn.down zeroed, a block must still return x: "
              "x itself is never dropped, only each sub-layer's output goes through self.drop")
    for sub, other in (("attn", "ffn.down"), ("ffn", "attn.out")):  # training: self.drop on each sub-layer's output
        block = cram.Block(small_cfg(cram, dropout=0.5)).train()
        block.attn.dropout = 0.0                                                   # only self.drop draws
        with torch.no_grad():
            block.get_submodule(other).weight.zero_()                              # the other sub-layer adds 0
            out = getattr(block, sub)(block.norm1(x) if sub == "attn" else block.norm2(x))
            added = block(x) - x
        expect(dropped_once(added, out),
               f"in training (dropout 0.5) each sub-layer's output goes through self.drop before it is added, "
               f"x + self.drop(self.{sub}(...)); yours does not put self.{sub}'s output through it, once")


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
    expect(got.isfinite().all(), "the output holds NaN or inf: is the mask inverted (True means: attend to this "
                                 "key), or the softmax taken over the queries? (over the keys: the last dim)")
    expect(torch.equal(got, again), "in eval mode nothing is dropped: dropout_p=self.dropout only while training")
    scores = (q @ k.transpose(-1, -2)).masked_fill(~keep[:, None, None, :], float("-inf"))
    expect(not matches(got, attend(scores / math.sqrt(C))), "scale the scores by 1/sqrt(d_head), the width of one "
                                                            "head (C / n_head), not 1/sqrt(C)")
    expect(not matches(got, attend(scores)), "scale the scores by 1/sqrt(d_head) before the softmax")
    q2, k2, v2 = (z.reshape(B, H, T, C // H) for z in qkv)                        # heads cut the wrong way
    mixed = (q2 @ k2.transpose(-1, -2) / math.sqrt(C // H)).masked_fill(~keep[:, None, None, :], float("-inf"))
    expect(not matches(got, attend(mixed, v2)),
           "split the heads with view(B, T, H, D).transpose(1, 2): view(B, H, T, D) cuts across positions")
    q3, k3, v3 = (x @ attn.qkv.weight.T).view(B, T, H, 3, C // H).permute(3, 0, 2, 1, 4)  # per head: q k v, q k v
    per_head = (q3 @ k3.transpose(-1, -2) / math.sqrt(C // H)).masked_fill(~keep[:, None, None, :], float("-inf"))
    expect(not matches(got, attend(per_head, v3)), "qkv's outputs are q, then k, then v (each all heads), not q, k, v "
                                                   "per head: the layout the checkpoints hold")
    scores = scores / math.sqrt(C // H)
    causal = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    expect(not matches(got, attend(causal)), "no causal mask: BERT's queries attend to keys on both sides")
    unmerged = (scores.softmax(-1) @ v).reshape(B, T, C) @ attn.out.weight.T     # (B, H, T, D) read as (B, T, C)
    expect(not matches(got, unmerged), "merge the heads back with transpose(1, 2) before reshape(B, T, C): "
                                       "(B, H, T, D) reshaped as it is mixes the positions of different heads")
    close(got, attend(scores), "Attention vs softmax(q k^T / sqrt(d_head)) v with padding mask", 1e-4)
    trains(lambda: attn(x.clone().requires_grad_(), keep[:, None, None, :]), "Attention")
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)                        # no mask: pretraining's path
    with torch.no_grad():
        close(attn(x), attend(scores),
              "Attention with no mask (pretraining) vs softmax over every key: no causal mask", 1e-4)
        bias = torch.randn(H, T, T)                                               # a float mask is added
        close(attn(x, bias), attend(scores + bias), "Attention with a float attn_mask (H, T, T) vs softmax(scores + "
                                                    "mask)", 1e-4)
    for mask in (keep[:, None, None, :], bias):
        on_another_device(lambda: attn.to("meta")(x.to("meta"), mask.to("meta")), "Attention")


def check_local_bias(cram):
    T = 16
    paper = cram.CrammedBERT(small_cfg(cram), 50, T).eval()
    expect(paper.attn_bias is None, "with local_bias 0, attn_bias must be None")
    torch.manual_seed(0)
    model = cram.CrammedBERT(small_cfg(cram, local_bias=2.0), 50, T).eval()
    off = [f"{n} (std {w.std():.3f}, mean {w.mean():+.3f})" for n, w in model.named_parameters() if w.dim() == 2 and
           not (0.016 < w.std() < 0.024 and abs(w.mean()) < 0.005)]  # every Linear's and the Embedding's matrix
    expect(not off, f"every Linear and Embedding weight is drawn from N(0, 0.02) in __init__; not: "
                    f"{', '.join(off)}"[:300])
    norms = [n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm) and not
             (bool((m.weight == 1).all()) and bool((m.bias == 0).all()))]
    expect(not norms, f"the LayerNorms keep their weight 1 and bias 0 (only Linear and Embedding weights are drawn); "
                      f"not: {', '.join(norms)}")
    close(model.embed.pos_scale.detach(), torch.tensor(1 / math.sqrt(32)), "embed.pos_scale keeps the start "
          "Embeddings gives it, cfg.pos_scale_init / sqrt(C) (only Linear and Embedding weights are drawn)")
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
    moved = cram.CrammedBERT(small_cfg(cram, local_bias=2.0), 50, T).to("meta")  # meta: a GPU's stand-in
    expect(moved.attn_bias.device.type == "meta", "attn_bias stays on the CPU when the model moves to a GPU "
           "(.to(device)): register it as a buffer, register_buffer(..., persistent=False), which moves with it")
    ids = torch.randint(5, 50, (2, T))
    pad = torch.ones(2, T, dtype=torch.bool)
    pad[1, 10:] = False                                                            # row 1 ends in 6 pad tokens
    with torch.no_grad():
        out, plain = model.encode(ids, pad), model.encode(ids)  # with padding (fine-tuning), without (pretraining)
        close(plain, model.encode(ids, torch.ones(2, T, dtype=torch.bool)),
              "encode without a pad_mask must equal encode with one that pads nothing (the bias in both)", 1e-4)
        short = cram.CrammedBERT(small_cfg(cram, local_bias=2.0), 50, 12).eval()
        short.load_state_dict(model.state_dict())
        first_rows = "use the bias's first T rows and columns, attn_bias[None, :, :T, :T]"
        try:
            close(model.encode(ids[:, :12]), short.encode(ids[:, :12]),
                  f"encode on 12 tokens of a 16-position model vs a 12-position model: {first_rows}", 1e-4)
        except RuntimeError as e:
            raise Slip(f"encode on 12 tokens of a 16-position model failed ({str(e).splitlines()[0][:90]}): "
                       f"{first_rows}") from None
        model.attn_bias.zero_()
        expect((model.encode(ids, pad) - out).abs().max().item() > 1e-3,
               "encode must use attn_bias: zeroing it changed nothing")
        model.attn_bias.copy_(want)
        other = ids.clone()
        other[1, 10:] = 7                                                          # other tokens under the padding
        close(model.encode(other, pad)[1, :10], out[1, :10],
              "with the bias on, padded keys must still be ignored (-inf in the mask)", 1e-4)
        close(paper.encode(other, pad)[1, :10], paper.encode(ids, pad)[1, :10], "with local_bias 0 (attn_bias None), "
              "padded keys must be ignored too: the pad_mask, as (B, 1, 1, T), is every block's attn_mask", 1e-4)
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
    hands_narrow_blocks_on(cram, T)


def added(mask, T):
    """What an attention mask adds to the (2, 4, T, T) scores: None 0, a bool mask 0 or -inf, a float one itself."""
    zeros = torch.zeros(2, 4, T, T)
    if mask is None:
        return zeros
    return zeros.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else zeros + mask


def hands_narrow_blocks_on(cram, T):
    """encode with narrow blocks (cfg.narrow 2 of 3): the wide block on every position, then one call of
    narrow_blocks, seen through a stand-in for it (that function is exercise narrow's)."""
    for bias in (0.0, 1.0):
        model = cram.CrammedBERT(small_cfg(cram, n_layer=3, narrow=2, local_bias=bias), 50, T).eval()
        kinds = [type(b).__name__ for b in model.blocks]
        expect(kinds == ["Block", "NarrowBlock", "NarrowBlock"], f"with n_layer 3 and cfg.narrow 2, blocks are one "
               f"Block then two NarrowBlocks; yours {kinds}")
        ids, positions = torch.randint(5, 50, (2, T)), torch.stack([torch.randperm(T)[:4] for _ in range(2)])
        calls, real = [], cram.narrow_blocks

        def stand_in(blocks, context, attn_mask, positions):
            calls.append((list(blocks), context, attn_mask, positions))
            return context.gather(1, positions[..., None].expand(-1, -1, context.shape[-1]))

        cram.narrow_blocks = stand_in  # encode finds it as a global of its module
        try:
            with torch.no_grad():
                got = model.encode(ids, positions=positions)
        finally:
            cram.narrow_blocks = real
        what = f"with narrow blocks (n_layer 3, cfg.narrow 2, local_bias {bias})"
        expect(len(calls) == 1, f"{what}, encode hands them to narrow_blocks(blocks, x, attn_mask, positions), "
                                f"once; yours called it {len(calls)} times")
        blocks, context, mask, at = calls[0]
        expect(blocks == list(model.blocks[1:]), f"{what}, narrow_blocks gets the narrow blocks, blocks[wide:]")
        with torch.no_grad():
            wide = model.blocks[0](model.embed(ids), None if not bias else model.attn_bias)
        close(context, wide, f"{what}, narrow_blocks gets x after the wide blocks only, blocks[:wide]", 1e-4)
        expect(matches(added(mask, T), added(model.attn_bias, T)), f"{what}, narrow_blocks gets the attention "
               "mask the wide blocks got: the local bias (its first T rows and columns), or none")
        expect(at is positions, f"{what}, narrow_blocks gets the positions encode was given")
        close(got, model.final_norm(stand_in(blocks, context, mask, at)),
              f"{what}, encode returns final_norm of what narrow_blocks returns", 1e-4)


def check_narrow(cram):
    torch.manual_seed(0)
    T, C, H = 16, 32, 4
    for bias in (0.0, 1.0):
        model = cram.CrammedBERT(small_cfg(cram, n_layer=3, narrow=2, local_bias=bias), 50, T).eval()
        ids, positions = torch.randint(5, 50, (2, T)), torch.stack([torch.randperm(T)[:4] for _ in range(2)])
        mask = model.attn_bias if bias else None
        with torch.no_grad():  # the reference, by hand: one wide block, then two narrow ones on every position
            for norm in (m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)):  # norm1 and norm2 differ
                norm.weight.normal_()
                norm.bias.normal_()
            for w in (p for p in model.blocks.parameters() if p.dim() == 2):  # sub-layers as large as x: slips show
                w.mul_(10)
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
            close(model.encode(ids), want, f"encode(ids) vs the narrow blocks run by hand on every position, {what} "
                  "(encode, exercise local_bias, hands x, the mask and positions to narrow_blocks, then final_norm)",
                  1e-4)
            close(model.encode(ids, positions=positions), want.gather(1, at),
                  f"encode(ids, positions=...) vs the same rows of the full computation, {what}", 1e-4)
            close(model(ids, positions), want.gather(1, at) @ model.embed.tok.weight.T,
                  f"the sparse logits of a narrow model vs the full computation's, {what}", 1e-4)
    block, x = model.blocks[1], torch.randn(2, T, C)
    with torch.no_grad():  # context None: x is its own context, as in a Block
        h = x + block.attn(block.norm1(x))
        close(block(x), h + block.ffn(block.norm2(h)), "NarrowBlock(x) with context None vs a Block's x + "
              "attn(norm1(x)), then + ffn(norm2(...)): x is its own context", 1e-4)
    block = cram.CrammedBERT(small_cfg(cram, n_layer=2, narrow=1, dropout=0.5), 50, T).blocks[1].train()
    block.attn.dropout = 0.0                                                       # only self.drop draws
    with torch.no_grad():
        block.ffn.down.weight.zero_()                                              # the feed-forward adds 0
        gained, out = block(x, None, x) - x, block.attn(block.norm1(x))
    expect(dropped_once(gained, out), "in training (dropout 0.5) NarrowBlock's attention output goes through "
                                      "self.drop before it is added, as in a Block")


CHECKS = {name[len("check_"):]: fn for name, fn in list(globals().items()) if name.startswith("check_")}
assert list(CHECKS) == list(EXERCISES), "every exercise needs its check, in the same order"


# ----------------------------------------------------------------------------------------------------------------
# Part 3: the command line: list, show, stub (write a student's file), check; release and grade (classroom.py).

def find(tree, name):
    """The def or class `name` ("f", "Class", "Class.method") at the top of a parsed module, or None."""
    node = tree
    for part in name.split("."):
        node = next((n for n in node.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            return None
    return node


def defs_of(tree, names):
    """(def, its name as the student reads it) for each function `names` hold: a function, Class.method, or every
    method of a class. A name the module lacks raises LookupError(name)."""
    defs = []
    for name in names:
        node = find(tree, name)
        if node is None:
            raise LookupError(name)
        if isinstance(node, ast.ClassDef):
            defs += [(n, f"{name}.{n.name}") for n in node.body if isinstance(n, ast.FunctionDef)]
        else:
            defs.append((node, name))
    return defs


def has_docstring(node):
    first = node.body[0]
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def emptied(source, names, stub):
    """`source` with the body of each def `names` hold replaced by the line stub(its name) (the docstring stays)."""
    tree, lines = ast.parse(source), source.splitlines(keepends=True)
    for node, where in sorted(defs_of(tree, names), key=lambda d: d[0].lineno, reverse=True):  # bottom up: line
        body, has_doc = node.body, has_docstring(node)                                             # numbers above hold
        first = body[0].end_lineno + 1 if has_doc else body[0].lineno  # 1-based line where the code starts
        indent = " " * (body[0].col_offset if body[0].lineno > node.lineno else node.col_offset + 4)
        while not has_doc and first - 1 > node.lineno and lines[first - 2].strip().startswith("#"):
            first -= 1  # the comments above the first statement go too
        line = f"{indent}{stub(where)}\n"
        if body[0].lineno == node.lineno and not has_doc:  # a one-line def: `def f(x): return x`
            head = lines[node.lineno - 1].encode()[:body[0].col_offset].decode()
            lines[node.lineno - 1:body[-1].end_lineno] = [head.rstrip() + "\n", line]
        elif len(body) == 1 and has_doc:
            lines[first - 1:first - 1] = [line]
        else:
            lines[first - 1:body[-1].end_lineno] = [line]
    return "".join(lines)


def blank(source, exercise):
    """cram.py's `source` with the body of each def the exercise writes replaced by a raise (the docstring stays)."""
    try:
        return emptied(source, EXERCISES[exercise].write, lambda where: f'raise NotImplementedError("exercise '
                       f'{exercise}: write {where} (python exercises.py show {exercise})")')
    except LookupError as e:
        raise SystemExit(f"exercises.py: error: cram.py has no {e.args[0]} for exercise {exercise} (was it renamed? "
                         "update its `write` in exercises.py)") from None


# what a stub raises (blank above): its exercise and what to write
STUB = re.compile(r"exercise (\w+): write (.+?) \(python exercises\.py show \1\)$")


def unwritten(source, exercise):
    """True when every def the exercise writes is still, in `source`, the raise that `stub` left there."""
    try:
        defs = defs_of(ast.parse(source), EXERCISES[exercise].write)
    except (SyntaxError, LookupError):
        return False
    for node, _ in defs:
        body = node.body[1:] if has_docstring(node) else node.body
        raised = body[0].exc if len(body) == 1 and isinstance(body[0], ast.Raise) else None
        if not (isinstance(raised, ast.Call) and raised.args and isinstance(raised.args[0], ast.Constant)
                and str(raised.args[0].value).startswith(f"exercise {exercise}: ")):
            return False
    return True


def one_line_main(source):
    """cram.py's `if __name__ == "__main__":` block inside a try: training that meets a function still to write
    stops with one line naming its exercise (cram.py's main() says other errors in one line already)."""
    tree = ast.parse(source)
    guard = next((n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)), None)
    if guard is None:
        return source
    lines = source.splitlines(keepends=True)
    body = ["        " + line + "\n" for stmt in guard.body
            for line in ast.get_source_segment(source, stmt).split("\n")]
    lines[guard.lineno - 1:guard.end_lineno] = [
        f"if {ast.get_source_segment(source, guard.test)}:\n", "    try:\n", *body,
        "    except NotImplementedError as e:  # a function left to write (python exercises.py stub): say which\n",
        '        if not str(e).startswith("exercise "):\n',
        "            raise\n",
        '        sys.exit(f"{os.path.basename(sys.argv[0])}: error: {e}; training runs it: finish that exercise '
        'first")\n']
    return "".join(lines)


def student_source(source, names, header):
    """A student's cram.py: `source` with the exercises' functions to write, a first line, a one-line stop."""
    for name in names:
        source = blank(source, name)
    return header + one_line_main(source)


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
    header = f"# {out.name}: cram.py, your copy for exercise {', '.join(names)}: python exercises.py show {names[0]}\n"
    if out.is_dir():
        raise SystemExit(f"exercises.py: error: --out {out} is a folder: name a .py file")
    try:
        with written_whole(out, "w", encoding="utf-8") as f:  # whole or not at all
            f.write(student_source(REFERENCE.read_text(encoding="utf-8"), names, header))
    except OSError as e:  # no permission, a full disk: the old file, if any, stays as it was
        raise SystemExit(f"exercises.py: error: cannot write {out} ({e.strerror or e}): name another --out") from None
    todo = ", ".join(w for name in names for w in EXERCISES[name].write)
    print(f"wrote {out}: cram.py with {todo} to write (each raises NotImplementedError until you do)")
    print(f"check it: python exercises.py check {' '.join(names)} --file {out}")


def in_order(names):
    """`names` in an order where each exercise comes after those its check runs (EXERCISES' order otherwise)."""
    done = []
    while len(done) < len(names):
        done.append(next(n for n in names if n not in done and all(d in done for d in EXERCISES[n].needs
                                                                    if d in names)))
    return done


def show(name):
    ex = EXERCISES[name]
    print(f"{name}: {ex.title}")
    print(f"paper: {ex.paper}" + (f" ({CRAMMING})" if ex.paper.startswith("Cramming") else ""))
    print(f"about {ex.minutes} minutes, {ex.points} points; you write: {', '.join(ex.write)} in your copy of cram.py")
    if ex.needs:
        print(f"first, where they are still stubs in your copy: {', '.join(ex.needs)} (its check runs their code)")
    print("\n" + ex.text + "\n")
    # commands on lines of their own, no comment after them: zsh and cmd would pass one on (docs/setup.md)
    if STUDENT_COPY:  # the student writes in the copy's own cram.py
        print(f"check it (PASS, or FAIL with what differs in cram.py):\n    python exercises.py check {name}")
        return
    print(f"start (writes my_cram.py):\n    python exercises.py stub {name}")
    print(f"check it (PASS, or FAIL with what differs):\n    python exercises.py check {name} --file my_cram.py")


def listing():
    print("The exercises: write one idea of the paper again in your copy of cram.py (docs/exercises.md).\n")
    print(f"  {'name':12s} {'paper':28s} {'minutes':>7s} {'points':>6s}  title")
    for name, ex in EXERCISES.items():
        if name in (STUDENT_COPY or EXERCISES):
            print(f"  {name:12s} {ex.paper:28s} {ex.minutes:7d} {ex.points:6d}  {ex.title.split(':')[0]}")
    print(f"\n  Cramming: {CRAMMING}:\n  section 4.2 is its architecture, 4.3 its training recipe.")
    print("\n  read an assignment:\n      python exercises.py show NAME")
    if STUDENT_COPY:  # the student writes in the copy's own cram.py (CLASS.md)
        print("  check it (PASS, or FAIL with what differs; NAME all: every one):\n"
              "      python exercises.py check NAME")
        return
    print("  write my_cram.py, cram.py with NAME left to write:\n      python exercises.py stub NAME")
    print("  check it (PASS, or FAIL with what differs; NAME all: every one):\n"
          "      python exercises.py check NAME --file my_cram.py")


def load_module(path, name="student_cram"):
    """Import a (student's) copy of cram.py from `path` under its own name; a file that does not import is one line."""
    if not Path(path).is_file():
        raise SystemExit(f"exercises.py: error: no file {path}: pass --file your_copy_of_cram.py "
                         "(python exercises.py stub NAME writes one)")
    if Path(path).suffix.lower() != ".py":
        raise SystemExit(f"exercises.py: error: {path} is not a Python file (a .py file)")
    loader = importlib.machinery.SourceFileLoader(name, str(path))  # given: a student's file.PY is Python source too
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise SystemExit(f"exercises.py: error: {path} line {e.lineno}: SyntaxError: {e.msg} (nothing was checked)")
    except (Exception, SystemExit) as e:  # SystemExit: a sys.exit() or exit() at the file's top level
        what = (f"sys.exit({e.code!r}), called as the file was imported (main() at its top level? keep such calls "
                "under if __name__ == '__main__':)") if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"
        at = in_file(e, path)
        raise SystemExit(f"exercises.py: error: {path}{at}: {what} (it does not import; nothing was checked)")
    return module


def in_file(error, path):
    """' line N in F' of the deepest frame of the error's traceback that runs in the file `path`, or ''."""
    target, found = os.path.realpath(path), ""
    for frame, line in traceback.walk_tb(error.__traceback__):
        if os.path.realpath(frame.f_code.co_filename) == target:
            found = f" line {line} in {getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}"  # 3.11: Class.f
    return found


# Each check runs the student's code of its own exercise only. Where the reference cram.py is at hand (the project,
# the teacher's bundle), the other exercises' functions are the reference's while a check runs: rebound into the
# student's module, so they call the student's own classes and functions, and a stub or a slip in another exercise
# cannot fail this one. A student copy has no reference: there a check runs the copy's own other functions, and one
# still a stub makes the check say which exercise to do first (each exercise's `needs`).

def reference_here():
    return not STUDENT_COPY and REFERENCE.is_file()


@functools.lru_cache(maxsize=None)
def reference_module():
    return load_module(REFERENCE, "reference_cram")


def rebound(fn, module, owner=None):
    """The reference's function `fn` as if written in `module`: its globals are the module's, and super() in it
    means the module's class `owner`."""
    cells = tuple(types.CellType(owner) if var == "__class__" else cell
                  for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    new = types.FunctionType(fn.__code__, vars(module), fn.__name__, fn.__defaults__, cells or None)
    new.__kwdefaults__, new.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    return new


def with_reference(module, exercise):
    """The student's `module` with every function of the other exercises taken from the reference cram.py."""
    ref = reference_module()
    for name in [w for other, ex in EXERCISES.items() if other != exercise for w in ex.write]:
        owner, _, method = name.partition(".")
        ours, theirs = getattr(ref, owner, None), getattr(module, owner, None)
        if isinstance(ours, types.FunctionType):
            setattr(module, owner, rebound(ours, module))
        elif isinstance(ours, type) and isinstance(theirs, type):  # a method, or every method of a class
            methods = [method] if method else [m for m, f in vars(ours).items() if isinstance(f, types.FunctionType)]
            for m in methods:
                setattr(theirs, m, rebound(vars(ours)[m], module, theirs))
    return module


def student(path, exercise):
    """The student's file imported afresh for one exercise's check (the others' functions the reference's, where
    there is one and `path` is not it)."""
    module = load_module(path)
    return with_reference(module, exercise) if reference_here() and Path(path).resolve() != REFERENCE else module


def verdict(name, path):
    """(passed, message) of exercise `name`'s check on the student's file `path`. In a student copy a FAIL also names
    the exercises it runs (`needs`) that fail their own checks: a slip there can be what fails this one."""
    passed, message = judged(name, path)
    if not passed and not reference_here() and message != NO_CHECKS:
        broken = [n for n in EXERCISES[name].needs if n not in message and not judged(n, path)[0]]
        if broken:
            message += (f" (exercise{'s' * (len(broken) > 1)} {', '.join(broken)} "
                        f"fail{'s' * (len(broken) == 1)} {'its' if len(broken) == 1 else 'their'} own check too, and "
                        "this check runs that code: fix it first)")
    return passed, message


def judged(name, path):
    """verdict's check of exercise `name` alone."""
    module = student(path, name)
    try:
        CHECKS[name](module)
        return True, ""
    except Slip as e:
        return False, str(e)
    except (Exception, SystemExit) as e:  # raised in the student's code (its file and line), or by what it returned
        at = in_file(e, path)
        stub = STUB.match(str(e)) if isinstance(e, NotImplementedError) else None
        if stub and stub.group(1) != name:  # another exercise's function, still a stub (a student copy)
            other, what = stub.groups()
            first = (f"do exercise {other} first: this check runs its {what}, still a stub ({path}{at}; python "
                     f"exercises.py show {other})")
            mine = unwritten(Path(path).read_text(encoding="utf-8"), name)
            return False, f"not written yet; {first}" if mine else first
        if at:
            return False, f"{'not written yet: ' if stub else ''}{path}{at}: {type(e).__name__}: {e}"
        return False, (f"{type(e).__name__}: {e} (exercises.py{in_file(e, __file__)}, checking what your code "
                       "returned or built)")


def run(names, path):
    """Run the named checks; print PASS/FAIL with the reason; return the number that failed."""
    failed = 0
    for name in names:
        passed, message = verdict(name, path)
        print(f"PASS  {name}" if passed else f"FAIL  {name}: {message}")
        failed += not passed
    return failed


# ----------------------------------------------------------------------------------------------------------------
# Grading (classroom.py runs it): each file in its own process, which reports one JSON line per exercise.

def worker(names, path):
    """`check --worker`, the process the grader starts: a JSON line per exercise on stdout, flushed as each ends
    (a time limit keeps the ones before); what the student's code prints goes nowhere."""
    out = sys.stdout
    sys.stdout = sys.stderr = classroom.Discard()

    def say(**result):
        out.write(json.dumps(result) + "\n")
        out.flush()
    start = time.perf_counter()
    try:
        load_module(path)
    except SystemExit as e:
        say(error=str(e.code).replace("exercises.py: error: ", "", 1))
        return 1
    say(imported=round(time.perf_counter() - start, 2))
    for name in names:
        start = time.perf_counter()
        passed, message = verdict(name, path)
        say(name=name, message=message, seconds=round(time.perf_counter() - start, 2), **{"pass": passed})
    return 0


def refusal(path, names):
    """Why grading the file `path` makes no sense (one line), or None: it is the reference cram.py, or what the
    exercises `names` write is still the stub everywhere (nothing written yet)."""
    if not Path(path).is_file():
        return f"no file {path}"
    text, reference = (Path(f).read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
                       for f in (path, REFERENCE if reference_here() else path))
    if reference_here() and (Path(path).resolve() == REFERENCE or text == reference):
        return f"{path} is the reference cram.py itself, not a student's work: name a student's file"
    if all(unwritten(text, name) for name in names):
        return f"{path} is unchanged from the stub: nothing written yet for {', '.join(names)}"
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):  # its check says where (ValueError: a NUL byte, Python < 3.12)
        return None
    wanted = [w for name in names for w in EXERCISES[name].write]
    if not any(find(tree, w) for w in wanted):  # an empty file, another homework: not ten errors of missing names
        what = "is empty" if not text.strip() else f"defines none of {', '.join(wanted)}"
        return f"{path} {what}: it is not a copy of cram.py with the exercises written in"
    return None


def graded(path, names, timeout):
    """The file's results, points included: {"file", "exercises": [{"name", "pass", "message", "seconds", "points",
    "out_of"}], "points", "out_of"}, and "refused" (why) for a file not worth grading."""
    out_of = sum(EXERCISES[name].points for name in names)
    why = refusal(path, names)
    if why:
        return {"file": str(path), "refused": why, "exercises": [], "points": 0, "out_of": out_of}

    def command(todo):  # this file's `check --worker` on the exercises still to do
        return [sys.executable, str(HERE / "exercises.py"), "check", *todo, "--file", str(Path(path).resolve()),
                "--worker"]
    results = classroom.check_file(command, names, timeout)
    rows = [{"name": name, **results[name], "points": EXERCISES[name].points * results[name]["pass"],
             "out_of": EXERCISES[name].points} for name in names]
    return {"file": str(path), "exercises": rows, "points": sum(r["points"] for r in rows), "out_of": out_of}


# ----------------------------------------------------------------------------------------------------------------
# A class: the student copy and the teacher's bundle (classroom.py writes them).

def class_exercises():
    """What `all` and `grade` mean here: a student copy's exercises, a bundle's (class.json), or every one, in the
    order CLASS.md gives (in_order: each after those its check runs)."""
    made = HERE / "class.json"
    if STUDENT_COPY or not made.is_file():
        return in_order(list(STUDENT_COPY or EXERCISES))
    return in_order([n for n in json.loads(made.read_text(encoding="utf-8"))["exercises"] if n in EXERCISES])


def answer_lines(source, names):
    """{exercise: the lines of its reference code (comments cut, 16 characters or more) found nowhere else in
    cram.py}: what no file of a student copy may hold (classroom.release looks)."""
    tree = ast.parse(source)
    code = [line.split("  #")[0].strip() for line in source.splitlines()]
    answers = {}
    for name in names:
        mine = []
        for node, _ in defs_of(tree, EXERCISES[name].write):
            body = node.body[1:] if has_docstring(node) else node.body
            mine += [c for c in code[body[0].lineno - 1:node.end_lineno] if len(c) >= 16] if body else []
        answers[name] = sorted({c for c in mine if code.count(c) == mine.count(c)})
    return answers


def without_checks(tool):
    """exercises.py's source `tool` with every check emptied: they compute what they compare with, by hand."""
    return emptied(tool, [f"check_{name}" for name in EXERCISES], lambda where: f"raise Slip({NO_CHECKS!r})")


def release(dest, names, teacher, checks):
    """Write the student copy to `dest` (the exercises `names` to write) and, with `teacher`, the bundle there."""
    if STUDENT_COPY:
        raise SystemExit("exercises.py: error: this is a student copy (its cram.py is a student's): release from the "
                         "teacher's project")
    source, tool = REFERENCE.read_text(encoding="utf-8"), (HERE / "exercises.py").read_text(encoding="utf-8")
    line = next((x for x in tool.splitlines(keepends=True) if x.startswith("STUDENT_COPY = ()")), None)
    assert line, "exercises.py: the line STUDENT_COPY = () is gone"
    listed = textwrap.fill(", ".join(f'"{n}"' for n in names) + ",", 100, subsequent_indent=" " * 16)
    tool = tool.replace(line, f"# {line.split('#', 1)[1].strip()}\nSTUDENT_COPY = ({listed})\n", 1)
    header = "# cram.py: your copy, with this class's exercises to write: CLASS.md lists them\n"
    tree = ast.parse(source)

    def code(name):  # the reference's code of what the exercise writes: for the teacher's answers.md
        return "\n\n".join(ast.get_source_segment(source, find(tree, w), padded=True) for w in EXERCISES[name].write)
    exercises = {name: {**asdict(EXERCISES[name]), "code": code(name)} for name in names}  # plain data, for classroom
    hidden = list(dict.fromkeys(m for n in names for m in EXERCISES[n].shown_by if m not in names))
    page = classroom.class_page(exercises, in_order(names), checks) + "".join("\n" + textwrap.fill(
        f"Also empty, not assigned: exercise {m} ({', '.join(EXERCISES[m].write)}), whose code would show the answer "
        "of one of yours; only its option (`--narrow`) runs it.", 116) + "\n" for m in hidden)
    student_files = {"cram.py": student_source(source, [*names, *hidden], header),
                     "exercises.py": tool if checks else without_checks(tool), "CLASS.md": page}
    made = {"exercises": names, "points": {n: EXERCISES[n].points for n in names}, "checks_in_the_copy": checks}
    teacher_files = {"answers.md": classroom.answers_page(exercises), "class.json": json.dumps(made, indent=1) + "\n"}
    untracked = classroom.release(HERE, Path(dest), student_files, answer_lines(source, names),
                                  teacher and Path(teacher), teacher_files)
    print(f"wrote {dest}: the student copy; cram.py with {', '.join(names)} to write (CLASS.md says what and how)")
    if untracked:
        print(f"  with {len(untracked)} files git does not track (are they for students?): {', '.join(untracked)}")
    if teacher:
        print(f"wrote {teacher}: the teacher's bundle: the reference, answers.md, the grader (class.json: the class)")
        where = teacher if re.fullmatch(r"[\w./\\:-]+", str(teacher)) else f'"{teacher}"'  # as every shell takes it
        print(f"grade, from that folder (one command a line, as every shell takes them):\n    cd {where}\n"
              "    python exercises.py grade SUBMISSIONS --out grades.csv")


COMMANDS = ("show", "stub", "check", "release", "grade")


def main(argv=None):
    safe_console()  # a student's error message is printed escaped where the console lacks a character (Windows)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="NAME: " + ", ".join(EXERCISES) +
                                ", or all. Without a command, check.", allow_abbrev=False)
    p.add_argument("words", nargs="*", metavar="[show|stub|check|release DIR|grade DIR] NAME",
                   help="what to do, and which exercises (release, grade: all, unless named)")
    p.add_argument("--file", default=str(REFERENCE), help="check: the copy of cram.py to check (default: cram.py)")
    p.add_argument("--out", help="stub: the student file to write (default: my_cram.py); grade: the .csv to write")
    p.add_argument("--overwrite", action="store_true", help="stub, grade: replace --out if it exists")
    p.add_argument("--json", action="store_true", help="check: in a process of its own, with --timeout; print JSON")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="check --json, grade: seconds one process may check a file for (default 60)")
    p.add_argument("--teacher", metavar="DIR", help="release: also write the teacher's bundle (the reference cram.py, "
                   "the answers, the grader) to DIR")
    p.add_argument("--no_checks", action="store_true", help="release: leave the checks' code out of the student copy "
                   "(they compute what they compare with); the teacher grades")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # check --json's process (classroom.py)
    args = p.parse_intermixed_args(argv)  # names may follow the options too
    if not args.words:
        listing()
        return 0
    command, names = (args.words[0], args.words[1:]) if args.words[0] in COMMANDS else ("check", args.words)
    folder = None
    if command in ("release", "grade"):
        if not names:
            raise SystemExit(f"exercises.py: error: {command} needs a folder: python exercises.py {command} DIR "
                             "[NAME ...]")
        folder, names = names[0], names[1:] or ["all"]
    if not names:
        raise SystemExit(f"exercises.py: error: {command} needs an exercise: one of {', '.join(EXERCISES)}, or all")
    for name in names:
        if name.startswith("#"):  # zsh (macOS) and cmd pass a comment on (docs/setup.md, section 6)
            raise SystemExit(f"exercises.py: error: {name!r} reached the script: your shell passed the comment on to "
                             "it: copy the command without the comment (zsh: setopt interactive_comments)")
        if name != "all" and name not in EXERCISES:
            raise SystemExit(f"exercises.py: error: unknown exercise {name!r}; choose one of "
                             f"{', '.join(EXERCISES)}, or all")
    names = (list(EXERCISES) if command == "release" else class_exercises()) if "all" in names \
        else list(dict.fromkeys(names))
    if args.timeout <= 0:
        raise SystemExit(f"exercises.py: error: --timeout must be > 0 seconds (got {args.timeout:g})")
    if command == "show":
        for name in names:
            show(name)
        return 0
    if command == "stub":
        if STUDENT_COPY:  # a class's copy: cram.py itself is the student's file, and what they hand in
            raise SystemExit("exercises.py: error: this is a class's copy: write your functions in cram.py itself "
                             "(CLASS.md), then `python exercises.py check NAME`; stub is for the whole project")
        write_stub(names, args.out or "my_cram.py", args.overwrite)
        return 0
    if command == "release":
        release(folder, names, args.teacher, not args.no_checks)
        return 0
    if command == "grade":
        return classroom.grade(Path(folder), names, {n: EXERCISES[n].points for n in names}, args.out,
                               args.overwrite, lambda path: graded(path, names, args.timeout))
    if args.worker:
        return worker(names, args.file)
    if args.json:
        why = refusal(args.file, names)
        if why:
            raise SystemExit(f"exercises.py: error: {why} (nothing was checked)")
        result = graded(args.file, names, args.timeout)
        print(json.dumps(result, indent=1))
        return 0 if result["points"] == result["out_of"] else 1
    failed = run(names, args.file)
    print(f"{len(names) - failed} of {len(names)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
