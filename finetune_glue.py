"""Fine-tune a crammed BERT on GLUE, or on your own labelled files, and report the paper's table (Cramming, section
5, the "GLUE-sane" recipe); keep the classifier for classify.py.

    python finetune_glue.py out/ckpt.pt                                   # the paper's 8 tasks, from the hub
    python finetune_glue.py out/ckpt.pt --glue_dir glue --tasks cola,sst2,mrpc,stsb,rte   # offline: the GLUE TSVs
    python finetune_glue.py out/ckpt.pt --vs_random                       # and from random weights, side by side
    python finetune_glue.py out/ckpt.pt --train_file train.csv --validation_file dev.csv --save_model models/mine

One recipe for all tasks, named by the checkpoint's preset (PAPER, TINY below; flags win): [CLS] A [SEP] B [SEP], a
fresh head, cross-entropy (a regression such as STS-B: MSE), AdamW, warm-up then cosine decay, mixed precision on
CUDA; dev metrics after the last epoch, median over seeds, beside no model at all (the majority class, or the
training mean), each with its 95% interval over the dev rows (tasks.intervals): a small dev set says what one row is
worth, and --vs_random's difference when it is within the noise. Tasks, their files, the table and the files
written: tasks.py; the model and the kept classifier: classifier.py.
Reading for the recipe: on a CPU a step is plain PyTorch (training_step: forward, the mean loss, backward, AdamW) on
one model at a time (by default; S = 1 below). What a GPU adds is for speed only and can be skipped: S seeds trained
as one model (hardware.together), each step replayed as a CUDA graph (hardware.Replay) on widths rounded up to 32,
torch.compile for a long run in bf16 (100,000 batches per head shape, as GLUE's: hardware.fine_tuning_plan), pace.
Outputs in --out (default: the checkpoint's folder): glue.md (the table), glue.json (every number, per seed,
settings, wall times) and predictions/<set>[.random_init].tsv (index, prediction, label; the median seed's), always
the latest run's; and each run's own copy, glue-<tasks>-<time>.md, .json and predictions/glue-<tasks>-<time>/,
written as each task ends: an interrupted run keeps its finished tasks.
"""
import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from classifier import GlueModel, check_save_dir, collate, decide, encode, predict, save_classifier
from cram import CramError, CrammedBERT, pick_device
from errors import no_link
from hardware import Replay, amp_dtype, autocast, compile_forward, fine_tuning_plan, run_info, safe_console, together
from hardware import sigterm_as_ctrl_c, use_cuda_graphs
from official import load_pretrained  # a cram.py checkpoint or the paper's released folder
from tasks import (GLUE, baseline, compute_metrics, count, describe, forget, intervals, load_task, one_row, own_name,
                   pick_tasks, publish, scored)
from tokenizer import load_tokenizer

# Recipes, named by the checkpoint's preset; every value is also a flag, which wins. The paper's "GLUE-sane" set:
PAPER = dict(lr=4e-5, beta1=0.9, beta2=0.98, adam_eps=1e-6, weight_decay=0.0, batch_size=16, epochs=5,  # AdamW
             warmup=0.1,          # fraction of each task's steps with a linear lr warm-up; cosine decay to 0 after it
             dropout=0.1, head_hidden=1024,  # dropout in the encoder and head; width of the head's hidden layer
             pool="cls",          # what the head reads: "cls" (the first token, the paper) or "mean" (GlueModel)
             max_len=128,         # tokens per example, specials included; pairs are truncated longest-first
             max_train=0, seeds=5,  # the first N train rows per task (0: all); runs per task, the median reported
             eval_batch_size=128)  # no gradients at evaluation, so larger batches fit
# The CPU presets' recipe, measured on STS-B, MRPC, RTE, CoLA, SST-2 (docs/notes.md, 2026-11-23): a small encoder,
# its weights grown large by pretraining at lr 1e-2, needs a 25x hotter lr, 10 epochs (CoLA's mcc 16 instead of 12),
# and a head on each sentence's mean (STS-B's Pearson 73, not 23).
TINY = {**PAPER, "lr": 1e-3, "batch_size": 32, "epochs": 10, "pool": "mean", "seeds": 3, "max_train": 8000}
RECIPES = {"paper": PAPER, "tiny": TINY}
# what a flag's value must be (one-line errors, not a crash or a quietly different run): (flags, test, in words)
RULES = [("seeds epochs batch_size eval_batch_size head_hidden", lambda x: x >= 1, ">= 1"),
         ("max_train adam_eps weight_decay seeds_together", lambda x: x >= 0, ">= 0"),
         ("warmup", lambda x: 0 <= x <= 1, "in [0, 1]"),
         ("lr", lambda x: 0 < x < math.inf, "> 0 and finite"), ("pool", lambda x: x in ("cls", "mean"), "cls or mean"),
         ("beta1 beta2 dropout", lambda x: 0 <= x < 1, "in [0, 1)")]

SHUFFLE_SEED = 1_000_003  # length_grouped's order of batch widths, the same for every seed: what a batch holds is
# the seed's, the order of widths is shared, so seeds trained as one model (a GPU's) pad a step to similar widths
# The paper's protocol, for pace's projection: GLUE's train.tsv rows; its steps: batches of 16, 5 epochs, 5 seeds
GLUE_TRAIN_ROWS = dict(cola=8551, sst2=67349, mrpc=3668, stsb=5749, qqp=363846, mnli=392702, qnli=104743, rte=2490)
PROTOCOL_STEPS = sum(math.ceil(n / PAPER["batch_size"]) for n in GLUE_TRAIN_ROWS.values()) * PAPER["epochs"] * 5


# ----------------------------------------------------------------------------------------------------------------
# The schedule, fine-tuning, one task's runs (the model, GlueModel, and encode are in classifier.py).


def lr_at(step, total, peak, warmup=PAPER["warmup"]):
    """Linear warm-up over the first warmup fraction of the steps (one at least: at 0.1, a run under 15 steps starts
    at the peak), then cosine decay towards 0 (reached one step after the last)."""
    n_warm = max(1, round(warmup * total))
    if step < n_warm:
        return peak * (step + 1) / n_warm
    return peak * 0.5 * (1 + math.cos(math.pi * (step - n_warm) / max(1, total - n_warm)))


def length_grouped(lengths, batch_size, gen, shuffle, window=100):
    """One epoch's batches (index tensors): a random order (gen), sorted by length within windows of `window` batches,
    then the batches shuffled (shuffle: a generator of its own). A batch is padded to its longest member (collate):
    drawn at random, a short sentence sits beside a long one (SST-2, batch 32: 3.03 tokens computed per real token;
    grouped 1.02; notes, 2026-11-25). The idea of Hugging Face's group_by_length; the windows keep random which rows
    share a batch. (The batches are put in order of width before the shuffle: see SHUFFLE_SEED.)"""
    order, size = torch.randperm(len(lengths), generator=gen).tolist(), window * batch_size
    groups = [sorted(order[i:i + size], key=lambda j: lengths[j]) for i in range(0, len(order), size)]  # stable
    batches = sorted((g[k:k + batch_size] for g in groups for k in range(0, len(g), batch_size)),
                     key=lambda b: max(lengths[j] for j in b))  # by width (stable)
    return [torch.tensor(batches[i]) for i in torch.randperm(len(batches), generator=shuffle).tolist()]


def training_step(forward, params, args, device):
    """Returns (step, set_lr, graphs). step(batch_ids, pad_mask, y, real), each (S, B, ...), is one fine-tuning step
    of S models trained as one (forward and parameters: hardware.together; S = 1 on a CPU: one model) and returns the
    S models' losses; set_lr(value) sets the next step's lr. On a CUDA GPU in bf16 the step is replayed as a CUDA
    graph (hardware.Replay); graphs then tells finetune to pad batches to fixed widths."""
    dtype, graphs = amp_dtype(device), use_cuda_graphs(device)
    lr = torch.tensor(args.lr, device=device) if graphs else args.lr  # a graph replays the numbers it recorded:
    # a float lr would stay fixed, a tensor's value is read at every replay
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(args.beta1, args.beta2), eps=args.adam_eps,
                                  weight_decay=args.weight_decay, fused=device.type == "cuda", capturable=graphs)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)  # as cram.py

    def set_lr(value):  # one group: all weights; with graphs the recorded step reads the lr from its tensor
        lr.fill_(value) if graphs else optimizer.param_groups[0].update(lr=value)

    def step(batch_ids, pad_mask, y, real):  # real (S, B): 1 on a batch's examples, 0 on the copies that fill it up
        with autocast(device, dtype):  # as in pretraining (hardware.amp_dtype): bf16 from Ampere on, else fp16 or fp32
            out = forward(batch_ids, pad_mask).float()                                   # (S, B, n_out)
        per_example = F.mse_loss(out[..., 0], y.float(), reduction="none") if out.shape[-1] == 1 else \
            F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none").view_as(real)    # (S, B)
        losses = (per_example * real).sum(1) / real.sum(1)                           # (S,): each model's mean
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(losses.sum()).backward()  # the sum: each model's weights get the gradient of its own loss
        scaler.step(optimizer)
        scaler.update()
        return losses.detach()

    return (Replay(step) if graphs else step), set_lr, graphs


def plan_batches(sizes, args, seeds):
    """Every step's batch for each seed, all epochs, in its seed's order (length_grouped): (rows, real), each
    (steps, S, B). rows holds example numbers; an epoch's one short batch is filled up with copies of its first
    example, which real marks 0 (1 on the batch's own examples): every step has one batch size."""
    def order(seed):  # (steps, B): the example numbers of each step's batch, -1 past the end of an epoch's short one
        gen, shuffle = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(SHUFFLE_SEED)
        batches = [b for _ in range(args.epochs) for b in length_grouped(sizes, args.batch_size, gen, shuffle)]
        return nn.utils.rnn.pad_sequence(batches, batch_first=True, padding_value=-1)
    rows = torch.stack([order(seed) for seed in seeds], 1)                              # (steps, S, B)
    return torch.where(rows >= 0, rows, rows[..., :1]), (rows >= 0).float()


def finetune(models, ids, labels, args, seeds, device, desc, pace=None):
    """args.epochs passes over (ids, labels) for each model, in its seed's order, in batches of args.batch_size of
    similar length (plan_batches); returns each model's last loss. The models (one a seed, seeds_together of them)
    train together, as one (hardware.together; by default on a CPU one). The data go to the device once, nothing is
    read back until the end. With CUDA graphs or --compile a batch is padded to a multiple of 32 tokens: at most 31
    padded tokens, max_len / 32 shapes (4 at 128; each costs two plain steps, or a compile). pace(seconds a step,
    seconds of the warm-up, its steps): once, the mean time of timed_steps' 200 and of the steps before them."""
    sizes = [len(s) for s in ids]
    rows, real = plan_batches(sizes, args, seeds)  # (steps, S, B): each step's example numbers; 0 in real: a filler
    params, forward, done = together(models, device)
    compiling = getattr(args, "compile", False)  # --compile: graphs a head shape and width (compile_forward)
    run_step, set_lr, graphs = training_step(compile_forward(forward) if compiling else forward, params, args, device)
    table, masks = collate(ids, args.pad_id, device)  # every row padded to the longest, (N, T), on the device once
    widths = torch.tensor(sizes)[rows].amax((1, 2))  # each step's longest, for graphs or compiling rounded up to 32s
    widths = (-(-widths // 32) * 32).clamp(max=table.shape[1]) if graphs or compiling else widths
    targets = torch.tensor(labels.tolist()).to(device)  # STS-B's scores in float32: MPS has no float64
    rows, real = rows.to(device), real.to(device)
    bar = tqdm(widths.tolist(), desc=desc, unit="step", leave=False, dynamic_ncols=True,
               disable=not sys.stderr.isatty())  # on a terminal only, not in a log file
    marks, window = [time.perf_counter()], timed_steps(widths.tolist(), graphs or compiling)  # the start, its ends
    for n, width in enumerate(bar):
        set_lr(lr_at(n, len(rows), args.lr, args.warmup))
        idx = rows[n]                                                                  # (S, B)
        loss = run_step(table[idx, :width], masks[idx, :width], targets[idx], real[n])
        if pace and window and n in window:
            getattr(torch, device.type).synchronize()
            marks.append(time.perf_counter())
            if n == window[1]:
                pace((marks[2] - marks[1]) / (window[1] - window[0]), marks[1] - marks[0], window[0])
    done()
    return loss.tolist()


def timed_steps(widths, warms, first=300, n=200):
    """(start, end): the steps whose mean time is the pace, warmed up: from step `first`, or, where `warms` (a width's
    first step compiles, its second records a CUDA graph: hardware.Replay), the first n steps after it that neither
    falls in; None: the run is too short."""
    seen, start = {}, first  # width -> the steps of its first two appearances
    for step, width in enumerate(widths):
        if len(seen.setdefault(width, [])) < 2:
            seen[width].append(step)
    for step in sorted(sum(seen.values(), [])) if warms else ():  # the first window that no warm-up falls in
        if start - 3 <= step < start + n:
            start = step + 3
    return (start, start + n) if start + n < len(widths) else None


def run_task(task, train, devs, weights, cfg, tok, args, device, outputs, report, keep=False, pace=None):
    """Fine-tune args.seeds times from weights (None: a random init); metrics and times go to report (its "table",
    "baseline", "results", "draws", "tasks"), the median seed's predictions to outputs, with keep its model to
    report["keep"]; pace: finetune's."""
    t0, preds, models_kept, random_init = time.time(), [], [], weights is None  # per seed: {set: predictions}, weights
    train_ids, dev_ids = encode(tok, train, args.max_len), {n: encode(tok, d, args.max_len) for n, d in devs.items()}
    info = report["tasks"][task.name] = {"n_train": len(train_ids), "n_dev": {n: len(d) for n, d in dev_ids.items()},
                                         "data_s": time.time() - t0, "train_s": [], "eval_s": [], "final_loss": []}
    for first in range(0, args.seeds, args.seeds_together):  # seeds_together of them as one model (together)
        seeds, models = range(first, min(first + args.seeds_together, args.seeds)), []
        for seed in seeds:
            torch.manual_seed(seed)
            encoder = CrammedBERT(cfg, *args.vocab_seq)
            if not random_init:  # a random init keeps this fresh N(0, 0.02) encoder: the no-pretraining baseline
                encoder.load_state_dict(weights)
            models.append(GlueModel(encoder, cfg.n_embd, n_out=len(task.labels or [0]),  # a regression: 1 output
                                    hidden=args.head_hidden, dropout=args.dropout, pool=args.pool,
                                    sep_id=tok.special["sep"], pair=train.b is not None))
        t1 = time.time()
        info["final_loss"] += finetune(models, train_ids, train.labels, args, seeds, device,
                                       f"{task.name} {first}" + f"-{seeds[-1]}" * (len(seeds) > 1), pace)
        info["train_s"] += [(time.time() - t1) / len(seeds)] * len(seeds)  # the group's time, shared
        for model in models:
            t1 = time.time()
            preds.append({name: decide(predict(model.to(device), ids, args, device)) for name, ids in dev_ids.items()})
            info["eval_s"].append(time.time() - t1)
            if keep:  # on the CPU until the median seed is known
                models_kept.append({k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
    name_of = (lambda y: task.labels[int(y)]) if task.labels else float  # predictions/ shows label names
    for n, (name, dev) in enumerate(devs.items()):
        runs, main = [compute_metrics(task, p[name], dev.labels) for p in preds], task.metrics[0]
        median = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
        pick = int(np.argsort([r[main] for r in runs], kind="stable")[(len(runs) - 1) // 2])  # the (lower) median
        trivial = compute_metrics(task, baseline(task, train.labels, len(dev.labels)), dev.labels)
        spread, draws = intervals(task, preds[pick][name], dev.labels)  # on the median seed's predictions
        report["draws"][name] = draws[main]  # for avg's interval, and the difference's (markdown)
        small = one_row(task, preds[pick][name], dev.labels)  # how far one dev row moves the score
        report["table"][name], report["baseline"][name] = median[main], trivial[main]
        report["results"][name] = {"main": main, "median": median, "per_seed": runs, "predictions_seed": pick,
                                   "baseline": trivial, "interval": spread, "one_row": small}
        outputs[f"predictions/{name}{'.random_init' * random_init}.tsv"] = "index\tprediction\tlabel\n" + "".join(
            f"{i}\t{name_of(p)}\t{name_of(y)}\n" for i, (p, y) in enumerate(zip(preds[pick][name], dev.labels)))
        print(f"{name}{' (random init)' * random_init}: " + scored(median, runs[pick], pick, spread) +
              f" (median of {count(args.seeds, 'seed')}, the 95% interval on seed {pick}'s predictions; "
              f"{len(train_ids)} train rows, {sum(info['train_s']):.0f} s training)"
              f"; no model ({'the training mean' if task.labels is None else 'the majority class'}): " +
              ", ".join(f"{k} {v:.2f}" for k, v in trivial.items()))
        if models_kept and n == 0:  # a saved classifier: the median seed of the first evaluation set
            report["keep"] = dict(state=models_kept[pick], seed=pick, metrics=runs[pick], baseline=trivial)


# ----------------------------------------------------------------------------------------------------------------
# The command line (the table it writes: tasks.markdown).

def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Fine-tune a cram.py checkpoint on GLUE, or on your own labelled files "
                                "(its preset's recipe), and keep the classifier.", allow_abbrev=False)
    p.add_argument("ckpt", help="checkpoint written by cram.py (meta.json and tokenizer.json beside it), or the "
                   "paper's released model folder (JonasGeiping/crammed-bert: official.py)")
    p.add_argument("--tasks", help=f"comma-separated GLUE tasks (default: all of {','.join(GLUE)})")
    p.add_argument("--glue_dir", default=os.environ.get("GLUE_DIR"), help="folder with the GLUE TSVs "
                   "(<DIR>/RTE/train.tsv ...; offline); default: $GLUE_DIR if set, else the Hugging Face hub")
    p.add_argument("--train_file", help="your own task instead: a .csv, .tsv, .json or .jsonl file with a header")
    p.add_argument("--validation_file", help="its evaluation rows, in the same layout (needed with --train_file)")
    p.add_argument("--text_columns", help="a or a,b: the text column(s) (default: sentence1,sentence2; sentence; text)")
    p.add_argument("--label_column", default="label", help="the label column (default: label); floats: a regression")
    p.add_argument("--task_name", help="the task's name in glue.md (default: the training file's stem, or its folder)")
    p.add_argument("--save_model", help="keep the classifier of the median seed in this folder, for classify.py")
    p.add_argument("--tokenizer_dir", help="folder with meta.json + tokenizer.json; default: the checkpoint's")
    p.add_argument("--out", help="for glue.md, glue.json, predictions/; default: the checkpoint's folder (hub: out/X)")
    p.add_argument("--random_init", action="store_true", help="re-initialise the encoder: no-pretraining baseline")
    p.add_argument("--vs_random", action="store_true", help="also from random weights: both rows, their difference")
    p.add_argument("--device", default="auto", help="auto (the default), cuda, cpu or mps")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, help="torch.compile the model, and train a "
                   "task's seeds as one (default: on a CUDA GPU in bf16 from 100,000 batches a head shape, as it pays)")
    p.add_argument("--seeds_together", type=int, help="a task's seeds trained as one model, in one step (0: on a CUDA "
                   "GPU in bf16 all that fit in half its memory, else 1; default: 0 when compiled, else 1)")
    for name, value in PAPER.items():  # None: the checkpoint's recipe
        p.add_argument(f"--{name}", type=type(value), help=f"default by preset: paper {value}, tiny {TINY[name]}")
    return p.parse_args(argv)


def plan_run(args, data, device, pretrained, random_inits):
    """How this run trains on its device, set in args (compile, seeds_together: hardware.fine_tuning_plan) and said in
    one line; returns (paced, pace): finetune's pace(step_s, warm_s, warm_steps) prints, once, the projection of this
    run and of the paper's protocol from the seconds a step, and keeps them in paced (glue.json)."""
    batches = sum(math.ceil(len(train.a) / args.batch_size) for _, train, _ in data.values()) * args.epochs * \
        args.seeds * len(random_inits)  # every seed's; what compiling must earn back (hardware.fine_tuning_plan)
    heads = len({len(task.labels or [0]) for task, _, _ in data.values()})  # head shapes: each compiles graphs
    args.compile, args.seeds_together = fine_tuning_plan(device, batches, args.seeds, sum(
        v.numel() for v in pretrained.state_dict().values()), args.compile, args.seeds_together, heads)
    steps = batches // args.seeds * math.ceil(args.seeds / args.seeds_together)  # seeds_together seeds in a step
    protocol = PROTOCOL_STEPS // 5 * math.ceil(5 / args.seeds_together)  # its 5 seeds, seeds_together at once
    graphed, paced = use_cuda_graphs(device), {}  # graphed: each step replayed as a CUDA graph (hardware.Replay)
    print(f"this run: {count(steps, 'step')} ({count(args.seeds, 'seed')} x {count(args.epochs, 'epoch')}"
          f"{' x 2 inits' * args.vs_random} in batches of {args.batch_size}, {count(args.seeds_together, 'seed')} in "
          f"a step); on {device}" + " each step a CUDA graph" * graphed
          + f", compiled ({batches:,} batches: each shape's first steps wait for the compiler)" * args.compile)

    def pace(step_s, warm_s, warm_steps):  # the first run that times 200 steps: this run's time, the protocol's
        if not paced:  # the protocol's steps are batches of 16: only a step of 16 times one (half of 32 is less)
            hours = protocol * step_s / 3600 if args.batch_size == PAPER["batch_size"] else None
            paced.update(step_s=step_s, warm_up_s=warm_s, warm_up_steps=warm_steps, projected_s=steps * step_s,
                         protocol_h=hours)
            print(f"pace: {1e3 * step_s:.2f} ms a step ({count(args.seeds_together, 'seed')} x {args.batch_size} "
                  f"examples, this task's lengths): this run's {steps:,} steps ~ {steps * step_s / 60:.1f} min; the "
                  f"paper's GLUE protocol (8 tasks x 5 epochs x 5 seeds, {PROTOCOL_STEPS:,} batches of 16"
                  + (f", {protocol:,} steps" if protocol != PROTOCOL_STEPS else "") + ") "
                  + (f"~ {hours:.1f} h at this pace (arithmetic: its tasks' lengths differ)" if hours else
                     f"not projected from batches of {args.batch_size}: time it with --batch_size 16") + "; first "
                  f"{warm_steps} steps: {warm_s:.0f} s" + " (compiling, recording graphs)" * (args.compile or graphed))
    return paced, pace


def run(args):
    t_start = time.time()
    for name, ok, what in ((n, ok, what) for names, ok, what in RULES for n in names.split()):
        if (value := getattr(args, name)) is not None and not ok(value):  # a flag given (the recipes' values are good)
            raise CramError(f"--{name} must be {what} (got {value})")
    device, (pretrained, cfg, meta) = pick_device(args.device), load_pretrained(args.ckpt, "cpu")  # a typo: 1st error
    tasks = pick_tasks(args)
    if args.save_model:  # before any work: a folder that is not a saved classifier is never overwritten
        check_save_dir(args.save_model, tasks)
    args.recipe = cfg.preset if cfg.preset in RECIPES else "paper"  # a config written by hand may say "auto"
    vars(args).update({k: v for k, v in RECIPES[args.recipe].items() if getattr(args, k) is None})  # a flag wins
    vocab, seq_len = pretrained.embed.tok.weight.shape[0], pretrained.embed.pos_table.shape[0]
    args.tokenizer_dir = args.tokenizer_dir or meta.get("folder") or os.path.dirname(os.path.abspath(args.ckpt))
    tok = load_tokenizer(args.tokenizer_dir, vocab)
    if not 3 <= args.max_len <= seq_len:
        raise CramError(f"--max_len {args.max_len} must be between 3 and the model's {seq_len} positions")
    args.vocab_seq, args.pad_id = (vocab, seq_len), tok.special["pad"]
    cfg.dropout = args.dropout  # the paper: no dropout in pretraining (cram.py), 0.1 in fine-tuning's encoder and head
    out_dir = Path(args.out or (args.ckpt if os.path.isdir(args.ckpt) else os.path.dirname(os.path.abspath(args.ckpt))
                                if os.path.isfile(args.ckpt) else os.path.join("out", Path(args.ckpt).name)))
    info = run_info(device)
    print(f"settings: {json.dumps(vars(args))}\nrun: {json.dumps(info)}")
    data = {task.name: (task, *load_task(task, args)) for task in tasks}  # every file read: a bad one costs no training
    print("\n".join(describe(task, train) for task, train, _ in data.values()))
    random_inits = [False, True] if args.vs_random else [args.random_init]  # True: the no-pretraining baseline
    paced, pace = plan_run(args, data, device, pretrained, random_inits)  # compiled? seeds in a step? the pace line
    made = [d for d in [out_dir, *out_dir.parents] if not d.exists()]  # the folders this run makes, the deepest first
    no_link(out_dir / "predictions").mkdir(parents=True, exist_ok=True)  # and leaves no folder; never through a link
    report = {r: {"table": {}, "baseline": {}, "results": {}, "tasks": {}, "draws": {}} for r in random_inits}
    outputs, this = {}, own_name(out_dir, data, t_start)  # glue-<tasks>-<time>: this run's own files
    tasks_kept = 0  # tasks in this run's own copy so far
    try:
        for n, (task, train, devs) in enumerate(data.values(), 1):
            for random_init in random_inits:  # the same data, seeds and recipe
                run_task(task, train, devs, None if random_init else pretrained.state_dict(), cfg, tok, args, device,
                         outputs, report[random_init], keep=bool(args.save_model) and random_init == random_inits[0],
                         pace=pace)
            if n < len(data):  # a long run's tasks, each kept as it ends: a crash or Ctrl-C later loses none of them
                publish(out_dir, this, args, data, report, outputs, info, paced, time.time() - t_start, final=False)
                tasks_kept = n
        total_s = time.time() - t_start
        md = publish(out_dir, this, args, data, report, outputs, info, paced, total_s, final=True)
        tasks_kept = len(data)  # the results are written: a classifier that cannot be saved loses none of them
        if classifier := report[random_inits[0]].get("keep"):
            task, train, _ = next(iter(data.values()))
            save_classifier(args.save_model, task, train, classifier, cfg, tok, args)
    except BaseException:  # Ctrl-C, an error, out of memory: the finished tasks stay; say where, then stop as ever
        if tasks_kept:
            print(f"finetune_glue.py: this run's finished tasks: {out_dir / this}.md and .json", file=sys.stderr)
        else:
            forget(out_dir, this, made)  # nothing of this run's kept: no trace of it, its new folders neither
        raise
    print("\n" + md + f"\nwrote {out_dir}/{this}.md, .json and predictions/{this}/ (this run's, kept), and glue.md, "
          "glue.json and predictions/*.tsv (the latest run's: an earlier run's stay in its own glue-*.md)" +
          (f", the classifier to {args.save_model} (classify.py)" if classifier else "") +
          f"; total wall time {total_s / 60:.1f} min")
    return report[random_inits[0]]["table"]


def main(argv=None):
    safe_console()  # a path or text the console's encoding lacks is printed escaped, never raised (Windows: cp1252)
    try:
        with sigterm_as_ctrl_c():  # kill or a time limit stops the run as Ctrl-C does: its finished tasks kept
            return run(parse_args(argv))
    except (CramError, OSError) as e:  # OSError: no permission, a full disk
        sys.exit(f"finetune_glue.py: error: {e}" + ("" if isinstance(e, CramError) else ": check --out and the disk"))
    except KeyboardInterrupt:
        print("finetune_glue.py: error: interrupted: what earlier runs wrote in --out stays as it was",
              file=sys.stderr)
        sys.exit(130)  # as cram.py: the shell's code for a stop by Ctrl-C


if __name__ == "__main__":
    main()
