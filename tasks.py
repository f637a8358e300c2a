"""Fine-tuning tasks, GLUE's and your own, as one description: the columns, the label set, the metrics.

    from tasks import pick_tasks, load_task     # finetune_glue.py: GLUE's tasks or your own, then their rows

GLUE's eight tasks (the paper's: WNLI left out, as BERT did) are instances of Task (GLUE below), read from the official
TSVs (--glue_dir) or the Hugging Face hub; a user's task is made from the files themselves by the conventions of
Hugging Face's example script run_glue.py (file_task): a .csv, .tsv, .json or .jsonl file with a header, the text in
sentence1 + sentence2, sentence or text (or --text_columns), the label in label (or --label_column); float labels make
a regression, anything else classes named by the label values.
Then the scores: each task's metrics, their intervals over the dev rows, and the table and files finetune_glue.py
writes (publish).
"""
import contextlib
import csv
import hashlib
import io
import itertools
import json
import math
import os
import re
import shutil
import sys
import time
import urllib.request
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from errors import CramError, hub_offline, written_whole
from tokenizer import unicode_text

HUB_NAME, HUB_URL = "nyu-mll/glue", "https://huggingface.co"
BINARY, NLI2, NLI3 = ("0", "1"), ("entailment", "not_entailment"), ("entailment", "neutral", "contradiction")


@dataclass
class Task:
    """What fine-tuning knows of a task, GLUE's or one described by a user's files: columns, labels, metrics."""
    name: str        # glue.md's column, predictions/<evaluation set>.tsv, a saved classifier's task
    columns: tuple   # (text A, text B or None, label): header names, or indices for headerless CoLA
    labels: tuple    # label names, class ids in this order (GLUE's as on the hub); None: a regression on floats
    metrics: tuple   # dev metrics (compute_metrics), the table's first
    train: str       # the training file ("": GLUE from the hub)
    evals: dict      # evaluation set -> (title, dev file; from the hub: its split's suffix): MNLI has two sets
    hub: tuple = ()  # GLUE: the hub's text columns (a, b); a user's task has none


# GLUE: task -> (TSV folder, TSV columns (a, b, label): header names, or indices for headerless CoLA, hub columns,
#                label names in the hub's id order (None: STS-B's float scores), metrics (the paper's table: first))
GLUE = {"cola": ("CoLA", (3, None, 1), ("sentence", None), BINARY, ("mcc", "acc")),
        "sst2": ("SST-2", ("sentence", None, "label"), ("sentence", None), BINARY, ("acc",)),
        "mrpc": ("MRPC", ("#1 String", "#2 String", "Quality"), ("sentence1", "sentence2"), BINARY, ("f1", "acc")),
        "stsb": ("STS-B", ("sentence1", "sentence2", "score"), ("sentence1", "sentence2"), None,
                 ("pearson", "spearman")),
        "qqp": ("QQP", ("question1", "question2", "is_duplicate"), ("question1", "question2"), BINARY, ("f1", "acc")),
        "mnli": ("MNLI", ("sentence1", "sentence2", "gold_label"), ("premise", "hypothesis"), NLI3, ("acc",)),
        "qnli": ("QNLI", ("question", "sentence", "label"), ("question", "sentence"), NLI2, ("acc",)),
        "rte": ("RTE", ("sentence1", "sentence2", "label"), ("sentence1", "sentence2"), NLI2, ("acc",))}
TEXT_COLUMNS = (("sentence1", "sentence2"), ("sentence",), ("text",))  # run_glue.py's defaults, in this order
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")  # a label a regression reads: 3, -0.5, .5, 1e-3
INTEGER = re.compile(r"[-+]?\d+")  # a number that may name a class: labels 0, 1, 2 are classes; 0.5 is a score
FORMATS = (".csv", ".tsv", ".json", ".jsonl")  # the data files read_table reads, and classify.py writes
SPLIT_NAMES = {"train", "training", "dev", "valid", "validation", "val", "test"}  # a file stem that names no task
Split = namedtuple("Split", "a b labels rows")  # texts A, texts B (None: one text), labels (np.ndarray), (line, row)


def row_keys(split):
    """An 8-byte fingerprint of each row's text(s), as int64: what tells a training row when it comes again (a saved
    classifier keeps its training rows' for classify.py). blake2b: the same on every machine, as hash() is not."""
    texts = zip(split.a, split.b or [None] * len(split.a))
    return np.array([int.from_bytes(hashlib.blake2b(json.dumps(pair).encode(), digest_size=8).digest(), "little",
                                    signed=True) for pair in texts], dtype=np.int64)


def seen_rows(split, keys):
    """Which of split's rows have one of keys (row_keys of the training rows), as booleans: a score on those measures
    memory, not how the model does on new text."""
    return np.isin(row_keys(split), keys)


def glue_task(name, glue_dir):
    """A GLUE task: its TSVs in glue_dir/<folder>/ (train.tsv, dev[_matched|_mismatched].tsv), else the hub's."""
    folder, cols, hub, labels, metrics = GLUE[name]
    path = lambda file: os.path.join(glue_dir, folder, file) if glue_dir else ""  # noqa: E731
    sets = {"mnli_m": ("MNLI-m", "_matched"), "mnli_mm": ("MNLI-mm", "_mismatched")} if name == "mnli" else {
        name: (folder, "")}  # MNLI's two dev sets
    return Task(name, cols, labels, metrics, path("train.tsv"),
                {s: (title, path(f"dev{suffix}.tsv") or suffix) for s, (title, suffix) in sets.items()}, hub)


def file_task(args):
    """A task described by the user's files, by run_glue.py's conventions: the text columns (--text_columns, else
    sentence1 + sentence2, sentence or text), --label_column; a regression if most labels are numbers and one is not
    written as a whole number (2.5, 1e-3), else classes named by the label values (sorted). The labels are those of
    the rows read_split will use."""
    columns, rows = read_table(args.train_file)
    if not rows:
        raise no_rows(args.train_file, columns)
    if args.text_columns:  # match: a header's Text or LABEL is the column text or label
        names = [match(columns, c.strip()) for c in args.text_columns.split(",")]
        if not 1 <= len(names) <= 2 or not all(names):
            raise CramError(f"--text_columns takes one or two column names, a or a,b (got {args.text_columns!r})")
    elif not (names := next((found for found in ([match(columns, x) for x in c] for c in TEXT_COLUMNS)
                             if set(found) <= set(columns)), None)):
        raise CramError(f"{args.train_file} has none of the columns sentence1 + sentence2, sentence or text; its "
                        f"columns are {columns}: name the text with --text_columns a[,b] (or, if that first line "
                        "is a row of data, add a header line that names the columns)")
    cols = (names[0], names[1] if len(names) == 2 else None, match(columns, args.label_column))
    check_columns(args.train_file, columns, cols)
    read = [c for c in cols if c is not None]
    why = [unusable(r, read) for _, r in rows]  # None for the rows read_split keeps
    given = [str(r[cols[2]]).strip() for (_, r), bad in zip(rows, why) if not bad]
    if not given:
        raise no_usable_rows(args.train_file, f"{row_name(args.train_file, rows[0][0])}: {why[0]}")
    distinct = set(given)
    numbers = {v for v in distinct if NUMBER.fullmatch(v) and math.isfinite(float(v))}  # 1e999: a word here
    if 2 * sum(v in numbers for v in given) > len(given) and any(not INTEGER.fullmatch(v) for v in numbers):
        labels, metrics = None, ("pearson", "spearman", "rmse")  # a stray "N/A": its row skipped (read_split), named
    else:
        labels = tuple(sorted(distinct, key=lambda v: (v not in numbers, float(v) if v in numbers else 0, v)))
        metrics = ("acc", "macro_f1") + ("mcc",) * (len(labels) == 2)
        if len(labels) < 2:
            raise CramError(f"{args.train_file}: every usable row has the label {next(iter(distinct), '')!r}: a "
                            "classifier needs two classes at least (a regression: labels not written whole, 2.5)")
    stem = Path(args.train_file).stem
    name = args.task_name or (stem if stem.lower() not in SPLIT_NAMES else Path(args.train_file).resolve().parent.name)
    return Task(name, cols, labels, metrics, args.train_file, {name: (name, args.validation_file)})


# ----------------------------------------------------------------------------------------------------------------
# Data: rows of CSV, TSV or JSON files (or GLUE from the hub) as a task's texts and labels.

NOTED = set()  # the files read_table has said are Windows-1252
BY_OBJECT = set()  # the .json files whose rows read_table numbers by object (a list of them), not by line


def row_name(path, n):
    """How a message names row n of a file read by read_table: "line 7", or "object 7" in a JSON list."""
    return f"{'object' if path in BY_OBJECT else 'line'} {n}"


def pick_tasks(args):
    """The tasks to run, GLUE's (--tasks, in the table's order) or the one of --train_file, each checked in one line."""
    if args.train_file:
        if args.tasks or not args.validation_file:
            raise CramError("--train_file needs --validation_file (its evaluation rows), and no --tasks: your task "
                            "and GLUE's run apart")
        return [file_task(args)]
    if args.validation_file or args.text_columns or args.task_name:
        raise CramError("--validation_file, --text_columns and --task_name describe your own task: add --train_file")
    wanted = [t.strip().lower() for t in (args.tasks or ",".join(GLUE)).split(",") if t.strip()]
    if unknown := next((t for t in wanted if t not in GLUE), None):
        raise CramError(f"unknown task {unknown!r}: choose from {','.join(GLUE)} (wnli is left out, as in the paper)")
    return [glue_task(t, args.glue_dir) for t in GLUE if t in wanted]


def not_text(raw):
    """What a file that is not text is, by its first bytes (an Excel workbook renamed .csv, say); None: text."""
    kinds = {b"PK\x03\x04": "a zip archive, not text (an Excel workbook, .xlsx?)", b"%PDF": "a PDF, not text",
             b"\x1f\x8b": "gzip-compressed, not text", b"\xd0\xcf\x11\xe0": "an old Excel workbook (.xls), not text"}
    if what := next((w for magic, w in kinds.items() if raw.startswith(magic)), None):
        return what
    if raw[:200].count(0) > len(raw[:200]) // 4 and not raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 without its byte-order mark"  # every other byte 0: ASCII in UTF-16
    return None


def windows_or_utf8(line):
    """(text, 1 if read as Windows-1252 else 0) of one line's bytes; bytes no Windows text has become U+FFFD (each
    row holding one is skipped, and named)."""
    for encoding, guessed in (("utf-8", 0), ("cp1252", 1)):
        with contextlib.suppress(UnicodeDecodeError):
            return line.decode(encoding), guessed
    return line.decode("utf-8", errors="replace"), 1


def excel_style(path):
    """(separator, byte-order mark?) of a .csv, to write one back as it came: ";" where its first line holds ";" and
    no "," (European Excel), a mark where it had one or is not UTF-8 (Excel's "CSV", Windows-1252)."""
    raw = Path(path).read_bytes()
    separator = csv_separator(raw.split(b"\n", 1)[0].decode("latin-1"))  # ";" and "," are the same byte in both
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return separator, True
    return separator, raw.startswith(b"\xef\xbb\xbf")


def csv_separator(first_line):
    """";" where a CSV's first line holds ";" and no "," (European Excel), else ","."""
    return ";" if ";" in first_line and "," not in first_line else ","


def read_table(path, header=True, guess_encoding=True):
    """A file's (columns, [(line, {column: value}, or why the row is unusable)]). CSV as Excel writes it (quoted
    fields may hold commas and newlines; `;` between fields, as European Excel writes them, is seen in the header);
    TSV split on tabs only, quotes are text (GLUE's; headerless CoLA's columns are indices); .json (a list of objects,
    or an object holding one: its rows are numbered by object, not line) and .jsonl."""
    kind = Path(path).suffix.lower()
    text = decode(path, kind, guess_encoding)
    if kind in (".json", ".jsonl"):
        return json_rows(path, text, kind)
    records, last = csv_records(path, text, kind)  # [(first line, fields)], {a row's first line: its last}
    columns = ([c.strip() for c in records.pop(0)[1]] if header else list(range(len(records[0][1])))) if records else []
    if kind == ".csv" and len(columns) == 1 and "\t" in columns[0]:
        raise CramError(f"{path}: its header holds tabs, not commas: a tab-separated file must be named .tsv")
    if kind == ".tsv" and len(columns) == 1 and re.fullmatch(r"[\w.#-]+(,[\w.#-]+)+", str(columns[0])):
        raise CramError(f"{path}: its header holds commas, not tabs: a comma-separated file must be named .csv")
    return columns, [(n, dict(zip(columns, fields)) if len(fields) == len(columns) else
                      f"{count(len(fields), 'field')}, expected {len(columns)}" + (f"; a quote opened here runs to "
                      f"line {last[n]}: read as one row" if last[n] > n else ""))
                     for n, fields in records]


def decode(path, kind, guess_encoding=True):
    """A data file's text, refused in one line where it is no data file: UTF-8, with a byte-order mark or CRLF, or
    UTF-16 with its mark; lines that are neither are read as Windows-1252, Excel's "CSV" on Windows, and said so
    (guess_encoding; GLUE's own files: such rows are skipped, and named)."""
    if os.path.isdir(path):
        raise CramError(f"{path} is a folder: name a data file in it")
    if kind not in FORMATS:
        raise CramError(f"{path}: a data file must be .csv, .tsv, .json or .jsonl (not {kind or 'no extension'})")
    if not os.path.isfile(path):
        raise CramError(f"missing {path}: check the path")
    with open(path, "rb") as f:
        raw = f.read()
    if what := not_text(raw):
        raise CramError(f"{path} is {what}: save it as text in UTF-8 (Excel: \"CSV UTF-8\")")
    try:  # UTF-16 with its mark: Excel's "Unicode Text", PowerShell 5.1's `>`
        return raw.decode("utf-16") if raw.startswith((b"\xff\xfe", b"\xfe\xff")) else raw.decode("utf-8-sig")
    except UnicodeDecodeError:  # -sig: a UTF-8 byte-order mark (MRPC's, Excel's "CSV UTF-8")
        if not guess_encoding:  # GLUE's own files: a row holding such bytes is skipped, and named
            return raw.decode("utf-8-sig", errors="replace")
    # line by line: lines pasted in from another tool keep their UTF-8, the rest read as Windows-1252
    lines = [windows_or_utf8(x) for x in raw.removeprefix(b"\xef\xbb\xbf").splitlines(keepends=True)]
    guessed = [n for n, (_, windows) in enumerate(lines, 1) if windows]
    if path not in NOTED:  # once a file: finetune_glue.py reads a training file twice (columns, then rows)
        NOTED.add(path)
        print(f"note: {path}: {count(len(guessed), 'line')} of {len(lines):,} not UTF-8 (the first: line "
              f"{guessed[0]}): read as Windows-1252, what Excel's \"CSV\" saves on Windows (\"CSV UTF-8\" avoids "
              "the guess)", file=sys.stderr)
    return "".join(x for x, _ in lines)


def json_rows(path, text, kind):
    """read_table of a .json (a list of objects, or an object holding one: {"data": [...]}, the datasets library's
    field=) or a .jsonl (one object a line)."""
    try:
        whole = json.loads(text, object_pairs_hook=KeyTwice.check)
    except ValueError:
        whole = None  # JSON Lines: a second object after the first
    tables = [k for k, v in whole.items() if isinstance(v, list) and (v or len(whole) == 1) and all(
        isinstance(x, dict) for x in v)] if isinstance(whole, dict) else []  # {"data": [rows]}, {"train": [...], ...}
    if len(tables) == 1:
        whole = whole[tables[0]]
    elif tables:
        raise CramError(f"{path} holds {len(tables)} lists of rows ({', '.join(tables)}): one file a list")
    elif isinstance(whole, dict) and len(whole) > 1 and all(isinstance(v, (dict, list)) for v in whole.values()):
        raise CramError(f"{path} holds a dict of columns (pandas' to_json() writes that): save a list of rows, "
                        "to_json(path, orient='records')")
    elif isinstance(whole, dict) and kind == ".json":
        raise CramError(f"{path} holds one JSON object: a list of objects, one a row (.json), or one object a "
                        "line (.jsonl)")
    records = list(enumerate(whole, 1)) if isinstance(whole, list) else []  # numbered by object
    if isinstance(whole, list):
        BY_OBJECT.add(path)
    else:
        BY_OBJECT.discard(path)
    for n, line in [] if isinstance(whole, list) else [(n, x) for n, x in enumerate(text.split("\n"), 1) if x.strip()]:
        try:
            records.append((n, json.loads(line, object_pairs_hook=KeyTwice.check)))
        except ValueError as e:
            raise CramError(f"{path} line {n} is not JSON ({e.msg}, column {e.colno}): one object a line "
                            "(.jsonl), or a list of objects (.json)") from None
    columns = list(dict.fromkeys(k for _, r in records if isinstance(r, dict) for k in r))
    return columns, [(n, r if isinstance(r, dict) else "not a JSON object") for n, r in records]


def csv_records(path, text, kind):
    """A CSV's or TSV's rows as ([(first line, fields)], {first line: last line}): a quoted CSV field may hold line
    ends, so a row may span lines. TSV: split on tabs only, a quote is text."""
    if kind == ".tsv":
        records = [(n, line.rstrip("\r").split("\t")) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
        return records, {n: n for n, _ in records}
    reader = csv.reader(io.StringIO(text, newline=""),  # "": a quoted field keeps its line ends
                        delimiter=csv_separator(text.split("\n", 1)[0]))
    records, last, end = [], {}, 0
    try:
        for fields in reader:
            start, end = end + 1, reader.line_num
            if any(f.strip() for f in fields):
                records.append((start, fields))
                last[start] = end
    except csv.Error as e:  # a NUL byte, a stray carriage return: not a text file
        raise CramError(f"{path} line {reader.line_num} is not CSV ({e}): save it as CSV UTF-8") from None
    return records, last


def valid(value):
    """A JSON value with every string in it as valid Unicode (tokenizer.unicode_text), lists walked."""
    return unicode_text(value) if isinstance(value, str) else [valid(v) for v in value] if isinstance(value, list) \
        else value


class KeyTwice(dict):
    """A JSON object that names a key twice ({"text": "a", "text": "b"}), which json would read as its last value: a
    row that names a column the task reads twice is skipped and named instead (unusable), as a CSV header naming a
    read column twice is refused (check_columns)."""

    @classmethod
    def check(cls, pairs):  # json.loads' object_pairs_hook
        pairs = [(unicode_text(k), valid(v)) for k, v in pairs]  # "\ud800": U+FFFD (objects inside: done already)
        keys = [k for k, _ in pairs]
        if len(set(keys)) == len(keys):
            return dict(pairs)
        twice = cls(pairs)
        twice.keys_twice = {k for k in keys if keys.count(k) > 1}
        return twice


def no_rows(path, columns):
    """The one-line error for a file with no rows: empty, or a header alone."""
    what = "holds its header and no rows" if columns else "is empty"
    return CramError(f"{path} {what}: it needs a header line and rows")


def match(columns, name):
    """A file's own name for a task's column: the name, else the one that differs from it only in case (Text)."""
    if name is None or name in columns or not isinstance(name, str):
        return name
    return next((c for c in columns if isinstance(c, str) and c.lower() == name.lower()), name)


def no_usable_rows(path, first):
    """The one-line error for a file none of whose rows a task can use; first: why its first row cannot."""
    return CramError(f"{path} has no usable rows ({first}): it is not this task's file, or damaged")


def check_columns(path, columns, wanted):
    """Refuses a file whose header lacks a column the task reads, or names one twice."""
    names = [str(c).lower() for c in columns]  # Text and text: one name to match (tasks.match)
    if twice := next((c for c in wanted if c is not None and names.count(str(c).lower()) > 1), None):
        raise CramError(f"{path}: its header names the column {twice!r} twice (in any case): rename one of them (or, "
                        "if that first line is a row of data, add a header line)")
    if missing := [c for c in wanted if c is not None and c not in columns]:
        raise CramError(f"{path} has no column {missing[0]!r}; its columns are {str(columns)[:200]}: another task's "
                        "file? Name the columns with --text_columns a[,b] and --label_column (or, if that first line "
                        "is a row of data, add a header line)")


def read_split(task, path, limit=0, labelled=True):
    """A task's file as a Split: texts, labels as class ids (floats for a regression). A row that cannot be used (a
    wrong field count, bytes that are not UTF-8, an empty text or label, a label a GLUE task does not have) is
    skipped, all of them named in one warning, as the real QQP's few broken lines are. A user's file may not hold a
    label its training file lacks: one line names it."""
    columns, rows = read_table(path, header=not isinstance(task.columns[0], int), guess_encoding=not task.hub)
    if not rows:
        raise no_rows(path, columns)
    wanted = [match(columns, c) for c in task.columns[:3 if labelled else 2] if c is not None]
    check_columns(path, columns, wanted)
    if match(columns, task.columns[2]) in [match(columns, c) for c in task.columns[:2] if c is not None]:
        raise CramError(f"the label column {task.columns[2]!r} is also a text column: the model would read its answer")
    a, b, y, kept, bad = [], [], [], [], []
    for n, row in rows:
        try:
            if why := unusable(row, wanted, labelled):
                raise ValueError(why)
            values = [str(row[c]) for c in wanted]  # (text A, text B where the task has one, label where labelled)
            y.append(label_of(task, values[-1], path, n) if labelled else None)
        except ValueError as e:
            bad.append(f"{row_name(path, n)}: {e}")
            continue
        a.append(values[0])
        b.append(values[1] if task.columns[1] is not None else None)
        kept.append((n, row))
        if len(kept) == limit:
            break
    if bad:
        print(f"warning: {path}: skipped {count(len(bad), 'unusable row')} ({'; '.join(bad[:3])}"
              f"{'; ...' * (len(bad) > 3)})", file=sys.stderr)
    if not kept:
        raise no_usable_rows(path, bad[0])
    if task.labels and not task.hub:
        warn_open_quote(task, path, kept, a)
    return Split(a, None if task.columns[1] is None else b, np.array(y) if labelled else None, kept)


def unusable(row, columns, labelled=True):
    """Why a row of read_table cannot train or score a task that reads these columns (the label last, if labelled):
    read_table's reason, a JSON list or object for a text, bytes that are not UTF-8, an empty field, a label that runs
    over several lines. None: the row can be used."""
    if isinstance(row, str):
        return row
    if twice := next((c for c in columns if c in getattr(row, "keys_twice", ())), None):
        return f"its object names the key {twice!r} twice"
    if nested := next((c for c in columns if isinstance(row.get(c), (dict, list))), None):
        return f"{nested!r} holds a JSON {'object' if isinstance(row[nested], dict) else 'list'}, not text or a number"
    values = [("" if row.get(c) is None else str(row[c])) for c in columns]
    if "\ufffd" in "".join(values):  # what errors="replace" made of bytes that are not UTF-8
        return "not UTF-8 text (from Excel: save as CSV UTF-8)"
    if empty := next((c for c, v in zip(columns, values) if not v.strip()), None):
        return f"{empty!r} is empty"
    if labelled and "\n" in values[-1]:  # a quote opened in the label runs on over the rows after it
        first, lines = values[-1].split("\n")[0], values[-1].rstrip().count("\n") + 1
        return f"the label {first[:30]!r}... runs on over {lines} lines: a quote left open?"
    return None


def label_of(task, text, path, n):
    """The class id (a float for a regression) of row n's label. ValueError: the row is skipped (GLUE's broken labels, a
    regression's "N/A"); CramError: the file is refused, as a user's evaluation file holds a class the training
    file lacks."""
    label = text.strip()
    if task.labels and label in task.labels:
        return task.labels.index(label)
    if task.labels and task.hub:
        raise ValueError(f"unknown label {label!r}")
    if task.labels:
        number = NUMBER.fullmatch(label) and not INTEGER.fullmatch(label) and all(
            NUMBER.fullmatch(name) for name in task.labels)  # 0.25 or 1.0 beside classes 0 and 1 (file_task's rule)
        whole = number and float(label).is_integer() and str(int(float(label))) in task.labels
        raise CramError(f"{path} {row_name(path, n)}: the label {label[:40]!r} is not in the training file's usable "
                        f"rows, whose labels are {list(task.labels)[:20]}: fix the label, or train with it" +
                        (f" (a class? write it {int(float(label))}, as the training file does)" if whole else
                         " (a regression? write the training labels with a point: 1.0)" if number else
                         f" (write it {cased!r}, as the training file does)" if (cased := match(task.labels, label))
                         != label else ""))
    if not NUMBER.fullmatch(label) or not math.isfinite(float(label)):
        raise ValueError(f"the label {label!r} is not a {'finite ' * bool(NUMBER.fullmatch(label))}number")
    return float(label)


def warn_open_quote(task, path, kept, texts):
    """Names texts holding lines that end like a row (",sport" and a line break): rows swallowed by a quote that a
    later quote closed, where the field counts look right."""
    ends = re.compile(r"([,;\t] *(?:" + "|".join(map(re.escape, task.labels)) + r")) *(?=\r?\n)")
    if inside := [(n, found) for (n, _), t in zip(kept, texts) if "\n" in t and (found := ends.findall(t))]:
        n, found = inside[0]
        print(f"warning: {path}: the text of line {n} holds {count(len(found), 'line')} that end like a row "
              f"({found[0][0] + found[0][1:].strip()!r}): a quote left open there? ({count(len(inside), 'text')} "
              "in all)", file=sys.stderr)


def read_hub(task, split, limit=0):
    """A GLUE split from the Hugging Face hub as a Split (rows labelled -1 have no label and are dropped)."""
    if not hub_offline():  # fail in seconds, not after the hub client's long retries
        try:
            urllib.request.urlopen(HUB_URL, timeout=10).close()
        except OSError as e:
            raise CramError(f"cannot reach the Hugging Face hub ({e}): pass --glue_dir DIR with the GLUE TSVs")
    import datasets  # slow to import, and only needed here
    try:
        ds = datasets.load_dataset(HUB_NAME, task.name, split=split)
    except Exception as e:
        raise CramError(f"cannot load {HUB_NAME} {task.name} {split} from the hub ({type(e).__name__}): pass "
                        "--glue_dir DIR with the GLUE TSVs") from None
    ds = (ds.select(range(min(limit, len(ds)))) if limit else ds).filter(lambda y: y != -1, input_columns="label")
    # list(): datasets >= 4 gives a column as a lazy Column, which encode cannot add to a list
    return Split(*(list(ds[col]) if col else None for col in task.hub), np.array(list(ds["label"])), None)


def load_task(task, args):
    """(train Split, {evaluation set: Split}) from the task's files, or GLUE from the hub's splits."""
    if not task.train:
        return (read_hub(task, "train", args.max_train),
                {s: read_hub(task, f"validation{suffix}") for s, (_, suffix) in task.evals.items()})
    train = read_split(task, task.train, args.max_train)
    if task.labels and not task.hub and (absent := set(range(len(task.labels))) - set(train.labels.tolist())):
        raise CramError(f"{task.train}: no usable training row is labelled {task.labels[min(absent)]!r} in the first "
                        f"{len(train.a)} (--max_train {args.max_train}; 0: all): shuffle the file, or raise it")
    devs = {s: read_split(task, f) for s, (_, f) in task.evals.items()}
    if not task.hub:  # a user's file: the training file again?
        seen = row_keys(train)
        for s, dev in devs.items():
            if same := int(seen_rows(dev, seen).sum()):
                print(f"note: {same} of {task.evals[s][1]}'s {len(dev.a)} rows are training rows too: on those the "
                      "score measures memory, not how the model does on new text", file=sys.stderr)
    return train, devs


def describe(task, train):
    """One line on what was read: the kind of task, its columns, its training rows and how many of each label."""
    kind = "classification" if task.labels else "regression" + (" (labels not written whole; classes? write "
                                                                "them as whole numbers or words)") * (not task.hub)
    per_label = np.bincount(train.labels, minlength=len(task.labels)).tolist() if task.labels else []
    counts = ", labels " + ", ".join(f"{v!r} {n}" for v, n in zip(task.labels, per_label)) if task.labels else ""
    few = f" (few: with under {FEW} a classifier has little to learn from)" * (len(train.a) < FEW)
    odd = [v for v in task.labels or () if v.lower() in ("nan", "null", "none", "n/a")]
    commas = [v for v in task.labels or () if re.fullmatch(r"[-+]?\d+(,\d+)+(\.\d+)?", v)]
    cased = [v for v in task.labels or () if [w.lower() for w in task.labels].count(v.lower()) > 1]
    lone = [v for v, n in zip(task.labels or (), per_label) if n == 1 and max(per_label) >= MANY]  # 'vehicel'?
    notes = [f"{odd} may stand for empty values: each is a class here" * bool(odd),
             f"{commas[:3]} are read as words: numbers with a comma? a regression needs 4.5 or 1250, not 4,5 or 1,250"
             * bool(commas), f"{sorted(cased, key=str.lower)[:6]} differ only in case: each is a class" * bool(cased),
             f"{lone[:6]} are on one training row each: a typo? or a class too rare to learn" * bool(lone)]
    return (f"task {task.name}: {kind}, text {[c for c in task.columns[:2] if c is not None]}, label "
            f"{task.columns[2]!r}, {len(train.a)} train rows{few}{counts}" + "".join(
                f"\nnote: the labels {n}" for n in notes if n and not task.hub))


# ----------------------------------------------------------------------------------------------------------------
# Metrics: the task's, and those of no model at all.

METRICS = ("acc", "mcc", "f1", "macro_f1", "pearson", "spearman", "rmse")  # what a task's metrics may name
SMALL = 200  # a dev set under this many rows says how far one row moves its score (one_row)
FEW = 100  # a training file under this many rows is called few (describe)
MANY = 10  # a label on one training row where another has this many: a typo? (describe)
RESAMPLES = 1000  # bootstrap resamples of the dev rows behind each interval (seed 0: the same every run)
INTERVAL_WORDS = (f"95% interval over the rows: accuracy's is Wilson's binomial interval, the other metrics' a "
                  f"percentile bootstrap ({RESAMPLES} resamples of the rows, seed 0)")


def compute_metrics(task, preds, labels):
    """The task's metrics on one evaluation set, times 100 (RMSE in the labels' units). preds and labels are (N,), or
    (B, N): B resamples of the set scored at once (bootstrap), each metric then an array of B. A classification's
    metrics all come from its confusion counts, by GLUE's definitions (scikit-learn's numbers: tests/test_glue.py)."""
    preds, labels = np.asarray(preds), np.asarray(labels)
    p, y = np.atleast_2d(preds), np.atleast_2d(labels)                                  # (B, N)
    if task.labels is not None:
        k, b = len(task.labels), len(p)
        cells = (np.arange(b)[:, None] * k + y.astype(int)) * k + p.astype(int)         # (resample, true, predicted)
        c = np.bincount(cells.ravel(), minlength=b * k * k).reshape(b, k, k).astype(float)  # (B, K, K) counts
        right, n, true, said = np.trace(c, axis1=1, axis2=2), c.sum((1, 2)), c.sum(2), c.sum(1)  # (B,) (B,) (B, K)
        f1 = 2 * np.diagonal(c, axis1=1, axis2=2) / np.maximum(true + said, 1)          # per class; 0 if it is absent
        # Matthews' correlation for K classes (Gorodkin 2004); 0 when either side names one class only
        cov_ts = right * n - (true * said).sum(1)
        cov_ss, cov_tt = n * n - (said ** 2).sum(1), n * n - (true ** 2).sum(1)
        metric = {"acc": lambda: right / n, "f1": lambda: f1[:, 1],                    # f1: of class 1 (MRPC, QQP)
                  "macro_f1": lambda: f1.sum(1) / ((true + said) > 0).sum(1),           # over the classes that occur
                  "mcc": lambda: cov_ts / np.sqrt(np.where(cov_ss * cov_tt > 0, cov_ss * cov_tt, np.inf))}
    else:
        from scipy.stats import rankdata  # imported here: scipy adds a second to every start, even a failing one

        def pearson(u, v):  # a correlation is undefined for constants: count it as none
            u, v = u - u.mean(1, keepdims=True), v - v.mean(1, keepdims=True)
            flat = (np.ptp(u, 1) == 0) | (np.ptp(v, 1) == 0)
            return np.where(flat, 0.0, (u * v).sum(1) / np.sqrt(np.where(flat, 1, (u * u).sum(1) * (v * v).sum(1))))
        metric = {"pearson": lambda: pearson(p, y), "rmse": lambda: np.sqrt(np.mean((p - y) ** 2, axis=1)) / 100,
                  "spearman": lambda: pearson(rankdata(p, axis=1), rankdata(y, axis=1))}  # ties: average ranks
    scores = {name: 100 * metric[name]() for name in task.metrics}
    return scores if preds.ndim > 1 else {name: float(v[0]) for name, v in scores.items()}


def bootstrap(task, preds, labels, resamples=RESAMPLES, seed=0):
    """The task's metrics on resamples of the evaluation set (rows drawn with replacement): {metric: (resamples,)}.
    The fixed seed draws the same rows for every model scored on a set of this size, so two models' draws pair up."""
    preds, labels = np.asarray(preds), np.asarray(labels)
    rows = np.random.default_rng(seed).integers(0, len(labels), size=(resamples, len(labels)))   # (B, N)
    parts = [compute_metrics(task, preds[r], labels[r]) for r in np.array_split(rows, -(-rows.size // 2**22))]
    return {name: np.concatenate([part[name] for part in parts]) for name in task.metrics}  # in chunks: QQP's 40k


def interval(draws):
    """The 95% percentile interval of bootstrap draws: (low, high)."""
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)


def wilson(right, n, z=1.96):
    """Wilson's 95% score interval of an accuracy of right out of n, in percent: unlike the bootstrap, and the normal
    approximation p +- z sqrt(p (1 - p) / n), it keeps a width at 0 and at n out of n (10 of 10: 72.2 to 100)."""
    p, half = right / n, z * math.sqrt(right * (n - right) / n + z * z / 4) / n
    centre, scale = p + z * z / (2 * n), 1 + z * z / n
    return 100 * (centre - half) / scale, 100 * (centre + half) / scale


def intervals(task, preds, labels):
    """The 95% interval of each metric over the evaluation rows, {metric: (low, high)}, and the bootstrap's draws:
    accuracy's is Wilson's, the others' the percentile bootstrap's."""
    draws, right = bootstrap(task, preds, labels), int(np.sum(np.asarray(preds) == np.asarray(labels)))
    return {m: wilson(right, len(labels)) if m == "acc" else interval(draws[m]) for m in task.metrics}, draws


def scored(median, kept, seed, spread):
    """"acc 80.00 [54.8, 93.0], ...": each metric's median over the seeds with the 95% interval of one seed's
    predictions (`seed`, scoring `kept`); where that seed scored another number than the median, it is given too."""
    return ", ".join(f"{k} {v:.2f} " + (f"[{lo:.1f}, {hi:.1f}]" if abs(v - kept[k]) < 5e-3 else
                                        f"(seed {seed}: {kept[k]:.2f} [{lo:.1f}, {hi:.1f}])")
                     for k, v in median.items() for lo, hi in [spread[k]])


def one_row(task, preds, labels, row="dev row"):
    """How far one evaluation row moves the score, in words: a classification's accuracy moves 100 / N points per row;
    a regression's first metric, the most that leaving out one row moves it. None from SMALL rows on: little."""
    n, main = len(labels), task.metrics[0]
    if n >= SMALL:
        return None
    if task.labels is not None:
        return f"one {row} is worth {100 / n:.1f} points of accuracy here ({n} rows)"
    if n < 3:  # a correlation of 1 or 2 rows is 0 or +-1 whatever the model
        return f"{count(n, row)} cannot measure {main}: a correlation needs 3 rows at least"
    rest = np.array([np.delete(np.arange(n), i) for i in range(n)])                       # (N, N - 1)
    moved = np.abs(compute_metrics(task, preds[rest], labels[rest])[main] - compute_metrics(task, preds, labels)[main])
    return f"leaving out one {row} moves {main} by up to {moved.max():.1f} points here ({n} rows)"


def baseline(task, train_labels, n):
    """The predictions of no model at all: the training set's most frequent class, or its mean for a regression."""
    return np.full(n, train_labels.mean() if task.labels is None else np.bincount(train_labels).argmax())


# ----------------------------------------------------------------------------------------------------------------
# The table finetune_glue.py writes: a row per model, each number with its interval, avg, no model for scale.

INTERVALS = (f"{INTERVAL_WORDS}, on the median seed's predictions (predictions/); avg's and the difference's "
             "by the bootstrap too, the difference's paired (the same resampled rows score both models)")


def average(table):
    """The paper's GLUE score: the plain mean of the main metrics (9 numbers for the eight tasks: MNLI counts its
    matched and mismatched dev sets)."""
    return sum(table.values()) / len(table)


def count(n, word):
    """"1 seed", "2 seeds", "1,250 rows"."""
    return f"{n:,} {word}{'s' * (n != 1)}"


def difference(a, b):
    """Per evaluation set and for avg, a minus b (two models' reports) and the 95% interval of a paired bootstrap: the
    same resampled dev rows score both models (tasks.bootstrap's fixed seed). Within the noise: the interval holds 0."""
    diffs = {c: (a["table"][c] - b["table"][c], a["draws"][c] - b["draws"][c]) for c in a["table"]}
    diffs["avg"] = (average(a["table"]) - average(b["table"]), np.mean([d for _, d in diffs.values()], axis=0))
    return {c: dict(value=v, interval=(iv := interval(d)), within_noise=iv[0] <= 0 <= iv[1]) for c, (v, d) in
            diffs.items()}


def markdown(reports, trivial, titles, seeds, recipe, notes):
    """The table: a row per model ({name: report}: its "table" {eval set: main metric}, "results", "draws"), each
    number with its 95% interval over the dev rows; their difference when there are two, and no model at all (the
    majority class, or the training mean: trivial) for scale. titles: eval set -> column title; notes: lines below."""
    cols, rows = list(titles), {}
    cell = lambda v, iv, f=".1f": f"{v:{f}} [{iv[0]:{f}}, {iv[1]:{f}}]"  # noqa: E731
    for name, r in reports.items():  # avg's interval: the mean of the sets' bootstrap draws (one set: its own)
        spread = [r["results"][c]["interval"][r["results"][c]["main"]] for c in cols]
        avg_iv = spread[0] if len(cols) == 1 else interval(np.mean([r["draws"][c] for c in cols], axis=0))
        rows[name] = [cell(r["table"][c], iv) for c, iv in zip(cols, spread)] + [cell(average(r["table"]), avg_iv)]
    below, first = [], next(iter(reports.values()))["results"]  # below: pretrained under random init, past the noise
    if len(reports) == 2:
        diffs = difference(*reports.values())
        rows["difference"] = [cell(d["value"], d["interval"], "+.1f") + " within the noise" * d["within_noise"]
                              for d in diffs.values()]
        below = [titles[c] for c, d in diffs.items() if c in titles and d["interval"][1] < 0
                 and first[c]["main"] != "rmse"]
    no_model = [f"{trivial[c]:.1f}" for c in cols] + [f"{average(trivial):.1f}"]  # no interval: no model to score
    rows["no model (majority class / training mean)"] = no_model
    lines = [f"| model | {' | '.join(titles[c] for c in cols)} | avg |", "|---|" + "---:|" * (len(cols) + 1)]
    lines += [f"| {name} | {' | '.join(cells)} |" for name, cells in rows.items()]
    glue = [s for name in GLUE for s in glue_task(name, "").evals]
    avg = ("of all 9 numbers, as in the paper." if cols == glue else f"over the {count(len(cols), 'number')} of the "
           "tasks run" + (": a subset, not comparable with the paper's 9-number average." if set(cols) <= set(glue)
                          else "."))
    small = [f"{titles[c]}: {first[c]['one_row']}." for c in cols if first[c]["one_row"]]  # a small dev set
    small += [f"{', '.join(below)}: the pretrained model below its random init, past the noise: pretraining has not "
              "helped here yet (a short pretraining, or too few fine-tuning steps: more --epochs; docs/glue.md)."
              ] if below else []
    for name, r in reports.items():  # as printed, to one decimal; rmse: lower is better
        small += [f"{name}, {titles[c]}: {r['table'][c]:.1f}, below no model's {trivial[c]:.1f}: worse than one answer "
                  "for every row." for c in cols if first[c]["main"] != "rmse"
                  and round(r["table"][c], 1) < round(trivial[c], 1)]
    return "\n".join(lines + [
        "", f"Dev sets, median of {count(seeds, 'fine-tuning seed')} per task, the {recipe} recipe; avg is the plain "
        f"mean {avg}", f"[low, high]: the {INTERVALS}; the seeds' own spread is not in it." + (
            ' "within the noise": the difference\'s interval holds 0, so these dev rows cannot tell the two models '
            'apart.' if len(reports) == 2 else ""), *small, *notes]) + "\n"


def own_name(out_dir, tasks, t_start):
    """A run's own name, glue-<tasks>-<time>, claimed by making its folder predictions/<name>/: a second run started
    in the same second into the same folder takes <name>-2."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(t_start))
    base = "glue-" + re.sub(r"[^\w,.-]+", "_", ",".join(tasks))[:60] + f"-{stamp}"
    for k in itertools.count(1):
        name = base + f"-{k}" * (k > 1)
        with contextlib.suppress(FileExistsError):
            if not (Path(out_dir) / f"{name}.json").exists():
                (Path(out_dir) / "predictions" / name).mkdir(parents=True)
                return name


def forget(out_dir, name, made=()):
    """Removes what a run that kept nothing wrote of its own (its folder, a half-written table, the folders it made:
    made, the deepest first): no trace of it."""
    shutil.rmtree(Path(out_dir) / "predictions" / name, ignore_errors=True)
    for file in (f"{name}.md", f"{name}.json"):
        (Path(out_dir) / file).unlink(missing_ok=True)
    for folder in [Path(out_dir) / "predictions", *made]:
        with contextlib.suppress(OSError):  # each only where it holds nothing else
            folder.rmdir()


def publish(out_dir, this, args, data, report, outputs, info, paced, total_s, final):
    """Writes the tasks done so far into this run's own copy ({this}.md and .json, predictions/{this}/); final: also
    glue.md, glue.json and predictions/*.tsv, the latest run's. Returns the markdown table. Each file is written whole
    (a .tmp, then renamed), glue.json last: a failed run leaves no half file, and an earlier run's files as they were.
    """
    inits = list(report)
    r = report[inits[0]]  # the first row's (pretrained unless --random_init)
    titles = {s: f"{title} {task.metrics[0]}" for task, _, _ in data.values() for s, (title, _) in task.evals.items()
              if s in r["table"]}  # the tasks done
    rest = ",".join(t for t in data if t not in r["tasks"])
    notes = [f"This run's own copy: {this}.md and .json, predictions/{this}/; glue.md and glue.json are always the "
             "latest run's."] + [f"Partial: {len(r['tasks'])} of {len(data)} tasks done; the rest, if the run "
                                 f"stopped: --tasks {rest}"] * (not final)
    md = markdown({args.ckpt + " (random init)" * i: rep for i, rep in report.items()}, r["baseline"], titles,
                  args.seeds, args.recipe, notes)

    def saved(rep):  # what the .json keeps of a row: not its bootstrap draws (the table's) nor the kept classifier
        return {k: v for k, v in rep.items() if k not in ("draws", "keep")}
    files = {f"predictions/{this}/{name.removeprefix('predictions/')}": text for name, text in outputs.items()}
    files[f"{this}.md"], files[f"{this}.json"] = md, json.dumps({
        "checkpoint": os.path.abspath(args.ckpt), "random_init": inits[0], "recipe": args.recipe, "total_s": total_s,
        "settings": vars(args), "run": info, "this_run": this, "intervals": INTERVALS, "pace": paced, **saved(r),
        "average": average(r["table"]), "average_over": list(r["table"]),
        **({f"random_init_{k}": v for k, v in saved(report[True]).items()} if args.vs_random else {}),
        **({"difference": difference(report[False], report[True])} if args.vs_random else {}),
        "final": final}, indent=1)  # final: false in a run's own copy while it goes on
    if final:
        files = {**outputs, **files, "glue.md": md, "glue.json": files[f"{this}.json"]}
    for name, text in files.items():
        (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
        with written_whole(out_dir / name, "w", encoding="utf-8") as f:  # a .tmp, renamed; a Ctrl-C leaves none
            f.write(text)
    return md
