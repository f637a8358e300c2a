"""What several test files share: a tiny checkpoint in cram.py's layout, with its tokenizer beside it."""
import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from cram import Config, CrammedBERT  # noqa: E402

WORDS = ("the a cat dog sat on mat is not good bad movie film he said \" ' , . ? ! yes no man woman play "
         "plays playing ran runs quickly why what who where how it was were").split()


@pytest.fixture(scope="session")
def ckpt(tmp_path_factory):
    """A 1-layer, 32-wide checkpoint in cram.py's layout, with a tiny WordPiece tokenizer beside it."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    folder = tmp_path_factory.mktemp("ckpt")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.save(str(folder / "tokenizer.json"))
    meta = {"version": 1, "tokenizer": "wordpiece", "tokenizer_file": "tokenizer.json", "vocab_size": len(vocab),
            "special_ids": {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}, "seq_len": 128,
            "num_sequences": {"train": 1, "val": 1}}
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    cfg = Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64)
    torch.manual_seed(1234)  # not a fine-tuning seed, so --random_init's weights differ from these
    model = CrammedBERT(cfg, len(vocab), 128)
    torch.save({"model": model.state_dict(), "config": dataclasses.asdict(cfg), "vocab_size": len(vocab),
                "seq_len": 128, "meta": meta, "step": 0}, folder / "ckpt.pt")
    return folder / "ckpt.pt"
