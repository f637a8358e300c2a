"""Fine-tune a crammed BERT on GLUE and report the paper's table (Cramming, section 5, "GLUE-sane" recipe).

    python finetune_glue.py out/ckpt.pt                                   # all 8 tasks from the Hugging Face hub
    python finetune_glue.py out/ckpt.pt --glue_dir ../shared/data/glue --tasks cola,sst2,mrpc,stsb,rte
    python finetune_glue.py out/ckpt.pt --vs_random                       # and from random weights, side by side

One recipe for all tasks, named by the checkpoint's preset (PAPER, TINY below; flags win): [CLS] A [SEP] B [SEP], a
fresh head, cross-entropy (STS-B: MSE), AdamW, warm-up then cosine decay, mixed precision on CUDA (hardware.py); dev
metrics after the last epoch, median over seeds. Outputs in --out (default: the checkpoint's folder): glue.md (the
table), glue.json (every number, per seed, settings, wall times), predictions/<set>[.random_init].tsv (index,
prediction, label; median seed's).
"""
import argparse
import json
import math
import os
import sys
import time
import urllib.request
from collections import namedtuple
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

from cram import CramError, CrammedBERT, load_model, pick_device
from hardware import amp_dtype, autocast, run_info, safe_console
from prepare import load_tokenizer

# Recipes, named by the checkpoint's preset; every value is also a flag, which wins. The paper's "GLUE-sane" set:
PAPER = dict(lr=4e-5, beta1=0.9, beta2=0.98, adam_eps=1e-6, weight_decay=0.0, batch_size=16, epochs=5,  # AdamW
             warmup=0.1,          # fraction of each task's steps with a linear lr warm-up; cosine decay to 0 after it
             dropout=0.1, head_hidden=1024,  # dropout in the encoder and head; width of the head's hidden layer
             pool="cls",          # what the head reads: "cls" (the first token, the paper) or "mean" (GlueModel)
             max_len=128,         # tokens per example, specials included; pairs are truncated longest-first
             max_train=0, seeds=5,  # the first N train rows per task (0: all); runs per task, the median reported
             eval_batch_size=128)  # no gradients at evaluation, so larger batches fit
# The CPU presets' recipe, measured on STS-B, MRPC, RTE, CoLA, SST-2 (docs/notes.md, 2026-11-23): a small encoder
# needs a 25x hotter lr, 10 epochs (CoLA 16 instead of 12), and a head on each sentence's mean (STS-B 73, not 23).
TINY = {**PAPER, "lr": 1e-3, "batch_size": 32, "epochs": 10, "pool": "mean", "seeds": 3, "max_train": 8000}
RECIPES = {"paper": PAPER, "tiny": TINY}
# what a flag's value must be (one-line errors, not a crash or a quietly different run): (flags, test, in words)
RULES = [("seeds epochs batch_size eval_batch_size head_hidden", lambda x: x >= 1, ">= 1"),
         ("max_train adam_eps weight_decay", lambda x: x >= 0, ">= 0"), ("warmup", lambda x: 0 <= x <= 1, "in [0, 1]"),
         ("lr", lambda x: 0 < x < math.inf, "> 0 and finite"), ("pool", lambda x: x in ("cls", "mean"), "cls or mean"),
         ("beta1 beta2 dropout", lambda x: 0 <= x < 1, "in [0, 1)")]

HUB_NAME, HUB_URL = "nyu-mll/glue", "https://huggingface.co"
BINARY, NLI2 = {"0": 0, "1": 1}, {"entailment": 0, "not_entailment": 1}  # TSV label text -> the hub's label id
NLI3 = {"entailment": 0, "neutral": 1, "contradiction": 2}
# task: (TSV folder, TSV columns (a, b, label): header names, or indices for headerless CoLA, hub columns (a, b),
#        label ids (None: STS-B's float scores, a regression))
TASKS = {"cola": ("CoLA", (3, None, 1), ("sentence", None), BINARY),
         "sst2": ("SST-2", ("sentence", None, "label"), ("sentence", None), BINARY),
         "mrpc": ("MRPC", ("#1 String", "#2 String", "Quality"), ("sentence1", "sentence2"), BINARY),
         "stsb": ("STS-B", ("sentence1", "sentence2", "score"), ("sentence1", "sentence2"), None),
         "qqp": ("QQP", ("question1", "question2", "is_duplicate"), ("question1", "question2"), BINARY),
         "mnli": ("MNLI", ("sentence1", "sentence2", "gold_label"), ("premise", "hypothesis"), NLI3),
         "qnli": ("QNLI", ("question", "sentence", "label"), ("question", "sentence"), NLI2),
         "rte": ("RTE", ("sentence1", "sentence2", "label"), ("sentence1", "sentence2"), NLI2)}
# the paper's table, in its column order: evaluation set -> (title, main metric)
COLUMNS = {"cola": ("CoLA", "mcc"), "sst2": ("SST-2", "acc"), "mrpc": ("MRPC", "f1"), "stsb": ("STS-B", "pearson"),
           "qqp": ("QQP", "f1"), "mnli_m": ("MNLI-m", "acc"), "mnli_mm": ("MNLI-mm", "acc"), "qnli": ("QNLI", "acc"),
           "rte": ("RTE", "acc")}
DEV_SUFFIX = {"mnli_m": "_matched", "mnli_mm": "_mismatched"}  # MNLI's two dev sets: dev_matched.tsv, ...
Split = namedtuple("Split", "a b labels")  # texts A, texts B (None for single-sentence tasks), labels (np.ndarray)


# ----------------------------------------------------------------------------------------------------------------
# Data: GLUE rows from TSV files or the hub, then token ids.

def read_tsv(path, cols, labels, limit=0):
    """A GLUE TSV as a Split. Fields are split on tabs only: quote characters are text, never CSV quoting."""
    if not os.path.isfile(path):
        raise CramError(f"missing {path}: download the GLUE data and check --glue_dir")
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:  # -sig: MRPC's byte-order mark
        lines = [(n, line.rstrip("\r").split("\t")) for n, line in enumerate(f.read().split("\n"), 1) if line.strip()]
    if not lines:
        raise CramError(f"{path} is empty: re-download the GLUE data")
    # a header line names the columns; headerless CoLA has 4, given by index (the sentence is the last)
    header = lines.pop(0)[1] if isinstance(cols[0], str) else list(range(cols[0] + 1))
    if not {c for c in cols if c is not None} <= set(header):
        raise CramError(f"{path}: the header {str(header)[:150]} lacks one of the columns {[c for c in cols if c]}: "
                        "it is not this task's file, or damaged; download the GLUE data again")
    i_a, i_b, i_y = [None if c is None else header.index(c) for c in cols]
    rows, bad = [], []
    for n, fields in lines:
        try:
            if len(fields) != len(header):
                raise ValueError(f"{len(fields)} fields, expected {len(header)}")
            if "\ufffd" in "".join(fields):  # what errors="replace" made of bytes that are not UTF-8
                raise ValueError("not UTF-8 text")
            rows.append((fields[i_a], None if i_b is None else fields[i_b],
                         labels[fields[i_y]] if labels else float(fields[i_y])))
            if len(rows) == limit:
                break
        except (KeyError, ValueError) as e:  # KeyError: a label this task does not have
            bad.append(f"line {n}: {e}" if isinstance(e, ValueError) else f"line {n}: unknown label {e}")
    if bad:  # the real QQP has a few broken lines: skip them, but say so
        print(f"warning: {path}: skipped {len(bad)} malformed rows ({'; '.join(bad[:3])}{'; ...' * (len(bad) > 3)})",
              file=sys.stderr)
    if not rows:
        raise CramError(f"{path} has no usable rows: it is not this task's file; re-download the GLUE data")
    a, b, y = zip(*rows)
    return Split(list(a), None if i_b is None else list(b), np.array(y))


def read_hub(task, split, limit=0):
    """A GLUE split from the Hugging Face hub as a Split (rows labelled -1 have no label and are dropped)."""
    if not os.environ.get("HF_HUB_OFFLINE"):  # fail in seconds, not after the hub client's long retries
        try:
            urllib.request.urlopen(HUB_URL, timeout=10).close()
        except OSError as e:
            raise CramError(f"cannot reach the Hugging Face hub ({e}): pass --glue_dir DIR with the GLUE TSVs")
    import datasets  # slow to import, and only needed here
    try:
        ds = datasets.load_dataset(HUB_NAME, task, split=split)
    except Exception as e:
        raise CramError(f"cannot load {HUB_NAME} {task} {split} from the hub ({type(e).__name__}): pass --glue_dir "
                        "DIR with the GLUE TSVs") from None
    ds = (ds.select(range(min(limit, len(ds)))) if limit else ds).filter(lambda y: y != -1, input_columns="label")
    return Split(*(ds[col] if col else None for col in TASKS[task][2]), np.array(ds["label"]))


def load_task(task, args):
    """(train Split, {eval set: Split}) from --glue_dir (train.tsv, dev<suffix>.tsv), else the hub's splits."""
    folder, cols, _, labels = TASKS[task]
    devs = {n: DEV_SUFFIX.get(n, "") for n in COLUMNS if n.split("_")[0] == task}
    if args.glue_dir:
        path = lambda name: os.path.join(args.glue_dir, folder, name)  # noqa: E731
        return (read_tsv(path("train.tsv"), cols, labels, args.max_train),
                {n: read_tsv(path(f"dev{s}.tsv"), cols, labels) for n, s in devs.items()})
    return read_hub(task, "train", args.max_train), {n: read_hub(task, f"validation{s}") for n, s in devs.items()}


def truncate_pair(a, b, budget):
    """Longest-first: cut the end of the longer of a and b until both fit in budget tokens together."""
    short = min(len(a), len(b), budget // 2)
    return (a[:short], b[:budget - short]) if len(a) <= len(b) else (a[:budget - short], b[:short])


def encode(tok, split, max_len):
    """Token ids [CLS] A [SEP] (B [SEP]) per example, at most max_len long, unpadded (a tokenizer with cls_first
    False, the paper's release, frames a single text as A [SEP]: the template it was evaluated with)."""
    cls, sep, ids_a = tok.special["cls"], tok.special["sep"], tok.encode_batch(split.a)
    if split.b is None:
        lead = [cls] if tok.cls_first else []
        return [lead + a[:max_len - 1 - len(lead)] + [sep] for a in ids_a]
    pairs = (truncate_pair(a, b, max_len - 3) for a, b in zip(ids_a, tok.encode_batch(split.b)))
    return [[cls] + a + [sep] + b + [sep] for a, b in pairs]


def collate(seqs, pad_id, device):
    """Pad to the longest sequence of this batch: ids (B, T) and pad_mask (B, T), True on real tokens."""
    lengths = torch.tensor([len(s) for s in seqs])
    ids = nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], batch_first=True, padding_value=pad_id)
    return ids.to(device), (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).to(device)


# ----------------------------------------------------------------------------------------------------------------
# Model, schedule, fine-tuning, evaluation.

def mean_of(h, mask):
    """The mean of the states h (B, T, C) where mask (B, T) is True: (B, C); zeros where a row has none."""
    return (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)       # (B, C) / (B, 1)


class GlueModel(nn.Module):
    """The encoder and a fresh head on the first token's state (pool "cls", the paper) or on the mean of the words
    (pool "mean"); a pair's means u (A) and v (B) as in Sentence-BERT (Reimers & Gurevych 2019): [u, v, |u-v|, u*v]."""

    def __init__(self, encoder, n_embd, n_out, hidden, dropout, pool, sep_id, pair):
        super().__init__()
        self.encoder, self.pool, self.sep_id, self.pair = encoder, pool, sep_id, pair
        n_in = 4 * n_embd if pool == "mean" and pair else n_embd
        self.head = nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Dropout(dropout), nn.Linear(hidden, n_out))
        for linear in (self.head[0], self.head[3]):
            nn.init.normal_(linear.weight, mean=0.0, std=0.02)
            nn.init.zeros_(linear.bias)

    def forward(self, ids, pad_mask):
        h = self.encoder.encode(ids, pad_mask)                                        # (B, T, C)
        if self.pool == "cls":
            return self.head(h[:, 0])                                                 # (B, C) -> (B, n_out)
        pos = torch.arange(ids.shape[1], device=ids.device)[None, :]                  # (1, T)
        words = pad_mask & (pos > 0) & (ids != self.sep_id)                           # not [CLS], [SEP], padding
        if not self.pair:
            return self.head(mean_of(h, words))
        first_sep = torch.where(ids == self.sep_id, pos, ids.shape[1]).min(1, keepdim=True).values   # (B, 1)
        u, v = mean_of(h, words & (pos < first_sep)), mean_of(h, words & (pos > first_sep))
        return self.head(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))             # (B, 4C) -> (B, n_out)


def lr_at(step, total, peak, warmup=PAPER["warmup"]):
    """Linear warm-up over the first warmup fraction of the steps, then cosine decay to 0 at the last step."""
    n_warm = max(1, round(warmup * total))
    if step < n_warm:
        return peak * (step + 1) / n_warm
    return peak * 0.5 * (1 + math.cos(math.pi * (step - n_warm) / max(1, total - n_warm)))


def finetune(model, ids, labels, args, seed, device, desc):
    """args.epochs passes over (ids, labels) in random batches of args.batch_size; returns the last batch's loss."""
    gen = torch.Generator().manual_seed(seed)
    batches = [b for _ in range(args.epochs) for b in torch.randperm(len(ids), generator=gen).split(args.batch_size)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(args.beta1, args.beta2),
                                  eps=args.adam_eps, weight_decay=args.weight_decay, fused=device.type == "cuda")
    targets = torch.tensor(labels.tolist()).to(device)  # once; STS-B's scores in float32: MPS has no float64
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype := amp_dtype(device)) == torch.float16)  # as cram.py
    model.train()
    for step, batch in enumerate(tqdm(batches, desc=desc, unit="step", leave=False, dynamic_ncols=True)):
        optimizer.param_groups[0]["lr"] = lr_at(step, len(batches), args.lr, args.warmup)  # one group: all weights
        with autocast(device, dtype):  # as in pretraining: bf16 from Ampere on, fp16 before it, else fp32
            out = model(*collate([ids[i] for i in batch], args.pad_id, device)).float()     # (B, n_out)
        y = targets[batch.to(device)]
        loss = F.mse_loss(out[:, 0], y.float()) if out.shape[1] == 1 else F.cross_entropy(out, y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return loss.item()


@torch.no_grad()
def predict(model, ids, args, device):
    """Class ids (STS-B: scores) for every example, in input order."""
    model.eval()
    order = np.argsort([len(s) for s in ids], kind="stable")  # similar lengths share a batch: little padding
    preds, dtype = np.zeros(len(ids)), amp_dtype(device)
    for chunk in np.array_split(order, range(args.eval_batch_size, len(ids), args.eval_batch_size)):
        with autocast(device, dtype):
            out = model(*collate([ids[i] for i in chunk], args.pad_id, device)).float()
        preds[chunk] = (out[:, 0] if out.shape[1] == 1 else out.argmax(dim=1)).cpu().numpy()
    return preds if out.shape[1] == 1 else preds.astype(np.int64)


def compute_metrics(task, preds, labels):
    """GLUE's dev metrics for one task's evaluation set, times 100."""
    from scipy.stats import pearsonr, spearmanr  # imported here: they add 2 s to every start, even a failing one
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
    if task == "stsb":  # a correlation is undefined for constant predictions: count it as none
        return {name: 0.0 if np.ptp(preds) == 0 or np.ptp(labels) == 0 else 100 * float(corr(preds, labels)[0])
                for name, corr in (("pearson", pearsonr), ("spearman", spearmanr))}
    out = {"acc": accuracy_score(labels, preds)}
    if task == "cola":
        out["mcc"] = matthews_corrcoef(labels, preds)
    if task in ("mrpc", "qqp"):
        out["f1"] = f1_score(labels, preds, zero_division=0.0)
    return {k: 100 * float(v) for k, v in out.items()}


def run_task(task, train, devs, weights, cfg, tok, args, device, outputs, report):
    """Fine-tune args.seeds times from weights (None: a random init); metrics and times go to report (its "table",
    "results", "tasks"), the median seed's predictions to outputs."""
    t0, preds, random_init = time.time(), [], weights is None  # preds: per seed, {eval set: predictions}
    train_ids, dev_ids = encode(tok, train, args.max_len), {n: encode(tok, d, args.max_len) for n, d in devs.items()}
    info = report["tasks"][task] = {"n_train": len(train_ids), "n_dev": {n: len(d) for n, d in dev_ids.items()},
                                    "data_s": time.time() - t0, "train_s": [], "eval_s": [], "final_loss": []}
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        encoder = CrammedBERT(cfg, *args.vocab_seq)
        if not random_init:  # a random init keeps this fresh N(0, 0.02) encoder: the no-pretraining baseline
            encoder.load_state_dict(weights)
        model = GlueModel(encoder, cfg.n_embd, len(TASKS[task][3] or [0]), args.head_hidden, args.dropout,
                          args.pool, tok.special["sep"], train.b is not None).to(device)
        t1 = time.time()
        info["final_loss"].append(finetune(model, train_ids, train.labels, args, seed, device, f"{task} {seed}"))
        info["train_s"].append(time.time() - t1)
        preds.append({name: predict(model, ids, args, device) for name, ids in dev_ids.items()})
        info["eval_s"].append(time.time() - t1 - info["train_s"][-1])
    for name, dev in devs.items():
        runs, main = [compute_metrics(task, p[name], dev.labels) for p in preds], COLUMNS[name][1]
        median = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
        pick = int(np.argsort([r[main] for r in runs], kind="stable")[(len(runs) - 1) // 2])  # the (lower) median
        report["table"][name] = median[main]
        report["results"][name] = {"main": main, "median": median, "per_seed": runs, "predictions_seed": pick}
        outputs[f"predictions/{name}{'.random_init' * random_init}.tsv"] = "index\tprediction\tlabel\n" + "".join(
            f"{i}\t{p}\t{y}\n" for i, (p, y) in enumerate(zip(preds[pick][name].tolist(), dev.labels.tolist())))
        print(f"{name}{' (random init)' * random_init}: " + ", ".join(f"{k} {v:.2f}" for k, v in median.items()) +
              f" (median of {args.seeds} seeds; {len(train_ids)} train rows, {sum(info['train_s']):.0f} s training)")


# ----------------------------------------------------------------------------------------------------------------
# Reporting and the command line.

def average(table):
    """The paper's GLUE score: the plain mean of the main metrics (9 numbers for the full benchmark)."""
    return sum(table.values()) / len(table)


def markdown(tables, seeds, recipe):
    """The table: a row per model ({name: {eval set: main metric}}), and their difference when there are two."""
    rows, cols = dict(tables), list(next(iter(tables.values())))
    if len(rows) == 2:
        (_, a), (_, b) = rows.items()
        rows["difference"] = {c: a[c] - b[c] for c in cols}
    lines = [f"| model | {' | '.join(' '.join(COLUMNS[c]) for c in cols)} | avg |", "|---|" + "---:|" * (len(cols) + 1)]
    for name, t in rows.items():
        fmt = "+.1f" if name == "difference" else ".1f"  # a difference shows its sign
        lines.append(f"| {name} | {' | '.join(format(t[c], fmt) for c in cols)} | {average(t):{fmt}} |")
    avg = ("of all 9 numbers, as in the paper." if len(cols) == len(COLUMNS) else f"over the {len(cols)} numbers of "
           "the tasks run: a subset, not comparable with the paper's 9-number average.")
    return "\n".join(lines + ["", f"GLUE dev sets, median of {seeds} fine-tuning seed(s) per task, the {recipe} "
                              f"recipe; avg is the plain mean {avg}"]) + "\n"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Fine-tune a cram.py checkpoint on GLUE (its preset's recipe).")
    p.add_argument("ckpt", help="checkpoint written by cram.py (meta.json and tokenizer.json beside it)")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated subset of the GLUE tasks (default: all)")
    p.add_argument("--glue_dir", help="folder with the GLUE TSVs (<DIR>/RTE/train.tsv ...); default: the hub")
    p.add_argument("--tokenizer_dir", help="folder with meta.json + tokenizer.json; default: the checkpoint's")
    p.add_argument("--out", help="where glue.md, glue.json and predictions/ go; default: the checkpoint's folder")
    p.add_argument("--random_init", action="store_true", help="re-initialise the encoder: no-pretraining baseline")
    p.add_argument("--vs_random", action="store_true", help="also from random weights: both rows, their difference")
    p.add_argument("--device", default="auto", help="auto (the default), cuda, cpu or mps")
    for name, value in PAPER.items():  # None: the checkpoint's recipe
        p.add_argument(f"--{name}", type=type(value), help=f"default by preset: paper {value}, tiny {TINY[name]}")
    return p.parse_args(argv)


def run(args):
    t_start, wanted = time.time(), [t.strip().lower() for t in args.tasks.split(",") if t.strip()]
    if unknown := next((t for t in wanted if t not in TASKS), None):
        raise CramError(f"unknown task {unknown!r}: choose from {','.join(TASKS)} (wnli is left out, as in the paper)")
    for name, ok, what in ((n, ok, what) for names, ok, what in RULES for n in names.split()):
        if (value := getattr(args, name)) is not None and not ok(value):  # a flag given (the recipes' values are good)
            raise CramError(f"--{name} must be {what} (got {value})")
    device, (pretrained, cfg, _) = pick_device(args.device), load_model(args.ckpt, "cpu")
    args.recipe = cfg.preset if cfg.preset in RECIPES else "paper"  # a config written by hand may say "auto"
    vars(args).update({k: v for k, v in RECIPES[args.recipe].items() if getattr(args, k) is None})  # a flag wins
    vocab, seq_len = pretrained.embed.tok.weight.shape[0], pretrained.embed.pos_table.shape[0]
    tok = load_tokenizer(args.tokenizer_dir or os.path.dirname(os.path.abspath(args.ckpt)), vocab)
    if not 3 <= args.max_len <= seq_len:
        raise CramError(f"--max_len {args.max_len} must be between 3 and the model's {seq_len} positions")
    args.vocab_seq, args.pad_id, cfg.dropout = (vocab, seq_len), tok.special["pad"], args.dropout
    out_dir = Path(args.out or os.path.dirname(os.path.abspath(args.ckpt)))
    (out_dir / "predictions").mkdir(parents=True, exist_ok=True)
    info = run_info(device)
    print(f"settings: {json.dumps(vars(args))}\nrun: {json.dumps(info)}")
    data = {t: load_task(t, args) for t in TASKS if t in wanted}  # in the table's order; a bad file costs no training
    inits = [False, True] if args.vs_random else [args.random_init]  # random init: the no-pretraining baseline
    report, outputs = {init: {"table": {}, "results": {}, "tasks": {}} for init in inits}, {}
    for task, (train, devs) in data.items():
        for init in inits:  # the same data, seeds and recipe
            run_task(task, train, devs, None if init else pretrained.state_dict(), cfg, tok, args, device, outputs,
                     report[init])
    md = markdown({args.ckpt + " (random init)" * i: r["table"] for i, r in report.items()}, args.seeds, args.recipe)
    r, total_s = report[inits[0]], time.time() - t_start  # r: the first row's (pretrained unless --random_init)
    outputs["glue.md"], outputs["glue.json"] = md, json.dumps({
        "checkpoint": os.path.abspath(args.ckpt), "random_init": inits[0], "recipe": args.recipe, "total_s": total_s,
        "settings": vars(args), "run": info, **r, "average": average(r["table"]), "average_over": list(r["table"]),
        **({f"random_init_{k}": v for k, v in report[True].items()} if args.vs_random else {})}, indent=1)
    for name, text in outputs.items():  # only now, all at once, glue.json last: a failed run leaves the earlier ones
        (out_dir / f"{name}.tmp").write_text(text, encoding="utf-8")  # then rename: never a half-written file
        os.replace(out_dir / f"{name}.tmp", out_dir / name)
    print("\n" + md + f"\nwrote {out_dir}/glue.md, glue.json and predictions/; total wall time {total_s / 60:.1f} min")
    return r["table"]


def main(argv=None):
    safe_console()  # a path or text the console's encoding lacks is printed escaped, never raised (Windows: cp1252)
    try:
        return run(parse_args(argv))
    except (CramError, OSError) as e:  # OSError: no permission, a full disk
        sys.exit(f"finetune_glue.py: error: {e}" + ("" if isinstance(e, CramError) else ": check --out and the disk"))
    except KeyboardInterrupt:
        sys.exit("finetune_glue.py: error: interrupted: the earlier glue.md, glue.json and predictions/ stay")


if __name__ == "__main__":
    main()
