"""Fine-tune a crammed BERT on GLUE and report the paper's table (Cramming, section 5, "GLUE-sane" recipe).

Usage:
    python finetune_glue.py out/ckpt.pt                                   # all 8 tasks from the Hugging Face hub
    python finetune_glue.py out/ckpt.pt --glue_dir ../shared/data/glue --tasks cola,sst2,mrpc,stsb,rte
    python finetune_glue.py out/tiny/ckpt.pt --glue_dir ../shared/data/glue --tasks rte --seeds 1 --max_train 500
    python finetune_glue.py out/ckpt.pt --random_init                     # the "no pretraining" baseline
    python finetune_glue.py --help                                        # every hyper-parameter, with its default

The recipe (one hyper-parameter set for every task, as in the paper):
- input [CLS] A [SEP] B [SEP] (single sentence: [CLS] A [SEP]), longest-first truncation to 128 tokens,
  each batch padded to its own longest sequence, padding masked out of attention
- head: hidden state of [CLS] -> Linear d->1024 -> Tanh -> Dropout 0.1 -> Linear 1024->labels, N(0, 0.02) init;
  dropout 0.1 in the encoder too; STS-B is a regression (1 output, MSE), every other task cross-entropy
- AdamW lr 4e-5, betas (0.9, 0.98), eps 1e-6, no weight decay; batch 16; 5 epochs; 10% linear warm-up then
  cosine decay to 0; bf16 autocast on CUDA, fp32 elsewhere
- dev sets, metric after the last epoch, median over 5 fine-tuning seeds; average = plain mean of 9 numbers
  (MNLI matched and mismatched counted separately)
Data: the hub's GLUE ("nyu-mll/glue"), or --glue_dir with the classic GLUE TSVs (<DIR>/RTE/train.tsv, dev.tsv).
Outputs in --out (default: the checkpoint's folder): glue.md (the table), glue.json (every number, per seed,
settings, wall times), predictions/<task>.tsv (index, prediction, label of the median seed).
"""
import argparse
import json
import math
import os
import sys
import time
import urllib.request
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

from cram import CramError, CrammedBERT, load_model, pick_device, run_info
from prepare import load_tokenizer

# Hyper-parameters (paper's "GLUE-sane" recipe); each one is a command-line flag of the same name in lowercase.
LR = 4e-5
BETA1, BETA2 = 0.9, 0.98
ADAM_EPS = 1e-6
WEIGHT_DECAY = 0.0
BATCH_SIZE = 16
EPOCHS = 5
WARMUP = 0.1            # fraction of each task's steps spent warming the lr up linearly
DROPOUT = 0.1           # encoder and head
HEAD_HIDDEN = 1024      # width of the classification head's hidden layer
MAX_LEN = 128           # tokens per example, specials included
SEEDS = 5               # fine-tuning runs per task; the median of each metric is reported
EVAL_BATCH_SIZE = 128   # no gradients at evaluation, so larger batches fit

HUB_NAME, HUB_URL = "nyu-mll/glue", "https://huggingface.co"
# task: (TSV folder, TSV columns (a, b, label): header names, or indices for headerless CoLA,
#        hub columns (a, b), TSV label text -> the hub's label id (None: a regression on float scores))
BINARY, NLI2 = {"0": 0, "1": 1}, {"entailment": 0, "not_entailment": 1}
TASKS = {
    "cola": ("CoLA", (3, None, 1), ("sentence", None), BINARY),
    "sst2": ("SST-2", ("sentence", None, "label"), ("sentence", None), BINARY),
    "mrpc": ("MRPC", ("#1 String", "#2 String", "Quality"), ("sentence1", "sentence2"), BINARY),
    "stsb": ("STS-B", ("sentence1", "sentence2", "score"), ("sentence1", "sentence2"), None),
    "qqp": ("QQP", ("question1", "question2", "is_duplicate"), ("question1", "question2"), BINARY),
    "mnli": ("MNLI", ("sentence1", "sentence2", "gold_label"), ("premise", "hypothesis"),
             {"entailment": 0, "neutral": 1, "contradiction": 2}),
    "qnli": ("QNLI", ("question", "sentence", "label"), ("question", "sentence"), NLI2),
    "rte": ("RTE", ("sentence1", "sentence2", "label"), ("sentence1", "sentence2"), NLI2),
}
# evaluation sets: name -> (task, TSV file, hub split); MNLI is scored on matched and mismatched dev sets
DEV_SETS = {t: (t, "dev.tsv", "validation") for t in TASKS if t != "mnli"}
DEV_SETS.update(mnli_m=("mnli", "dev_matched.tsv", "validation_matched"),
                mnli_mm=("mnli", "dev_mismatched.tsv", "validation_mismatched"))
# the paper's table: one main metric per evaluation set, in this column order
MAIN_METRIC = {"cola": "mcc", "sst2": "acc", "mrpc": "f1", "stsb": "pearson", "qqp": "f1", "mnli_m": "acc",
               "mnli_mm": "acc", "qnli": "acc", "rte": "acc"}
TITLES = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP", "mnli_m": "MNLI-m",
          "mnli_mm": "MNLI-mm", "qnli": "QNLI", "rte": "RTE"}

Split = namedtuple("Split", "a b labels")  # texts A, texts B (None for single-sentence tasks), labels (np.ndarray)


# ----------------------------------------------------------------------------------------------------------------
# Data: GLUE rows from TSV files or the hub, then token ids.

def read_tsv(path, cols, labels, limit=None):
    """A GLUE TSV as a Split. Fields are split on tabs only: quote characters are text, never CSV quoting."""
    if not os.path.isfile(path):
        raise CramError(f"missing {path}: download the GLUE data and check --glue_dir")
    rows, bad, header = [], [], None
    with open(path, encoding="utf-8-sig", newline="\n") as f:  # utf-8-sig drops MRPC's byte-order mark
        for lineno, line in enumerate(f, 1):
            fields = line.rstrip("\r\n").split("\t")
            if line.strip() == "":
                continue
            if header is None and isinstance(cols[0], str):
                header = fields
                missing = [c for c in cols if c is not None and c not in header]
                if missing:
                    raise CramError(f"{path}: no column {missing[0]!r} in the header line (found {header})")
                idx = [None if c is None else header.index(c) for c in cols]
                continue
            idx = idx if header else cols
            width = len(header) if header else max(cols[0], cols[2]) + 1
            if len(fields) != width:
                bad.append(f"line {lineno}: {len(fields)} fields, expected {width}")
                continue
            text = fields[idx[2]]
            label = labels.get(text) if labels else _float(text)
            if label is None:
                bad.append(f"line {lineno}: label {text!r} is not one of {sorted(labels) if labels else 'floats'}")
                continue
            rows.append((fields[idx[0]], None if idx[1] is None else fields[idx[1]], label))
            if limit and len(rows) == limit:
                break
    if bad:  # real QQP has a few broken lines: skip them, but say so
        print(f"warning: {path}: skipped {len(bad)} malformed rows ({'; '.join(bad[:3])}"
              f"{'; ...' if len(bad) > 3 else ''})", file=sys.stderr)
    if not rows:
        raise CramError(f"{path} has no usable rows: it is empty or not this task's file; re-download it")
    a, b, y = zip(*rows)
    return Split(list(a), None if cols[1] is None else list(b), np.array(y))


def _float(text):
    try:
        return float(text)
    except ValueError:
        return None


def read_hub(task, split, limit=None):
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
    if limit:
        ds = ds.select(range(min(limit, len(ds))))
    col_a, col_b = TASKS[task][2]
    keep = [i for i, y in enumerate(ds["label"]) if y != -1]
    pick = lambda col: [ds[col][i] for i in keep]  # noqa: E731
    return Split(pick(col_a), pick(col_b) if col_b else None, np.array(pick("label")))


def load_task(task, args):
    """(train Split, {dev set name: Split}) from --glue_dir when given, else from the hub."""
    folder, cols, _, labels = TASKS[task]
    names = [n for n, (t, _, _) in DEV_SETS.items() if t == task]
    if args.glue_dir:
        path = lambda name: os.path.join(args.glue_dir, folder, name)  # noqa: E731
        return (read_tsv(path("train.tsv"), cols, labels, args.max_train),
                {n: read_tsv(path(DEV_SETS[n][1]), cols, labels) for n in names})
    return read_hub(task, "train", args.max_train), {n: read_hub(task, DEV_SETS[n][2]) for n in names}


def truncate_pair(a, b, budget):
    """Longest-first: cut the end of the longer of a and b until both fit in budget tokens together."""
    if len(a) + len(b) <= budget:
        return a, b
    short = min(len(a), len(b), budget // 2)
    return (a[:short], b[:budget - short]) if len(a) <= len(b) else (a[:budget - short], b[:short])


def encode(tok, split, max_len):
    """Token ids [CLS] A [SEP] (B [SEP]) per example, at most max_len long, unpadded."""
    cls, sep = tok.special["cls"], tok.special["sep"]
    ids_a = tok.encode_batch(split.a)
    if split.b is None:
        return [[cls] + a[:max_len - 2] + [sep] for a in ids_a]
    pairs = (truncate_pair(a, b, max_len - 3) for a, b in zip(ids_a, tok.encode_batch(split.b)))
    return [[cls] + a + [sep] + b + [sep] for a, b in pairs]


def collate(seqs, pad_id, device):
    """Pad to the longest sequence of this batch: ids (B, T) and pad_mask (B, T), True on real tokens."""
    lengths = torch.tensor([len(s) for s in seqs])
    ids = torch.full((len(seqs), int(lengths.max())), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    pad_mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
    return ids.to(device), pad_mask.to(device)


# ----------------------------------------------------------------------------------------------------------------
# Model, schedule, training and evaluation.

class GlueModel(nn.Module):
    """The pretrained encoder and a fresh head on the [CLS] (first) token."""

    def __init__(self, encoder, n_embd, n_out, hidden=HEAD_HIDDEN, dropout=DROPOUT):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(nn.Linear(n_embd, hidden), nn.Tanh(), nn.Dropout(dropout), nn.Linear(hidden, n_out))
        for m in self.head:
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, ids, pad_mask):
        return self.head(self.encoder.encode(ids, pad_mask)[:, 0])           # (B, C) -> (B, n_out)


def lr_at(step, total, peak, warmup=WARMUP):
    """Linear warm-up over the first warmup fraction of the steps, then cosine decay to 0 at the last step."""
    n_warm = max(1, round(warmup * total))
    if step < n_warm:
        return peak * (step + 1) / n_warm
    return peak * 0.5 * (1 + math.cos(math.pi * (step - n_warm) / max(1, total - n_warm)))


def finetune(model, ids, labels, args, seed, device, amp, desc):
    """args.epochs passes over (ids, labels) in random batches of args.batch_size; returns the last loss."""
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(args.beta1, args.beta2),
                                  eps=args.adam_eps, weight_decay=args.weight_decay, fused=device.type == "cuda")
    total = args.epochs * math.ceil(len(ids) / args.batch_size)
    targets = torch.from_numpy(labels).to(device)
    model.train()
    step, loss = 0, torch.zeros(())
    with tqdm(total=total, desc=desc, unit="step", leave=False, dynamic_ncols=True) as bar:
        for _ in range(args.epochs):
            for batch in torch.randperm(len(ids), generator=gen).split(args.batch_size):
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step, total, args.lr, args.warmup)
                with amp():
                    out = model(*collate([ids[i] for i in batch], args.pad_id, device)).float()
                y = targets[batch.to(device)]
                loss = F.mse_loss(out[:, 0], y.float()) if out.shape[1] == 1 else F.cross_entropy(out, y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                step += 1
                bar.update()
                if step % 20 == 0 or step == total:
                    bar.set_postfix(loss=f"{loss.item():.4f}")
    return loss.item()


@torch.no_grad()
def predict(model, ids, args, device, amp):
    """Class ids (or STS-B scores) for every example, in input order."""
    model.eval()
    order = np.argsort([len(s) for s in ids], kind="stable")  # similar lengths share a batch: little padding
    preds = [None] * len(ids)
    for start in range(0, len(ids), args.eval_batch_size):
        chunk = order[start:start + args.eval_batch_size]
        with amp():
            out = model(*collate([ids[i] for i in chunk], args.pad_id, device)).float()
        values = out[:, 0] if out.shape[1] == 1 else out.argmax(dim=1)
        for i, v in zip(chunk, values.tolist()):
            preds[i] = v
    return np.array(preds)


def compute_metrics(name, preds, labels):
    """GLUE's dev metrics for one evaluation set, times 100."""
    from scipy.stats import pearsonr, spearmanr  # imported here: they add 2 s to every start, even a failing one
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
    if name == "stsb":  # a correlation is undefined for constant predictions: count it as none
        flat = np.ptp(preds) == 0 or np.ptp(labels) == 0
        return {"pearson": 0.0 if flat else 100 * float(pearsonr(preds, labels)[0]),
                "spearman": 0.0 if flat else 100 * float(spearmanr(preds, labels)[0])}
    out = {"acc": 100 * accuracy_score(labels, preds)}
    if name == "cola":
        out["mcc"] = 100 * matthews_corrcoef(labels, preds)
    if name in ("mrpc", "qqp"):
        out["f1"] = 100 * f1_score(labels, preds, zero_division=0.0)
    return {k: float(v) for k, v in out.items()}


# ----------------------------------------------------------------------------------------------------------------
# Reporting and the command line.

def average(table):
    """The paper's GLUE score: the plain mean of the main metrics (9 numbers for the full benchmark)."""
    return sum(table.values()) / len(table)


def markdown(table, model_name, seeds):
    cols = list(table)
    lines = [f"| model | {' | '.join(f'{TITLES[c]} {MAIN_METRIC[c]}' for c in cols)} | avg |",
             "|---|" + "---:|" * (len(cols) + 1),
             f"| {model_name} | {' | '.join(f'{table[c]:.1f}' for c in cols)} | {average(table):.1f} |", ""]
    scope = ("of all 9 numbers, as in the paper" if len(cols) == len(MAIN_METRIC) else
             f"over the {len(cols)} numbers of the tasks run, a subset: not comparable with the paper's 9-number average")
    lines.append(f"GLUE dev sets, median of {seeds} fine-tuning seed(s) per task; avg is the plain mean {scope}.")
    return "\n".join(lines) + "\n"


def write_atomic(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Fine-tune a cram.py checkpoint on GLUE (the paper's recipe).",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("ckpt", help="checkpoint written by cram.py (meta.json and tokenizer.json beside it)")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated subset of the GLUE tasks")
    p.add_argument("--glue_dir", help="folder with the GLUE TSVs (<DIR>/RTE/train.tsv ...); default: the hub")
    p.add_argument("--tokenizer_dir", help="folder with meta.json + tokenizer.json; default: the checkpoint's")
    p.add_argument("--out", help="where glue.md, glue.json and predictions/ go; default: the checkpoint's folder")
    p.add_argument("--max_train", type=int, default=0, help="use only the first N train rows per task (0: all)")
    p.add_argument("--random_init", action="store_true", help="re-initialise the encoder: no-pretraining baseline")
    p.add_argument("--device", default="auto", help="auto, cuda, cpu or mps")
    for name in ("lr", "beta1", "beta2", "adam_eps", "weight_decay", "warmup", "dropout"):
        p.add_argument(f"--{name}", type=float, default=globals()[name.upper()])
    for name in ("batch_size", "epochs", "head_hidden", "max_len", "seeds", "eval_batch_size"):
        p.add_argument(f"--{name}", type=int, default=globals()[name.upper()])
    return p.parse_args(argv)


def run(args):
    t_start = time.time()
    tasks = [t.strip().lower() for t in args.tasks.split(",") if t.strip()]
    for t in tasks:
        if t not in TASKS:
            raise CramError(f"unknown task {t!r}: choose from {','.join(TASKS)} (wnli is left out, as in the paper)")
    if min(args.seeds, args.epochs, args.batch_size, args.eval_batch_size) < 1 or args.max_train < 0:
        raise CramError("--seeds, --epochs, --batch_size and --eval_batch_size must be >= 1, --max_train >= 0")
    device = pick_device(args.device)
    pretrained, cfg, _ = load_model(args.ckpt, "cpu", dropout=args.dropout)
    vocab, seq_len = pretrained.embed.tok.weight.shape[0], pretrained.embed.pos_table.shape[0]
    tok_dir = args.tokenizer_dir or os.path.dirname(os.path.abspath(args.ckpt))
    if not os.path.isfile(os.path.join(tok_dir, "meta.json")):
        raise CramError(f"no tokenizer in {tok_dir} (meta.json missing): pass --tokenizer_dir with the prepare.py "
                        "output the model was trained on")
    tok = load_tokenizer(tok_dir)
    if tok.vocab_size != vocab:
        raise CramError(f"the tokenizer in {tok_dir} has {tok.vocab_size} tokens but {args.ckpt} was trained with "
                        f"{vocab}: pass --tokenizer_dir with the data the checkpoint was trained on")
    if not 3 <= args.max_len <= seq_len:
        raise CramError(f"--max_len {args.max_len} must be between 3 and the model's {seq_len} positions")
    args.pad_id = tok.special["pad"]
    out_dir = args.out or os.path.dirname(os.path.abspath(args.ckpt))
    amp = lambda: torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")  # noqa: E731
    info = run_info(device)
    print(f"settings: {json.dumps(vars(args))}\nrun: {json.dumps(info)}")
    weights = {k: v.clone() for k, v in pretrained.state_dict().items()}

    results, times, preds_of, labels_of = {}, {}, {}, {}
    for task in tasks:
        t0 = time.time()
        train, devs = load_task(task, args)
        train_ids = encode(tok, train, args.max_len)
        dev_ids = {name: encode(tok, dev, args.max_len) for name, dev in devs.items()}
        labels_of.update({name: dev.labels for name, dev in devs.items()})
        n_out = 1 if TASKS[task][3] is None else len(TASKS[task][3])
        times[task] = {"data_s": time.time() - t0, "train_s": [], "eval_s": [], "n_train": len(train_ids),
                       "n_dev": {n: len(d) for n, d in dev_ids.items()}, "final_loss": []}
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            encoder = CrammedBERT(cfg, vocab, seq_len)  # fresh N(0, 0.02) weights: kept only for --random_init
            if not args.random_init:
                encoder.load_state_dict(weights)
            model = GlueModel(encoder, cfg.n_embd, n_out, args.head_hidden, args.dropout).to(device)
            t1 = time.time()
            loss = finetune(model, train_ids, train.labels, args, seed, device, amp, f"{task} seed {seed}")
            times[task]["train_s"].append(time.time() - t1)
            times[task]["final_loss"].append(loss)
            t1 = time.time()
            for name, ids in dev_ids.items():
                preds = predict(model, ids, args, device, amp)
                results.setdefault(name, []).append(compute_metrics(task, preds, devs[name].labels))
                preds_of.setdefault(name, []).append(preds)
            times[task]["eval_s"].append(time.time() - t1)
        for name in dev_ids:
            median = {k: float(np.median([r[k] for r in results[name]])) for k in results[name][0]}
            print(f"{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in median.items()) +
                  f" (median of {args.seeds}; {sum(times[task]['train_s']):.0f} s training)")

    table, report = {}, {}
    for name in (n for n in MAIN_METRIC if n in results):
        runs, main = results[name], MAIN_METRIC[name]
        median = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
        table[name] = median[main]
        pick = int(np.argsort([r[main] for r in runs], kind="stable")[(len(runs) - 1) // 2])  # the (lower) median
        report[name] = {"main": main, "median": median, "per_seed": runs, "predictions_seed": pick}
        rows = zip(preds_of[name][pick].tolist(), labels_of[name].tolist())
        write_atomic(os.path.join(out_dir, "predictions", f"{name}.tsv"),
                     "index\tprediction\tlabel\n" + "".join(f"{i}\t{p}\t{y}\n" for i, (p, y) in enumerate(rows)))
    model_name = args.ckpt + (" (random init)" if args.random_init else "")
    md = markdown(table, model_name, args.seeds)
    total_s = time.time() - t_start
    write_atomic(os.path.join(out_dir, "glue.md"), md)
    write_atomic(os.path.join(out_dir, "glue.json"), json.dumps({
        "checkpoint": os.path.abspath(args.ckpt), "random_init": args.random_init, "settings": vars(args),
        "run": info, "table": table, "average": average(table), "average_over": list(table), "results": report,
        "tasks": times, "total_s": total_s}, indent=1))
    print("\n" + md + f"\nwrote {out_dir}/glue.md, glue.json and predictions/; total wall time {total_s / 60:.1f} min")
    return table


def main(argv=None):
    try:
        return run(parse_args(argv))
    except CramError as e:
        sys.exit(f"finetune_glue.py: error: {e}")


if __name__ == "__main__":
    main()
