"""Poke a pretrained model: fill the [MASK] slots of a sentence and print the top predictions with probabilities.

    python fill_mask.py out/ckpt.pt "the capital of france is [MASK] ." --top_k 5
    python fill_mask.py out/ckpt.pt "he [MASK] to the [MASK] ." "she plays [MASK] ."   # several sentences and masks
    python fill_mask.py out/ckpt.pt "..." --tokenizer_dir data/wiki8k   # the tokenizer of another prepare.py output
    python fill_mask.py crammed-bert "paris is the capital of [MASK] ."   # the paper's released model (official.py)

The model sees the sentence as it saw text in pretraining (encode_for_mlm), runs the encoder and the tied decoder
at the [MASK] positions (CrammedBERT.forward), and a softmax over the vocabulary gives each slot its own top-k.
WordPiece pieces that continue a word are shown with their "##"; GPT-2 tokens are quoted, leading space included.
"""
import argparse
import math
import os
import re
import sys

import torch

from cram import CramError, not_readable, pick_device, read_checkpoint
from hardware import safe_console
from official import load_pretrained  # a cram.py checkpoint or the paper's released folder
from tokenizer import load_tokenizer


def encode_for_mlm(tok, text):
    """Token ids of `text` as a pretraining row holds a document: its tokens, then [SEP] (rows are packed, no
    [CLS]; prepare.pack). Each [MASK] (any case; or the paper's release's <mask>) becomes the model's mask id: split
    around it ourselves, because tiktoken knows none of our specials (WordPiece would match "[MASK]", in capitals)."""
    pieces = re.split(r"\[mask\]|<mask>", text, flags=re.IGNORECASE)
    if tok.kind == "gpt2":  # a GPT-2 word token carries its leading space: " paris", so the mask takes the space
        pieces = [p.removesuffix(" ") for p in pieces[:-1]] + pieces[-1:]
    ids = []
    for i, piece_ids in enumerate(tok.encode_batch(pieces)):
        ids += ([tok.special["mask"]] if i else []) + piece_ids
    return ids + [tok.special["sep"]]


def how_trained(path, meta):
    """One line on how far the model was trained: a cram.py checkpoint's step, budget used and validation loss (under
    the unigram baseline: the loss of guessing by word frequency alone); the paper's release has no such record."""
    if not os.path.isfile(path):
        return (f"model: {meta.get('folder', path)}, a folder in the paper's release format, which keeps no training "
                "record (the paper's own release trained 24 hours on one A6000, to an MLM loss of about 1.97 on "
                "the Pile)")
    ckpt = read_checkpoint(path, mmap=True)  # already read once: mmap, no copy
    cfg, step, loss, unigram = ckpt["config"], ckpt.get("step", 0), ckpt.get("val_loss", math.nan), \
        ckpt.get("unigram_baseline", math.nan)
    try:
        budget = (f"{100 * step / cfg['max_steps']:.0f}% of --max_steps {cfg['max_steps']}" if cfg.get("max_steps")
                  else f"{100 * ckpt.get('train_time', 0) / 3600 / cfg['budget_hours']:.0f}% of its "
                  f"{60 * cfg['budget_hours']:.4g}-minute budget")
        return (f"model: {path}, trained {step:d} steps ({budget}), validation loss " + (
            "not measured yet" if not math.isfinite(loss) else f"{loss:.3f} nats" + (
                f", {unigram - loss:.3f} under the unigram baseline {unigram:.3f}" if math.isfinite(unigram) else "")))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:  # a record edited by hand, or crafted
        raise not_readable(path, e) from None


def token_str(tok, i):
    return tok.backend.id_to_token(i) if tok.kind == "wordpiece" else repr(tok.decode([i]))


def main(argv=None):
    safe_console()  # a sentence or token the console's encoding lacks is printed escaped (Windows: cp1252)
    p = argparse.ArgumentParser(description="Top-k predictions of a cram.py checkpoint for each [MASK] of a sentence.",
                                allow_abbrev=False)
    p.add_argument("ckpt", help="checkpoint written by cram.py (meta.json and tokenizer.json beside it), or the "
                   "paper's released model folder (JonasGeiping/crammed-bert: official.py)")
    p.add_argument("sentences", nargs="+", help="text with one or more [MASK] in it")
    p.add_argument("--top_k", type=int, default=5, help="predictions shown per [MASK]")
    p.add_argument("--tokenizer_dir", help="folder with meta.json + tokenizer.json; default: the checkpoint's")
    p.add_argument("--device", default="auto", help="auto (the default: cuda, else mps, else cpu), cuda, cpu or mps")
    args = p.parse_args(argv)
    try:
        if args.top_k < 1:
            raise CramError(f"--top_k must be >= 1 (got {args.top_k})")
        device = pick_device(args.device)
        model, _, meta = load_pretrained(args.ckpt, device)
        vocab, seq_len = model.embed.tok.weight.shape[0], model.embed.pos_table.shape[0]
        tok = load_tokenizer(args.tokenizer_dir or meta.get("folder") or os.path.dirname(os.path.abspath(args.ckpt)),
                             vocab)  # a released model folder holds its own tokenizer
        rows = [torch.tensor(encode_for_mlm(tok, text), device=device) for text in args.sentences]  # (T,)
        for n, (text, ids) in enumerate(zip(args.sentences, rows), 1):  # check every sentence before any work
            if tok.special["mask"] not in ids:
                raise CramError(f"no [MASK] in sentence {n} ({text[:60]!r}): put [MASK] where a word should go")
            if len(ids) > seq_len:
                raise CramError(f"sentence {n} is {len(ids)} tokens with its [SEP], but the model has {seq_len} "
                                "positions: shorten it")
        model.eval()
        print(how_trained(args.ckpt, meta))  # a model's guesses mean little without how far it was trained
        results = []
        for text, ids in zip(args.sentences, rows):
            positions = (ids == tok.special["mask"]).nonzero()[:, 0]                    # (k,)
            with torch.no_grad():
                probs = model(ids[None], positions[None])[0].float().softmax(-1)        # (k, V)
            top = probs.topk(min(args.top_k, vocab), dim=-1)
            results.append([[(token_str(tok, int(i)), float(q)) for q, i in zip(*row)]
                            for row in zip(top.values, top.indices)])
            print(f"{text}\n  as the model sees it: {tok.decode(ids.tolist())}")
            for n, preds in enumerate(results[-1], 1):
                print(f"  [MASK] {n}: " + "   ".join(f"{s} {q:.3f}" for s, q in preds))
        return results
    except CramError as e:
        sys.exit(f"fill_mask.py: error: {e}")


if __name__ == "__main__":
    main()
