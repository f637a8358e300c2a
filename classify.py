"""Use a fine-tuned classifier: label new text with the model finetune_glue.py kept with --save_model.

    python classify.py models/bbc "Shares in the firm rose by 10% after its profits beat forecasts"  # a line per text
    python classify.py models/rte "A man is playing a guitar. [SEP] A man plays music."    # a two-text task: A [SEP] B
    python classify.py models/bbc --input dev.csv --output dev.predicted.csv                 # a file: columns added

The folder (classifier.py writes and reads it) holds everything the classifier needs: model.pt (the encoder's and
the head's weights and settings, tensors and plain values only: loading it can never run code), classifier.json (the
task: its label names or "regression", its text columns, the max length, the dev metrics it reached and no model's)
and the tokenizer files of its encoder.
A text is encoded as fine-tuning encoded it (classifier.encode), the head's largest logit names the label and a
softmax gives its probability; a regression prints the value. With --input, each row is written back with the
columns prediction and probability added; if the file has the label column, the metric is printed at the end.
"""
import argparse
import csv
import io
import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from classifier import decide, encode, load_classifier, predict  # the fine-tuned model, and the kept folder
from cram import CramError, pick_device
from errors import check_writable, written_whole
from hardware import safe_console
from tasks import INTERVAL_WORDS, NUMBER, Split, Task, compute_metrics, excel_style, intervals, one_row, read_split
from tasks import FORMATS, count, match, read_table, row_name, seen_rows


# ----------------------------------------------------------------------------------------------------------------
# Labelling texts, and a file written back with the predictions.

def write_rows(path, columns, rows, like=None, header=True):
    """rows (dicts) to path as .csv, .tsv (tabs and newlines in a value become spaces; header=False: as headerless
    CoLA's), .json or .jsonl; atomic. A .csv as Excel wrote `like` (a .csv): its separator, and a byte-order mark if it
    had one or was Windows-1252 (Excel then reads the UTF-8 as such)."""
    kind, buf = Path(path).suffix.lower(), io.StringIO()
    separator, marked = excel_style(like) if like and Path(like).suffix.lower() == ".csv" else (",", False)
    if kind == ".csv":
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore",
                                delimiter=separator)
        if header:
            writer.writeheader()
        writer.writerows(rows)
    elif kind == ".tsv":
        clean = lambda v: re.sub(r"[\t\r\n]", " ", "" if v is None else str(v))  # noqa: E731
        buf.write("".join("\t".join(clean(r.get(c)) for c in columns) + "\n" for r in [dict(zip(columns, columns))]
                          * header + rows))
    elif kind == ".jsonl":
        buf.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    else:  # .json (label_file checked the name)
        buf.write(json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with written_whole(path, "w", encoding="utf-8-sig" if marked and kind == ".csv" else "utf-8", newline="") as f:
        f.write(buf.getvalue())


def classify(model, tok, info, split, run, device):
    """(labels or values, probabilities (None for a regression), predictions) of a Split's texts, decided as
    fine-tuning decided (classifier.predict: the same batches, so the same numbers)."""
    out = predict(model, encode(tok, split, info["max_len"]), run, device, progress=len(split.a) > 2000)
    preds, labels = decide(out), info["labels"]
    probs = torch.from_numpy(out).softmax(-1).max(-1).values.tolist() if labels else [None] * len(preds)
    return [labels[int(y)] if labels else float(y) for y in preds], probs, preds


def output_of(path, output, overwrite):
    """Where the labelled rows of path go (--output, else path's name + .predicted), checked before any work: a file
    that exists already is replaced only with --overwrite (it may be a user's notes), the input file never."""
    if os.path.isdir(path):
        raise CramError(f"{path} is a folder: name a data file in it")
    if Path(path).suffix.lower() not in FORMATS:  # dev.cvs: the input's name is the slip, not --output's
        raise CramError(f"--input {path} must end in .csv, .tsv, .json or .jsonl (check the name)")
    output = output or str(Path(path).with_suffix(".predicted" + Path(path).suffix))
    if Path(output).suffix.lower() not in FORMATS:
        raise CramError(f"--output {output} must end in .csv, .tsv, .json or .jsonl")
    if Path(output).resolve() == Path(path).resolve():
        raise CramError(f"--output {output} is the input file: choose another name (the input stays as it is)")
    if os.path.lexists(output) and not overwrite:
        raise CramError(f"{output} exists: name another --output, or add --overwrite to replace it")
    if os.path.isdir(output):
        raise CramError(f"--output {output} is a folder: name a file")
    check_writable(output, "--output")
    return output


def label_file(path, output, task, info, labeller):
    """Every row of the file written back, in its place, with prediction and probability added (empty where a text is
    empty; a row that could not be read, its fields too), in the output's format (output_of checked the name); the
    metric where the file has the label column. A headerless file (CoLA's TSV): numbered columns, as in training."""
    header = not isinstance(task.columns[0], int)  # CoLA's TSV has none: its columns are numbers, its rows all data
    columns, rows = read_table(path, header=header)
    task = replace(task, columns=tuple(match(columns, c) for c in task.columns))  # the file's names: Text for text
    split = read_split(task, path, labelled=False)  # the rows fine-tuning would have read: a warning names the rest
    shown, probs, preds = labeller(split)
    done = {n: i for i, (n, _) in enumerate(split.rows)}
    given = {str(r[task.columns[2]]).strip(): r[task.columns[2]] for _, r in rows  # JSON: 1 stays 1, true true
             if isinstance(r, dict) and r.get(task.columns[2]) is not None and not isinstance(r[task.columns[2]], str)}
    labelled = [{**(r if isinstance(r, dict) else {}),  # a row it could not read: empty (read_split warned)
                 "prediction": "" if n not in done else given.get(shown[done[n]], shown[done[n]]),
                 **({"probability": "" if n not in done else round(probs[done[n]], 6)} if info["labels"] else {})}
                for n, r in rows]
    added = ["prediction", *(["probability"] if info["labels"] else [])]
    write_rows(output, [c for c in columns if c not in added] + added, labelled, like=path, header=header)
    print(f"wrote {len(labelled)} rows to {output}, {len(done)} with a prediction"
          + (f" (the other {len(labelled) - len(done)}: no usable text)" if len(done) < len(labelled) else ""))
    if task.columns[2] not in columns:  # a file of new texts, or its true labels under another name
        print(f"no metric: {path} has no column {task.columns[2]!r}; if another holds its true labels, name it with "
              "--label_column")
    score(task, info, split, preds, path)
    return shown


def score(task, info, split, preds, path):
    """The task's metrics on the rows whose label column holds a label (none if the file has no such column)."""
    rows = split.rows
    truth = [("" if row.get(task.columns[2]) is None else str(row[task.columns[2]])).strip() for _, row in rows]
    known = [i for i, y in enumerate(truth) if y]
    if open_quote := [i for i in known if "\n" in truth[i]]:  # a quote left open in a label: as fine-tuning did
        print(f"warning: {path}: left out of the metric: {count(len(open_quote), 'row')} whose label runs over "
              f"several lines (a quote left open? the first: {row_name(path, rows[open_quote[0]][0])})",
              file=sys.stderr)
        known = [i for i in known if "\n" not in truth[i]]
    if task.labels is None and (odd := [i for i in known if not NUMBER.fullmatch(truth[i])]):  # as fine-tuning did
        print(f"warning: {path}: left out of the metric: {count(len(odd), 'row')} whose label is not a number (the "
              f"first: {row_name(path, rows[odd[0]][0])}, {truth[odd[0]]!r})", file=sys.stderr)
        known = [i for i in known if NUMBER.fullmatch(truth[i])]
    if not known:
        return
    ids, labels = {name: i for i, name in enumerate(task.labels or ())}, []
    for i in known:
        try:
            labels.append(ids[truth[i]] if task.labels else float(truth[i]))
        except (KeyError, ValueError):
            cased = match(task.labels or (), truth[i])  # Negative for negative: the classifier's own case
            print(f"no metric: the label {truth[i][:40]!r} in {path} (column {task.columns[2]!r}) is not one the "
                  f"classifier knows: {list(task.labels) if task.labels else 'a number'}"
                  + f" (write it {cased!r}, as the training file did)" * (cased != truth[i]))
            return
    labels = np.array(labels)

    def listed(metrics):
        return ", ".join(f"{k} {v:.2f}" for k, v in metrics.items())
    scores, spread = compute_metrics(task, preds[known], labels), intervals(task, preds[known], labels)[0]
    print(f"{task.name}: " + ", ".join(f"{k} {v:.2f} [{spread[k][0]:.1f}, {spread[k][1]:.1f}]" for k, v in
                                       scores.items()) + f" on the {len(known)} labelled rows of {path} (fine-tuning's "
          f"dev set: {listed(info['dev'])}" + f"; no model there: {listed(info['no_model'])}" * bool(info["no_model"])
          + f")\n[low, high]: the {INTERVAL_WORDS}"
          + f"\n{one_row(task, preds[known], labels, 'row') or ''}".rstrip())  # a small set: what one row is worth
    if info["seen"] is not None and (same := int(seen_rows(split, info["seen"].numpy())[known].sum())):
        print(f"note: {same} of these {len(known)} rows are the classifier's training rows: on those the score "
              "measures memory, not how it does on new text", file=sys.stderr)


def texts_split(texts, pair):
    """Command-line texts as a Split; a two-text task's as "first [SEP] second" (or the tokenizer's own separator)."""
    sep = re.compile(r"\s*\[sep\]\s*|\s*<sep>\s*", re.IGNORECASE)
    parts = [sep.split(t) if pair else [t] for t in texts]
    for n, (text, p) in enumerate(zip(texts, parts), 1):
        if pair and len(p) != 2:
            raise CramError(f"text {n} ({text[:60]!r}) is not \"first [SEP] second\": this classifier reads two texts")
        if not all(x.strip() for x in p):
            raise CramError(f"text {n} is empty{' on one side of [SEP]' * pair}: give the classifier words to read")
    return Split([p[0] for p in parts], [p[1] for p in parts] if pair else None, None, None)


def main(argv=None):
    p = argparse.ArgumentParser(description="Label text with a classifier kept by finetune_glue.py --save_model.",
                                allow_abbrev=False)
    p.add_argument("model", help="the folder written by finetune_glue.py --save_model")
    p.add_argument("texts", nargs="*", help="texts to label; a two-text task takes \"first [SEP] second\"")
    p.add_argument("--input", help="a .csv, .tsv, .json or .jsonl file to label, row by row")
    p.add_argument("--output", help="where the labelled rows go (default: INPUT's name + .predicted)")
    p.add_argument("--overwrite", action="store_true", help="replace --output if it exists (else: refused)")
    p.add_argument("--text_columns", help="the input's text column(s), a or a,b (default: the classifier's)")
    p.add_argument("--label_column", help="a column of true labels to score against (default: the classifier's)")
    p.add_argument("--batch_size", type=int, help="texts per forward pass (default: fine-tuning's evaluation batch)")
    p.add_argument("--device", default="auto", help="auto (the default: cuda, else mps, else cpu), cuda, cpu or mps")
    args = p.parse_args(argv)
    safe_console()  # a label or text the console's encoding lacks is printed escaped, never raised (Windows: cp1252)
    try:
        if bool(args.texts) == bool(args.input):
            raise CramError("give texts to label, or --input FILE (one of the two)")
        if file := next((t for t in args.texts if os.path.isfile(t) and Path(t).suffix.lower() in FORMATS),
                        None):  # classify.py DIR dev.csv
            raise CramError(f"{file!r} is a file, not a text: label its rows with --input {file}")
        if args.batch_size is not None and args.batch_size < 1:
            raise CramError(f"--batch_size must be >= 1 (got {args.batch_size})")
        output = args.input and output_of(args.input, args.output, args.overwrite)
        device = pick_device(args.device)
        model, info, tok = load_classifier(args.model, device)
        labels, pair = info["labels"], len(info["text_columns"]) == 2
        numbered = type(info["text_columns"][0]) is int  # CoLA's headerless TSV: its columns by number, flags "3"
        column = lambda c: int(c) if numbered and c.strip().isdigit() else c.strip()  # noqa: E731
        text_cols = [column(c) for c in args.text_columns.split(",")] if args.text_columns else info["text_columns"]
        if len(text_cols) != len(info["text_columns"]):
            raise CramError(f"--text_columns names {len(text_cols)} column(s), but the classifier reads "
                            f"{len(info['text_columns'])} text(s) per example")
        label = column(args.label_column) if args.label_column else info["label_column"]
        task = Task(info["task"], (*text_cols, None)[:2] + (label,),
                    labels and tuple(labels), tuple(info["metrics"]), "", {})
        run = argparse.Namespace(eval_batch_size=args.batch_size or info["eval_batch_size"], pad_id=tok.special["pad"])
        labeller = lambda split: classify(model, tok, info, split, run, device)  # noqa: E731
        if args.input:
            return label_file(args.input, output, task, info, labeller)
        shown, probs, _ = labeller(texts_split(args.texts, pair))
        for text, label, q in zip(args.texts, shown, probs):
            print(f"{label}\t{q:.3f}\t{text}" if labels else f"{label:.4f}\t{text}")
        return shown
    except (CramError, OSError) as e:  # OSError: no permission, a full disk
        sys.exit(f"classify.py: error: {e}")


if __name__ == "__main__":
    main()
