"""Keeping fine-tuned models (hub/finetuned.py): each saved folder, loaded with the stock class, gives the logits
of encoderlab's fine-tuned model (fp32, padded batches) and reproduces its record's test score exactly; its card
carries the task, metric, score, baseline and protocol; what no stock class computes is refused before any work."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers
import yaml
from conftest import run_command
from torch import nn

from encoderlab.core.errors import EncoderlabError
from encoderlab.data.tokenizer import train_bpe
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.hub.finetuned import MANIFEST, SavedModels
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import TransformerLM
from encoderlab.runs.checkpoint import save_weights_only
from encoderlab.tasks import baselines
from encoderlab.tasks.base import pad
from encoderlab.tasks.baselines import LABELS
from encoderlab.tasks.metrics import DEFINITIONS
from encoderlab.tasks.bi_encoder import encode

WORDS = "the film was very quite rather plot actors story good bad Anna Oslo reads sleeps in at".split()


def write_tasks(root):
    """Tiny classification, tokens (CoNLL columns), QA (SQuAD json) and retrieval (BEIR) task files."""
    rng = random.Random(0)
    rows = lambda n: [{"text": " ".join(rng.choices(WORDS[:9], k=4) + [w]), "label": w}  # noqa: E731
                      for w in rng.choices(["good", "bad"], k=n)]
    for split, n in (("train", 24), ("dev", 8), ("test", 8)):
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(n)))
        sentences = ["Anna B-PER\nreads O\nin O\nOslo B-LOC\n", "the O\nfilm O\nsleeps O\nat O\nOslo B-LOC\n"]
        (root / f"{split}.txt").write_text("\n".join(rng.choices(sentences, k=n)))
        qas = [{"context": f"{' '.join(rng.choices(WORDS[:9], k=5))} {name} {' '.join(rng.choices(WORDS[:9], k=3))}",
                "name": name} for name in rng.choices(["Anna", "Oslo"], k=n)]
        (root / f"{split}.json").write_text(json.dumps({"data": [{"title": "t", "paragraphs": [
            {"context": q["context"], "qas": [{"id": f"{split}{i}", "question": "who is it?", "answers": [
                {"text": q["name"], "answer_start": q["context"].index(q["name"])}]}]} for i, q in enumerate(qas)]}]}))
    files = "train: train.{0}\nvalidation: dev.{0}\ntest: test.{0}\n"
    (root / "cls.yaml").write_text("family: classification\n" + files.format("jsonl"))
    (root / "ner.yaml").write_text("family: tokens\n" + files.format("txt"))
    (root / "qa.yaml").write_text("family: qa\n" + files.format("json"))
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = {f"d{i}": " ".join(rng.choices(WORDS, k=8)) for i in range(24)}
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in docs.items()))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": docs[f"d{i}"][:15]}) + "\n"
                                                for i in range(24)))
    for split, ids in (("train", range(0, 16)), ("dev", range(16, 20)), ("test", range(20, 24))):
        (beir / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"q{i}\td{i}\t1\n" for i in ids))
    (root / "ir.yaml").write_text("family: retrieval\nfolder: beir\n")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("keep")
    write_tasks(root)
    tok = train_bpe([" ".join(random.Random(i).choices(WORDS, k=12)) for i in range(200)], 300)
    bodies = {"ckpt": {}, "qwen3": {"qk_norm": True, "head_dim": 16}, "mistral": {"sliding_window": 6}}
    for name, variants in bodies.items():
        cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          bos_token_id=tok.bos_id, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id,
                          mask_token_id=tok.mask_id, **variants)
        model = TransformerLM(cfg)
        model.init_weights(seed=5)
        save_weights_only(root / name, model.state_dict(), cfg, tok, {"step": 3, "reason": "final",
                                                                      "objective": "mlm40", "total_steps": 3})
    return root


def protocol(**over) -> Protocol:
    return Protocol(**{"name": "keep", "max_steps": 4, "batch_size": 4, "eval_batch_size": 8, "lrs": [3e-3],
                       "seeds": [0], "max_length": 48, "dtype": "fp32", "classification_head": "dense_gelu", **over})


class Capturing(SavedModels):
    """Saves as SavedModels does and keeps the trained modules, to compare the saved folder with them."""
    def save(self, unit, backbone, head, records, identity):
        super().save(unit, backbone, head, records, identity)
        self.kept = (unit, backbone, head, records, identity)


class Body(nn.Module):
    """A stock model's body called as encoderlab calls its backbone, so the task's own scoring runs on it."""
    def __init__(self, hf_body: nn.Module) -> None:
        super().__init__()
        self.hf_body = hf_body

    def forward(self, input_ids, *, causal, attention_mask):
        assert not causal
        return self.hf_body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def sweep_and_save(setup, spec: str, mode: str = "all", ckpt: str = "ckpt", tag: str = "", **over):
    keep = Capturing(mode, setup / f"models-{ckpt}-{spec}-{mode}{tag}", setup / ckpt, log=lambda m: None)
    summary = run_sweep(setup / ckpt, [str(setup / spec)], protocol(**over), setup / "evals", keep=keep,
                        show_progress=False, log=lambda m: None)
    unit, backbone, head, records, identity = keep.kept
    (record,) = records.values()
    return summary, unit, backbone, head, record, keep.folder(unit.name, identity)


def check_card(folder, record: dict) -> None:
    """The card's row: the run's scores, its test examples, every baseline of its task, the strongest named and the
    run against it (or that it predicts a constant, or does not beat it), the metric's definition; the same caveat
    in the model-index."""
    card = (folder / "README.md").read_text()
    val, test = record["scores"]["validation"]["score"], record["scores"]["test"]["score"]
    named = {LABELS[name]: s["score"] for name, s in record["baselines"]["test"].items()}
    # the strongest of those that read what the model read (a full-text reader is shown, not the bar)
    strongest, value = baselines.strongest({name: s["score"] for name, s in record["baselines"]["test"].items()})
    best = LABELS[strongest]
    constant = (record.get("constant_predictions") or {}).get("test")
    versus = (f"predicts a constant ({constant})" if constant else f"not above the {best} baseline ({value:.2f})"
              if test <= value else f"{test - value:+.2f} vs {best}")
    every = ", ".join(f"{name} {named[name]:.2f}" for name in named)
    assert (f"| {record['task']} | {record['metric']} | {val:.2f} | {test:.2f} | {record['examples']['test']} | "
            f"{every} | {best} {value:.2f} | {versus} |") in card
    meta = yaml.safe_load(card.split("---")[1])
    (result,) = [r for r in meta["model-index"][0]["results"] if r["dataset"]["name"] == record["task"]]
    assert result["metrics"][0]["name"].endswith(f"; strongest baseline {best} {value:.2f}"
                                                 + ("" if versus.startswith(("+", "-")) else f"; {versus}") + ")")
    for text in (f"- `{record['metric']}`: {DEFINITIONS[record['metric']]}", f"Protocol `{record['protocol']['name']}`",
                 f"cut at {record['max_length']} tokens"):
        assert text in card, text
    assert str(folder.parent) not in card  # no local path
    # nor in the records published beside it (the checkpoint's and the records' folders: their last names only)
    manifest = (folder / MANIFEST).read_text()
    assert not re.search(r'"/', manifest), re.findall(r'"/[^"]*"', manifest)
    (kept,) = json.loads(manifest)["records"].values()
    assert kept["checkpoint"] == Path(record["checkpoint"]).name and kept["scores"] == record["scores"]
    # encoderlab's own pretraining: no Hub id to name and no license made up ("unknown" is not a license)
    assert "license" not in meta and "base_model" not in meta and "License: none given" in card


def test_classification_is_eurobert_sequence_classification(setup):
    summary, unit, backbone, head, record, folder = sweep_and_save(setup, "cls.yaml")
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert type(hf).__name__ == "EuroBertForSequenceClassification" and hf.config.classifier_pooling == "mean"
    seqs = unit._prepared("test")
    ids, mask = pad(seqs, unit.pad_id)  # every test example in one padded batch
    with torch.no_grad():
        ours, theirs = unit.logits(backbone, head, ids, mask), hf(input_ids=ids, attention_mask=mask).logits
    assert (ours - theirs).abs().max() <= 1e-5
    gold = unit.gold["test"]
    accuracy = 100 * sum(int(p == g) for p, g in zip(theirs.argmax(-1).tolist(), gold)) / len(gold)
    assert accuracy == record["scores"]["test"]["score"] == summary["tasks"][unit.name]["test"]
    assert [hf.config.id2label[i] for i in range(len(unit.labels))] == unit.labels
    tok = transformers.AutoTokenizer.from_pretrained(folder)  # the saved tokenizer frames text as the task did
    assert tok(unit.splits["test"][0]["text"])["input_ids"] == seqs[0]
    check_card(folder, record)


@pytest.mark.parametrize(("ckpt", "classes"), [
    ("ckpt", ("EuroBertForTokenClassification", "LlamaForQuestionAnswering")),  # EuroBERT has no QA class
    ("qwen3", ("Qwen3ForTokenClassification", "Qwen3ForQuestionAnswering")),  # an imported family: bidirectional
    ("mistral", ("MistralForTokenClassification", "MistralForQuestionAnswering")),  # a window of 6, both ways
])
def test_tokens_and_qa_load_as_stock_token_and_qa_classes(setup, ckpt, classes):
    for spec, auto, head_name, cls in (("ner.yaml", "AutoModelForTokenClassification", "classifier", classes[0]),
                                       ("qa.yaml", "AutoModelForQuestionAnswering", "qa_outputs", classes[1])):
        _, unit, backbone, head, record, folder = sweep_and_save(setup, spec, ckpt=ckpt)
        hf = getattr(transformers, auto).from_pretrained(folder).eval()
        assert type(hf).__name__ == cls and (ckpt == "ckpt" and spec == "ner.yaml" or not hf.config.is_causal)
        head_name = "score" if cls.endswith("ForTokenClassification") and ckpt != "ckpt" else head_name
        batch = next(unit.train_batches(6, 0))
        with torch.no_grad():
            ours = head(backbone(batch["input_ids"], causal=False, attention_mask=batch["attention_mask"]))
            out = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        theirs = out.logits if spec == "ner.yaml" else torch.stack([out.start_logits, out.end_logits], -1)
        real = batch["attention_mask"].bool()
        assert (ours - theirs)[real].abs().max() <= 1e-5, spec
        again = unit.evaluate(Body(hf.base_model), getattr(hf, head_name), "test", 8)  # the task's own scoring
        assert again["score"] == record["scores"]["test"]["score"], spec
        check_card(folder, record)
        if spec == "qa.yaml":  # a plain tok(question, context) would truncate what the scoring windowed
            assert "split into windows overlapping by the task's `stride`" in (folder / "README.md").read_text()


@pytest.mark.parametrize("ckpt", ["ckpt", "qwen3"])
def test_retrieval_is_a_sentence_transformers_folder(setup, ckpt):
    from sentence_transformers import SentenceTransformer

    _, unit, backbone, head, record, folder = sweep_and_save(setup, "ir.yaml", ckpt=ckpt)
    st = SentenceTransformer(str(folder), device="cpu")
    texts = ["Query: the film", "Document: Anna reads in Oslo at the story", "x"]
    ids, mask = pad(st.tokenizer(texts)["input_ids"], st.tokenizer.pad_token_id)  # framed <bos> text <eos>
    with torch.no_grad():
        ours = F.normalize(encode(backbone, ids, mask), dim=-1)
    theirs = st.encode(texts, convert_to_tensor=True, normalize_embeddings=True)
    assert (ours - theirs).abs().max() <= 1e-5
    again = unit.evaluate(Body(st[0].auto_model), head, "test", 8)
    assert again["score"] == record["scores"]["test"]["score"]
    check_card(folder, record)


def test_chosen_saves_the_kept_run_of_each_seed_only(setup):
    summary, unit, *_ = sweep_and_save(setup, "cls.yaml", mode="chosen", lrs=[1e-3, 3e-2], seeds=[0, 1],
                                       lr_choice="per_seed")
    task = summary["tasks"][unit.name]
    saved = {p.parent.name: json.loads(p.read_text()) for p in (setup / "models-ckpt-cls.yaml-chosen").rglob(MANIFEST)}
    assert set(saved) == {f"{unit.name}-lr{lr:g}-seed{seed}" for seed, lr in task["lr_by_seed"].items()}
    for seed, test in task["test_by_seed"].items():  # retrained sequentially: the records' scores, exactly
        (name,) = [n for n in saved if n.endswith(f"seed{seed}")]
        assert saved[name]["records"][unit.name]["scores"]["test"]["score"] == test


@pytest.mark.parametrize(("over", "spec", "message"), [
    ({"classification_head": "linear"}, "cls.yaml", "--set classification_head=dense_gelu"),
    ({"qa": {"format": "tagging"}}, "qa.yaml", "--set qa.format=spans"),
    ({"classification_head": "dense_gelu"}, "cls.yaml", "Qwen3ForSequenceClassification reads the last token"),
])
def test_what_no_stock_class_computes_is_refused_before_any_work(setup, tmp_path, over, spec, message):
    ckpt = setup / ("qwen3" if "Qwen3" in message else "ckpt")
    keep = SavedModels("all", tmp_path / "models", ckpt)
    with pytest.raises(EncoderlabError, match=message.replace(".", r"\.")):
        run_sweep(ckpt, [str(setup / spec)], protocol(**over), tmp_path / "evals", keep=keep,
                  show_progress=False, log=lambda m: None)
    assert not (tmp_path / "evals").exists() and not (tmp_path / "models").exists()


def test_finetune_save_from_the_command_line_and_again(setup, tmp_path, monkeypatch, capsys):
    """`encoderlab finetune ... --save DIR`: the folder, loaded with the Auto class, scores the record's test score;
    the same command again trains nothing (the run is recorded and saved)."""
    args = ["finetune", setup / "ckpt", setup / "cls.yaml", "--lr", "3e-3", "--out", tmp_path / "evals", "--save",
            tmp_path / "kept", "--json", *(x for over in ("max_steps=4", "batch_size=4", "max_length=48", "dtype=fp32",
                                                          "classification_head=dense_gelu") for x in ("--set", over))]
    code, out, err = run_command(monkeypatch, capsys, *args, home=tmp_path / "home")
    assert code == 0, err
    first = json.loads(out)
    code, out, err = run_command(monkeypatch, capsys, *args, home=tmp_path / "home")
    assert code == 0, err
    again = json.loads(out)
    assert first["runs_done_this_time"] == 1 and again["runs_done_this_time"] == 0
    (task,) = first["tasks"].values()
    saved = json.loads((tmp_path / "kept" / MANIFEST).read_text())
    (record,) = saved["records"].values()
    assert record["scores"]["test"]["score"] == task["test"]
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "kept").eval()
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "kept")
    rows = [json.loads(line) for line in (setup / "test.jsonl").read_text().splitlines()]
    with torch.no_grad():
        logits = hf(**tok([r["text"] for r in rows], padding=True, return_tensors="pt")).logits
    predicted = [hf.config.id2label[i] for i in logits.argmax(-1).tolist()]
    assert 100 * sum(p == r["label"] for p, r in zip(predicted, rows)) / len(rows) == task["test"]
    check_card(tmp_path / "kept", record)


def test_the_card_of_a_fine_tuned_import_names_its_base_model_and_license():
    from encoderlab.hub.card import base_model
    from encoderlab.hub.finetuned_card import _license_line

    hub_id, license = base_model("/x/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert (hub_id, license) == ("HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0")
    assert _license_line({"license": license, "base_model": hub_id}) == (
        "License: `apache-2.0`, that of `HuggingFaceTB/SmolLM2-135M-Instruct`, which it was fine-tuned from; the "
        "task data's terms apply too.")


@pytest.mark.parametrize("pairs", ["segments", "labelled"])
def test_a_pair_task_card_says_how_to_give_a_pair(setup, pairs):
    """A pair fine-tuned as two segments is `tok(a, b)`; one fine-tuned as one labelled text (`sentence_pairs:
    labelled`) must be given as that text: the card says which, and so framed the saved model scores the record."""
    rng = random.Random(1)
    for split, n in (("train", 24), ("dev", 8), ("test", 8)):
        rows = [{"premise": " ".join(rng.choices(WORDS[:9], k=4)), "hypothesis": w, "label": w}
                for w in rng.choices(["good", "bad"], k=n)]
        (setup / f"pair-{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (setup / "pair.yaml").write_text("family: classification\ntext_column: [premise, hypothesis]\n"
                                     "train: pair-train.jsonl\nvalidation: pair-dev.jsonl\ntest: pair-test.jsonl\n")
    _, unit, _, _, record, folder = sweep_and_save(setup, "pair.yaml", tag=pairs, sentence_pairs=pairs)
    card = (folder / "README.md").read_text()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    rows = unit.splits["test"]
    if pairs == "labelled":
        assert 'one text, `f"Premise: {premise}\\nHypothesis: {hypothesis}"`' in card
        batch = tok([f"Premise: {r['premise']}\nHypothesis: {r['hypothesis']}" for r in rows], padding=True,
                    return_tensors="pt")
    else:
        assert "two texts, `tok(premise, hypothesis)`: `<bos> premise <eos> hypothesis <eos>`" in card
        batch = tok([r["premise"] for r in rows], [r["hypothesis"] for r in rows], padding=True, return_tensors="pt")
    assert batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist() == unit._prepared("test")[0]
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        predicted = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.argmax(-1)
    assert 100 * sum(int(p == g) for p, g in zip(predicted.tolist(), unit.gold["test"])) / len(rows) == (
        record["scores"]["test"]["score"])


def test_finetune_save_over_another_runs_model_is_refused_before_training(setup, tmp_path, monkeypatch, capsys):
    """A `--save` folder holding the model of another run (here another LR) is not replaced unasked: one line,
    before anything trains; the model there is kept."""
    args = lambda lr: ["finetune", setup / "ckpt", setup / "cls.yaml", "--lr", lr, "--out", tmp_path / "evals",  # noqa: E731
                       "--save", tmp_path / "kept", *(x for over in ("max_steps=4", "batch_size=4", "max_length=48",
                                                                     "dtype=fp32", "classification_head=dense_gelu")
                                                      for x in ("--set", over))]
    code, _, err = run_command(monkeypatch, capsys, *args("3e-3"), home=tmp_path / "home")
    assert code == 0, err
    records = sorted(p.name for p in (tmp_path / "evals").rglob("*.json"))
    code, _, err = run_command(monkeypatch, capsys, *args("1e-3"), home=tmp_path / "home")
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith(f"error: --save {tmp_path / 'kept'} holds the fine-tuned model of another "
                                         "run (cls, lr 0.003, seed 0)") and "Traceback" not in err, err
    assert json.loads((tmp_path / "kept" / MANIFEST).read_text())["identity"]["lr"] == 3e-3
    assert sorted(p.name for p in (tmp_path / "evals").rglob("*.json")) == records  # nothing trained
