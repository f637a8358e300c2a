"""The fine-tuning model and the classifier a user keeps: what finetune_glue.py trains and classify.py uses.

- encode: text -> token ids [CLS] A [SEP] (B [SEP]), as the paper fine-tunes; collate pads a batch of them;
- GlueModel: the pretrained encoder with a fresh head (the first token's state, or the mean of the words);
- predict and decide: the head's outputs for many texts in batches of similar length, and the labels they name;
- a kept classifier: a folder with model.pt (tensors and plain values: loading it can never run code),
  classifier.json (the task: labels, text columns, max length, dev metrics) and its tokenizer's files. finetune_glue.py
  --save_model writes it (save_classifier), classify.py reads it (load_classifier).
"""
import json
import math
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from tqdm import tqdm

from cram import Config, CramError, CrammedBERT, check_config
from errors import check_writable, no_link, not_readable, same_kinds, text_of, written_whole
from hardware import amp_dtype, autocast, built_for
from tasks import METRICS, count, row_keys
from tokenizer import load_tokenizer


# ----------------------------------------------------------------------------------------------------------------
# Text to ids, the model, its predictions.

def truncate_pair(a, b, budget):
    """Longest-first: cut the end of the longer of a and b until both fit in budget tokens together."""
    short = min(len(a), len(b), budget // 2)
    return (a[:short], b[:budget - short]) if len(a) <= len(b) else (a[:budget - short], b[:short])


def encode(tok, split, max_len):
    """Token ids [CLS] A [SEP] (B [SEP]) per example, at most max_len long, unpadded. The paper's release was
    evaluated with a single text as a pair whose second is empty, [CLS] A [SEP] [SEP] (tok.single_as_pair)."""
    cls, sep, ids_a = tok.special["cls"], tok.special["sep"], tok.encode_batch(split.a)
    ids_b = None if split.b is None else tok.encode_batch(split.b)
    if lost := [t for t, ids in zip(split.a + (split.b or []), ids_a + (ids_b or [])) if t.strip() and not ids]:
        print(f"warning: no token the tokenizer keeps in {count(len(lost), 'text')} (e.g. {lost[0][:40]!r}): the model "
              "reads it as empty; a tokenizer of English ASCII drops other scripts and emoji", file=sys.stderr)
    if split.b is None and not tok.single_as_pair:
        return [[cls] + a[:max_len - 2] + [sep] for a in ids_a]
    ids_b = ids_b or [[]] * len(ids_a)
    pairs = (truncate_pair(a, b, max_len - 3) for a, b in zip(ids_a, ids_b))
    return [[cls] + a + [sep] + b + [sep] for a, b in pairs]


def collate(seqs, pad_id, device):
    """Pad to the longest of seqs: ids (N, T) and pad_mask (N, T), True on real tokens (fine-tuning pads a whole set
    once and slices each batch to its width)."""
    lengths = torch.tensor([len(s) for s in seqs])
    ids = nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], batch_first=True, padding_value=pad_id)
    return ids.to(device), (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).to(device)


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


@torch.no_grad()
def predict(model, ids, args, device, progress=False):
    """The head's outputs (N, n_out) as float32, for every example in input order: class logits, or the value."""
    model.eval()
    order = np.argsort([len(s) for s in ids], kind="stable")  # similar lengths share a batch: little padding
    chunks = np.array_split(order, range(args.eval_batch_size, len(ids), args.eval_batch_size))
    outs, dtype = [], amp_dtype(device)
    for chunk in tqdm(chunks, unit="batch", disable=not progress, leave=False, dynamic_ncols=True):
        with autocast(device, dtype):
            outs.append(model(*collate([ids[i] for i in chunk], args.pad_id, device)).float())
    out = np.empty((len(ids), outs[0].shape[1]), dtype=np.float32)
    out[order] = torch.cat(outs).cpu().numpy()  # one copy back at the end: the GPU never waits for the host
    return out


def decide(out):
    """Predictions from the head's outputs (N, n_out): class ids (the largest logit), or the value (N,)."""
    return out[:, 0].astype(np.float64) if out.shape[1] == 1 else out.argmax(axis=1)


# ----------------------------------------------------------------------------------------------------------------
# The kept classifier: written by finetune_glue.py --save_model, read by classify.py.

FORMAT = "cram-classifier/1"  # classifier.json's "format": what marks a folder as one of ours

TOKENIZER_FILES = ("meta.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def check_save_dir(path, tasks):
    """Refuse, before any training, a --save_model folder that holds something other than a saved classifier."""
    if len(tasks) != 1:
        raise CramError(f"--save_model keeps one task's classifier, but {len(tasks)} tasks would run: name one with "
                        "--tasks, or use --train_file")
    check_writable(no_link(path), "--save_model")  # its folder: the classifier is built beside it, then swapped in
    folder = Path(path).resolve()
    if folder in (Path.cwd(), *Path.cwd().parents) or folder.parent == folder:
        raise CramError(f"--save_model {path} is the folder you are in, or holds it: name a folder of its own, e.g. "
                        "models/mine")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir()) and not is_classifier(folder)):
        raise CramError(f"--save_model {path} holds something that is not a saved classifier: choose a new or empty "
                        "folder (a folder it did not write is never overwritten)")
    if is_classifier(folder):  # the same task's, trained again: replaced; another task's: kept
        if other := sorted({f.name for f in folder.iterdir()} - {"model.pt", "classifier.json", *TOKENIZER_FILES}):
            raise CramError(f"--save_model {path} holds files a saved classifier does not ({', '.join(other[:3])}): "
                            "the new one would replace them; move them, or name another folder")
        old = json.loads(text_of(folder / "classifier.json")).get("task")
        if old != tasks[0].name:
            raise CramError(f"--save_model {path} holds the classifier of another task ({old!r}, not "
                            f"{tasks[0].name!r}): name another folder, or delete that one first")
        print(f"note: --save_model {path} holds this task's saved classifier: the new one will replace it")


def is_classifier(folder):
    try:
        return json.loads(text_of(Path(folder) / "classifier.json")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def save_classifier(path, task, train, keep, cfg, tok, args):
    """The median seed's classifier as a folder: model.pt, classifier.json and the tokenizer files. Built beside the
    destination and swapped in whole: a crash leaves the previous classifier (or none), never half of one."""
    folder = Path(path).resolve()
    stage, old = (folder.with_name(f"{folder.name}.{kind}-{os.getpid()}") for kind in ("tmp", "old"))
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        write_classifier(stage, task, train, keep, cfg, tok, args)
    except BaseException:  # a full disk, Ctrl-C: the half-built folder goes, the old classifier stays
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if folder.exists():
        os.replace(folder, old)
    os.replace(stage, folder)
    shutil.rmtree(old, ignore_errors=True)


def write_classifier(stage, task, train, keep, cfg, tok, args):
    head = dict(n_out=len(task.labels or [0]), hidden=args.head_hidden, pool=args.pool, sep_id=tok.special["sep"],
                pair=task.columns[1] is not None)
    with written_whole(stage / "model.pt") as f:  # a full disk: the OSError, in one line
        torch.save({"config": asdict(cfg), "vocab_seq": list(args.vocab_seq), "head": head, "model": keep["state"],
                    "seen": torch.from_numpy(np.unique(row_keys(train)))}, f)  # classify.py: "training rows too"
    info = {"format": FORMAT, "task": task.name, "type": "regression" if task.labels is None else "classification",
            "labels": task.labels, "text_columns": [c for c in task.columns[:2] if c is not None],
            "label_column": task.columns[2], "metrics": task.metrics, "max_len": args.max_len,
            "eval_batch_size": args.eval_batch_size, "dev": keep["metrics"], "no_model": keep["baseline"],
            "seed": keep["seed"], "checkpoint": os.path.abspath(args.ckpt), "recipe": args.recipe}
    (stage / "classifier.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
    for name in TOKENIZER_FILES:  # whichever the encoder's tokenizer has: ours, or the paper's release
        if (Path(args.tokenizer_dir) / name).is_file():
            shutil.copyfile(Path(args.tokenizer_dir) / name, stage / name)


def load_classifier(path, device="cpu"):
    """(model, info, tok) of a saved classifier folder; anything else, or a damaged file, is one line."""
    folder = Path(path)
    if not folder.exists():
        raise CramError(f"no folder {path}: check the path (finetune_glue.py ... --save_model DIR made it)")
    if not (folder / "model.pt").is_file() or not (folder / "classifier.json").is_file():
        raise CramError(f"{path} is not a saved classifier (no model.pt and classifier.json): make one with "
                        "finetune_glue.py ... --save_model DIR")
    info = read_info(folder / "classifier.json")
    try:
        saved = torch.load(folder / "model.pt", map_location="cpu", weights_only=True)  # tensors and plain values
        (vocab, seq_len), head, cfg = saved["vocab_seq"], saved["head"], same_kinds(Config(**saved["config"]))
        check_config(cfg, model_only=True)  # what builds the model, as a checkpoint's (a crafted file: one line)
        if head["pool"] not in ("cls", "mean") or type(head["pair"]) is not bool or type(head["n_out"]) is not int or \
                type(head["sep_id"]) is not int or not 0 <= head["sep_id"] < vocab:  # else [SEP] counted in the mean
            raise ValueError(f"its head is {str(head)[:80]}: pool cls or mean, pair true or false, n_out a count, "
                             "sep_id a token id")
        model = built_for(saved["model"], cfg.n_layer, seq_len, lambda: GlueModel(  # no random init; NaN: refused
            CrammedBERT(cfg, vocab, seq_len), cfg.n_embd, n_out=head["n_out"], hidden=head["hidden"], dropout=0.0,
            pool=head["pool"], sep_id=head["sep_id"], pair=head["pair"]))
        model.load_state_dict(saved["model"], assign=True)  # the loaded tensors themselves become the weights
        seen = saved.get("seen")  # the training rows' keys (none before 2026-12-07): a sorted int64 vector
        if seen is not None and not (torch.is_tensor(seen) and seen.dtype == torch.int64 and seen.dim() == 1):
            raise ValueError(f"its training rows' keys are {type(seen).__name__}, not a vector of int64")
    except Exception as e:  # not a torch file, a crafted pickle, a field missing or of the wrong shape
        raise not_readable(folder / "model.pt", e, "a saved classifier", "fine-tune again with --save_model") from None
    if len(info["labels"] or [0]) != head["n_out"] or len(info["text_columns"]) != 1 + head["pair"] or \
            info["max_len"] > seq_len:
        raise CramError(f"{folder / 'classifier.json'} does not match model.pt (its labels, text columns or max_len, "
                        f"for {head['n_out']} outputs and {seq_len} positions): restore it, or fine-tune again")
    return model.to(device), {**info, "seen": seen}, load_tokenizer(folder, vocab)


def read_info(path):
    """classifier.json, checked field by field: a hand edit that breaks it is one line, not a crash later."""
    try:
        info = json.loads(text_of(path))
        if isinstance(info, dict):
            info.setdefault("no_model", {})  # a classifier kept before 2026-11-25 has no no-model scores
        names = lambda x, most: isinstance(x, list) and 1 <= len(x) <= most and all(  # noqa: E731
            isinstance(s, str) for s in x)
        checks = [("format", info["format"] == FORMAT),
                  ("labels", info["labels"] is None or names(info["labels"], math.inf) and len(info["labels"]) > 1),
                  ("text_columns", isinstance(info["text_columns"], list) and 1 <= len(info["text_columns"]) <= 2
                   and all(isinstance(c, str) or type(c) is int and c >= 0 for c in info["text_columns"])),  # CoLA: [3]
                  ("metrics", names(info["metrics"], len(METRICS)) and set(info["metrics"]) <= set(METRICS)),
                  ("label_column", isinstance(info["label_column"], (str, int))),
                  ("task", isinstance(info["task"], str)), ("dev", isinstance(info["dev"], dict)),
                  ("no_model", isinstance(info["no_model"], dict)),
                  ("max_len", type(info["max_len"]) is int and info["max_len"] >= 3),
                  ("eval_batch_size", type(info["eval_batch_size"]) is int and info["eval_batch_size"] >= 1)]
        if bad := next((key for key, ok in checks if not ok), None):
            raise ValueError(f"{bad!r} holds {str(info[bad])[:60]!r}")
        return info
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:  # JSON: ValueErrors
        raise CramError(f"{path} is damaged ({type(e).__name__}: {e}): restore it, or fine-tune again with "
                        "--save_model") from None
