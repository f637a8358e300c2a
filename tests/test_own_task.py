"""Your own task as a specification: files in four formats, run_glue.py's column and label conventions, the no-model
baseline, a kept classifier that classify.py uses (the same predictions, the same metric), and one-line errors."""
import argparse
import json
import math
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import classifier  # noqa: E402
import classify  # noqa: E402
import finetune_glue as fg  # noqa: E402
import tasks  # noqa: E402
from cram import Config, CrammedBERT  # noqa: E402
from conftest import WORDS  # noqa: E402  (and the fixture ckpt: a 1 x 32 checkpoint with its tokenizer)

FAST = ["--epochs", "2", "--seeds", "3", "--device", "cpu", "--lr", "1e-3"]
TOPICS = ["sport", "Sci/Tech", "world"]


def rows(n, seed=0, pair=False, label=lambda i: TOPICS[i % 3]):
    rng = np.random.default_rng(seed)
    text = lambda i: " ".join(rng.choice(WORDS, size=2 + i % 6))  # noqa: E731
    return [{**({"sentence1": text(i), "sentence2": text(i)} if pair else {"sentence": text(i)}), "label": label(i)}
            for i in range(n)]


def write(path, items, columns=None):
    """items (dicts) as CSV (Excel's: a byte-order mark, CRLF, quoted where needed), TSV, JSON or JSON Lines."""
    path, columns = Path(path), columns or list(items[0])
    if path.suffix == ".csv":
        quote = lambda v: '"' + str(v).replace('"', '""') + '"' if re.search(r'[,"\n]', str(v)) else str(v)
        text = "\ufeff" + "".join(",".join(quote(r[c]) for c in columns) + "\r\n" for r in [dict(zip(columns, columns))]
                                  + items)
    elif path.suffix == ".tsv":
        text = "".join("\t".join(str(r[c]) for c in columns) + "\n" for r in [dict(zip(columns, columns))] + items)
    elif path.suffix == ".json":
        text = json.dumps(items)
    else:
        text = "".join(json.dumps(r) + "\n" for r in items)
    path.write_bytes(text.encode("utf-8"))  # the line ends as written (write_text's newline= needs Python 3.10)
    return str(path)


def task_of(train, **flags):
    args = fg.parse_args(["ckpt.pt", "--train_file", train, "--validation_file", train] +
                         [x for k, v in flags.items() for x in (f"--{k}", v)])
    return tasks.file_task(args)


# ---------------------------------------------------------------------------------------------- files and columns

def test_the_four_formats_read_as_the_same_rows_excel_s_bom_crlf_and_quoted_commas_and_newlines_included(tmp_path):
    items = rows(8)
    items[1]["sentence"] = 'he said, "yes"\nand ran'  # a comma, quotes and a line break inside one field
    splits = []
    for ext in ("csv", "tsv", "json", "jsonl"):
        its = [dict(r, sentence=r["sentence"].replace("\n", " ")) for r in items] if ext == "tsv" else items
        path = write(tmp_path / f"train.{ext}", its)
        splits.append(tasks.read_split(task_of(path), path))
    csv_split = splits[0]
    assert csv_split.a[1] == 'he said, "yes"\nand ran' and len(csv_split.a) == 8
    for s in splits[1:]:
        assert s.labels.tolist() == csv_split.labels.tolist() and len(s.a) == 8
    assert splits[2].a == splits[3].a == csv_split.a


@pytest.mark.parametrize("columns, expected", [
    (["sentence1", "sentence2", "sentence", "label"], ("sentence1", "sentence2")),
    (["sentence", "text", "label"], ("sentence", None)),
    (["id", "text", "label"], ("text", None)),
])
def test_text_columns_default_as_run_glue_py_sentence1_and_2_then_sentence_then_text(columns, expected, tmp_path):
    items = [{c: (str(i) if c == "label" else "a b") for c in columns} for i in range(2)]
    assert task_of(write(tmp_path / "t.csv", items)).columns == (*expected, "label")


def test_text_and_label_columns_can_be_named(tmp_path):
    items = [{"review": "good film", "title": "a", "stars": "5"}, {"review": "bad", "title": "b", "stars": "1"}]
    task = task_of(write(tmp_path / "t.csv", items), text_columns="title,review", label_column="stars")
    assert task.columns == ("title", "review", "stars") and task.labels == ("1", "5")


def test_a_file_without_a_known_text_column_names_the_columns_it_has(tmp_path):
    path = write(tmp_path / "t.csv", [{"review": "good", "label": "1"}, {"review": "bad", "label": "0"}])
    with pytest.raises(tasks.CramError, match=r"columns are \['review', 'label'\].*--text_columns"):
        task_of(path)
    with pytest.raises(tasks.CramError, match=r"no column 'stars'; its columns are \['review', 'label'\]"):
        task_of(path, text_columns="review", label_column="stars")


# ---------------------------------------------------------------------------------------------- labels and metrics

@pytest.mark.parametrize("values, labels", [
    (["2", "10", "-1", "2"], ("-1", "2", "10")),                  # integers: classes, in numeric order
    (["Sci/Tech", "sport", "Sci/Tech"], ("Sci/Tech", "sport")),   # strings: classes named by them
    (["0.5", "3", "4.25", "1"], None),                            # a decimal point: a regression, as float labels
    (["1e-3", "2", "3"], None),
    (["0", "1", "1", "0", "1e999"], ("0", "1", "1e999")),         # not finite: no number, so no regression here
])
def test_float_labels_make_a_regression_anything_else_classes_named_by_their_values(values, labels, tmp_path):
    items = [{"text": f"w{i}", "label": v} for i, v in enumerate(values)]
    task = task_of(write(tmp_path / "t.csv", items))
    assert task.labels == labels
    assert task.metrics == (("pearson", "spearman", "rmse") if labels is None else
                            ("acc", "macro_f1", "mcc") if len(labels) == 2 else ("acc", "macro_f1"))


def test_a_stray_n_a_in_float_labels_keeps_the_regression_its_rows_skipped_and_named_classify_too(ckpt, tmp_path,
                                                                                                    capsys):
    """One `N/A` among float scores made 139 classes, and the run blamed the dev file for a label."""
    items = [{"text": r["sentence"], "score": f"{i % 5}.{i % 4}"} for i, r in enumerate(rows(24))]
    items[4]["score"] = "N/A"
    train, dev = write(tmp_path / "train.csv", items), write(tmp_path / "dev.csv", items[:4] + items[2:12])
    assert task_of(train, label_column="score").labels is None
    fg.main([str(ckpt), "--train_file", train, "--validation_file", dev, "--label_column", "score",
             "--save_model", str(tmp_path / "m"), "--out", str(tmp_path), "--epochs", "1", "--seeds", "1",
             "--device", "cpu"])
    err = capsys.readouterr().err
    assert "train.csv: skipped 1 unusable row (line 6: the label 'N/A' is not a number)" in err
    assert "dev.csv: skipped 1 unusable row (line 8: the label 'N/A' is not a number)" in err
    assert [t["n_train"] for t in json.loads((tmp_path / "glue.json").read_text("utf-8"))["tasks"].values()] == [23]
    classify.main(["--device", "cpu", str(tmp_path / "m"), "--input", dev])
    out, err = capsys.readouterr()
    assert "dev.csv: left out of the metric: 1 row whose label is not a number (the first: line 8, 'N/A')" in err
    assert "on the 13 labelled rows of" in out and "pearson" in out


def test_json_may_be_a_list_an_object_holding_one_or_one_object_a_line(tmp_path):
    items = rows(4)
    paths = [write(tmp_path / "a.json", items), write(tmp_path / "b.jsonl", items)]
    (tmp_path / "c.json").write_text(json.dumps({"data": items}, indent=2), encoding="utf-8")
    (tmp_path / "d.jsonl").write_text(json.dumps(items[0]) + "\n", encoding="utf-8")
    for path in [*paths, str(tmp_path / "c.json")]:
        assert [r for _, r in tasks.read_table(path)[1]] == items
    assert [r for _, r in tasks.read_table(str(tmp_path / "d.jsonl"))[1]] == items[:1]


def test_json_numbers_follow_the_same_rule_floats_regress_integers_classify(tmp_path):
    assert task_of(write(tmp_path / "a.jsonl", [{"text": "a", "label": 1.0}, {"text": "b", "label": 2}])).labels is None
    assert task_of(write(tmp_path / "b.jsonl", [{"text": "a", "label": 1}, {"text": "b", "label": 0}])).labels == (
        "0", "1")


def test_the_baseline_is_the_majority_class_or_the_training_mean():
    cls, reg = tasks.Task("t", ("text", None, "label"), ("a", "b", "c"), ("acc", "macro_f1"), "", {}), \
        tasks.Task("t", ("text", None, "label"), None, ("pearson", "spearman", "rmse"), "", {})
    assert tasks.baseline(cls, np.array([0, 2, 2, 1]), 3).tolist() == [2, 2, 2]
    assert tasks.baseline(reg, np.array([1.0, 2.0, 6.0]), 2).tolist() == [3.0, 3.0]
    scores = tasks.compute_metrics(cls, np.array([2, 2, 2, 2]), np.array([2, 2, 0, 1]))
    assert scores["acc"] == 50.0 and scores["macro_f1"] == pytest.approx(100 * (2 / 3) / 3)
    rmse = tasks.compute_metrics(reg, np.full(3, 3.0), np.array([1.0, 3.0, 5.0]))["rmse"]
    assert rmse == pytest.approx(np.sqrt(8 / 3))


def test_the_task_is_named_after_the_file_or_its_folder(tmp_path):
    (tmp_path / "reviews").mkdir()
    items = rows(4)
    assert task_of(write(tmp_path / "reviews" / "train.csv", items)).name == "reviews"
    assert task_of(write(tmp_path / "reviews" / "imdb_small.csv", items)).name == "imdb_small"
    assert task_of(write(tmp_path / "reviews" / "x.csv", items), task_name="mine").name == "mine"


# ---------------------------------------------------------------------------------------------- end to end

@pytest.fixture(scope="session")
def kept(ckpt, tmp_path_factory):
    """A pair task fine-tuned from a CSV (3 seeds) with --save_model, its dev file in JSON Lines."""
    tmp = tmp_path_factory.mktemp("own")
    (tmp / "pairs").mkdir()
    train = write(tmp / "pairs" / "train.csv", rows(30, 1, pair=True))
    dev = write(tmp / "pairs" / "dev.jsonl", rows(12, 2, pair=True))
    table = fg.main([str(ckpt), "--train_file", train, "--validation_file", dev, "--save_model", str(tmp / "model"),
                     "--out", str(tmp / "out"), *FAST])
    return tmp, train, dev, table


def test_own_task_fine_tunes_reports_metrics_and_baseline_and_keeps_the_median_seed(kept):
    tmp, _, _, table = kept
    report = json.loads((tmp / "out" / "glue.json").read_text(encoding="utf-8"))
    result = report["results"]["pairs"]
    assert list(table) == ["pairs"] and result["main"] == "acc"
    assert set(result["median"]) == {"acc", "macro_f1"} and result["baseline"]["acc"] == pytest.approx(100 * 4 / 12)
    info = json.loads((tmp / "model" / "classifier.json").read_text(encoding="utf-8"))
    assert info["labels"] == ["Sci/Tech", "sport", "world"] and info["text_columns"] == ["sentence1", "sentence2"]
    assert info["dev"] == result["per_seed"][result["predictions_seed"]] and info["seed"] == result["predictions_seed"]
    assert {p.name for p in (tmp / "model").iterdir()} == {"model.pt", "classifier.json", "meta.json", "tokenizer.json"}
    assert "| no model (majority class / training mean) | 33.3 |" in (tmp / "out" / "glue.md").read_text("utf-8")


def test_classify_on_the_validation_file_reproduces_the_fine_tuning_predictions_and_metric(kept, capsys):
    tmp, _, dev, _ = kept
    out = tmp / "labelled.csv"
    classify.main(["--device", "cpu", str(tmp / "model"), "--input", dev, "--output", str(out)])
    printed = capsys.readouterr().out
    info = json.loads((tmp / "model" / "classifier.json").read_text(encoding="utf-8"))
    assert f"acc {info['dev']['acc']:.2f}" in printed.split("(fine-tuning's dev set")[0]
    assert f"; no model there: acc {info['no_model']['acc']:.2f}" in printed  # the score's scale, as glue.md gives it
    written = tasks.read_table(str(out))
    assert written[0] == ["sentence1", "sentence2", "label", "prediction", "probability"]
    fine_tuned = [line.split("\t")[1] for line in (tmp / "out" / "predictions" / "pairs.tsv").read_text(
        encoding="utf-8").splitlines()[1:]]
    assert [r["prediction"] for _, r in written[1]] == fine_tuned
    assert all(1 / 3 <= float(r["probability"]) <= 1 for _, r in written[1])


def test_classify_says_when_the_rows_it_scores_are_the_classifiers_training_rows(kept, tmp_path, capsys):
    """Fine-tuning says it of a validation file; classify.py scored the training file itself (acc 83 on 36 rows, a
    student's trial, 2026-12-07) without a word. model.pt keeps an 8-byte key a training row, none of the texts."""
    tmp, train, dev, _ = kept
    saved = torch.load(tmp / "model" / "model.pt", weights_only=True)
    assert saved["seen"].dtype == torch.int64 and 0 < len(saved["seen"]) <= 30  # the 30 training rows' keys
    both = write(tmp_path / "both.csv", [r for _, r in tasks.read_table(train)[1][:4]]
                 + [r for _, r in tasks.read_table(dev)[1][:6]])
    classify.main(["--device", "cpu", str(tmp / "model"), "--input", both])
    assert "note: 4 of these 10 rows are the classifier's training rows: on those the score measures memory" in \
        capsys.readouterr().err
    classify.main(["--device", "cpu", str(tmp / "model"), "--input", dev, "--output", str(tmp_path / "d.csv")])
    assert "training rows" not in capsys.readouterr().err


def test_classify_writes_any_format_and_scores_only_labels_it_knows(kept, capsys):
    tmp, _, dev, _ = kept
    items = [dict(r, label=lbl) for (_, r), lbl in zip(tasks.read_table(dev)[1][:3], ["sport", "weather", "world"])]
    for name, expected in [("unknown.json", "no metric: the label 'weather'"), ("nolabel.tsv", "wrote 3")]:
        source = write(tmp / name, [{k: v for k, v in r.items() if name == "unknown.json" or k != "label"}
                                    for r in items])
        classify.main(["--device", "cpu", str(tmp / "model"), "--input", source])
        printed = capsys.readouterr().out
        assert expected in printed and "fine-tuning's dev set" not in printed
        out = Path(source).with_suffix(".predicted" + Path(source).suffix)
        written = tasks.read_table(str(out))[1]
        assert [r["sentence1"] for _, r in written] == [r["sentence1"] for r in items]
        assert all(r["prediction"] in TOPICS for _, r in written)


def test_classify_leaves_a_label_run_on_by_an_open_quote_out_of_the_metric_and_writes_labels_unpadded(kept, capsys):
    tmp, _, dev, _ = kept
    text = ["sentence1,sentence2,label"] + [f"the cat {i},the dog {i}, {TOPICS[i % 3]}  " for i in range(8)]
    text[5] = 'the cat 4,the dog 4,"sport'  # line 6's label opens a quote: it runs over the rows after it
    (tmp / "quoted.csv").write_text("\n".join(text) + "\n", encoding="utf-8")  # labels padded: " world  "
    source = str(tmp / "quoted.csv")
    classify.main(["--device", "cpu", str(tmp / "model"), "--input", source])
    captured = capsys.readouterr()
    assert "left out of the metric: 1 row whose label runs over several lines (a quote left open? the first: " \
        "line 6)" in captured.err
    assert "on the 4 labelled rows of" in captured.out  # the 4 rows before it, not "no metric"
    written = tasks.read_table(str(Path(source).with_suffix(".predicted.csv")))[1]
    assert all(r["prediction"] in TOPICS for _, r in written)  # not " sport  "


def test_classify_labels_texts_given_on_the_command_line_with_sep_between_a_pair(kept, capsys):
    tmp, _, dev, _ = kept
    first = tasks.read_table(dev)[1][0][1]
    shown = classify.main(["--device", "cpu", str(tmp / "model"), f"{first['sentence1']} [SEP] {first['sentence2']}",
                           "cat [SEP] dog"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(shown) == 2 and all(label in TOPICS for label in shown)
    assert lines[0].split("\t")[0] == shown[0] and 0 < float(lines[0].split("\t")[1]) <= 1
    labelled = tasks.read_table(str(tmp / "labelled.csv"))[1] if (tmp / "labelled.csv").exists() else None
    if labelled:  # the same text, alone or in a file, gets the same label
        assert shown[0] == labelled[0][1]["prediction"]


def test_a_regression_is_kept_and_classify_prints_the_value(ckpt, tmp_path, capsys):
    items = [{"text": r["sentence"], "score": f"{i % 5}.5"} for i, r in enumerate(rows(20))]
    train = write(tmp_path / "scores.tsv", items)
    fg.main([str(ckpt), "--train_file", train, "--validation_file", train, "--label_column", "score",
             "--save_model", str(tmp_path / "m"), "--out", str(tmp_path), *FAST])
    assert json.loads((tmp_path / "m" / "classifier.json").read_text(encoding="utf-8"))["type"] == "regression"
    capsys.readouterr()
    values = classify.main(["--device", "cpu", str(tmp_path / "m"), "the cat sat", "a dog"])
    assert all(isinstance(v, float) for v in values)
    assert capsys.readouterr().out.splitlines()[0] == f"{values[0]:.4f}\tthe cat sat"


# ---------------------------------------------------------------------------------------------- bad input

def one_line(args, script="finetune_glue.py"):
    """The last line a tool prints to stderr as it exits non-zero, on the CPU whatever the machine has."""
    p = subprocess.run([sys.executable, str(ROOT / script), "--device", "cpu", *map(str, args)], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    return p.stderr.strip().splitlines()[-1]


@pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="a link needs a privilege on Windows")
def test_a_predictions_link_planted_in_a_shared_folder_is_refused_and_nothing_is_written_through_it(ckpt, tmp_path):
    """finetune_glue.py writes beside the checkpoint by default: a shared folder's predictions -> a folder of the
    user's sent the tables there (written through the link, 2026-12-07's trial). Refused before any training."""
    shared, yours = tmp_path / "shared", tmp_path / "yours"
    shutil.copytree(ckpt.parent, shared)
    yours.mkdir()
    (shared / "predictions").symlink_to(yours, target_is_directory=True)
    train = write(tmp_path / "train.csv", rows(12))
    line = one_line([shared / "ckpt.pt", "--train_file", train, "--validation_file", train, "--epochs", "1",
                     "--seeds", "1"])
    assert line.startswith("finetune_glue.py: error:") and "predictions is a link to" in line, line
    assert list(yours.iterdir()) == [] and not (shared / "glue.md").exists()


@pytest.mark.skipif(os.name == "nt", reason="a link needs a privilege on Windows")
def test_save_model_replaces_only_a_classifier_never_a_folder_of_yours_or_through_a_link(kept, ckpt, tmp_path):
    """Replacing a saved classifier of the same task deleted a user's other files in that folder, and a link as
    --save_model replaced the folder it points to (a trial, 2026-12-07)."""
    _, train, dev, _ = kept
    yours = tmp_path / "yours"
    shutil.copytree(kept[0] / "model", yours)
    (yours / "MYNOTE.txt").write_text("keep me", encoding="utf-8")
    (tmp_path / "link").symlink_to(yours, target_is_directory=True)
    for folder, needle in [(yours, "holds files a saved classifier does not (MYNOTE.txt)"), (tmp_path / "link",
                                                                                             "link is a link to")]:
        line = one_line([ckpt, "--train_file", train, "--validation_file", dev, "--save_model", folder, "--out",
                         tmp_path / "out"])
        assert needle in line, line
    assert (yours / "MYNOTE.txt").read_text(encoding="utf-8") == "keep me"


def test_a_crafted_model_pt_runs_nothing_and_is_refused_in_one_line(kept, tmp_path):
    folder = tmp_path / "crafted"
    folder.mkdir()
    (folder / "classifier.json").write_text((kept[0] / "model" / "classifier.json").read_text("utf-8"), "utf-8")
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    (folder / "model.pt").write_bytes(pickle.dumps({"model": Evil()}))
    line = one_line([folder, "some text"], "classify.py")
    assert line.startswith("classify.py: error:") and "model.pt is damaged or not a saved classifier" in line
    assert not marker.exists()


@pytest.mark.parametrize("edit", [{"head": {"pool": "evil"}}, {"head": {"pair": "yes"}}, {"head": {"sep_id": None}},
                                  {"config": {"dropout": math.nan}}, {"config": {"n_head": 0}},
                                  {"config": {"n_layer": 1000}}, {"model": {"head.0.weight": math.inf}},
                                  {"seen": [1, 2]}, {"seen": torch.zeros(3)}])  # the training rows' keys: int64
def test_a_model_pt_with_values_no_flag_may_take_is_damaged_in_one_line(edit, kept, tmp_path):
    """Crafted (a trial, 2026-12-07): a pool of no kind was taken silently, a NaN dropout crashed at the first forward,
    n_head 0 was called a change of the model's code; 1,000 blocks were built before the weights said no, and a
    weight of infinity was taken silently (now hardware.built_for), and a sep_id of None counted [SEP] in the mean."""
    folder = tmp_path / "edited"
    shutil.copytree(kept[0] / "model", folder)
    saved = torch.load(folder / "model.pt", weights_only=True)
    for key, values in edit.items():
        saved[key] = values if key == "seen" else {**saved[key], **{
            name: torch.full_like(saved[key][name], value) if key == "model" else value for name, value in values.items()}}
    torch.save(saved, folder / "model.pt")
    line = one_line([folder, "some text [SEP] more text"], "classify.py")  # a pair, as the kept classifier reads
    assert "model.pt is damaged or not a saved classifier" in line, line


def test_a_kept_classifier_that_this_code_does_not_build_names_the_weight_not_damage(kept, tmp_path):
    folder = tmp_path / "edited"
    shutil.copytree(kept[0] / "model", folder)
    saved = torch.load(folder / "model.pt", weights_only=True)
    name = next(k for k in saved["model"] if k.endswith("ffn.down.weight"))
    saved["model"][name] = torch.cat([saved["model"][name]] * 2, dim=1)  # as if cram.py's feed-forward changed
    torch.save(saved, folder / "model.pt")
    line = one_line([folder, "some text"], "classify.py")
    assert "model.pt holds weights that this code does not build (size mismatch for " in line, line
    assert "in the file" in line and line.endswith("or fine-tune again with --save_model"), line


def write_bad_files(tmp_path):
    """The files a user gets wrong, in tmp_path, beside a good one (good.csv) and a folder of theirs (foreign)."""
    write(tmp_path / "good.csv", rows(9))
    (tmp_path / "empty.csv").write_text("", encoding="utf-8")
    write(tmp_path / "unseen.csv", rows(4) + [{"sentence": "the cat", "label": "weather"}])
    write(tmp_path / "single.csv", rows(5, label=lambda i: "sport"))
    write(tmp_path / "binary.csv", rows(9, label=lambda i: str(i % 2)))  # classes 0 and 1
    write(tmp_path / "quarter.csv", rows(4, label=lambda i: str(i % 2)) + [{"sentence": "a", "label": "0.25"}])
    write(tmp_path / "two.csv", rows(4, label=lambda i: str(i % 2)) + [{"sentence": "a", "label": "2"}])
    write(tmp_path / "half.csv", rows(4) + [{"sentence": "a", "label": "0.5"}])  # beside word classes
    write(tmp_path / "cased.csv", rows(4) + [{"sentence": "a", "label": "Sport"}])  # a student's trial, 2026-12-07
    write(tmp_path / "pointed.csv", rows(4, label=lambda i: str(i % 2)) + [{"sentence": "a", "label": "1.0"}])
    write(tmp_path / "no_text.csv", [{**r, "sentence": " "} for r in rows(3)])  # every text empty
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("my thesis", encoding="utf-8")
    (tmp_path / "header.csv").write_text("sentence,label\n", encoding="utf-8")
    (tmp_path / "tabs.csv").write_text("sentence\tlabel\nthe cat\tpets\n", encoding="utf-8")


BAD_INPUTS = {  # what the line says: the flags that make it (a file's name: the one write_bad_files wrote)
    "empty.csv is empty: it needs a header line and rows": ["--train_file", "empty.csv", "--validation_file",
                                                            "good.csv"],
    "header.csv holds its header and no rows": ["--train_file", "header.csv", "--validation_file", "good.csv"],
    "tabs.csv: its header holds tabs, not commas: a tab-separated file must be named .tsv":
        ["--train_file", "tabs.csv", "--validation_file", "good.csv"],
    "has no column 'review'; its columns are ['sentence', 'label']: another task's file? Name the columns with "
    "--text_columns a[,b] and --label_column (or, if that first line is a row of data, add a header line)":
        ["--train_file", "good.csv", "--validation_file", "good.csv", "--text_columns", "review"],
    "empty.csv is empty": ["--train_file", "good.csv", "--validation_file", "empty.csv"],
    "unseen.csv line 6: the label 'weather' is not in the training file's usable rows, whose labels are "
    "['Sci/Tech', 'sport', 'world']: fix the label, or train with it": ["--train_file", "good.csv",
                                                                        "--validation_file", "unseen.csv"],
    "quarter.csv line 6: the label '0.25' is not in the training file's usable rows, whose labels are ['0', "
    "'1']: fix the label, or train with it (a regression? write the training labels with a point: 1.0)":
        ["--train_file", "binary.csv", "--validation_file", "quarter.csv"],
    "two.csv line 6: the label '2' is not in the training file's usable rows, whose labels are ['0', '1']: fix "
    "the label, or train with it": ["--train_file", "binary.csv", "--validation_file", "two.csv"],  # no hint
    "half.csv line 6: the label '0.5' is not in the training file's usable rows, whose labels are ['Sci/Tech', "
    "'sport', 'world']: fix the label, or train with it": ["--train_file", "good.csv", "--validation_file",
                                                           "half.csv"],
    "cased.csv line 6: the label 'Sport' is not in the training file's usable rows, whose labels are ['Sci/Tech', "
    "'sport', 'world']: fix the label, or train with it (write it 'sport', as the training file does)":
        ["--train_file", "good.csv", "--validation_file", "cased.csv"],
    "pointed.csv line 6: the label '1.0' is not in the training file's usable rows, whose labels are ['0', '1']: "
    "fix the label, or train with it (a class? write it 1, as the training file does)":
        ["--train_file", "binary.csv", "--validation_file", "pointed.csv"],
    "no_text.csv has no usable rows (line 2: 'sentence' is empty)": ["--train_file", "no_text.csv",
                                                                      "--validation_file", "good.csv"],
    "every usable row has the label 'sport': a classifier needs two classes": ["--train_file", "single.csv",
                                                                         "--validation_file", "good.csv"],
    "holds something that is not a saved classifier": ["--train_file", "good.csv", "--validation_file", "good.csv",
                                                      "--save_model", "foreign"],
    "--train_file needs --validation_file": ["--train_file", "good.csv"],
    "foreign is a folder: name a data file in it": ["--train_file", "good.csv", "--validation_file", "foreign"],
}


@pytest.mark.parametrize("needle", list(BAD_INPUTS))  # a process each: pytest-xdist spreads them over its workers
def test_bad_own_task_inputs_are_one_line_errors_and_write_nothing(needle, ckpt, tmp_path):
    write_bad_files(tmp_path)
    flags = [tmp_path / a if (tmp_path / a).exists() else a for a in BAD_INPUTS[needle]]
    line = one_line([ckpt, "--epochs", "1", "--seeds", "1", "--out", tmp_path / "out", *flags])
    assert line.startswith("finetune_glue.py: error:") and needle in line, (needle, line)
    assert "regression?" not in line or "0.25" in line  # the hint only where a label looks like a regression's
    assert "a class?" not in line or "1.0" in line
    assert (tmp_path / "foreign" / "notes.txt").read_text(encoding="utf-8") == "my thesis"
    assert not (tmp_path / "out").exists()  # not even an empty folder: every file is read before it is made


def test_compile_asked_for_where_torch_cannot_is_one_line_before_any_folder_is_made(ckpt, tmp_path, monkeypatch):
    import hardware  # a GPU before the V100 (a review, 2026-11-27: the line came after predictions/ was made)
    monkeypatch.setattr(hardware, "cannot_compile", lambda device: "Triton ... needs compute capability 7.0")
    good = write(tmp_path / "good.csv", rows(9))
    with pytest.raises(SystemExit, match=r"^finetune_glue.py: error: --compile: Triton .*: leave out --compile$"):
        fg.main([str(ckpt), "--train_file", good, "--validation_file", good, "--compile", "--device", "cpu",
                 "--out", str(tmp_path / "out" / "run")])
    assert not (tmp_path / "out").exists()


def test_empty_texts_are_skipped_and_named_in_one_warning(tmp_path, capsys):
    items = rows(5)
    items[2]["sentence"] = "  "
    path = write(tmp_path / "t.csv", items)
    split = tasks.read_split(task_of(path), path)
    assert len(split.a) == 4 and "skipped 1 unusable row (line 4: 'sentence' is empty)" in capsys.readouterr().err


@pytest.mark.slow
def test_classify_refuses_empty_text_a_pair_without_sep_and_overwriting_its_input(kept):
    tmp, _, dev, _ = kept
    assert "text 1 is empty on one side of [SEP]" in one_line([tmp / "model", " [SEP] dog"], "classify.py")
    assert "is not \"first [SEP] second\"" in one_line([tmp / "model", "only one text"], "classify.py")
    assert "is the input file" in one_line([tmp / "model", "--input", dev, "--output", dev], "classify.py")
    assert "the label column 'label' is also a text column" in one_line(
        [tmp / "model", "--input", dev, "--text_columns", "sentence1,label", "--output", tmp / "x.csv"], "classify.py")
    assert f"{tmp} is a folder: name a data file in it" in one_line([tmp / "model", "--input", tmp], "classify.py")
    assert "not a saved classifier" in one_line([tmp, "text"], "classify.py")
    assert f"is a file, not a text: label its rows with --input {dev}" in one_line([tmp / "model", dev],
                                                                                   "classify.py")
    typo = one_line([tmp / "modle", "text"], "classify.py")
    assert typo.endswith(f"no folder {tmp / 'modle'}: check the path (finetune_glue.py ... --save_model DIR made it)")


def test_a_json_row_with_a_lone_surrogate_is_named_unusable_and_written_back_empty_in_its_place(kept, tmp_path, capsys):
    """{"sentence1": "\\ud800 ..."} is valid JSON but no Unicode text: read as a byte that is not UTF-8 (U+FFFD), the
    row is skipped, named, and written back in its place; the output file is valid UTF-8."""
    tmp, _, _, _ = kept
    rows_ = [{"sentence1": "the cat \ud800 sat", "sentence2": "a dog", "no\udc00te": ["x\ud800"]},
             {"sentence1": "the cat", "sentence2": "a dog"}]  # in a key, in a list: written back too
    (tmp_path / "odd.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_), encoding="utf-8")
    classify.main(["--device", "cpu", str(tmp / "model"), "--input", str(tmp_path / "odd.jsonl")])
    out = [json.loads(line) for line in (tmp_path / "odd.predicted.jsonl").read_text(encoding="utf-8").splitlines()]
    assert out[0]["sentence1"] == "the cat \ufffd sat" and out[0]["prediction"] == "" and out[1]["prediction"] != ""
    assert "skipped 1 unusable row (line 1: not UTF-8 text" in capsys.readouterr().err


@pytest.mark.slow
def test_an_output_path_that_cannot_be_written_is_refused_before_any_work_and_names_the_right_flag(kept, ckpt,
                                                                                                   tmp_path):
    """classify's --output a folder or under a file, an input named .cvs (the slip is the input's name, not
    --output's); finetune_glue's --save_model under a file: one line each, before the model is even trained."""
    tmp, train, dev, _ = kept
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    (tmp_path / "adir.csv").mkdir()
    model = tmp / "model"
    assert one_line([model, "--input", dev, "--output", tmp_path / "adir.csv", "--overwrite"], "classify.py").endswith(
        f"--output {tmp_path / 'adir.csv'} is a folder: name a file")
    assert one_line([model, "--input", dev, "--output", tmp_path / "afile" / "x.csv"], "classify.py").endswith(
        f"{tmp_path / 'afile'} is a file, not a folder: name a path in a folder")
    shutil.copyfile(dev, tmp_path / "dev.cvs")
    assert one_line([model, "--input", tmp_path / "dev.cvs"], "classify.py").endswith(
        "must end in .csv, .tsv, .json or .jsonl (check the name)")
    line = one_line([ckpt, "--train_file", train, "--validation_file", dev, "--save_model", tmp_path / "afile" / "m",
                     "--out", tmp_path / "out", "--seeds", "1", "--epochs", "1"])
    assert line.endswith(f"--save_model {tmp_path / 'afile' / 'm'}: {tmp_path / 'afile'} is a file, not a folder: "
                         "name a path in a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir.csv", "afile", "dev.cvs"]  # no output, no --out


def test_classify_never_replaces_an_existing_file_without_overwrite_the_default_name_too(kept, tmp_path, capsys):
    tmp, _, dev, _ = kept
    source = write(tmp_path / "dev.csv", [r for _, r in tasks.read_table(dev)[1]])
    notes, default = tmp_path / "notes.csv", tmp_path / "dev.predicted.csv"
    for target in (notes, default):
        target.write_text("my notes\n", encoding="utf-8")
        flags = ["--output", str(target)] if target == notes else []
        with pytest.raises(SystemExit, match=f"{re.escape(str(target))} exists: .* add --overwrite"):
            classify.main(["--device", "cpu", str(tmp / "model"), "--input", source, *flags])
        assert target.read_text(encoding="utf-8") == "my notes\n" and "wrote" not in capsys.readouterr().out
    classify.main(["--device", "cpu", str(tmp / "model"), "--input", source, "--overwrite"])
    assert tasks.read_table(str(default))[0][-2:] == ["prediction", "probability"]


@pytest.mark.parametrize("script", ["classify", "fill_mask", "finetune_glue"])
def test_every_tool_s_device_defaults_to_auto_so_a_gpu_user_gets_the_gpu(script, tmp_path, monkeypatch):
    module, asked = __import__(script), []
    monkeypatch.setattr(module, "pick_device", lambda name: (asked.append(name), torch.device("cpu"))[1])
    with pytest.raises(SystemExit):  # no such model: it stops after choosing the device
        module.main([str(tmp_path / "nope"), *({"classify": ["a text"], "fill_mask": ["a [MASK] ."]}.get(script, []))])
    assert asked == ["auto"]


@pytest.mark.parametrize("local_bias", [0.0, 1.0])  # 1.0: the tiny preset's, with an attn_bias buffer
def test_a_kept_classifier_loads_without_a_random_init_and_predicts_as_one_built_the_slow_way(local_bias, kept,
                                                                                              tmp_path, monkeypatch):
    """Built without a random init that load_state_dict would overwrite, the saved tensors assigned; the buffers a
    state dict leaves out (pos_table, attn_bias) are real tensors, equal to a fresh encoder's."""
    folder, drawn = shutil.copytree(kept[0] / "model", tmp_path / "model"), []
    saved = torch.load(folder / "model.pt", weights_only=True)
    saved["config"]["local_bias"] = local_bias
    torch.save(saved, folder / "model.pt")
    for name in ("normal_", "uniform_"):  # what nn.init's functions call to draw the numbers
        monkeypatch.setattr(torch.Tensor, name, lambda t, *a, _draw=getattr(torch.Tensor, name), **k: (
            drawn.append(t.numel()), _draw(t, *a, **k))[1])
    model, info, tok = classifier.load_classifier(folder)
    monkeypatch.undo()
    h = saved["head"]
    slow = classifier.GlueModel(CrammedBERT(Config(**saved["config"]), *saved["vocab_seq"]), saved["config"]["n_embd"],
                                h["n_out"], h["hidden"], 0.0, h["pool"], h["sep_id"], h["pair"])
    slow.load_state_dict(saved["model"])
    assert drawn == []  # not one number drawn
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    assert (model.encoder.attn_bias is None) == (local_bias == 0)
    for (name, a), (_, b) in zip(model.encoder.named_buffers(), slow.encoder.named_buffers()):
        assert torch.equal(a, b), name
    split = tasks.Split(["the cat sat", "a dog ran"], ["on the mat", "quickly"], None, None)
    ids = classifier.encode(tok, split, info["max_len"])
    run = type("Run", (), {"eval_batch_size": 8, "pad_id": tok.special["pad"]})
    assert np.array_equal(classifier.predict(model, ids, run, torch.device("cpu")),
                          classifier.predict(slow, ids, run, torch.device("cpu")))


def test_a_saved_classifier_is_replaced_whole_by_a_new_one_never_half(kept, ckpt, tmp_path, monkeypatch):
    tmp, train, dev, _ = kept
    before = {p.name: p.read_bytes() for p in (tmp / "model").iterdir()}
    monkeypatch.setattr(torch, "save", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(SystemExit, match="disk full"):
        fg.main([str(ckpt), "--train_file", train, "--validation_file", dev, "--save_model", str(tmp / "model"),
                 "--out", str(tmp_path), "--epochs", "1", "--seeds", "1", "--device", "cpu"])
    assert {p.name: p.read_bytes() for p in (tmp / "model").iterdir()} == before
    assert not list(tmp.glob("model.tmp-*"))
    assert (tmp_path / "glue.md").is_file(), "the run's results are written before its classifier, and kept"


def test_a_file_excel_saved_comes_back_as_excel_reads_it(kept, tmp_path, capsys):
    tmp, _, _, _ = kept  # a pair task: sentence1, sentence2
    rows_ = ["sentence1;sentence2;note", "le café est chaud;the cat sat;à voir", "a dog ran;the sun;ok"]
    (tmp_path / "excel.csv").write_bytes("\r\n".join(rows_).encode("cp1252") + b"\r\n")  # European Excel's "CSV"
    classify.main(["--device", "cpu", str(tmp / "model"), "--input", str(tmp_path / "excel.csv")])
    raw = (tmp_path / "excel.predicted.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and raw.split(b"\n")[0].count(b";") == 4  # Excel reads UTF-8 so marked
    columns, back = tasks.read_table(str(tmp_path / "excel.predicted.csv"))
    assert columns[:3] == ["sentence1", "sentence2", "note"] and back[0][1]["note"] == "à voir"
    (tmp_path / "plain.csv").write_text("sentence1,sentence2\na dog ran,the sun\n", encoding="utf-8")
    classify.main(["--device", "cpu", str(tmp / "model"), "--input", str(tmp_path / "plain.csv")])
    assert (tmp_path / "plain.predicted.csv").read_bytes().startswith(b"sentence1,sentence2,prediction")  # as it came


def test_a_saved_classifier_of_another_task_is_never_replaced(kept, ckpt, tmp_path):
    tmp, _, _, _ = kept  # its task: "pairs" (the training file's folder)
    before = {p.name: p.read_bytes() for p in (tmp / "model").iterdir()}
    other = write(tmp_path / "topics.csv", rows(9))
    with pytest.raises(SystemExit, match="holds the classifier of another task \\('pairs', not 'topics'\\): name "
                                         "another folder"):
        fg.main([str(ckpt), "--train_file", other, "--validation_file", other, "--save_model", str(tmp / "model"),
                 "--out", str(tmp_path), "--epochs", "1", "--seeds", "1", "--device", "cpu"])
    assert {p.name: p.read_bytes() for p in (tmp / "model").iterdir()} == before


# ------------------------------------------------------------------------------------------ what a student's files do

def test_excel_s_windows_csv_semicolons_and_spaced_headers_read_as_meant(tmp_path, capsys):
    (tmp_path / "cp1252.csv").write_bytes("text,label\r\ncafé très bon,positif\r\nmauvais,négatif\r\n".encode("cp1252"))
    columns, rows = tasks.read_table(str(tmp_path / "cp1252.csv"))
    tasks.read_table(str(tmp_path / "cp1252.csv"))  # read again (finetune_glue.py reads a training file twice)
    (tmp_path / "bom1252.csv").write_bytes(b"\xef\xbb\xbf" + "text,label\r\ncafé,positif\r\n".encode("cp1252"))
    assert tasks.read_table(str(tmp_path / "bom1252.csv"))[0] == ["text", "label"]  # a UTF-8 mark on Windows bytes
    assert [r["label"] for _, r in rows] == ["positif", "négatif"]
    assert capsys.readouterr().err.count("read as Windows-1252") == 2  # said once a file: these two
    for codec in ("utf-16", "utf-16-be"):  # Excel's "Unicode Text", PowerShell 5.1's `>`: UTF-16 with its mark
        (tmp_path / "u16.csv").write_bytes(("\ufeff" * (codec == "utf-16-be") + "text,label\r\ncafé,positif\r\n")
                                           .encode(codec))
        assert tasks.read_table(str(tmp_path / "u16.csv"))[1][0][1] == {"text": "café", "label": "positif"}
    (tmp_path / "semi.csv").write_text('Text ; Label\n"a; b";1\nc;0\n', encoding="utf-8")
    columns, rows = tasks.read_table(str(tmp_path / "semi.csv"))
    assert columns == ["Text", "Label"] and [r["Text"] for _, r in rows] == ["a; b", "c"]


def test_json_errors_name_the_file_line_and_an_object_may_hold_its_rows_beside_other_keys(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"version": "1.0", "data": rows(3)}), encoding="utf-8")
    assert len(tasks.read_table(str(tmp_path / "meta.json"))[1]) == 3
    (tmp_path / "bad.jsonl").write_text(json.dumps(rows(1)[0]) + "\n" * 3 + '{"text": "x",\n', encoding="utf-8")
    with pytest.raises(tasks.CramError, match=r"bad.jsonl line 4 is not JSON"):
        tasks.read_table(str(tmp_path / "bad.jsonl"))


def test_texts_the_tokenizer_cannot_read_are_named_in_a_warning(capsys):
    class Tok:
        special, single_as_pair = {"cls": 2, "sep": 3}, False
        encode_batch = staticmethod(lambda texts: [[5] * t.isascii() for t in texts])
    fg.encode(Tok, tasks.Split(["good", "Это отличный товар", "👍"], None, None, None), 16)
    assert "no token the tokenizer keeps in 2 texts (e.g. 'Это отличный товар')" in capsys.readouterr().err


def test_the_first_rows_of_a_sorted_file_must_hold_every_class(ckpt, tmp_path):
    items = sorted(rows(12), key=lambda r: r["label"])
    path = write(tmp_path / "sorted.csv", items)
    line = one_line([ckpt, "--train_file", path, "--validation_file", path, "--max_train", "4", "--device", "cpu",
                     "--epochs", "1", "--seeds", "1", "--out", tmp_path])
    assert "no usable training row is labelled 'sport' in the first 4 (--max_train 4" in line


def test_save_model_into_the_folder_you_are_in_is_refused_before_training(ckpt, tmp_path, monkeypatch):
    path = write(tmp_path / "t.csv", rows(6))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="is the folder you are in"):
        fg.main([str(ckpt), "--train_file", path, "--validation_file", path, "--save_model", "."])


def test_classify_writes_every_row_keeps_json_types_and_scores_falsy_labels(ckpt, tmp_path, capsys):
    items = [{"text": r["sentence"], "label": i % 2} for i, r in enumerate(rows(12))]
    train = write(tmp_path / "ints.jsonl", items)
    fg.main([str(ckpt), "--train_file", train, "--validation_file", train, "--save_model", str(tmp_path / "m"),
             "--out", str(tmp_path), "--epochs", "1", "--seeds", "1", "--device", "cpu"])
    dev = write(tmp_path / "dev.jsonl", items[:5] + [{"text": " ", "label": 0}] + items[5:])
    classify.main(["--device", "cpu", str(tmp_path / "m"), "--input", dev, "--output",
                   str(tmp_path / "new" / "out.json")])
    printed = capsys.readouterr()
    written = json.loads((tmp_path / "new" / "out.json").read_text(encoding="utf-8"))
    assert len(written) == 13 and written[5]["prediction"] == "" and "on the 12 labelled rows" in printed.out
    assert "13 rows to" in printed.out and "12 with a prediction (the other 1: no usable text)" in printed.out
    renamed = write(tmp_path / "renamed.jsonl", [{"text": r["text"], "category": r["label"]} for r in items])
    classify.main(["--device", "cpu", str(tmp_path / "m"), "--input", renamed])
    printed = capsys.readouterr().out
    assert "no metric: " in printed and "has no column 'label'; if another holds its true labels, name it" in printed
    classify.main(["--device", "cpu", str(tmp_path / "m"), "--input", renamed, "--label_column", "category",
                   "--overwrite"])
    assert "on the 12 labelled rows" in capsys.readouterr().out
    assert all(isinstance(r["prediction"], int) for r in written if r["text"].strip())
    classify.main(["--device", "cpu", str(tmp_path / "m"), "--input", str(tmp_path / "new" / "out.json")])  # again
    again = json.loads((tmp_path / "new" / "out.predicted.json").read_text(encoding="utf-8"))
    assert list(again[0]) == ["text", "label", "prediction", "probability"]


def test_classify_writes_a_row_it_cannot_read_in_its_place_so_predictions_stay_in_line(kept, tmp_path, capsys):
    tmp, _, dev, _ = kept
    source = tmp_path / "odd.csv"  # line 3: an unquoted comma, 3 fields for 2 columns
    source.write_text("sentence1,sentence2\nthe cat,a dog\nwell, it was,bad\nthe end,of it\n", encoding="utf-8")
    classify.main(["--device", "cpu", str(tmp / "model"), "--input", str(source)])
    captured = capsys.readouterr()
    assert "wrote 3 rows" in captured.out and "2 with a prediction" in captured.out and "line 3" in captured.err
    lines = (tmp_path / "odd.predicted.csv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and lines[2] == ",,," and lines[1].startswith("the cat,a dog,") and \
        lines[3].startswith("the end,of it,")  # the row read as empty, in its place: line n is row n again


@pytest.mark.parametrize("edit, needle", [
    (lambda info: info.pop("max_len"), "KeyError: 'max_len'"),
    (lambda info: info.update(eval_batch_size="64"), "'eval_batch_size' holds '64'"),
    (lambda info: info.update(max_len=512), "does not match model.pt"),
    (lambda info: info.update(labels=None), "does not match model.pt"),
    (None, "classifier.json is damaged (JSONDecodeError"),
])
def test_a_classifier_json_edited_by_hand_is_one_line(edit, needle, kept, tmp_path):
    folder = tmp_path / "edited"
    folder.mkdir()
    for p in (kept[0] / "model").iterdir():
        (folder / p.name).write_bytes(p.read_bytes())
    info = json.loads((folder / "classifier.json").read_text(encoding="utf-8"))
    text = json.dumps(info)[:-2] if edit is None else (edit(info), json.dumps(info))[1]
    (folder / "classifier.json").write_text(text, encoding="utf-8")
    assert needle in one_line([folder, "the cat [SEP] a dog"], "classify.py")


# ---------------------------------------------------------------------------------------------- files people hand in

def test_a_file_that_is_not_text_or_is_a_folder_is_named_as_such(tmp_path):
    cases = {"book.csv": (b"PK\x03\x04" + bytes(200), "is a zip archive, not text (an Excel workbook, .xlsx?)"),
             "data.csv": (b"\x1f\x8b\x08" + bytes(100), "is gzip-compressed, not text"),
             "nomark.csv": ("text,label\r\nthe cat,pets\r\n".encode("utf-16-le"), "is UTF-16 without its byte-order "
                            "mark: save it as text in UTF-8")}
    for name, (raw, needle) in cases.items():
        (tmp_path / name).write_bytes(raw)
        with pytest.raises(tasks.CramError, match=re.escape(needle)):
            tasks.read_table(str(tmp_path / name))
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(tasks.CramError, match=r"folder.csv is a folder: name a data file in it"):
        tasks.read_table(str(tmp_path / "folder.csv"))
    assert tasks.not_text(b"text,label\nthe \x00cat sat on the mat today,pets\nthe dog,pets\n") is None  # one NUL
    # in a text is still text (Python 3.11's csv reads it; 3.9's refuses it in one line: "line 2 is not CSV")


def test_a_header_that_names_a_column_twice_or_a_comma_file_named_tsv_is_one_line(tmp_path):
    (tmp_path / "dup.csv").write_text("text,label,text\nthe cat,pets,note 1\nthe dog,pets,note 2\n", encoding="utf-8")
    with pytest.raises(tasks.CramError, match=r"dup.csv: its header names the column 'text' twice \(in any case\)"):
        task_of(str(tmp_path / "dup.csv"))
    (tmp_path / "trailing.csv").write_text("text,label,,,note,note\nthe cat,pets,,,a,b\nthe dog,birds,,,a,b\n",
                                           encoding="utf-8")  # Excel's empty columns; a name twice that is not read
    assert tasks.read_split(task_of(str(tmp_path / "trailing.csv")), str(tmp_path / "trailing.csv")).a == [
        "the cat", "the dog"]
    (tmp_path / "commas.tsv").write_text("text,label\nthe cat,pets\n", encoding="utf-8")
    with pytest.raises(tasks.CramError, match=r"holds commas, not tabs: a comma-separated file must be named .csv"):
        tasks.read_table(str(tmp_path / "commas.tsv"))


def test_a_stray_quote_says_how_many_lines_it_swallowed(tmp_path, capsys):
    lines = ["sentence,label"] + [f"sentence {i},{TOPICS[i % 3]}" for i in range(30)]
    lines[4] = '"a quote that never closes,sport'
    (tmp_path / "stray.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    split = tasks.read_split(task_of(write(tmp_path / "good.csv", rows(9))), str(tmp_path / "stray.csv"))
    assert len(split.a) == 3  # lines 2-4: the rest is one field
    assert "skipped 1 unusable row (line 5: 1 field, expected 2; a quote opened here runs to line 31: read as " \
           "one row" in capsys.readouterr().err


def test_json_of_columns_one_object_or_nested_values_is_named_not_trained_on(tmp_path, capsys):
    items = rows(6)
    (tmp_path / "pandas.json").write_text(json.dumps({c: {str(i): r[c] for i, r in enumerate(items)}
                                                      for c in ("sentence", "label")}), encoding="utf-8")
    with pytest.raises(tasks.CramError, match=r"holds a dict of columns \(pandas' to_json\(\) writes that\): save a "
                                              r"list of rows, to_json\(path, orient='records'\)"):
        tasks.read_table(str(tmp_path / "pandas.json"))
    (tmp_path / "one.json").write_text(json.dumps(items[0]), encoding="utf-8")
    with pytest.raises(tasks.CramError, match=r"one.json holds one JSON object: a list of objects"):
        tasks.read_table(str(tmp_path / "one.json"))
    items[2]["sentence"], items[4]["label"] = {"title": "the cat", "lang": "en"}, ["sport"]
    (tmp_path / "nested.json").write_text(json.dumps(items), encoding="utf-8")
    task = task_of(str(tmp_path / "nested.json"))
    assert task.labels == ("Sci/Tech", "sport", "world")  # not "['sport']"
    assert len(tasks.read_split(task, str(tmp_path / "nested.json")).a) == 4
    assert "'sentence' holds a JSON object, not text or a number; object 5: 'label' holds a JSON list" in \
        capsys.readouterr().err


def test_a_json_object_naming_a_key_twice_is_skipped_not_read_as_its_last_value(tmp_path, capsys):
    text = json.dumps(rows(6))
    text = text.replace('{"sentence"', '{"sentence": "the first text", "sentence"', 1)  # row 1: the key twice
    for name, data in (("twice.json", text), ("twice.jsonl", "\n".join(json.dumps(r) for r in rows(6)[1:]) + "\n"
                       + '{"sentence": "a", "label": "sport", "label": "world"}\n')):
        (tmp_path / name).write_text(data, encoding="utf-8")
        split = tasks.read_split(task_of(write(tmp_path / "good.csv", rows(9))), str(tmp_path / name))
        assert len(split.a) == 5 and "the first text" not in split.a
        assert "its object names the key " in capsys.readouterr().err
    ids = [dict(r, id=i) for i, r in enumerate(rows(6))]  # a key the task does not read, twice: the rows are read
    (tmp_path / "ids.jsonl").write_text("".join(json.dumps(r)[:-1] + f', "id": {r["id"]}}}\n' for r in ids), "utf-8")
    assert len(tasks.read_split(task_of(str(tmp_path / "good.csv")), str(tmp_path / "ids.jsonl")).a) == 6
    nested = '{"sentence": {"x": 1, "x": 2}, "label": "sport"}\n'  # a read value that is an object: its kind named
    (tmp_path / "nested.jsonl").write_text(json.dumps(rows(1)[0]) + "\n" + nested, encoding="utf-8")
    tasks.read_split(task_of(str(tmp_path / "good.csv")), str(tmp_path / "nested.jsonl"))
    assert "'sentence' holds a JSON object" in capsys.readouterr().err
    (tmp_path / "one.jsonl").write_text('{"sentence": "hello", "label": "sport", "tags": []}\n', encoding="utf-8")
    assert len(tasks.read_split(task_of(str(tmp_path / "good.csv")), str(tmp_path / "one.jsonl")).a) == 1


def test_a_label_only_skipped_rows_hold_is_no_class_and_an_empty_json_list_is_an_empty_file(tmp_path, capsys):
    items = rows(9) + [{"sentence": "", "label": "neutral"}]  # its text empty: read_split skips the row
    task = task_of(write(tmp_path / "t.csv", items))
    assert task.labels == ("Sci/Tech", "sport", "world")  # not "neutral": no class that no row can train
    assert len(tasks.load_task(task, argparse.Namespace(max_train=0))[0].a) == 9
    (tmp_path / "empty.json").write_text("[]\n", encoding="utf-8")
    with pytest.raises(tasks.CramError, match=r"empty.json is empty: it needs a header line and rows"):
        tasks.read_split(task, str(tmp_path / "empty.json"))


def test_json_rows_are_named_by_line_unless_a_list_and_a_header_s_column_twice_in_two_cases_is_refused(tmp_path,
                                                                                                          capsys):
    lines = [json.dumps(r) for r in rows(6)]
    lines[3] = json.dumps({"sentence": "", "label": "sport"})
    (tmp_path / "lines.json").write_text("\n\n".join(lines) + "\n", encoding="utf-8")  # JSON Lines in a .json
    tasks.read_split(task_of(write(tmp_path / "good.csv", rows(9))), str(tmp_path / "lines.json"))
    assert "(line 7: 'sentence' is empty)" in capsys.readouterr().err  # its line, not its object's number
    (tmp_path / "empty.json").write_text('{"data": []}', encoding="utf-8")
    with pytest.raises(tasks.CramError, match="empty.json is empty"):
        tasks.read_split(task_of(str(tmp_path / "good.csv")), str(tmp_path / "empty.json"))
    (tmp_path / "cases.csv").write_text("Text,text,label\na,b,sport\nc,d,world\n", encoding="utf-8")
    with pytest.raises(tasks.CramError, match=r"names the column 'text' twice \(in any case\)"):
        task_of(str(tmp_path / "cases.csv"))


def test_a_file_mostly_utf_8_keeps_its_utf_8_lines_and_says_how_many_were_not(tmp_path, capsys):
    raw = "text,label\nCafé crème,food\n".encode("utf-8") + "Naïve defending,sport\n".encode("cp1252")
    (tmp_path / "mixed.csv").write_bytes(raw)
    assert [r["text"] for _, r in tasks.read_table(str(tmp_path / "mixed.csv"))[1]] == ["Café crème", "Naïve defending"]
    assert "mixed.csv: 1 line of 3 not UTF-8 (the first: line 3)" in capsys.readouterr().err


def test_headers_in_another_case_are_the_columns_the_label_may_not_be_a_text(tmp_path):
    path = write(tmp_path / "t.csv", [{"Text": r["sentence"], "LABEL": r["label"]} for r in rows(6)])
    assert task_of(path).columns == ("Text", None, "LABEL")
    with pytest.raises(tasks.CramError, match=r"the label column 'LABEL' is also a text column: the model would read"):
        tasks.read_split(task_of(path, text_columns="label"), path)
    other = write(tmp_path / "dev.csv", [{"text": r["sentence"], "label": r["label"]} for r in rows(6, seed=1)])
    assert len(tasks.read_split(task_of(path), other).a) == 6  # the dev file's text is the training file's Text


@pytest.mark.parametrize("labels, needle", [
    (["4,5", "2,0", "3,25"], "the labels ['2,0', '3,25', '4,5'] are read as words: numbers with a comma?"),
    (["sport", "world", "NaN"], "the labels ['NaN'] may stand for empty values: each is a class here"),
    (["sport", "Sport", "world"], "the labels ['Sport', 'sport'] differ only in case: each is a class")])
def test_labels_that_look_like_a_mistake_are_noted_under_the_task_line(labels, needle, tmp_path):
    path = write(tmp_path / "t.csv", rows(9, label=lambda i: labels[i % 3]))
    task = task_of(path)
    assert needle in tasks.describe(task, tasks.read_split(task, path))
    assert "note" not in tasks.describe(task_of(write(tmp_path / "g.csv", rows(9))), tasks.read_split(task, path))


def test_a_label_on_one_training_row_beside_labels_on_many_is_noted_as_a_possible_typo(tmp_path):
    path = write(tmp_path / "t.csv", rows(21, label=lambda i: "wrold" if i == 20 else ["sport", "world"][i % 2]))
    task = task_of(path)
    line = tasks.describe(task, tasks.read_split(task, path))
    assert "labels 'sport' 10, 'world' 10, 'wrold' 1\nnote: the labels ['wrold'] are on one training row each: a " \
           "typo? or a class too rare to learn" in line
    few = write(tmp_path / "few.csv", rows(9, label=lambda i: ["a", "b", "c", "d", "e", "f", "g", "h", "i"][i]))
    assert "note" not in tasks.describe(task_of(few), tasks.read_split(task_of(few), few))  # nine classes of one


def test_validation_rows_that_are_training_rows_are_counted(tmp_path, capsys):
    train, other = write(tmp_path / "train.csv", rows(12)), write(tmp_path / "dev.csv", rows(6, seed=1))
    args = fg.parse_args(["ckpt.pt", "--train_file", train, "--validation_file", train])
    tasks.load_task(tasks.file_task(args), args)
    assert "note: 12 of " in capsys.readouterr().err  # the same file twice
    args = fg.parse_args(["ckpt.pt", "--train_file", train, "--validation_file", other])
    tasks.load_task(tasks.file_task(args), args)
    assert "training rows too" not in capsys.readouterr().err


def test_a_quote_left_open_in_the_label_skips_its_row_and_names_it_not_a_class_of_many_lines(tmp_path, capsys):
    lines = ["sentence,label"] + [f"sentence {i},{TOPICS[i % 3]}" for i in range(12)]
    lines[6] = 'sentence 5,"sport'  # the rest of the file is this label
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    task = task_of(str(tmp_path / "t.csv"))
    assert task.labels == ("Sci/Tech", "sport", "world") and len(tasks.read_split(task, task.train).a) == 5
    assert "line 7: the label 'sport'... runs on over 7 lines: a quote left open?" in capsys.readouterr().err


def test_json_of_two_splits_or_one_row_with_a_list_reads_as_said(tmp_path):
    (tmp_path / "both.json").write_text(json.dumps({"version": 1, "train": rows(3), "validation": rows(2)}),
                                        encoding="utf-8")
    with pytest.raises(tasks.CramError, match=r"holds 2 lists of rows \(train, validation\): one file a list"):
        tasks.read_table(str(tmp_path / "both.json"))
    (tmp_path / "one.jsonl").write_text(json.dumps({"text": "the cat", "tags": ["a", "b"], "label": "pets"}) + "\n",
                                        encoding="utf-8")
    assert tasks.read_table(str(tmp_path / "one.jsonl")) == (["text", "tags", "label"], [
        (1, {"text": "the cat", "tags": ["a", "b"], "label": "pets"})])


def test_rows_inside_a_text_that_a_later_quote_closed_are_named(tmp_path, capsys):
    lines = ["sentence,label"] + [f"sentence {i},{TOPICS[i % 3]}" for i in range(12)]
    lines[4], lines[7] = '"sentence 3,sport', 'sentence 6 "says, world'  # lines 5-8: one text, its field count right
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    task = task_of(write(tmp_path / "good.csv", rows(9)))
    assert len(tasks.read_split(task, str(tmp_path / "t.csv")).a) == 9
    assert "the text of line 5 holds 3 lines that end like a row (',sport'): a quote left open there? (1 text in " \
           "all)" in capsys.readouterr().err
    tasks.read_split(task, write(tmp_path / "fine.csv", [{"sentence": "I like sport,\nand Sci/Tech", "label": "world"}]
                                 + rows(3)))  # a text's own line break, and a comma before a label's word
    assert "quote left open" not in capsys.readouterr().err
