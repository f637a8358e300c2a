"""official.py as a specification: the paper's released folder (JonasGeiping/crammed-bert) is our paper preset weight
for weight, its tokenizer keeps its own special tokens, and anything it cannot be is refused in one line."""
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import fill_mask  # noqa: E402
import finetune_glue as fg  # noqa: E402
import official  # noqa: E402
import prepare  # noqa: E402
import tasks  # noqa: E402
from cram import Config, CramError, CrammedBERT  # noqa: E402
from official import load_pretrained  # noqa: E402  (a checkpoint or a release folder)

TINY = ROOT.parent / "shared/data/official_tiny"  # made by the official code: see ../shared/README.md
needs_tiny = pytest.mark.skipif(not (TINY / "expected.safetensors").is_file(), reason="no ../shared/data/official_tiny")
SHAPE = Config(preset="paper", n_layer=2, n_embd=32, n_head=4, ffn_hidden=64)


def ours(seed=0):
    """A random model of ours whose norms and position scale are not at their init, so a mix-up shows."""
    torch.manual_seed(seed)
    model = CrammedBERT(SHAPE, 50, 16)
    for name, p in model.named_parameters():
        if "norm" in name or "pos_scale" in name:
            p.data.normal_()
    return model


def write_release(model, folder, bin_format=False):
    """Our model as a release folder: config.json and the weights in the official names and layouts."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    vocab, seq_len = model.embed.tok.weight.shape[0], model.embed.pos_table.shape[0]
    (folder / "config.json").write_text(json.dumps(official.release_config(SHAPE, vocab, seq_len)))
    state = official.to_release(model.state_dict(), SHAPE)
    torch.save(state, folder / "pytorch_model.bin") if bin_format else save_file(state, folder / "model.safetensors")
    return folder


def refused(path, *needles):
    with pytest.raises(CramError) as e:
        load_pretrained(str(path))
    message = str(e.value)
    assert "\n" not in message and all(n in message for n in needles), message
    return message


# ------------------------------------------------------------------------------------ no shared files needed

def test_ours_to_the_release_layout_and_back_is_the_same_model(tmp_path):
    model = ours()
    loaded, cfg, meta = load_pretrained(str(write_release(model, tmp_path / "rel")))
    assert cfg.preset == "paper" and (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.ffn_hidden) == (2, 32, 4, 64)
    assert meta["folder"] == str(tmp_path / "rel") and (meta["vocab_size"], meta["seq_len"]) == (50, 16)
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(w, model.state_dict()[k]) for k, w in loaded.state_dict().items())


def test_the_older_pytorch_model_bin_loads_the_same_weights(tmp_path):
    model = ours()
    loaded, _, _ = load_pretrained(str(write_release(model, tmp_path / "rel", bin_format=True)))
    assert all(torch.equal(w, model.state_dict()[k]) for k, w in loaded.state_dict().items())


def test_the_release_groups_qkv_rows_per_head_and_ours_per_projection():
    C, H, D = 32, 4, 8
    w = torch.arange(3 * C, dtype=torch.float32)[:, None].expand(3 * C, C)  # row r holds the value r
    release = official.qkv_to_release(w, H)
    for h, j, d in [(0, 1, 0), (1, 0, 0), (3, 2, 7), (2, 1, 5)]:  # head h, projection j (q, k, v), channel d
        assert release[h * 3 * D + j * D + d, 0] == j * C + h * D + d
    assert torch.equal(official.qkv_to_ours(release, H), w)


def test_the_release_stores_the_position_scale_with_shape_1_and_the_attention_scale_per_layer():
    state = official.to_release(ours().state_dict(), SHAPE)
    assert state["encoder.embedding.pos_embedding.scale_factor"].shape == (1,)
    assert torch.equal(state["encoder.layers.1.attn.self_attention.norm_factor"], torch.tensor(8.0).rsqrt())
    assert torch.equal(state["decoder.weight"], state["encoder.embedding.word_embedding.weight"])


@pytest.mark.parametrize("key, value", [("attention.rotary_embedding", True), ("attention.qkv_bias", True),
                                        ("norm_scheme", "post"), ("nonlin", "ReLUglu"), ("skip_head_transform", False),
                                        ("decoder_bias", True), ("tie_weights", False), ("use_bias", True),
                                        ("embedding.pos_embedding", "learned"), ("attention.causal_attention", True)])
def test_an_option_the_model_does_not_compute_is_refused_by_name(key, value, tmp_path):
    folder = write_release(ours(), tmp_path / "rel")
    config = json.loads((folder / "config.json").read_text())
    *group, name = key.split(".")
    (config["arch"][group[0]] if group else config["arch"])[name] = value
    (folder / "config.json").write_text(json.dumps(config))
    refused(folder, f"arch option {key} = {value!r}", "refused")


def test_an_unknown_or_missing_option_another_model_type_and_a_wrong_size_are_refused(tmp_path):
    folder = write_release(ours(), tmp_path / "rel")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "arch": {**config["arch"], "layer_drop": 0.1}}))
    refused(folder, "unknown arch option 'layer_drop'")
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    refused(folder, "model_type 'bert'")
    (folder / "config.json").write_text(json.dumps({**config, "arch": {**config["arch"], "intermed_size": 128}}))
    refused(folder, "encoder.layers.0.ffn.dense_in.weight has shape (64, 32), config.json implies (128, 32)")
    arch = {**config["arch"], "attention": {**config["arch"]["attention"], "num_attention_heads": 8}}
    (folder / "config.json").write_text(json.dumps({**config, "arch": arch}))
    refused(folder, "32 wide, 8 heads): config.json and the weights disagree")  # shapes fit any count: the scale
    del config["arch"]["attention"]["rotary_embedding"]
    (folder / "config.json").write_text(json.dumps(config))
    refused(folder, "arch option attention.rotary_embedding = missing")


def test_a_config_json_declaring_what_its_weights_cannot_be_and_a_nan_weight_are_refused(tmp_path):
    """A crafted release: 1,000 layers were built before the weights said no, a vocabulary of 2^40 words was an
    allocator's message, a hidden size of 4,096 drew ~0.5 GB of random weights first, a NaN weight answered NaN."""
    from safetensors.torch import load_file, save_file
    folder = write_release(ours(), tmp_path / "rel")
    config = json.loads((folder / "config.json").read_text())
    embedding = config["arch"]["embedding"]
    for arch, needle in [({"num_transformer_layers": 1000}, "declares 1000 blocks"),
                         ({"embedding": {**embedding, "vocab_size": 1 << 40}}, "larger than this machine's memory"),
                         ({"embedding": {**embedding, "vocab_size": 1 << 62}}, "Storage size calculation overflowed"),
                         ({"embedding": {**embedding, "max_seq_length": 10 ** 7}}, "rows of 10000000 tokens")]:
        (folder / "config.json").write_text(json.dumps({**config, "arch": {**config["arch"], **arch}}))
        refused(folder, needle, "a damaged or altered release, refused")
    wide = {**config["arch"], "hidden_size": 4096, "embedding": {**embedding, "embedding_dim": 4096}}
    (folder / "config.json").write_text(json.dumps({**config, "arch": wide}))
    refused(folder, "has shape (50, 32), config.json implies (50, 4096)")
    (folder / "config.json").write_text(json.dumps(config))
    state = {k: v.clone() for k, v in load_file(folder / "model.safetensors").items()}
    state["encoder.final_norm.weight"][0] = math.nan
    save_file(state, folder / "model.safetensors")
    refused(folder, "encoder.final_norm.weight holds NaN or infinity")


def test_a_missing_an_extra_or_an_untied_tensor_and_another_attention_scale_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file
    folder = write_release(ours(), tmp_path / "rel")
    good = {k: v.clone() for k, v in load_file(folder / "model.safetensors").items()}  # safetensors 0.4 maps the
    # file: writing it over below would change these tensors too
    cases = [({k: v for k, v in good.items() if k != "encoder.final_norm.bias"}, "no tensor encoder.final_norm.bias"),
             ({**good, "encoder.pooler.weight": torch.zeros(2)}, "unexpected tensor encoder.pooler.weight"),
             ({**good, "decoder.weight": good["decoder.weight"] + 1}, "decoder.weight differs from"),
             ({**good, "encoder.layers.1.attn.self_attention.norm_factor": torch.tensor(1.0)}, "layers.1.attn")]
    for state, needle in cases:
        save_file(state, folder / "model.safetensors")
        refused(folder, needle, "refused" if "no tensor" not in needle else "incomplete")


def test_a_crafted_pytorch_model_bin_is_refused_in_one_line_and_runs_nothing(tmp_path):
    folder = write_release(ours(), tmp_path / "rel", bin_format=True)
    marker = tmp_path / "ran"

    class Crafted:
        def __reduce__(self):  # unpickling this calls open(marker, "w"): code in a weights file
            return open, (str(marker), "w")

    torch.save({"encoder.final_norm.bias": Crafted()}, folder / "pytorch_model.bin")
    refused(folder, "pytorch_model.bin refused: damaged or not plain weights")
    assert not marker.exists(), "the crafted pickle ran"


def test_a_folder_that_is_not_a_model_and_a_path_that_is_nothing_are_one_line_errors(tmp_path):
    refused(tmp_path, "has no config.json: give a cram.py checkpoint (ckpt.pt) or the paper's released model folder")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ckpt.pt").write_bytes(b"")  # a cram.py run's folder (a learner's trial, 11-27)
    run = tmp_path / "run"
    refused(run, f"{run} is a cram.py run: pass its checkpoint, {run / 'ckpt.pt'}")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json", encoding="utf-8")
    refused(tmp_path / "bad", "'s config.json is not a crammedBERT config (JSONDecodeError")
    refused(tmp_path / "nope.pt", "no checkpoint at")
    (tmp_path / "config.json").write_text(json.dumps(official.release_config(SHAPE, 50, 16)))
    refused(tmp_path, "no model.safetensors or pytorch_model.bin in")


def test_a_hub_name_offline_says_how_to_download_it_by_hand(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_cache"))
    monkeypatch.chdir(tmp_path)  # no local folder of that name
    refused("JonasGeiping/crammed-bert", "git clone https://huggingface.co/JonasGeiping/crammed-bert", "hf download")


@pytest.mark.parametrize("bin_format", [False, True])
def test_a_hub_release_of_either_weights_file_downloads_that_one_only(bin_format, tmp_path, monkeypatch):
    """The hub's download, stood in for by a copy of the repository's files that its allow_patterns match."""
    import fnmatch
    hub = pytest.importorskip("huggingface_hub")
    repo = write_release(ours(), tmp_path / "repo", bin_format=bin_format)
    asked = []

    def snapshot_download(name, allow_patterns):
        asked.append(allow_patterns)
        out = tmp_path / f"snapshot{len(asked)}"
        out.mkdir()
        for f in repo.iterdir():
            if any(fnmatch.fnmatch(f.name, pattern) for pattern in allow_patterns):
                shutil.copy(f, out / f.name)
        return str(out)
    monkeypatch.setattr(hub, "snapshot_download", snapshot_download)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no quick check of the network
    monkeypatch.chdir(tmp_path)
    model, _, _ = load_pretrained("owner/crammed-bert")
    assert torch.equal(model.embed.tok.weight, ours().embed.tok.weight)
    assert [("pytorch_model.bin" in a, "model.safetensors" in a) for a in asked] == \
        ([(False, True), (True, False)] if bin_format else [(False, True)])


def test_a_tokenizer_folder_without_meta_json_is_read_as_hugging_face_s(tmp_path):
    """The release's files, or a classifier's copies of them: special tokens by name, the single template's order."""
    from tokenizers import Tokenizer, models, processors
    vocab = {t: i for i, t in enumerate(["a", "<sep>", "<pad>", "b", "<mask>", "<cls>", "<unk>", "c"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(single="$A <sep>", pair="<cls> $A <sep> $B <sep>",
                                                       special_tokens=[("<cls>", 5), ("<sep>", 1)])
    tok.save(str(tmp_path / "tokenizer.json"))
    names = {"pad_token": "<pad>", "unk_token": "<unk>", "cls_token": "<cls>", "sep_token": "<sep>"}
    (tmp_path / "special_tokens_map.json").write_text(json.dumps(names))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"mask_token": {"content": "<mask>"}}))
    got = prepare.load_tokenizer(tmp_path, len(vocab))
    assert got.special == {"pad": 2, "unk": 6, "cls": 5, "sep": 1, "mask": 4} and got.single_as_pair
    (tmp_path / "tokenizer_config.json").unlink()
    with pytest.raises(SystemExit, match="names a mask token by a name"):
        prepare.load_tokenizer(tmp_path, len(vocab))


# ------------------------------------------------------------------ against the official code's own numbers

@pytest.fixture(scope="module")
def expected():
    from safetensors.torch import load_file
    return load_file(TINY / "expected.safetensors")


def assert_computes_the_official_function(folder, expected):
    model, _, _ = load_pretrained(str(folder))
    with torch.no_grad():
        hidden = model.eval().encode(expected["input_ids"])                               # (3, T, 64), no pad mask
        logits = hidden @ model.embed.tok.weight.T                                         # (3, T, 1024)
    # float32 rounding: the official code sums in another order (bmm then * norm_factor vs SDPA; its sin/cos table
    # from exp(-log(10000) k/C) vs our pow), measured 1.4e-6 on |hidden| up to 4.5 (a few float32 ulps) and 2.4e-7 on
    # the logits; a wrong map, head layout, norm or position scale is off by 0.3 or more (docs/notes.md, 2026-11-24 20:40).
    torch.testing.assert_close(hidden, expected["hidden"], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits, expected["logits"], rtol=0, atol=1e-5)


@needs_tiny
def test_hidden_states_and_logits_equal_the_official_model_s(expected):
    assert_computes_the_official_function(TINY, expected)


@needs_tiny
@pytest.mark.parametrize("dropped", ["decoder.weight", "encoder.embedding.word_embedding.weight"])
def test_either_tied_key_may_be_missing(dropped, expected, tmp_path):
    from safetensors.torch import load_file, save_file
    shutil.copytree(TINY, tmp_path / "rel")
    state = load_file(TINY / "model.safetensors")
    save_file({k: v for k, v in state.items() if k != dropped}, tmp_path / "rel" / "model.safetensors")
    assert_computes_the_official_function(tmp_path / "rel", expected)


@needs_tiny
def test_a_special_token_named_by_a_list_names_none_and_the_other_file_s_name_is_used(tmp_path):
    """special_tokens_map.json with "mask_token": ["<mask>"] (a hand edit, another tool) was a TypeError's
    traceback; tokenizer_config.json, which names it too, is used. Named by neither file: one line."""
    shutil.copytree(TINY, tmp_path / "rel")
    path = tmp_path / "rel" / "special_tokens_map.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "mask_token": ["<mask>"]}))
    assert prepare.load_tokenizer(tmp_path / "rel", 1024).special == prepare.load_tokenizer(TINY, 1024).special
    config = tmp_path / "rel" / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "mask_token": {"content": 4}}))
    with pytest.raises(SystemExit, match="special_tokens_map.json', 'tokenizer_config.json'.* names a mask token"):
        prepare.load_tokenizer(tmp_path / "rel", 1024)


@needs_tiny
def test_the_tokenizer_keeps_the_release_s_special_ids_and_single_template(expected):
    tok = prepare.load_tokenizer(TINY, 1024)
    assert tok.special == {k: tok.backend.token_to_id(f"<{k}>") for k in ("pad", "unk", "cls", "sep", "mask")}
    assert tok.single_as_pair  # fine-tuned as the official evaluation did: <cls> A <sep> <sep>
    for a, b in [("The cat sat on the mat.", None), ("A man plays.", "Someone makes music.")]:
        official = tok.backend.encode(a, b or "").ids  # its call: a single text with an empty second
        assert fg.encode(tok, tasks.Split([a], b and [b], None, None), 128) == [official]
    sentence = "Paris is the capital of [MASK] and Berlin is in Germany."
    assert fill_mask.encode_for_mlm(tok, sentence) == expected["mask_ids"][0].tolist()


@needs_tiny
@pytest.mark.parametrize("mask", ["[MASK]", "<mask>"])
def test_fill_mask_ranks_the_official_top_5_in_order(mask, expected):
    [[preds]] = fill_mask.main([str(TINY), f"Paris is the capital of {mask} and Berlin is in Germany."])
    tok = prepare.load_tokenizer(TINY, 1024)
    assert [s for s, _ in preds] == [tok.backend.id_to_token(i) for i in expected["mask_top5"].tolist()]


@needs_tiny
def test_finetune_glue_runs_from_the_folder_with_the_paper_recipe_and_the_release_s_tokens(tmp_path, monkeypatch):
    rte = "index\tsentence1\tsentence2\tlabel\n" + "".join(
        f"{i}\tthe cat sat on the mat {i}\ta dog ran\t{['entailment', 'not_entailment'][i % 2]}\n" for i in range(6))
    cola = "".join(f"gj04\t{i % 2}\t\tthe cat sat on {'the ' * i}mat .\n" for i in range(6))
    for task, text in [("RTE", rte), ("CoLA", cola)]:
        (tmp_path / "glue" / task).mkdir(parents=True)
        for split in ("train", "dev"):
            (tmp_path / "glue" / task / f"{split}.tsv").write_text(text, encoding="utf-8")
    used = []  # the tokenizer finetune_glue.py finds in the folder
    monkeypatch.setattr(fg, "load_tokenizer", lambda d, v: used.append(prepare.load_tokenizer(d, v)) or used[-1])
    table = fg.main([str(TINY), "--glue_dir", str(tmp_path / "glue"), "--tasks", "cola,rte", "--epochs", "1",
                     "--seeds", "1", "--device", "cpu", "--out", str(tmp_path / "out")])
    report = json.loads((tmp_path / "out" / "glue.json").read_text())
    assert list(table) == ["cola", "rte"] and report["recipe"] == "paper" and report["settings"]["lr"] == 4e-5
    assert used[0].special == prepare.load_tokenizer(TINY, 1024).special and used[0].single_as_pair


@needs_tiny
def test_a_classifier_kept_from_the_release_carries_its_tokenizer_and_classify_uses_it(tmp_path, capsys):
    import classify
    rows = "".join(f"the cat sat on the mat {i},{['sport', 'world'][i % 2]}\n" for i in range(8))
    (tmp_path / "train.csv").write_text("sentence,label\n" + rows, encoding="utf-8")
    fg.main([str(TINY), "--train_file", str(tmp_path / "train.csv"), "--validation_file", str(tmp_path / "train.csv"),
             "--save_model", str(tmp_path / "model"), "--epochs", "1", "--seeds", "1", "--device", "cpu",
             "--out", str(tmp_path / "out")])
    kept = {p.name for p in (tmp_path / "model").iterdir()}
    assert {"tokenizer.json", "special_tokens_map.json", "tokenizer_config.json"} <= kept and "meta.json" not in kept
    _, _, tok = classify.load_classifier(tmp_path / "model")
    assert tok.special == prepare.load_tokenizer(TINY, 1024).special and tok.single_as_pair
    capsys.readouterr()
    classify.main(["--device", "cpu", str(tmp_path / "model"), "--input", str(tmp_path / "train.csv")])
    predicted = json.loads((tmp_path / "model" / "classifier.json").read_text(encoding="utf-8"))["dev"]["acc"]
    printed = capsys.readouterr().out.split("(fine-tuning's dev set")[0]
    assert f"acc {predicted:.2f}" in printed and "on the 8 labelled rows" in printed


# ------------------------------------------------------------------ export: a checkpoint as a release folder
V = 44  # the vocabulary of conftest's checkpoint: 5 specials and 39 words


def save_ckpt(folder, cfg, model, like):
    """A cram.py checkpoint of `model` in folder, with the tokenizer and meta.json of the checkpoint `like`."""
    import dataclasses
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "meta.json"):
        shutil.copyfile(like.parent / name, folder / name)
    meta = json.loads((folder / "meta.json").read_text())
    torch.save({"model": model.state_dict(), "config": dataclasses.asdict(cfg), "meta": meta, "step": 0,
                "vocab_size": len(model.embed.tok.weight), "seq_len": len(model.embed.pos_table)}, folder / "ckpt.pt")
    return folder / "ckpt.pt"


def outputs(path):
    """Hidden states and sparse MLM logits of the model at path on a fixed batch, as every tool computes them."""
    model, _, _ = load_pretrained(str(path))
    ids = torch.arange(40).reshape(2, 20) % len(model.embed.tok.weight)
    with torch.no_grad():
        return model.eval().encode(ids), model(ids, torch.tensor([[1, 5, 7], [0, 2, 19]]))


@pytest.fixture(scope="module")
def exported(ckpt, tmp_path_factory):
    return official.main(["export", str(ckpt), str(tmp_path_factory.mktemp("export") / "crammed")])


def test_export_writes_the_release_s_files_and_our_loader_computes_the_same_function(ckpt, exported):
    assert {p.name for p in exported.iterdir()} == {"config.json", "model.safetensors", "tokenizer.json",
                                                    "tokenizer_config.json", "special_tokens_map.json"}
    config = json.loads((exported / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "crammedBERT" and config["arch"]["num_transformer_layers"] == 1
    every = {*official.SHAPE, *official.REQUIRED, *official.SIZES, *official.IRRELEVANT}  # each option of the yaml
    assert set(official.flat(config["arch"])) == every
    if (TINY / "config.json").is_file():  # the key set the official code wrote
        assert every == set(official.flat(json.loads((TINY / "config.json").read_text())["arch"]))
    for got, want in zip(outputs(exported), outputs(ckpt)):
        assert torch.equal(got, want)


def test_the_exported_tokenizer_names_our_specials_and_encodes_as_we_fine_tune(ckpt, exported):
    from tokenizers import Tokenizer
    ours = prepare.load_tokenizer(ckpt.parent, V)
    names = json.loads((exported / "special_tokens_map.json").read_text(encoding="utf-8"))
    assert names == {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                     "mask_token": "[MASK]"}
    theirs = Tokenizer.from_file(str(exported / "tokenizer.json"))
    text, ids = "The man said: why not play?", ours.encode_batch(["The man said: why not play?"])[0]
    assert theirs.encode(text, add_special_tokens=False).ids == ids
    assert theirs.encode(text).ids == fg.encode(ours, tasks.Split([text], None, None, None), 128)[0]  # [CLS] A [SEP]
    pair = fg.encode(ours, tasks.Split([text], ["a dog ran"], None, None), 128)[0]  # [CLS] A [SEP] B [SEP]
    assert theirs.encode(text, "a dog ran").ids == pair
    back = prepare.load_tokenizer(exported, V)
    assert back.special == ours.special and not back.single_as_pair


def test_hugging_face_s_pretrained_tokenizer_fast_encodes_the_export_as_ours(ckpt, exported):
    transformers = pytest.importorskip("transformers")
    hf = transformers.PreTrainedTokenizerFast.from_pretrained(str(exported))
    ours = prepare.load_tokenizer(ckpt.parent, V)
    text = "A woman plays, he ran quickly."
    assert hf(text, add_special_tokens=False)["input_ids"] == ours.encode_batch([text])[0]
    assert hf(text, "yes")["input_ids"] == fg.encode(ours, tasks.Split([text], ["yes"], None, None), 128)[0]
    assert [hf.pad_token_id, hf.unk_token_id, hf.cls_token_id, hf.sep_token_id, hf.mask_token_id] == [0, 1, 2, 3, 4]


def test_fill_mask_gives_the_same_top_k_from_the_export_as_from_the_checkpoint(ckpt, exported):
    sentence = ["the man [MASK] on the mat .", "why [MASK] he [MASK] ?"]
    assert fill_mask.main([str(exported), *sentence]) == fill_mask.main([str(ckpt), *sentence])


def test_a_fine_tune_and_its_kept_classifier_give_the_same_numbers_from_the_export(ckpt, exported, tmp_path, capsys):
    import classify
    rows = "".join(f"{'the good film' if i % 2 else 'a bad movie'} he said {i},{['neg', 'pos'][i % 2]}\n"
                   for i in range(12))
    (tmp_path / "train.csv").write_text("sentence,label\n" + rows, encoding="utf-8")
    printed = []
    for name, model in [("ckpt", ckpt), ("export", exported)]:
        fg.main([str(model), "--train_file", str(tmp_path / "train.csv"), "--validation_file",
                 str(tmp_path / "train.csv"), "--save_model", str(tmp_path / name), "--epochs", "2", "--seeds", "1",
                 "--device", "cpu", "--out", str(tmp_path / f"out_{name}")])
        capsys.readouterr()
        classify.main(["--device", "cpu", str(tmp_path / name), "--input", str(tmp_path / "train.csv"), "--output",
                       str(tmp_path / f"{name}.csv")])
        printed.append(capsys.readouterr().out)
    reports = [json.loads((tmp_path / f"out_{n}" / "glue.json").read_text(encoding="utf-8"))
               for n in ("ckpt", "export")]
    assert reports[0]["results"] == reports[1]["results"] and reports[0]["recipe"] == reports[1]["recipe"] == "paper"
    assert (tmp_path / "ckpt.csv").read_text(encoding="utf-8") == (tmp_path / "export.csv").read_text(encoding="utf-8")


def test_one_narrow_block_is_the_same_function_and_is_exported(ckpt, tmp_path):
    cfg = Config(n_layer=2, n_embd=32, n_head=2, ffn_hidden=64, narrow=1)
    torch.manual_seed(3)
    path = save_ckpt(tmp_path / "narrow", cfg, CrammedBERT(cfg, V, 128), ckpt)
    folder = official.export(path, tmp_path / "rel")
    for got, want in zip(outputs(folder), outputs(path)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("change, needle", [
    (dict(local_bias=1.0), "local_bias = 1.0 (the tiny preset's local attention bias)"),
    (dict(narrow=2, n_layer=3), "narrow = 2"),
    (dict(weight_decay=0.5), "weight_decay = 0.5, an option the official architecture lacks")])
def test_a_checkpoint_the_release_cannot_hold_is_refused_in_one_line_and_nothing_is_written(
        change, needle, ckpt, tmp_path, monkeypatch, capsys):
    if "weight_decay" in change:  # stands in for a field cram.py may gain: not known to change nothing, not default
        monkeypatch.setattr(official, "NOT_THE_FUNCTION", official.NOT_THE_FUNCTION - {"weight_decay"})
    cfg = Config(**{**dict(n_layer=2, n_embd=32, n_head=2, ffn_hidden=64), **change})
    path = save_ckpt(tmp_path / "run", cfg, CrammedBERT(cfg, V, 128), ckpt)
    with pytest.raises(SystemExit) as e:
        official.main(["export", str(path), str(tmp_path / "rel")])
    assert needle in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("official.py: error:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no folder, no staging folder left


def test_a_checkpoint_copied_without_its_tokenizer_says_what_to_copy_not_a_flag_export_lacks(ckpt, tmp_path):
    (tmp_path / "lone").mkdir()
    shutil.copy(ckpt, tmp_path / "lone" / "ckpt.pt")  # its meta.json and tokenizer.json left behind
    with pytest.raises(SystemExit) as e:
        official.main(["export", str(tmp_path / "lone" / "ckpt.pt"), str(tmp_path / "rel")])
    assert "use the tokenizer of the data the model was trained on" in str(e.value) and "beside the" in str(e.value)
    assert "\n" not in str(e.value) and not (tmp_path / "rel").exists()


def test_a_weight_of_an_edited_cram_py_is_refused_by_export_not_dropped(ckpt, tmp_path, monkeypatch, capsys):
    """A learner's cram.py with a weight the release has no name for (an untied decoder): export would save a model
    without it, another function, and say it worked. It is refused, and what the export loads says the same."""
    import cram

    class Untied(CrammedBERT):  # cram.py as a learner edits it
        def __init__(self, cfg, vocab_size, seq_len):
            super().__init__(cfg, vocab_size, seq_len)
            self.decoder = torch.nn.Linear(cfg.n_embd, vocab_size, bias=False)
    cfg = Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64)
    monkeypatch.setattr(cram, "CrammedBERT", Untied)
    path = save_ckpt(tmp_path / "run", cfg, Untied(cfg, V, 128), ckpt)
    with pytest.raises(SystemExit) as e:
        official.main(["export", str(path), str(tmp_path / "rel")])
    assert "no place for (decoder.weight): it was edited" in str(e.value) and "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing written
    monkeypatch.undo()  # the code as it was: a folder exported by it, then read by an edited cram.py
    folder = official.export(save_ckpt(tmp_path / "plain", cfg, CrammedBERT(cfg, V, 128), ckpt), tmp_path / "rel")
    monkeypatch.setattr(official, "CrammedBERT", Untied)
    with pytest.raises(CramError, match="format has no place for .*use the unchanged cram.py"):
        official.load_release(folder)


def test_a_gpt2_checkpoint_is_refused_before_its_tokenizer_is_read(ckpt, tmp_path):
    cfg = Config(n_layer=1, n_embd=32, n_head=2, ffn_hidden=64)
    path = save_ckpt(tmp_path / "run", cfg, CrammedBERT(cfg, V, 128), ckpt)
    state = torch.load(path, weights_only=True)
    torch.save({**state, "meta": {**state["meta"], "tokenizer": "gpt2"}}, path)
    with pytest.raises(CramError, match="GPT-2's tokenizer"):
        official.export(path, tmp_path / "rel")
    assert not (tmp_path / "rel").exists()


def test_export_writes_only_into_a_new_or_empty_folder_and_whole_or_not_at_all(ckpt, tmp_path, monkeypatch):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    (tmp_path / "a_file").write_text("mine")
    for dst in ("full", "a_file"):
        with pytest.raises(CramError, match="exists and is not an empty folder"):
            official.export(ckpt, tmp_path / dst)
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    assert (official.export(ckpt, tmp_path / "empty") / "model.safetensors").is_file()

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(official, "write_tokenizer", disk_full)  # after config.json and the weights are written
    with pytest.raises(CramError, match="No space left on device.*nothing was written"):
        official.export(ckpt, tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "empty", "full"]


@needs_tiny
def test_the_official_folder_exported_again_is_the_same_folder_and_computes_its_numbers(expected, tmp_path):
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    folder = official.export(TINY, tmp_path / "again")
    ours, theirs = (json.loads((f / "config.json").read_text(encoding="utf-8")) for f in (folder, TINY))
    assert ours["arch"] == theirs["arch"]  # every option, as the official code wrote it
    assert [ours[k] for k in ("model_type", "architectures")] == [theirs[k] for k in ("model_type", "architectures")]
    mine, official_state = load_file(folder / "model.safetensors"), load_file(TINY / "model.safetensors")
    assert mine.keys() == official_state.keys()  # a strict load_state_dict of the official class takes it
    assert all(torch.equal(mine[k], official_state[k]) for k in mine)
    for name in ("tokenizer.json", "special_tokens_map.json"):
        assert json.loads((folder / name).read_text(encoding="utf-8")) == json.loads((TINY / name).read_text())
    text = "Paris is the capital of France and Berlin is in Germany."
    assert Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids == \
        Tokenizer.from_file(str(TINY / "tokenizer.json")).encode(text).ids
    assert_computes_the_official_function(folder, expected)
