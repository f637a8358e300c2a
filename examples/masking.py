"""Masking, worked: one validation row of prepare.py's data, masked by cram.mask_tokens as pretraining masks it.

    python examples/masking.py              # data/, written by the README's first run (prepare.py)
    python examples/masking.py data/wiki    # another prepared folder; --row 3 for another row

It prints the passage, what the model reads (a random token marked {x}, a kept one <x>, as in the notebook: here,
for you; the model sees no mark), and each predicted slot as `position input->target`.
"""
import argparse
import sys
import textwrap
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # cram.py and prepare.py live one folder up
import cram  # noqa: E402
import prepare  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description="Show how cram.mask_tokens masks one row of prepared data.",
                                allow_abbrev=False)
    p.add_argument("data_dir", nargs="?", default="data", help="a folder written by prepare.py (default: data)")
    p.add_argument("--row", type=int, default=0, help="which validation row (default: the first)")
    args = p.parse_args(argv)
    try:
        tok = prepare.load_tokenizer(args.data_dir)           # the WordPiece tokenizer prepare.py trained
        rows, meta = cram.load_split(args.data_dir, "val")    # (rows, 128) token ids
    except cram.CramError as e:
        sys.exit(f"masking.py: error: {e}")  # it says which prepare.py command writes the folder
    row = rows[args.row % len(rows)]
    ids = torch.from_numpy(row[None].astype("int64"))        # (1, 128): a batch of one row
    mask_id = tok.special["mask"]
    try:
        inputs, positions, targets = cram.mask_tokens(ids, mask_id, tok.vocab_size, rate=0.25,
                                                      generator=torch.Generator().manual_seed(0))
    except NotImplementedError as e:  # a class's copy of cram.py, its masking exercise not written yet
        sys.exit(f"masking.py: error: {e}")
    ids, inputs, positions, targets = ids[0].tolist(), inputs[0].tolist(), positions[0].tolist(), targets[0].tolist()

    def word(i):  # a token id as its text
        return tok.backend.id_to_token(i)

    target = dict(zip(positions, targets))

    def shown(p, x):  # what the model reads at position p, a random token as {x} and a kept one as <x>
        if p not in target or x == mask_id:
            return word(x)
        return f"<{word(x)}>" if x == target[p] else f"{{{word(x)}}}"

    reads = [shown(p, x) for p, x in enumerate(inputs)]
    print(textwrap.fill(" ".join(map(word, ids)), 110), end="\n\n")   # the passage
    print(textwrap.fill(" ".join(reads), 110), end="\n\n")           # what the model reads
    slots = [f"{p:3d} {word(inputs[p])}->{word(y)}" for p, y in sorted(zip(positions, targets))]
    for i in range(0, len(slots), 4):                                 # four slots a line
        print("".join(f"{slot:<27}" for slot in slots[i:i + 4]).rstrip())
    n_mask = sum(inputs[p] == mask_id for p in positions)
    n_kept = sum(inputs[p] == y for p, y in zip(positions, targets))
    print(f"{n_mask} [MASK], {len(positions) - n_mask - n_kept} random, {n_kept} kept, of {len(ids)} tokens")


if __name__ == "__main__":
    main()
