"""fill_mask.py as a specification: the model fills each [MASK] as pretraining taught it, and bad input is one line."""
import json
import os
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
os.environ["HF_HUB_OFFLINE"] = "1"
import fill_mask  # noqa: E402
import prepare  # noqa: E402
from cram import load_model  # noqa: E402
from conftest import built_once  # noqa: E402

TIKTOKEN_DIR = ROOT.parent / "shared/data/tiktoken"
FILLER = "the cat sat on the mat and a dog ran in the park with her old friend over there".split()
TINY = ["--preset", "tiny", "--n_layer", "1", "--n_embd", "32", "--n_head", "2", "--ffn_hidden", "64",
        "--micro_batch", "8", "--batch_size", "8", "--max_steps", "150", "--lr", "1e-2", "--eval_every", "0.5",
        "--eval_seqs", "8", "--device", "cpu"]


@pytest.fixture(scope="session")
def ckpt(tmp_path_factory):
    """A real prepare.py + cram.py run (~10 s) on 200 documents that all end "the capital of france is paris."."""
    return Path(built_once(tmp_path_factory, "fill", train_on_paris))


def train_on_paris(tmp):
    rng = np.random.default_rng(0)
    (tmp / "txt").mkdir()
    for i in range(200):
        filler = " ".join(rng.choice(FILLER, size=5)).capitalize()
        (tmp / "txt" / f"{i:03d}.txt").write_text(f"{filler}. The capital of france is paris.")
    prepare.main([str(tmp / "txt"), "--vocab_size", "100", "--seq_len", "16", "--no_filter", "--out",
                  str(tmp / "data")])
    p = subprocess.run([sys.executable, str(ROOT / "cram.py"), "--data_dir", str(tmp / "data"), "--out_dir",
                        str(tmp / "out"), *TINY], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return str(tmp / "out" / "ckpt.pt")


def test_a_model_that_always_saw_paris_there_puts_paris_on_top(ckpt):
    [[preds]] = fill_mask.main([str(ckpt), "The capital of France is [MASK] ."])
    assert preds[0][0] == "paris" and preds[0][1] > 0.5


def test_probabilities_are_sorted_at_most_one_and_equal_a_softmax_of_the_model(ckpt):
    [[preds]] = fill_mask.main([str(ckpt), "the capital of [MASK] is paris .", "--top_k", "4"])
    probs = [q for _, q in preds]
    assert len(preds) == 4 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    model, _, _ = load_model(str(ckpt))
    tok = prepare.load_tokenizer(ckpt.parent)
    mask, sep = tok.special["mask"], tok.special["sep"]
    ids = tok.encode_batch(["the capital of"])[0] + [mask] + tok.encode_batch(["is paris ."])[0] + [sep]
    with torch.no_grad():
        expected = model.eval()(torch.tensor([ids]), torch.tensor([[ids.index(mask)]]))[0, 0].softmax(-1)
    values, indices = expected.topk(4)
    assert [s for s, _ in preds] == [tok.backend.id_to_token(int(i)) for i in indices]
    assert np.allclose(probs, values.tolist(), atol=1e-6)


def test_each_mask_gets_its_own_list_and_each_sentence_its_own_block(ckpt, capsys):
    results = fill_mask.main([str(ckpt), "the [MASK] of france is [MASK] .", "a dog [MASK] .", "--top_k", "3"])
    assert [len(r) for r in results] == [2, 1] and all(len(preds) == 3 for r in results for preds in r)
    assert results[0][0][0][0] == "capital" and results[0][1][0][0] == "paris"
    out = capsys.readouterr().out.splitlines()[1:]  # after the line on how far the model was trained
    assert out[0] == "the [MASK] of france is [MASK] ." and out[1].startswith("  as the model sees it: the [MASK]")
    assert out[2].startswith("  [MASK] 1: capital 0.") and out[3].startswith("  [MASK] 2: paris 0.")
    assert out[4] == "a dog [MASK] ." and out[6].startswith("  [MASK] 1: ") and len(out) == 7


def test_text_is_encoded_as_a_pretraining_document_tokens_then_sep_no_cls(ckpt):
    tok = prepare.load_tokenizer(ckpt.parent)
    doc = "The capital of france is paris."
    ids = fill_mask.encode_for_mlm(tok, doc)
    assert ids == tok.encode_batch([doc])[0] + [tok.special["sep"]] and tok.special["cls"] not in ids
    train = np.fromfile(ckpt.parent.parent / "data" / "train.bin", dtype=np.uint16).tolist()
    assert any(train[i:i + len(ids)] == ids for i in range(len(train))), "pretraining rows hold the same ids"
    masked = fill_mask.encode_for_mlm(tok, "The capital of france is [mask].")  # any case, no space needed
    assert masked == ids[:5] + [tok.special["mask"]] + ids[6:]
    assert tok.backend.encode("is [MASK].", add_special_tokens=False).ids[1] == tok.special["mask"], \
        "WordPiece itself matches [MASK] before lowercasing, as our split does"


def test_wordpiece_continuations_are_shown_with_their_hashes(ckpt):
    tok = prepare.load_tokenizer(ckpt.parent)
    piece = next(i for i in range(tok.vocab_size) if tok.backend.id_to_token(i).startswith("##"))
    assert fill_mask.token_str(tok, piece).startswith("##")


def test_gpt2_text_gets_the_mask_id_inserted_and_the_mask_takes_the_word_s_leading_space(monkeypatch):
    if not (TIKTOKEN_DIR / "6d1cbeee0f20b3d9449abfede4726ed8212e3aee").exists():
        pytest.skip("tiktoken's gpt2 files are not in ../shared/data/tiktoken")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_DIR))
    tok = prepare.gpt2_tok()
    mask, sep = tok.special["mask"], tok.special["sep"]
    [city] = tok.encode_batch([" city"])[0]
    ids = fill_mask.encode_for_mlm(tok, "a big [MASK] and [MASK].")
    assert ids.count(mask) == 2 and ids[-1] == sep
    assert [city if i == mask else i for i in ids] == tok.encode_batch(["a big city and city."])[0] + [sep]
    assert fill_mask.token_str(tok, city) == "' city'"


def error(*argv):
    with pytest.raises(SystemExit) as e, pytest.MonkeyPatch.context() as m:
        m.setattr(sys, "argv", ["fill_mask.py"])  # as from the command line: prepare.die names the script
        fill_mask.main([*map(str, argv)])
    message = str(e.value)
    assert message.startswith("fill_mask.py: error:") and "\n" not in message, message
    return message


def test_a_sentence_without_mask_is_a_one_line_error(ckpt, capsys):
    assert "no [MASK] in sentence 2" in error(ckpt, "the [MASK] .", "the capital of france")
    assert capsys.readouterr().out == "", "every sentence is checked before anything is printed"


def test_text_longer_than_the_model_s_positions_is_a_one_line_error(ckpt):
    assert "17 tokens with its [SEP], but the model has 16 positions" in error(ckpt, "the " * 15 + "[MASK]")


def test_a_checkpoint_without_its_tokenizer_is_a_one_line_error(ckpt, tmp_path):
    shutil.copy(ckpt, tmp_path / "ckpt.pt")
    assert "no tokenizer in" in error(tmp_path / "ckpt.pt", "a [MASK]")
    shutil.copy(ckpt.parent / "meta.json", tmp_path / "meta.json")
    assert re.search(r"cannot load .*tokenizer.json .*: use the tokenizer of the data the model was trained on: "
                     r"that data folder \(fill_mask.py's and finetune_glue.py's --tokenizer_dir\)",
                     error(tmp_path / "ckpt.pt", "a [MASK]"))


@pytest.mark.parametrize("record", [{"step": "x"}, {"config": {"max_steps": 0, "budget_hours": 0}},
                                    {"val_loss": "x"}])
def test_a_checkpoint_whose_training_record_is_not_numbers_is_a_one_line_error(record, ckpt, tmp_path):
    """Crafted or edited by hand (a trial, 2026-12-07): the line on how far it was trained divided by zero, or
    formatted a text as a number, in a traceback."""
    shutil.copytree(ckpt.parent, tmp_path / "run")
    state = torch.load(ckpt, weights_only=True)
    config = {**state["config"], **record.pop("config", {})}
    torch.save({**state, **record, "config": config}, tmp_path / "run" / "ckpt.pt")
    assert "is damaged or not a cram.py checkpoint" in error(tmp_path / "run" / "ckpt.pt", "a [MASK]")


def test_a_damaged_meta_json_beside_the_checkpoint_is_a_one_line_error(ckpt, tmp_path):
    shutil.copytree(ckpt.parent, tmp_path / "run")
    (tmp_path / "run" / "meta.json").write_bytes(np.random.default_rng(0).bytes(400))
    p = subprocess.run([sys.executable, str(ROOT / "fill_mask.py"), str(tmp_path / "run" / "ckpt.pt"), "a [MASK]",
                        "--device", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("fill_mask.py: error:") and "meta.json is damaged" in p.stderr


def test_a_tokenizer_of_another_vocab_size_is_a_one_line_error(ckpt, tmp_path):
    shutil.copytree(ckpt.parent, tmp_path / "other")
    vocab = json.loads((ckpt.parent / "tokenizer.json").read_text())
    vocab["model"]["vocab"]["extra"] = len(vocab["model"]["vocab"])  # one token more than the checkpoint has
    (tmp_path / "other" / "tokenizer.json").write_text(json.dumps(vocab))
    n = prepare.load_tokenizer(ckpt.parent).vocab_size
    assert f"has {n + 1} tokens but" in error(ckpt, "a [MASK]", "--tokenizer_dir", tmp_path / "other")


def test_a_missing_checkpoint_and_a_bad_top_k_are_one_line_errors(ckpt, tmp_path):
    assert "no checkpoint at" in error(tmp_path / "nope.pt", "a [MASK]")
    assert "--top_k must be >= 1" in error(ckpt, "a [MASK]", "--top_k", "0")


def test_the_command_line_prints_predictions_and_exits_non_zero_on_bad_input(ckpt):
    def run(*args):
        return subprocess.run([sys.executable, str(ROOT / "fill_mask.py"), str(ckpt), *args, "--device", "cpu"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    good, bad = run("the capital of france is [MASK] .", "--top_k", "2"), run("no mask")
    assert good.returncode == 0 and good.stdout.splitlines()[3].startswith("  [MASK] 1: paris "), good.stderr
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("fill_mask.py: error: no [MASK]")


def test_it_says_how_far_the_checkpoint_was_trained_step_budget_and_validation_loss(ckpt, capsys):
    fill_mask.main([str(ckpt), "a dog [MASK] ."])
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    first, loss, unigram = capsys.readouterr().out.splitlines()[0], state["val_loss"], state["unigram_baseline"]
    assert state["step"] == 150 and first == (
        f"model: {ckpt}, trained 150 steps (100% of --max_steps 150), validation loss {loss:.3f} nats, "
        f"{unigram - loss:.3f} under the unigram baseline {unigram:.3f}")
    state.update(step=40, val_loss=float("nan"), train_time=90.0, config={**state["config"], "max_steps": 0,
                                                                         "budget_hours": 0.05})  # 3 minutes
    early = ckpt.parent / "early.pt"
    torch.save(state, early)
    fill_mask.main([str(early), "a dog [MASK] ."])
    assert capsys.readouterr().out.splitlines()[0] == (
        f"model: {early}, trained 40 steps (50% of its 3-minute budget), validation loss not measured yet")
    assert fill_mask.how_trained("crammed-bert", {"folder": "models/crammed-bert"}).startswith(
        "model: models/crammed-bert, a folder in the paper's release format, which keeps no training record")


def test_the_real_run_s_log_gives_plot_its_unigram_baseline(ckpt):
    import plot
    assert plot.unigram_baseline(ckpt.parent) == pytest.approx(torch.load(ckpt, weights_only=False)["unigram_baseline"],
                                                              abs=1e-4)
