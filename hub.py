"""prepare.py's sources on the Hugging Face hub (--hf): a dataset's text streamed row by row, or the authors'
pre-tokenized set (rows of input_ids and a tokenizer/ folder, as the paper's code loads it); a local folder of the
same layout (data/*.parquet) works offline. Every failure is one line (errors.die)."""
import os
import shutil
import socket
from pathlib import Path

from errors import die, hub_offline
from tokenizer import hf_tokenizer


def hub_rows(args, batch=0):  # a hub dataset's rows, or a local folder's of its layout (data/*.parquet), streamed;
    # batch > 0: dicts of numpy arrays of that many rows (input_ids (batch, T)), 4x faster than row by row (notes)
    try:
        if os.path.isdir(args.hf):  # its parquet files by name (a folder's other files would be read as data too)
            files = sorted(map(str, Path(args.hf).glob("data/**/*.parquet"))) or die(f"no {args.hf}/data/*.parquet")
        elif not hub_offline():  # fail in seconds, not after the hub's retries
            socket.create_connection(("huggingface.co", 443), timeout=5).close()
        import datasets
        rows = (datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
                if os.path.isdir(args.hf) else
                datasets.load_dataset(args.hf, args.hf_config, split=args.hf_split, streaming=True))
        yield from rows.with_format("numpy").iter(batch_size=batch) if batch else rows
    except Exception as e:  # offline, unknown name or config, a damaged parquet file: one answer for all
        die(f"cannot stream {args.hf!r} ({type(e).__name__}: {str(e)[:100]!r}): check the name, --hf_config and "
            "the network (a local folder: data/*.parquet), or pass local files instead")


def hub_docs(args):  # a document a row (wikitext's empty rows: skipped later)
    for row in hub_rows(args):
        if not isinstance(text := row.get(args.text_field), str):
            die(f"{args.hf} has no text field {args.text_field!r} (its fields: {sorted(row)}): give --text_field")
        yield text


def set_tokenizer(args, stage):
    """A pre-tokenized set's own: its tokenizer/ folder (the official _load_from_hub's), specials by name."""
    folder = Path(args.hf) / "tokenizer" if os.path.isdir(args.hf) else stage / "tokenizer"
    try:
        from huggingface_hub import hf_hub_download
        for name in [] if folder.is_dir() else ("tokenizer.json", "special_tokens_map.json", "tokenizer_config.json"):
            hf_hub_download(args.hf, name, subfolder="tokenizer", repo_type="dataset", local_dir=stage)
    except Exception as e:
        die(f"cannot get the tokenizer/ folder of {args.hf} ({type(e).__name__}): a pre-tokenized set needs its own")
    tok = hf_tokenizer(folder)
    shutil.copyfile(folder / "tokenizer.json", stage / "tokenizer.json")
    return tok
