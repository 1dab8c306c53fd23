"""Keeping a fine-tuned transformers encoder in its own stock classes (hub/finetuned_transformers.py): tiny random
BERT, RoBERTa and DeBERTa-v2 folders fine-tuned on a tokens, a QA-spans and a retrieval task; each saved folder,
loaded with AutoModelForTokenClassification, AutoModelForQuestionAnswering or SentenceTransformer, gives the logits
or embeddings of encoderlab's trained backbone and head (fp32) and, scored by the task's own code, its record's
test score exactly. What no stock class computes (ModernBERT's token head, any classification) is refused by the
command line before any work, in one line."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import transformers
from test_authors_protocol import write_tasks
from test_transformers_encoders import SIZES, write_encoder
from torch import nn

from conftest import run_command
from encoderlab.finetuning.protocol import load_protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.hub.finetuned import SavedModels
from encoderlab.tasks.base import pad
from encoderlab.tasks.bi_encoder import encode

PREFIX = {"bert": "Bert", "roberta": "Roberta", "deberta-v2": "DebertaV2"}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-finetuned")
    write_tasks(root / "home" / "data" / "offline" / "tasks")
    return root


class Capturing(SavedModels):
    """Saves as SavedModels does and keeps the trained modules, to compare the saved folder with them."""
    def save(self, unit, backbone, head, records, identity):
        super().save(unit, backbone, head, records, identity)
        self.kept = (unit, backbone.eval(), head.eval(), records, identity)


class Body(nn.Module):
    """A stock model's body called as encoderlab calls its backbone, so the task's own scoring runs on it."""
    def __init__(self, hf_body: nn.Module) -> None:
        super().__init__()
        self.hf_body = hf_body

    def forward(self, input_ids, *, causal, attention_mask):
        assert not causal
        return self.hf_body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def sweep_and_save(home, folder, task: str):
    keep = Capturing("all", home / f"models-{folder.name}-{task}", folder, log=lambda m: None)
    run_sweep(folder, [task], load_protocol(None, SIZES), home / f"evals-{folder.name}", keep=keep,
              show_progress=False, log=lambda m: None)
    unit, backbone, head, records, identity = keep.kept
    (record,) = records.values()
    return unit, backbone, head, record, keep.folder(unit.name, identity)


def check_head_class(unit, backbone, head, record, folder, auto: str, cls: str, head_name: str) -> None:
    hf = getattr(transformers, auto).from_pretrained(folder).eval()
    assert type(hf).__name__ == cls
    batch = next(unit.train_batches(6, 0))
    with torch.no_grad():
        ours = head(backbone(batch["input_ids"], causal=False, attention_mask=batch["attention_mask"]))
        out = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    theirs = out.logits if auto.endswith("TokenClassification") else torch.stack([out.start_logits,
                                                                                  out.end_logits], -1)
    assert (ours - theirs)[batch["attention_mask"].bool()].abs().max() <= 1e-5
    again = unit.evaluate(Body(hf.base_model), getattr(hf, head_name), "test", 8)  # the task's own scoring
    assert again["score"] == record["scores"]["test"]["score"]


def check_tokenizer(folder, unit) -> None:
    """The saved tokenizer frames a text and a pair as the task did: [CLS] a [SEP] b [SEP], all of token type 0
    (encoderlab runs the body without token types)."""
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    bos, eos = tok.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    a, b = tok("the cat", add_special_tokens=False)["input_ids"], tok("sat", add_special_tokens=False)["input_ids"]
    pair = tok("the cat", "sat")
    assert pair["input_ids"] == [bos, *a, eos, *b, eos] and set(pair.get("token_type_ids", [0])) == {0}


def check_card(folder, record) -> None:
    card = (folder / "README.md").read_text()
    assert f"| {record['task']} | {record['metric']} |" in card and "`transformers` 5.24 (measured)" in card
    assert "License: none given (encoderlab reads none from the model folder" in card
    assert str(folder.parent) not in card and "base_model" not in card.split("---")[1]


@pytest.mark.parametrize("model_type", list(PREFIX))
def test_tokens_and_qa_load_in_their_own_stock_classes(home, model_type, monkeypatch, one_thread):
    monkeypatch.setenv("ENCODERLAB_HOME", str(home / "home"))
    folder = write_encoder(home / model_type, model_type)
    for task, auto, suffix, head_name in (
            ("toy-names", "AutoModelForTokenClassification", "ForTokenClassification", "classifier"),
            ("toy-cloze", "AutoModelForQuestionAnswering", "ForQuestionAnswering", "qa_outputs")):
        unit, backbone, head, record, saved = sweep_and_save(home, folder, task)
        check_head_class(unit, backbone, head, record, saved, auto, PREFIX[model_type] + suffix, head_name)
        check_card(saved, record)
    check_tokenizer(saved, unit)


@pytest.mark.parametrize("model_type", list(PREFIX))
def test_retrieval_is_a_sentence_transformers_folder_of_the_encoder(home, model_type, monkeypatch, one_thread):
    from sentence_transformers import SentenceTransformer

    monkeypatch.setenv("ENCODERLAB_HOME", str(home / "home"))
    folder = write_encoder(home / f"{model_type}-ir", model_type)
    unit, backbone, head, record, saved = sweep_and_save(home, folder, "toy-ir")
    st = SentenceTransformer(str(saved), device="cpu")
    assert type(st[0].auto_model).__name__ == f"{PREFIX[model_type]}Model"
    texts = ["Query: the cat sat", "Document: dogs ran across green fields near old river", "who"]
    ids, mask = pad(st.tokenizer(texts)["input_ids"], st.tokenizer.pad_token_id)  # framed [CLS] text [SEP]
    with torch.no_grad():
        ours = F.normalize(encode(backbone, ids, mask), dim=-1)
    theirs = st.encode(texts, convert_to_tensor=True, normalize_embeddings=True)
    assert (ours - theirs).abs().max() <= 1e-5
    again = unit.evaluate(Body(st[0].auto_model), head, "test", 8)
    assert again["score"] == record["scores"]["test"]["score"]
    check_card(saved, record)


@pytest.mark.parametrize(("model_type", "task", "message"), [
    ("modernbert", "toy-names", "ModernBertForTokenClassification has 2 parameters that the trained body and head do "
                                "not fill (head.dense.weight, head.norm.weight)"),
    ("modernbert", "toy-cloze", "ModernBertForQuestionAnswering has 4 parameters"),
    ("bert", "toy-pairs", "BertForSequenceClassification reads the first token"),
    ("roberta", "toy-pairs", "RobertaForSequenceClassification reads the first token"),
    ("deberta-v2", "toy-pairs", "DebertaV2ForSequenceClassification reads the first token"),
    ("modernbert", "toy-pairs", "even with classifier_pooling: mean, adds a LayerNorm"),
])
def test_what_no_stock_class_computes_is_refused_before_any_work(home, tmp_path, monkeypatch, capsys, model_type,
                                                                   task, message):
    folder = write_encoder(tmp_path / model_type, model_type)
    code, out, err = run_command(monkeypatch, capsys, "finetune", folder, task, "--lr", "1e-3", "--out",
                                 tmp_path / "evals", "--save", tmp_path / "kept",
                                 *(x for s in SIZES for x in ("--set", s)), home=home / "home")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{task}: its fine-tuned model cannot be saved: " in err and message in " ".join(err.split()), err
    assert not (tmp_path / "evals").exists() and not (tmp_path / "kept").exists()


def test_finetune_save_from_the_command_line_and_again(home, tmp_path, monkeypatch, capsys, one_thread):
    """`encoderlab finetune FOLDER toy-cloze --save DIR` on a RoBERTa folder: the folder's manifest holds the
    record, its card the score, AutoModelForQuestionAnswering loads it; the same command again trains nothing."""
    import json

    from encoderlab.hub.finetuned import MANIFEST

    folder = write_encoder(tmp_path / "roberta", "roberta")
    args = ["finetune", folder, "toy-cloze", "--lr", "1e-3", "--out", tmp_path / "evals", "--save", tmp_path / "kept",
            "--json", *(x for s in SIZES for x in ("--set", s))]
    runs = []
    for _ in range(2):
        code, out, err = run_command(monkeypatch, capsys, *args, home=home / "home")
        assert code == 0, err
        runs.append(json.loads(out))
    assert runs[0]["runs_done_this_time"] == 1 and runs[1]["runs_done_this_time"] == 0
    saved = json.loads((tmp_path / "kept" / MANIFEST).read_text())
    assert saved["class"] == "RobertaForQuestionAnswering"
    (record,) = saved["records"].values()
    assert round(record["scores"]["test"]["score"], 3) == runs[0]["tasks"]["toy-cloze"]["test"]  # --json rounds
    hf = transformers.AutoModelForQuestionAnswering.from_pretrained(tmp_path / "kept")
    assert type(hf).__name__ == "RobertaForQuestionAnswering" and hf.config.num_labels == 2
    check_card(tmp_path / "kept", record)


def test_chosen_saves_each_seeds_run_at_the_chosen_lr(home, monkeypatch, one_thread):
    """`--save-models chosen` on a DeBERTa-v2 folder: the kept run is trained again after the sweep and saved with
    the score its record has."""
    import json

    from encoderlab.hub.finetuned import MANIFEST

    monkeypatch.setenv("ENCODERLAB_HOME", str(home / "home"))
    folder = write_encoder(home / "deberta-chosen", "deberta-v2")
    keep = SavedModels("chosen", home / "models-chosen", folder, log=lambda m: None)
    summary = run_sweep(folder, ["toy-names"], load_protocol(None, [*SIZES, "lrs=[1.0e-3, 3.0e-3]"]),
                        home / "evals-chosen", keep=keep, show_progress=False, log=lambda m: None)
    task = summary["tasks"]["toy-names"]
    (saved,) = [json.loads(p.read_text()) for p in (home / "models-chosen").rglob(MANIFEST)]
    (lr,), (test,) = task["lr_by_seed"].values(), task["test_by_seed"].values()  # one seed
    assert saved["class"] == "DebertaV2ForTokenClassification" and saved["identity"]["lr"] == lr
    assert saved["records"]["toy-names"]["scores"]["test"]["score"] == test


def test_the_base_model_of_a_transformers_folder_is_its_hub_id_when_cached(tmp_path):
    """hub/card.py `training_info` reads a transformers folder as no encoderlab checkpoint: no run, no import record;
    its base model is the folder's repository when the Hugging Face cache names it, else none."""
    from encoderlab.hub.card import training_info

    cached = write_encoder(tmp_path / "models--acme--tiny-bert" / "snapshots" / "abc", "bert")
    assert training_info(cached, {})["base_model"] == "acme/tiny-bert"
    info = training_info(write_encoder(tmp_path / "local", "bert"), {})
    assert info["base_model"] is None and info["license"] is None and "run" not in info
