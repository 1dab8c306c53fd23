"""Studies with an imported decoder: CPT from its weights against the from-scratch model of its shapes and the import
itself, on text packed with its tokenizer. A tiny random Llama made here stands in for SmolLM2 (no download)."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import torch
import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import encoderlab

from encoderlab.core.config import ConfigError
from encoderlab.finetuning import records
from encoderlab.study.imported import prepare_imports
from encoderlab.study.jobs import jobs_of
from encoderlab.study.plan import build_plan
from encoderlab.study.report import write_report
from encoderlab.study.runner import run_study
from encoderlab.study.spec import load_study

SHAPE = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 50000.0, "tie_word_embeddings": True}


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory, synthetic) -> Path:
    """A random transformers Llama with tied embeddings and a BPE tokenizer without mask or pad token."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator((d.text for d in synthetic(120)), trainer=trainers.BpeTrainer(
        vocab_size=290, special_tokens=["<s>", "</s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=tok.get_vocab_size(), bos_token_id=0, eos_token_id=1,
                                         max_position_embeddings=256, **SHAPE))
    path = tmp_path_factory.mktemp("hf") / "tinyllama"
    model.save_pretrained(str(path))
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory, synthetic) -> Path:
    """What `data prepare` leaves in corpus/: the text the imported tokenizer packs."""
    root = tmp_path_factory.mktemp("text")
    (root / "corpus").mkdir()
    docs = synthetic(300, seed=1)
    (root / "corpus" / "documents.jsonl").write_text(
        "".join(json.dumps({"id": d.id, "source": d.source, "text": d.text}) + "\n" for d in docs))
    (root / "corpus" / "manifest.json").write_text(json.dumps({"documents": len(docs)}))
    return root


@pytest.fixture(scope="module")
def task_yaml(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("task")
    rng = random.Random(0)
    words = "the film was very quite rather plot actors story".split()
    for split, n in (("train", 32), ("dev", 12), ("test", 12)):
        rows = [{"text": " ".join(rng.choices(words, k=4) + ["good" if y else "bad"]), "label": "pos" if y else "neg"}
                for y in (rng.randint(0, 1) for _ in range(n))]
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "task.yaml").write_text("family: classification\ntrain: train.jsonl\nvalidation: dev.jsonl\n"
                                    "test: test.jsonl\ntext_column: text\nlabel_column: label\n")
    return root / "task.yaml"


def write_study(tmp_path: Path, source: str, data: str, task: str = "rt-polarity", steps: int = 3, **spec) -> Path:
    (tmp_path / "pretrain.yaml").write_text(yaml.safe_dump({
        "data": {"path": data}, "model": {"preset": "micro"}, "optim": {"lr": 3e-3},
        "lr_schedule": {"kind": "wsd", "warmup_steps": 1, "decay_steps": 1},
        "train": {"steps": 1, "global_batch": 4, "dtype": "fp32", "tensorboard": False, "eval_batches": 1}}))
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump({
        "name": "t", "max_steps": 2, "batch_size": 8, "eval_batch_size": 16, "lrs": [1e-3], "seeds": [0, 1],
        "max_length": 24, "dtype": "fp32"}))
    body = {"name": "cpt", "out_dir": str(tmp_path / "studies"), "pretrain": "pretrain.yaml",
            "imported": {"tinyllama": {"source": source, "seq_len": 32}}, "budget": steps,
            "models": [{"sizes": ["tinyllama"], "objectives": ["mlm40"]}],
            "cpt": {"sizes": ["tinyllama"], "sources": ["imported"], "objective": "mlm40", "steps": [steps],
                    "optim": {"lr": 1e-3}},
            "evaluation": {"protocol": "protocol.yaml", "tasks": [task]}, **spec}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(body))
    return tmp_path / "study.yaml"


def plan_of(path: Path):
    spec, base = load_study(path)
    return build_plan(spec, base), spec, base


def test_plan_before_and_after_the_import(tmp_path, llama_dir, corpus_dir, one_thread):
    plan, spec, base = plan_of(write_study(tmp_path, str(llama_dir), str(corpus_dir)))
    assert set(plan.runs) == {"tinyllama-mlm40-3", "tinyllama-imported-mlm40-3"}
    scratch, cpt = plan.runs["tinyllama-mlm40-3"], plan.runs["tinyllama-imported-mlm40-3"]
    assert (scratch.steps, scratch.objective, scratch.tokens_per_step) == (cpt.steps, cpt.objective, 4 * 32)
    assert cpt.imported == "tinyllama" and cpt.parent is None and scratch.imported is None
    assert scratch.flops == cpt.flops > 0  # same shapes, steps, batch, windows and objective: same compute
    ckpt = plan.root / "imported" / "tinyllama"
    cfg = plan.config(cpt)
    assert cfg["init"] == {"from_weights": str(ckpt)} and plan.config(scratch)["init"] == {}
    assert cfg["optim"]["lr"] == 1e-3 and plan.config(scratch)["optim"]["lr"] == 3e-3  # cpt.optim: CPT runs only
    assert cfg["data"]["path"] == plan.config(scratch)["data"]["path"] == str(plan.root / "data" / "tinyllama")
    before = plan.config(scratch)["model"]  # from the folder's config.json: no mask row yet
    assert {k: before[k] for k in SHAPE} == SHAPE and before["vocab_size"] == 290
    evals = {e.label: e for e in plan.evaluations}
    assert evals["tinyllama-imported"].kind == "imported" and plan.eval_checkpoint(evals["tinyllama-imported"]) == ckpt
    summary = plan.summary()
    assert summary["imports"][0]["done"] is False and "imported tinyllama (weights)" in [r["from"] for r in
                                                                                           summary["runs"]]
    assert {j.id: j.deps for j in jobs_of(plan)}["eval:tinyllama-imported:rt-polarity"] == []

    prepare_imports(spec, base, plan.root, str(corpus_dir), log=lambda m: None)
    plan, _, _ = plan_of(tmp_path / "study.yaml")
    imported = json.loads((ckpt / "model_config.json").read_text())
    for run in plan.runs.values():  # the import's own shapes, the mask row included, for scratch and CPT alike
        model = plan.config(run)["model"]
        assert {k: model[k] for k in imported} == imported and imported["vocab_size"] == 291
    meta = json.loads((plan.root / "data" / "tinyllama" / "packed" / "meta.json").read_text())
    assert meta["seq_len"] == 32 and meta["tokenizer"]["vocab_size"] == 291
    assert meta["tokenizer"]["mask_id"] == imported["mask_token_id"]
    marker = (plan.root / "data" / "tinyllama" / "study-data.json").stat().st_mtime_ns
    prepare_imports(spec, base, plan.root, str(corpus_dir), log=lambda m: pytest.fail(f"redid work: {m}"))
    assert (plan.root / "data" / "tinyllama" / "study-data.json").stat().st_mtime_ns == marker


def test_bad_imported_specs_are_clear(tmp_path, llama_dir, corpus_dir, task_yaml):
    study = write_study(tmp_path, str(tmp_path / "missing"), str(corpus_dir))
    with pytest.raises(ConfigError, match="imported.tinyllama: source .*missing.* not found"):
        plan_of(study)
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    study = write_study(tmp_path, "model.gguf", str(corpus_dir))  # relative to the study file
    with pytest.raises(ConfigError, match=r"not imported yet.*give imported.tinyllama.shape.*import it first: "
                                          r"encoderlab import-hf \S*model\.gguf --out "):
        plan_of(study)
    with pytest.raises(ConfigError, match=r"import it first: encoderlab\.import_hf\('\S*model\.gguf', out='"):
        encoderlab.run_study(study)  # the Python API names its own function, not the command
    study = write_study(tmp_path, "610m-clm-42k", str(corpus_dir))  # a released checkpoint: fetched when run
    with pytest.raises(ConfigError, match=r"not imported yet.*give imported.tinyllama.shape"):
        plan_of(study)
    study = write_study(tmp_path, str(llama_dir), str(corpus_dir),
                        cpt={"sizes": ["micro"], "sources": ["imported"], "steps": [2]})
    with pytest.raises(ConfigError, match=r"'imported' needs every cpt size to name an imported model: \['micro'\]"):
        plan_of(study)
    study = write_study(tmp_path, str(llama_dir), str(corpus_dir),
                        models=[{"sizes": ["tinyllama", "tinyllamas"], "objectives": ["mlm40"]}])
    with pytest.raises(ConfigError, match=r"unknown model size 'tinyllamas'.*imported models \(tinyllama\)"):
        plan_of(study)
    body = yaml.safe_load(study.read_text())
    body["imported"] = {"tiny": str(llama_dir)}
    study.write_text(yaml.safe_dump(body))
    with pytest.raises(ConfigError, match="'tiny' must be a folder name .* not a model preset"):
        plan_of(study)
    body["imported"] = {"tinyllama": str(llama_dir)}
    body["data_shape"] = None
    body["models"] = [{"sizes": ["tinyllama"], "objectives": ["mlm40"]}]
    body["pretrain_overrides"] = {"data": {"path": str(tmp_path / "no-text")}}
    body["evaluation"]["tasks"] = [str(task_yaml)]  # a task of its own: the offline suite may not be built
    study.write_text(yaml.safe_dump(body))
    plan, spec, base = plan_of(study)  # the base data is not needed to plan imported sizes
    with pytest.raises(ConfigError, match="no text to pack with the imported tokenizers"):
        run_study(plan, base, log=lambda m: None)


def test_imported_study_runs_and_reports(tmp_path, llama_dir, corpus_dir, task_yaml, one_thread, monkeypatch):
    monkeypatch.setenv("ENCODERLAB_HOME", str(tmp_path / "home"))  # the sweep's task cache
    plan, _, base = plan_of(write_study(tmp_path, str(llama_dir), str(corpus_dir), task=str(task_yaml), steps=2))
    result = run_study(plan, base, log=lambda m: None)
    assert not result["failed"] and result["done"] == result["jobs"] == 2 + 3  # 2 runs, 3 checkpoints x 1 task
    tags = {r["tag"] for r in records.load_all(plan.root / "evals")}
    assert tags == {"imported-tinyllama", "tinyllama-mlm40-2-step-0000002", "tinyllama-imported-mlm40-2-step-0000002"}
    written = yaml.safe_load((plan.root / "configs" / "tinyllama-imported-mlm40-2.yaml").read_text())
    assert written["init"]["from_weights"] == str(plan.root / "imported" / "tinyllama")
    logs: list[str] = []
    again = run_study(plan, base, log=logs.append)
    redone = [m for m in logs if m.startswith(("importing", "packing", "done pretrain"))]
    assert not again["failed"] and not redone  # the import, the packed text and the runs are on disk
    text = write_report(plan.root).read_text()
    assert "## Continued pretraining of imported models" in text and "**Verdict (tinyllama-imported-mlm40-2):" in text
    rows = (plan.root / "report" / "imported-tinyllama.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["tinyllama-imported", "tinyllama-mlm40-2",
                                                    "tinyllama-imported-mlm40-2"]
    assert "The paper's five findings" not in text  # no CLM/MLM pair in this study


def test_verdict_says_whether_cpt_beat_both_baselines(tmp_path, llama_dir, corpus_dir):
    from encoderlab.core.io import write_json

    plan, _, base = plan_of(write_study(tmp_path, str(llama_dir), str(corpus_dir)))
    rec = plan.record(base)
    families = {"rt-polarity": "classification", "conll-ner": "tokens", "wiki-cloze": "qa", "wiki-title": "retrieval"}
    for e in rec["evaluations"]:
        e["tasks"] = list(families)  # what the records below are of (the report counts a plan's tasks only)
    rec["protocol"]["seeds"] = [0, 1, 2]  # the grid of the records below (the report counts a plan's grid only)
    plan.root.mkdir(parents=True)
    write_json(plan.root / "plan.json", rec)
    key = records.protocol_key(rec["protocol"])
    level = {"tinyllama-imported": 60.0, "tinyllama-mlm40-3": 50.0, "tinyllama-imported-mlm40-3": 70.0}
    rng = random.Random(0)
    for e in rec["evaluations"]:
        for task, family in families.items():
            for seed in (0, 1, 2):
                score = level[e["label"]] + rng.gauss(0, 1)
                records.write(records.record_path(plan.root / "evals", e["tag"], key, task, "0" * 16, 1e-3, seed), {
                    "tag": e["tag"], "task": task, "family": family, "metric": "score", "status": "ok", "lr": 1e-3,
                    "fingerprint": "0" * 16, "protocol": rec["protocol"],
                    "seed": seed, "baseline": {s: {"score": 0.0} for s in ("validation", "test")},
                    "scores": {"validation": {"score": score}, "test": {"score": score}}})
    text = write_report(plan.root).read_text()
    assert "**Verdict (tinyllama-imported-mlm40-3): CPT beat both baselines.** vs tinyllama-imported (no CPT): " \
           "higher in 4/4 categories, significantly in 4; vs tinyllama-mlm40-3 (from scratch, the same 3 steps): " \
           "higher in 4/4 categories, significantly in 4." in text
    table = text.split("## Continued pretraining of imported models")[1].split("CSV:")[0]
    assert table.count("| tinyllama-") == 3 and "±" in table


def test_a_transformers_encoder_is_continued_as_it_is_in_a_study(tmp_path, corpus_dir, task_yaml, one_thread,
                                                                 monkeypatch):
    """An encoder (a tiny BERT folder) as an imported size: copied, not imported; the text packed with its own
    tokenizer; its CPT arm trains it in BertForMaskedLM (the base recipe's model section left out); the copy and the
    continued checkpoint are evaluated; a from-scratch model of its architecture is refused before any work."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
    from test_continued_pretraining import write_masked_lm

    monkeypatch.setenv("ENCODERLAB_HOME", str(tmp_path / "home"))
    bert = write_masked_lm(tmp_path / "bert", "bert")
    path = write_study(tmp_path, str(bert), str(corpus_dir), task=str(task_yaml), steps=2)
    with pytest.raises(ConfigError, match="tinyllama is a transformers encoder: it is continued"):
        plan_of(path)
    body = yaml.safe_load(path.read_text())
    del body["models"]
    path.write_text(yaml.safe_dump(body))
    plan, _, base = plan_of(path)
    cpt = plan.configs["tinyllama-imported-mlm40-2"]
    assert cpt.init.from_weights == str(plan.root / "imported" / "tinyllama") and not cpt.model.model_fields_set
    logs: list[str] = []
    result = run_study(plan, base, log=logs.append)
    assert not result["failed"] and result["done"] == result["jobs"] == 1 + 2  # 1 run, 2 checkpoints x 1 task
    assert any(m.startswith("copying tinyllama") for m in logs) and not any(m.startswith("importing") for m in logs)
    assert (plan.root / "imported" / "tinyllama" / "config.json").read_bytes() == (bert / "config.json").read_bytes()
    final = plan.root / "pretrain" / "tinyllama-imported-mlm40-2" / "checkpoints" / "step-0000002"
    assert json.loads((final / "config.json").read_text())["model_type"] == "bert"
    tags = {r["tag"] for r in records.load_all(plan.root / "evals")}
    assert tags == {"imported-tinyllama", "tinyllama-imported-mlm40-2-step-0000002"}
    text = write_report(plan.root).read_text()
    assert "## Continued pretraining of imported models" in text and "tinyllama-imported-mlm40-2" in text


@pytest.mark.parametrize(("model_type", "seq_len", "usable"), [("bert", None, 128), ("roberta", 127, 126)])
def test_an_encoders_windows_longer_than_its_positions_are_refused_when_planned(
        tmp_path, corpus_dir, task_yaml, monkeypatch, capsys, model_type, seq_len, usable):
    """An imported encoder's text was packed at the entry's `seq_len` (512 by default) whatever the positions the
    model reads, and its CPT job refused the windows after the packing (and after any job before it): `study plan`
    and `study run` refuse them first, naming the entry, with nothing imported, packed or written."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
    from conftest import run_command
    from test_continued_pretraining import write_masked_lm

    monkeypatch.chdir(tmp_path)
    model = write_masked_lm(tmp_path / model_type, model_type)  # 128 positions; RoBERTa's first is 2
    path = write_study(tmp_path, str(model), str(corpus_dir), task=str(task_yaml), steps=2)
    body = yaml.safe_load(path.read_text())
    del body["models"]
    body["imported"]["tinyllama"].pop("seq_len")
    if seq_len is not None:
        body["imported"]["tinyllama"]["seq_len"] = seq_len
    path.write_text(yaml.safe_dump(body))
    given = seq_len or 512
    says = (f"study cpt: imported.tinyllama.seq_len={given}{' (the default)' * (seq_len is None)}: the {model_type} "
            f"model {model} reads at most {usable} tokens (its learned positions), so continuing it on windows of "
            f"{given} would be refused: give imported.tinyllama.seq_len: {usable} or less")
    with pytest.raises(ConfigError) as caught:
        plan_of(path)
    assert str(caught.value) == says
    for command in ("plan", "run"):
        code, out, err = run_command(monkeypatch, capsys, "study", command, path, home=tmp_path / "home")
        assert (code, out, err) == (2, "", f"error: {says}\n")
    assert not (tmp_path / "studies").exists()
