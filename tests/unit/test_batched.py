"""The batched engine gives each run what the sequential one gives it: metrics, loss curves, failures.

Tolerance. Both engines run the same arithmetic on the same data in fp32, but not in the same order: the batched
engine pads a step's batches to a common length (masked keys add exact zeros, yet change how reductions are
blocked), multiplies with batched instead of single matrix products, uses SDPA's math form instead of its fused
CPU kernel, and clips with the gradient norm computed for K runs at once. Each differs from the other by float
rounding (~1e-7 relative per operation); over a few steps of Adam, whose update divides by the
square root of the second moment, such differences grow to ~1e-6..1e-5 relative in the losses. LOSS_RTOL = 1e-5
leaves an order of magnitude of room and still catches any real difference (a wrong LR, seed, schedule value,
clipping or data order moves a loss by percents). Metrics are counts over a few examples and must be equal.
"""
from __future__ import annotations

import math
import random
import re

import pytest
import torch

from encoderlab.data.tokenizer import train_bpe
from encoderlab.finetuning import batched, engines
from encoderlab.finetuning.protocol import Protocol
from encoderlab.finetuning.training import FinetuneRun, finetune
from encoderlab.model.config import ModelConfig
from encoderlab.model.transformer import Transformer
from encoderlab.tasks.classification import ClassificationTask
from encoderlab.tasks.qa import QATask
from encoderlab.tasks.retrieval import RetrievalTask
from encoderlab.tasks.tokens import TokenTask

LOSS_RTOL = 1e-5
WORDS = ("the cat sat on a mat while dogs ran across green fields and birds sang in tall trees near the old river "
         "where children played with boats good bad Oslo Zoe Kimberly").split()
CPU = torch.device("cpu")

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest


@pytest.fixture(scope="module")
def tok():
    rng = random.Random(0)
    return train_bpe([" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(300)]
                     + ["Query: Document: Where did it happen?"], 300)


def words(rng: random.Random, lo: int, hi: int) -> list[str]:
    return [rng.choice(WORDS[:-5]) for _ in range(rng.randint(lo, hi))]


def classification(rng: random.Random, n: int) -> ClassificationTask:
    def rows(k):
        out = []
        for i in range(k):
            y = rng.randint(0, 1)
            out.append({"id": f"e{i}", "text": " ".join(words(rng, 1, 12) + ["good" if y else "bad"]), "label": y})
        return out
    return ClassificationTask("toy-cls", {"train": rows(n), "validation": rows(12), "test": rows(12)}, ["neg", "pos"])


def tokens(rng: random.Random, n: int) -> TokenTask:
    def rows(k):
        out = []
        for i in range(k):
            ws = words(rng, 2, 10)
            for _ in range(3):
                ws.insert(rng.randrange(len(ws) + 1), rng.choice(["Oslo", "Zoe"]))
            out.append({"id": f"s{i}", "tokens": ws, "tags": [{"Oslo": 0, "Zoe": 1}.get(w, 2) for w in ws]})
        return out
    return TokenTask("toy-ner", {"train": rows(n), "validation": rows(10), "test": rows(10)},
                     ["B-LOC", "B-PER", "O"], "iob2")


def qa(rng: random.Random, n: int) -> QATask:
    def rows(k, split):
        out = []
        for i in range(k):
            ws = words(rng, 4, 16)
            name = rng.choice(["Oslo", "Zoe", "Kimberly"])
            ws.insert(rng.randrange(len(ws) + 1), name)
            context = " ".join(ws) + "."
            out.append({"id": f"{split}{i}", "context": context, "question": "Where did it happen?",
                        "answers": {"text": [name], "answer_start": [context.index(name)]}})
        return out
    return QATask("toy-qa", {"train": rows(n, "t"), "validation": rows(8, "v"), "test": rows(8, "s")})


def retrieval(rng: random.Random, n: int) -> RetrievalTask:
    corpus = {f"d{i}": {"title": f"doc {i}", "text": " ".join(words(rng, 2, 20))} for i in range(n + 8)}
    queries = {f"q{i}": " ".join(words(rng, 1, 6)) for i in range(n + 8)}
    qrels = {"train": {f"q{i}": {f"d{i}": 1} for i in range(n)},
             "validation": {f"q{i}": {f"d{i}": 1} for i in range(n, n + 4)},
             "test": {f"q{i}": {f"d{i}": 1} for i in range(n + 4, n + 8)}}
    return RetrievalTask("toy-ir", corpus, queries, qrels)


FAMILIES = {"classification": classification, "tokens": tokens, "qa": qa, "retrieval": retrieval}


def setup(family: str, tok, **over):
    # 21 training examples in batches of 4: five full batches and a short one per epoch, so that a step mixes
    # batch lengths (padding) and, at some step, batch sizes (separate calls); 8 steps cross into a second epoch.
    task = FAMILIES[family](random.Random(1), 21)
    task.prepare(tok, 48)
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1)
    backbone = Transformer(cfg)
    backbone.init_weights(0)
    protocol = Protocol(**{"name": "t", "max_steps": 8, "epochs": 2, "batch_size": 4, "eval_batch_size": 8,
                           "lrs": [1e-3, 3e-3], "seeds": [0, 1], "max_length": 48, "dtype": "fp32",
                           "warmup_fraction": 0.25, "curve_every": 2, **over})
    return task, cfg, backbone.state_dict(), protocol


def compare(sequential: dict, grid: dict) -> float:
    """Assert two record bodies agree; return the largest relative loss difference."""
    assert {k: v for k, v in grid.items() if k not in ("curve", "scores", "seconds")} == \
        {k: v for k, v in sequential.items() if k not in ("curve", "scores", "seconds")}
    assert [s for s, _ in grid["curve"]] == [s for s, _ in sequential["curve"]]
    worst = max((abs(a - b) / abs(b) for (_, a), (_, b) in zip(grid["curve"], sequential["curve"])), default=0.0)
    assert worst <= LOSS_RTOL, (grid["curve"], sequential["curve"])
    assert grid.get("scores") == sequential.get("scores")
    return worst


@pytest.mark.parametrize("family", list(FAMILIES))
def test_batched_runs_equal_sequential_runs(family, tok):
    task, cfg, weights, protocol = setup(family, tok)
    runs = [(lr, seed) for lr in protocol.lrs for seed in protocol.seeds]
    grid = list(batched.finetune_grid(task, cfg, weights, runs, protocol=protocol, device=CPU))
    assert [(b["lr"], b["seed"]) for b in grid] == sorted(runs, key=lambda r: (r[1], r[0]))
    for body in grid:
        assert body["status"] == "ok" and body["steps"] == 8 and len(body["curve"]) == 4
        compare(finetune(task, cfg, weights, lr=body["lr"], seed=body["seed"], protocol=protocol, device=CPU), body)


@pytest.mark.parametrize("family", ["classification", "retrieval"])
def test_a_diverging_run_fails_alone(family, tok):
    task, cfg, weights, protocol = setup(family, tok, lrs=[1e-3, 1e30], seeds=[0])
    grid = {b["lr"]: b for b in batched.finetune_grid(task, cfg, weights, [(1e-3, 0), (1e30, 0)], protocol=protocol,
                                                      device=CPU)}
    reference = {lr: finetune(task, cfg, weights, lr=lr, seed=0, protocol=protocol, device=CPU)
                 for lr in (1e-3, 1e30)}
    assert reference[1e30]["status"] == "failed"  # the premise: this LR diverges sequentially too
    assert grid[1e30]["status"] == "failed" and grid[1e30]["steps"] == reference[1e30]["steps"]
    assert grid[1e30]["reason"].startswith("training loss became")
    assert not math.isfinite(float(grid[1e30]["reason"].split()[3]))
    compare(reference[1e-3], grid[1e-3])


def test_groups_respect_the_size_limit_and_keep_a_seed_together(tok):
    runs = [(lr, seed) for lr in (1e-3, 2e-3, 3e-3) for seed in (0, 1)]
    groups = batched.split_groups(runs, 3)
    assert [[s for _, s in g] for g in groups] == [[0, 0, 0], [1, 1, 1]]
    task, cfg, weights, protocol = setup("classification", tok, max_steps=2)
    seen = []
    bodies = list(batched.finetune_grid(task, cfg, weights, runs, protocol=protocol, device=CPU, max_group=4,
                                        log=seen.append, skip=lambda lr, seed: lr == 2e-3))
    assert [m for m in seen if "together" in m] == ["toy-cls: 2 runs trained together (group 1 of 2)",
                                                    "toy-cls: 2 runs trained together (group 2 of 2)"]
    assert sorted((b["lr"], b["seed"]) for b in bodies) == [(1e-3, 0), (1e-3, 1), (3e-3, 0), (3e-3, 1)]
    assert all(b["status"] == "ok" and b["steps"] == 2 for b in bodies)


def test_a_long_group_says_its_step_at_least_every_heartbeat(tok, monkeypatch):
    task, cfg, weights, protocol = setup("classification", tok, max_steps=20, epochs=10)
    for heartbeat, steps in ((1e9, [2, 4, 6, 8, 10, 12, 14, 16, 18]), (0.0, list(range(1, 20)))):
        monkeypatch.setattr(batched, "HEARTBEAT_S", heartbeat)  # 0: every step is 30 s after the last line
        seen: list[str] = []
        list(batched.finetune_grid(task, cfg, weights, [(1e-3, 0)], protocol=protocol, device=CPU, log=seen.append))
        said = [re.match(r"toy-cls: step (\d+)/20 of 1 runs, eta ~[0-9.]+ min before evaluation$", m) for m in seen[1:]]
        assert all(said) and [int(m[1]) for m in said] == steps, seen  # every tenth of the steps, or every step


def test_calls_split_where_padding_costs_more_than_a_call():
    def block(runs, rows, length):
        return runs, {"input_ids": torch.zeros(rows, length, dtype=torch.long),
                      "labels": torch.zeros(rows, length, dtype=torch.long)}

    blocks = [block([0, 1], 4, 10), block([2, 3], 4, 11), block([4, 5], 4, 40), block([6], 3, 12)]
    calls = batched.plan_calls(blocks, overhead=64)
    assert sorted(idx for idx, _ in calls) == [[0, 1, 2, 3], [4, 5], [6]]  # sizes never mix; 10 and 11 pad cheaply
    (batch,) = [b for idx, b in calls if idx == [0, 1, 2, 3]]
    assert batch["input_ids"].shape == (4, 4, 11) and (batch["labels"][:2, :, 10] == -100).all()
    assert [idx for idx, _ in batched.plan_calls(blocks[:3], overhead=10**9)] == [[0, 1, 2, 3, 4, 5]]


def test_auto_engine_batches_on_cuda_and_never_chooses_from_a_timing(tok, monkeypatch):
    """A study's numbers must not depend on the machine's load: on a CPU `auto` is the sequential engine whatever
    batching would gain (an earlier timing probe made the same study give different records from one run to the
    next), on CUDA the batched one unless a trial step fails."""
    task, cfg, weights, protocol = setup("classification", tok)
    runs = [(1e-3, 0), (3e-3, 0)]

    def choose(requested, runs=runs, device=CPU, **over):
        return engines.choose_engine(requested, task, cfg, weights, runs, protocol.model_copy(update=over), device)

    assert choose("sequential") == "sequential" and choose("batched") == "batched"
    for problem, chosen in ((None, "batched"), ("NotImplementedError: no batching rule", "sequential")):
        monkeypatch.setattr(engines, "batched_step_fails", lambda *a, problem=problem: problem)
        assert choose("auto", device=torch.device("cuda")) == chosen
    assert choose("auto", runs=runs[:1], device=torch.device("cuda")) == "sequential"  # nothing to batch
    monkeypatch.setattr(engines, "batched_step_fails", lambda *a: None)  # batching would work here too
    assert choose("auto", max_steps=1000) == "sequential" and choose("auto") == "sequential"
    with pytest.raises(engines.EncoderlabError, match="engine 'fast' is not one of auto, sequential, batched"):
        choose("fast")
    said: list[str] = []  # asked for on a CPU: it runs, and the log says it is the slower engine there
    assert engines.choose_engine("batched", task, cfg, weights, runs, protocol, CPU, said.append) == "batched"
    assert said and "slower there than one run after another" in said[0]


def test_the_trial_step_trains_no_run(tok, monkeypatch):
    task, cfg, weights, protocol = setup("classification", tok)
    before = {k: v.clone() for k, v in weights.items()}
    assert engines.batched_step_fails(task, cfg, weights, [(1e-3, 0), (3e-3, 1)], protocol, CPU) is None
    assert all(torch.equal(before[k], weights[k]) for k in weights)

    def unbatchable(*args, **kwargs):
        raise NotImplementedError("Batching rule not implemented for aten::something")

    monkeypatch.setattr(batched.Group, "step", unbatchable)
    assert "aten::something" in engines.batched_step_fails(task, cfg, weights, [(1e-3, 0), (3e-3, 1)], protocol, CPU)


@pytest.mark.parametrize("max_length, form", [(48, "eager"), (256, "flash")])
def test_a_run_trains_and_scores_with_one_attention_form(max_length, form, tok, monkeypatch):
    """Both engines give a run one attention backend, chosen from the protocol's length, for its training steps
    (gradients on) and its scoring (off): no kernel is picked by whether gradients are on."""
    from encoderlab.model.attention import Dense

    seen = []
    layout = Dense.layout

    def recording(self, causal, doc_ids, attention_mask, window=None):
        seen.append((self.form, torch.is_grad_enabled()))
        return layout(self, causal, doc_ids, attention_mask, window)

    monkeypatch.setattr(Dense, "layout", recording)
    task, cfg, weights, protocol = setup("classification", tok, max_length=max_length, max_steps=2)
    engines = {"sequential": lambda: finetune(task, cfg, weights, lr=1e-3, seed=0, protocol=protocol, device=CPU),
               "batched": lambda: list(batched.finetune_grid(task, cfg, weights, [(1e-3, 0)], protocol=protocol,
                                                             device=CPU))}
    for name, run in engines.items():
        seen.clear()
        run()
        assert set(seen) == {(form, True), (form, False)}, name


# bf16 weights: the engines' arithmetic differs by bf16 rounding (~4e-3 relative per operation) where fp32 differs by
# ~1e-7; over 8 Adam steps the losses stay within BF16_LOSS_RTOL. Metrics may flip on an example or two.
BF16_LOSS_RTOL = 3e-2


@pytest.mark.parametrize("family", list(FAMILIES))
def test_bf16_weights_train_bf16_parameters_alike_in_both_engines(family, tok):
    task, cfg, weights, protocol = setup(family, tok, weights="bf16", dtype="bf16", lrs=[3e-3], seeds=[0])
    run = FinetuneRun(task, cfg, weights, 0, protocol, CPU)
    run.step(next(task.epoch_batches(4, 0)), 1e-3)
    assert {p.dtype for p in run.params} == {torch.bfloat16}
    assert {t.dtype for s in run.optimizer.state.values() for k, t in s.items() if k != "step"} == {torch.bfloat16}
    (grid,) = batched.finetune_grid(task, cfg, weights, [(3e-3, 0)], protocol=protocol, device=CPU)
    sequential = finetune(task, cfg, weights, lr=3e-3, seed=0, protocol=protocol, device=CPU)
    assert grid["status"] == sequential["status"] == "ok"
    worst = max(abs(a - b) / abs(b) for (_, a), (_, b) in zip(grid["curve"], sequential["curve"]))
    assert worst <= BF16_LOSS_RTOL, (grid["curve"], sequential["curve"])


def test_a_run_in_bf16_weights_learns(tok):
    task, cfg, weights, protocol = setup("classification", tok, weights="bf16", dtype="bf16", max_steps=60,
                                         epochs=20, curve_every=10)
    body = finetune(task, cfg, weights, lr=3e-3, seed=0, protocol=protocol, device=CPU)
    assert body["curve"][-1][1] < body["curve"][0][1] / 2, body["curve"]
    assert body["scores"]["test"]["score"] > 80
