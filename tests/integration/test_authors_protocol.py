"""The authors' evaluation protocol end to end: the real configs/eval/small-study-authors.yaml, only its sizes
overridden as `--set` does, swept by `run_sweep` over one tiny offline task of each family on a tiny pretrained
checkpoint. Checks that every family takes the authors' path (inputs, heads, labels, metrics, the searched corpus,
the per-seed LR choice) and that both the authors' metric and the field's standard one reach the records."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import train_tiny
from encoderlab.core.config import load_config
from encoderlab.core.io import write_jsonl
from encoderlab.data.offline.taskfiles import write_task_folder
from encoderlab.finetuning import records
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.sweep import run_sweep
from encoderlab.runs import checkpoint as ckpt

CONFIG = Path(__file__).parents[2] / "configs" / "eval" / "small-study-authors.yaml"
# Only the sizes change (and the task retrieval trains on, which must be one of ours); two LRs, so that the per-seed
# LR choice has something to choose between, and seeds 0 and 2, which choose differently on toy-ir.
SIZES = ["max_steps=4", "batch_size=8", "eval_batch_size=16", "lrs=[1.0e-3, 3.0e-3]", "seeds=[0, 2]",
         "max_length=48", "max_eval_examples=8", "dtype=fp32", "retrieval.train_on=toy-ir"]
TASKS = ["toy-pairs", "toy-names", "toy-cloze", "toy-ir"]
FILLER = "the cat sat on a mat while dogs ran across green fields near the old river".split()
NAMES = ["Zanzibar Quetzal", "Kowloon Xylo", "Ouagadou Fjordvik", "Tegucig Pzrwq"]  # several sub-words each


def pairs(n: int, rng: random.Random) -> list[dict]:
    """Premise and hypothesis; "yes" when the hypothesis' word is in the premise. Half of each label."""
    out = []
    for i in range(n):
        premise = rng.sample(FILLER, 5)
        word = rng.choice(premise) if i % 2 else rng.choice([w for w in FILLER if w not in premise])
        out.append({"premise": " ".join(premise), "hypothesis": f"it was {word}", "label": i % 2})
    return out


def named_sentences(n: int, rng: random.Random) -> list[dict]:
    """Five words each: three filler words ("O") and a two-word name (B-PER I-PER) somewhere among them."""
    out = []
    for _ in range(n):
        words, at = rng.sample(FILLER, 3), rng.randrange(4)
        words[at:at] = rng.choice(NAMES).split()
        out.append({"tokens": words, "tags": [1 if j == at else 2 if j == at + 1 else 0 for j in range(5)]})
    return out


def cloze(n: int, split: str, rng: random.Random) -> list[dict]:
    """A context that never starts with its answer (a one-word name), and a question naming it."""
    out = []
    for i in range(n):
        name = rng.choice(NAMES).split()[0]
        context = f"people said that {name} {' '.join(rng.sample(FILLER, 4))}."
        out.append({"id": f"{split}{i}", "context": context, "question": f"Who is {name}?", "title": "",
                    "answers": {"text": [name], "answer_start": [context.index(name)]}})
    return out


# Retrieval: 24 train pairs on documents judged in train only, 3 documents judged nowhere, and validation/test
# judgements. dv2 is judged only in validation, d-zero only in validation and at grade 0, dv0 in both splits.
VALIDATION_QRELS = [("v0", "dv0", 1), ("v0", "d-zero", 0), ("v1", "dv1", 1), ("v2", "dv2", 1)]
TEST_QRELS = [("t0", "dt0", 1), ("t0", "dv0", 1), ("t1", "dt1", 1), ("t2", "dt2", 1)]
UNION = {"dv0", "dv1", "dv2", "d-zero", "dt0", "dt1", "dt2"}  # judged in validation or test, any grade: 7


def write_beir(folder: Path) -> None:
    rng = random.Random(3)
    docs = [f"tr{i}" for i in range(24)] + sorted(UNION) + ["u0", "u1", "u2"]
    texts = {d: " ".join(rng.sample(FILLER, 6)) for d in docs}
    write_jsonl(folder / "corpus.jsonl", [{"_id": d, "title": "", "text": t} for d, t in texts.items()])
    queries = [f"q{i}" for i in range(24)] + ["v0", "v1", "v2", "t0", "t1", "t2"]
    write_jsonl(folder / "queries.jsonl", [{"_id": q, "text": " ".join(rng.sample(FILLER, 3))} for q in queries])
    (folder / "qrels").mkdir()
    for split, rows in (("train", [(f"q{i}", f"tr{i}", 1) for i in range(24)]), ("validation", VALIDATION_QRELS),
                        ("test", TEST_QRELS)):
        lines = ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t{g}" for q, d, g in rows)]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")


def write_tasks(root: Path) -> None:
    rng = random.Random(0)
    sizes = {"train": 24, "validation": 8, "test": 8}  # 24 / batch 8: 3 steps, under max_steps 4
    write_task_folder(root, {"name": "toy-pairs", "family": "classification", "labels": ["no", "yes"],
                             "text_fields": ["premise", "hypothesis"]}, {},
                      {s: pairs(n, rng) for s, n in sizes.items()})
    write_task_folder(root, {"name": "toy-names", "family": "tokens", "labels": ["O", "B-PER", "I-PER"],
                             "scheme": "iob2"}, {}, {s: named_sentences(n, rng) for s, n in sizes.items()})
    write_task_folder(root, {"name": "toy-cloze", "family": "qa"}, {}, {s: cloze(n, s, rng) for s, n in sizes.items()})
    write_task_folder(root, {"name": "toy-ir", "family": "retrieval"}, {}, write_data=write_beir)


@pytest.fixture(scope="module")
def swept(tmp_path_factory, packed_dir, one_thread):
    tmp = tmp_path_factory.mktemp("authors")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENCODERLAB_HOME", str(tmp / "home"))
        write_tasks(tmp / "home" / "data" / "offline" / "tasks")
        train_tiny(tmp, packed_dir)
        protocol = load_config(Protocol, CONFIG, SIZES, str(CONFIG))  # what `encoderlab sweep --set ...` does
        prepared: dict = {}
        summary = run_sweep(tmp / "tiny", TASKS, protocol, tmp / "evals", log=lambda m: None, show_progress=False,
                            prepared=prepared)
        again = run_sweep(tmp / "tiny", TASKS, protocol, tmp / "evals", log=lambda m: None, show_progress=False,
                          prepared=prepared)
        # the whole sweep once more, tasks prepared afresh, elsewhere: random batches and dropout are seeded
        run_sweep(tmp / "tiny", TASKS, protocol, tmp / "evals2", log=lambda m: None, show_progress=False)
        yield {"protocol": protocol, "summary": summary, "again": again, "prepared": prepared,
               "records": records.load_all(tmp / "evals"), "rerun": records.load_all(tmp / "evals2"),
               "checkpoint": tmp / "tiny"}


# task -> (the authors' metric, the standard metric), as the records name them
METRICS = {"toy-pairs": ("accuracy", "accuracy"), "toy-names": ("sentence_macro_f1", "f1"),
           "toy-cloze": ("token_f1", "f1"), "toy-ir": ("ndcg@10_top10_only", "ndcg@10")}


def test_the_file_keeps_the_authors_choices_and_the_records_hold_them(swept):
    protocol = swept["protocol"]
    authors = {"inputs": "eos", "batch_order": "random", "classification_head": "dense_gelu", "lr_choice": "per_seed",
               "tokens": {"labels": "all_subwords", "dropout": 0.1, "metric": "sentence_macro_f1"},
               "qa": {"format": "tagging"},
               "retrieval": {"train_on": "toy-ir", "corpus": "judged_any_split", "relevance": "binary", "loss": "mnrl",
                             "ndcg": "top10_only"}}
    dumped = protocol.model_dump(mode="json")
    assert {k: dumped[k] for k in authors} == authors
    # the sizes are ours, the rest the file's
    assert (protocol.max_steps, protocol.batch_size, protocol.seeds, protocol.lrs) == (4, 8, [0, 2], [1e-3, 3e-3])
    assert (protocol.max_length, protocol.max_eval_examples, protocol.dtype) == (48, 8, "fp32")
    assert protocol.name == "small-study-authors" and protocol.max_length_by_family == {"qa": 256, "retrieval": 64}
    assert protocol.optim.betas == (0.9, 0.95) and protocol.warmup_fraction == 0.1
    found = swept["records"]
    assert len(found) == 16  # 4 tasks x 2 LRs x 2 seeds; retrieval's runs trained once on toy-ir and scored on it
    assert all(r["protocol"] == dumped for r in found)


def test_each_family_records_the_authors_metric_and_the_standard_one(swept):
    by_task: dict[str, list[dict]] = {}
    for r in swept["records"]:
        by_task.setdefault(r["task"], []).append(r)
    assert sorted(by_task) == sorted(TASKS) and all(len(rs) == 4 for rs in by_task.values())
    for task, rs in by_task.items():
        metric, standard = METRICS[task]
        for r in rs:
            assert r["status"] == "ok" and r["metric"] == metric and r["steps"] == 3, (task, r.get("reason"))
            for scores in (*(r["scores"][s] for s in ("validation", "test")), *r["baseline"].values()):
                assert scores["score"] == scores[metric] and scores["standard"] == scores[standard], task
                assert all(0 <= v <= 100 for v in scores.values()), (task, scores)
    assert {r["trained_on"]["task"] for r in by_task["toy-ir"]} == {"toy-ir"}
    # The baselines, by hand (every validation and test split has 8 examples, max_eval_examples keeps them all):
    for split in ("validation", "test"):
        pairs_base, names_base, cloze_base, ir_base = (by_task[t][0]["baseline"][split] for t in TASKS)
        # pairs: labels 12/12 in train, the tie goes to the smaller, "no"; 4 of 8 right; macro F1 (2/3 + 0) / 2
        assert pairs_base["accuracy"] == 50.0 and pairs_base["macro_f1"] == pytest.approx(100 / 3)
        # names: all "O" on five words, three of them O: F1(O) = 2*3/(5+3), F1(B) = F1(I) = 0 -> 0.25; no entity
        assert names_base["sentence_macro_f1"] == pytest.approx(25.0) and names_base["f1"] == 0.0
        # cloze: the first word, "people", which is never the answer: no position and no word in common
        assert cloze_base["token_f1"] == 0.0 and cloze_base["f1"] == 0.0
        # retrieval searches 7 documents: every relevant one is among the top 10 (recall 100), so the authors'
        # ideal (the relevant documents retrieved) is the standard one (all of them) and the two NDCGs agree
        assert ir_base["recall@100"] == 100.0
    for r in by_task["toy-ir"]:
        for scores in (*r["scores"].values(), *r["baseline"].values()):
            assert scores["ndcg@10_top10_only"] == pytest.approx(scores["ndcg@10"], abs=1e-9)
            assert scores["recall@100"] == 100.0


def test_retrieval_searches_the_documents_judged_in_either_split(swept):
    task = swept["prepared"]["toy-ir"]
    assert task.searched_documents("validation") == task.searched_documents("test") == len(UNION) == 7
    lm, _, _ = ckpt.load_model(swept["checkpoint"])
    run = task.search(lm.model, "test", batch_size=16)
    # every test query ranks the same 7 documents: dv2 (judged only in validation) and d-zero (judged only at grade
    # 0) among them, never a training document nor one judged nowhere
    assert sorted(run) == ["t0", "t1", "t2"] and all(set(ranked) == UNION for ranked in run.values())


def test_inputs_heads_labels_and_batches_are_the_authors(swept):
    prepared = swept["prepared"]
    _, _, tok = ckpt.load_model(swept["checkpoint"])
    pairs_task, names, cloze_task = prepared["toy-pairs"], prepared["toy-names"], prepared["toy-cloze"]
    first = pairs_task.splits["train"][0]
    a, b = tok.encode_batch([first["premise"], first["hypothesis"]])
    assert pairs_task.ids["train"][0] == [*a, tok.eos_id, *b, tok.eos_id]  # `a <eos> b <eos>`: no BOS
    head = pairs_task.make_head(32, torch.Generator().manual_seed(0))
    assert [type(m) for m in head] == [nn.Linear, nn.GELU, nn.Linear] and head[0].out_features == 32
    # random batches: the first batch of seed 5 is the first 8 of a seeded permutation of the 24 examples
    order = torch.randperm(24, generator=torch.Generator().manual_seed(5)).tolist()[:8]
    batch = next(pairs_task.train_batches(8, seed=5))
    assert batch["labels"].tolist() == [pairs_task.gold["train"][i] for i in order]
    # tokens: every sub-word of a word carries its tag (the names split into several), and dropout seeds ride along
    sentence = names.splits["train"][0]
    spans = names.word_spans("train", 0)
    at = sentence["tags"].index(1)
    assert spans[at][1] - spans[at][0] > 1 and spans[0][0] == 0  # no BOS in front of the first word
    labels = names.sub_word_labels("train", 0, len(names.ids["train"][0]))
    assert labels[spans[at][0]:spans[at][1]] == [1] * (spans[at][1] - spans[at][0])
    assert names.ids["train"][0][-1] == tok.eos_id and labels[-1] == -100
    assert "dropout_seed" in next(names.train_batches(8, seed=0))
    assert cloze_task.tagging is not None and cloze_task.tagging.dropout == 0.1


def test_the_summary_chooses_each_seeds_lr(swept):
    summary, found = swept["summary"], swept["records"]
    assert summary["runs_done_this_time"] == 16
    for task in TASKS:
        entry = summary["tasks"][task]
        runs = {(r["seed"], r["lr"]): r["scores"] for r in found if r["task"] == task}
        best = {}
        for seed in (0, 2):  # each seed's best validation score, the smaller LR on a tie
            best[seed] = max((1e-3, 3e-3), key=lambda lr: (runs[seed, lr]["validation"]["score"], -lr))
        assert entry["lr_choice"] == "per_seed" and entry["lr_by_seed"] == best, task
        tests = [runs[seed, lr]["test"]["score"] for seed, lr in best.items()]
        assert entry["test"] == round(sum(tests) / 2, 3) and entry["seeds"] == 2
    again = swept["again"]  # nothing left to do: every record found again, the same summary
    assert again["runs_done_this_time"] == 0 and again["tasks"] == summary["tasks"]
    # toy-ir's seeds keep different LRs (seed 0 3e-3, seed 2 1e-3), so this sweep tells per_seed from
    # mean_over_seeds, which would keep 3e-3 for both (the better mean validation score)
    ir = summary["tasks"]["toy-ir"]
    assert ir["lr_by_seed"] == {0: 3e-3, 2: 1e-3} and ir["best_lr"] == 1e-3  # most seeds' LR; a tie: the smaller


def test_the_sweep_is_deterministic(swept):
    def scores(found):
        return {(r["task"], r["lr"], r["seed"]): (r["scores"], r["baseline"], r["curve"]) for r in found}

    assert scores(swept["rerun"]) == scores(swept["records"])


def test_a_study_job_is_done_by_the_sweeps_rule(swept, tmp_path):
    """A study's evaluation job is done by the rule a sweep skips a run by (finetuning/records.py `recorded`): a record
    made by a model trained on other data is not done (the study used to take any usable record)."""
    import json
    import shutil

    from encoderlab.study.jobs import EvalJob

    out = tmp_path / "evals"
    shutil.copytree(swept["checkpoint"].parent / "evals", out)
    job = EvalJob(id="eval:tiny:retrieval", checkpoint=ckpt.resolve(swept["checkpoint"]), tasks=["toy-ir"], out=out,
                  protocol=swept["protocol"])
    assert job.is_done()
    path = next(out.rglob("toy-ir/*/lr*-seed*.json"))
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "trained_on": {"task": "other", "fingerprint": "0" * 12}}))
    assert not job.is_done()
