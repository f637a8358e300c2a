"""How text becomes ids: the tokenizers behind one small interface (Tok), as prepare.py trains or picks them.

- the paper's: a WordPiece vocabulary trained on the pretraining text itself (train_wordpiece; the tokenizers
  library), uncased ASCII, the five special tokens at ids 0..4 (SPECIALS);
- GPT-2's byte-level BPE (gpt2_tok; tiktoken), our special tokens just above its 50257 ids;
- a Hugging Face tokenizer folder (hf_tokenizer): the paper's released model, or a folder official.py exported.
load_tokenizer picks the one a folder holds: a prepared data set (its meta.json says which), a cram.py run's out/
(meta.json and tokenizer.json beside ckpt.pt), or a Hugging Face folder.
"""
import json
import os
import re
from pathlib import Path

from errors import LONGEST_ROW, die, is_file_name, text_of

SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}  # ids 0..4, in order


class Tok:
    """What cram.py and finetune_glue.py use: encode_batch (adds no specials), decode, special ids, vocab_size."""

    def __init__(self, kind, backend):
        self.kind, self.backend, first = kind, backend, 50257 if kind == "gpt2" else 0  # GPT-2's ids: 0..50256
        self.special = {k: first + i for i, k in enumerate(SPECIALS)}  # just above them, or 0..4 (train_wordpiece)
        self.single_as_pair = False  # fine-tuning: [CLS] A [SEP]; True: [CLS] A [SEP] [SEP] (the paper's release)
        self.vocab_size = first + len(SPECIALS) if kind == "gpt2" else backend.get_vocab_size()

    def encode_raw(self, texts):
        """The library's own batch call, on every core: tiktoken's lists of ids, or tokenizers' Encodings."""
        texts = [unicode_text(t) for t in texts]
        if self.kind == "gpt2":
            return self.backend.encode_ordinary_batch(texts, num_threads=os.cpu_count() or 1)
        # encode_batch_fast skips the character offsets we never use: the same ids, about 1.5x faster
        return getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)(texts, add_special_tokens=False)

    def encode_batch(self, texts):
        return [e if self.kind == "gpt2" else e.ids for e in self.encode_raw(texts)]

    def decode(self, ids):
        if self.kind != "gpt2":
            return self.backend.decode([int(i) for i in ids], skip_special_tokens=False)
        names = {i: SPECIALS[k].encode() for k, i in self.special.items()}  # tiktoken knows nothing of our specials
        pieces = (names.get(i) or self.backend.decode_single_token_bytes(i) for i in map(int, ids))
        return b"".join(pieces).decode("utf-8", errors="replace")


def gpt2_tok():
    import tiktoken
    try:
        return Tok("gpt2", tiktoken.get_encoding("gpt2"))
    except Exception as e:
        die(f"cannot load tiktoken's gpt2 files ({type(e).__name__}): go online once, or set TIKTOKEN_CACHE_DIR")


def wordpiece(vocab=None):
    """A WordPiece tokenizer, the paper's way: lower-case ASCII (accents stripped, other characters and control codes
    dropped), words and punctuation split as BERT does, "##" marking a piece inside a word; vocab: {token: id}."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))  # vocab None: empty, for a trainer to fill
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents(),
                                           normalizers.Replace(Regex(r"[^\t\n\r\x20-\x7e]"), "")])
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.BertPreTokenizer(), decoders.WordPiece(prefix="##")
    return tok


# A word's inner pieces start as "##" + a letter or digit: BERT's split leaves nothing else inside a word.
INNER = ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def unicode_text(text):
    """`text` as valid Unicode: a lone surrogate (a JSON "\\ud800", or bytes that were not UTF-8 on a command line)
    becomes U+FFFD, as a bad byte in a file does, where the tokenizers would refuse the whole batch."""
    return LONE_SURROGATE.sub("\ufffd", text)


def train_wordpiece(docs, vocab_size):
    """The paper's tokenizer: WordPiece trained on our own text, the specials at 0..4. The same text gives the same
    tokenizer on every run: the trainer numbers a word's inner letters ("##e") in the order it meets them in a hash
    map, which differs run to run, and breaks ties between equally frequent merges by those numbers (tokenizers
    issue 1794), so we number them first, as specials of the trainer, then rebuild the tokenizer from its vocabulary
    with only our five specials: "##e" must be an ordinary piece (a special token is matched as it is in raw text,
    and dropped by decode)."""
    from tokenizers import trainers
    tok = wordpiece()
    tok.train_from_iterator(map(unicode_text, docs), trainers.WordPieceTrainer(vocab_size=vocab_size,
                                                            special_tokens=[*SPECIALS.values(), *INNER]))
    tok = wordpiece(tok.get_vocab())
    tok.add_special_tokens([*SPECIALS.values()])
    assert [tok.token_to_id(s) for s in SPECIALS.values()] == [0, 1, 2, 3, 4], "the special ids moved"
    return Tok("wordpiece", tok)


# A Hugging Face tokenizer folder (the paper's release, a folder exported by official.py, a classifier kept from
# them): tokenizer.json, its special tokens named in special_tokens_map.json / tokenizer_config.json.
HF_TOKENIZER_FILES = ("special_tokens_map.json", "tokenizer_config.json")


def is_hf_tokenizer_folder(folder):
    """No meta.json (prepare.py's), but a Hugging Face tokenizer's files: the release, or a classifier saved from it."""
    return not (folder / "meta.json").is_file() and any((folder / n).is_file() for n in HF_TOKENIZER_FILES)


def hf_special_names(folder):
    """{"pad": "<pad>", "bos": "<s>", ...}: the tokens a Hugging Face folder's two files name (as a name, or a
    {"content": name, ...})."""
    names = {}
    for name in reversed(HF_TOKENIZER_FILES):  # special_tokens_map.json wins where both name a token
        spec = json.loads(text_of(folder / name)) if (folder / name).is_file() else {}
        for key, value in spec.items():
            value = value.get("content") if isinstance(value, dict) else value
            if key.endswith("_token") and value and isinstance(value, str):  # a list there names no token
                names[key.removesuffix("_token")] = value
    return names


def hf_tokenizer(folder):
    """A prepare.Tok over the folder's tokenizer.json: the special ids of the tokens its files name (the release:
    <pad> <unk> <cls> <sep> <mask>, ids of its own). A single text is fine-tuned as the folder's own single template
    frames it: the release's is A <sep>, with no <cls> for the head to read, so it is framed as the official
    evaluation did (cramming/data/downstream_task_preparation.py), a pair with an empty second: <cls> A <sep> <sep>;
    a folder exported from a cram.py checkpoint says [CLS] A [SEP], as finetune_glue.py frames the checkpoint's."""
    from tokenizers import Tokenizer
    try:
        names = hf_special_names(folder)
        text = text_of(folder / "tokenizer.json")  # a byte-order mark is fine
        tok, spec = Tok("wordpiece", Tokenizer.from_str(text)), json.loads(text)
    except Exception as e:  # not JSON, not a tokenizer (tokenizers raises a bare Exception), missing
        die(f"cannot load the tokenizer in {folder} ({type(e).__name__}: {' '.join(str(e).split())[:120]}): "
            "download the model folder again")
    tok.kind = spec["model"]["type"].lower()  # "wordpiece" for the release: fill_mask shows its "##" pieces
    for kind in ("pad", "unk", "cls", "sep", "mask"):
        if (i := tok.backend.token_to_id(names.get(kind) or "")) is None:
            die(f"{folder}: no {kind} token {names[kind]!r} in tokenizer.json (named in {HF_TOKENIZER_FILES})" if kind
                in names else f"{folder}: neither of {HF_TOKENIZER_FILES} names a {kind} token by a name")
        tok.special[kind] = i
    single = (spec.get("post_processor") or {}).get("single") or [{}]
    tok.single_as_pair = single[0].get("SpecialToken", {}).get("id") != names["cls"]  # A <sep>: no <cls> first
    return tok


# Which tokenizer a folder holds: meta.json, the card prepare.py writes last for a set, names it.
def read_meta(data_dir):
    try:  # JSON, with every field that cram.py and finetune_glue.py read, of the type prepare.py writes
        meta = json.loads(text_of(path := Path(data_dir) / "meta.json"))
        n, ids = meta["num_sequences"], meta["special_ids"]
        if not all(type(v) is int for v in (meta["seq_len"], meta["vocab_size"], ids["mask"], n["train"], n["val"])):
            raise ValueError("a count or an id is not a whole number")
        if not 1 <= meta["seq_len"] <= LONGEST_ROW or not 1 <= meta["vocab_size"] <= 65536 or min(
                n["train"], n["val"]) < 0 or not all(  # an id past the embedding: IndexError
                type(i) is int and 0 <= i < meta["vocab_size"] for i in ids.values()):
            raise ValueError(f"seq_len is outside 1..{LONGEST_ROW}, vocab_size outside 1..65536 (uint16 ids), a count "
                             "below 0, or a special id outside 0..vocab_size-1")
        if meta.get("tokenizer_file") is not None and not is_file_name(meta["tokenizer_file"]):  # cram.py copies it
            raise ValueError(f"tokenizer_file {meta['tokenizer_file']!r} is not a file name in the folder itself")
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:  # JSON and UTF-8 errors: ValueErrors
        die(f"no {path}: {'check the path, or ' * (not path.parent.is_dir())}run `python prepare.py --out "
            f"{data_dir}` first (the README's and the class's data: add --vocab_size 8192 --max_tokens_per_char 0.3)"
            if isinstance(e, FileNotFoundError) else
            f"{path} is damaged ({type(e).__name__}: {e}): prepare the data again, or copy the good one there")
    return meta


def load_tokenizer(data_dir, vocab=None):
    """A prepared set's tokenizer, or a Hugging Face folder's (hf_tokenizer). With vocab: the one a model was trained
    with (cram.py copies meta.json and tokenizer.json beside ckpt.pt), checked against the model's vocabulary."""
    fix = ("use the tokenizer of the data the model was trained on: that data folder (fill_mask.py's and "
           "finetune_glue.py's --tokenizer_dir), or its meta.json and tokenizer.json beside the checkpoint, as "
           "cram.py leaves them") if vocab else "prepare the data again"
    if is_hf_tokenizer_folder(Path(data_dir)):  # no meta.json but special_tokens_map.json or tokenizer_config.json
        tok = hf_tokenizer(Path(data_dir))
    elif vocab and not (Path(data_dir) / "meta.json").is_file():
        die(f"no tokenizer in {data_dir} (meta.json missing): {fix}")
    elif (meta := read_meta(data_dir)).get("tokenizer") == "gpt2":
        tok = gpt2_tok()
    else:
        from tokenizers import Tokenizer  # meta.json is written last, so tokenizer.json is there
        try:
            text = text_of(Path(data_dir) / "tokenizer.json")  # a byte-order mark is fine
            tok = Tok("wordpiece", Tokenizer.from_str(text))
        except Exception as e:  # tokenizers raises a bare Exception: missing, not JSON, not a tokenizer
            die(f"cannot load {data_dir}/tokenizer.json ({e}): {fix}, or copy the good one there")
        tok.special = dict(meta["special_ids"])  # 0..4 for our WordPiece; a pre-tokenized set's own (<mask>, ...)
        names = meta.get("special_tokens")  # their tokens, named in meta.json since 2026-11-25; before: ours
        names = names if isinstance(names, dict) else SPECIALS
        for kind, i in tok.special.items():  # an id that names another token would mask, pad or frame with it
            if (token := tok.backend.id_to_token(i)) != names.get(kind):
                die(f"{data_dir}/meta.json: its {kind} id {i} is {token!r} in tokenizer.json, not "
                    f"{names.get(kind)!r}: {fix}")
    if vocab and tok.vocab_size != vocab:
        die(f"the tokenizer in {data_dir} has {tok.vocab_size} tokens but the model was trained with {vocab}: {fix}")
    return tok
