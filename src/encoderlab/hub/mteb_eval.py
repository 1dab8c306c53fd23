"""`encoderlab mteb MODEL --tasks T1 T2 --out DIR`: run the `mteb` library (an optional extra, `pip install
'encoderlab[mteb]'`) on a model, frozen, as ModernBERT, Ettin, EuroBERT and LLM2Vec report it (docs/mteb.md).

MODEL is an encoderlab checkpoint or run folder (exported to a sentence-transformers folder in a temporary folder
with hub/exporter.py: the family's body, mean pooling and the retrieval prompts, as encoderlab's retrieval evaluation
embeds text), a sentence-transformers folder, or a plain transformers encoder folder (sentence-transformers wraps it
with mean pooling). No code from the folder runs: `trust_remote_code=False`, a config asking for a class only its own
code provides (`auto_map`) is refused as import-hf refuses it, and so is a modules.json naming a module outside
sentence-transformers.

A task is an offline-suite task of a family MTEB can score (its record's `mteb`: retrieval, classification), made an
MTEB custom task in memory (tasks/mteb_tasks.py), or any other name: an MTEB task, found in the tasks mteb ships
(`mteb.get_tasks`) and downloaded from the Hugging Face Hub, which must then be reachable. Every task and the model
are checked before any work, and --out is written whole in a temporary folder, then renamed: mteb's own result files
(`results/MODEL/REVISION/TASK.json`) and encoderlab's `summary.json`, each score beside the task's baselines where
encoderlab has them (an offline task's, on its full texts: tasks/baselines.py).
"""
from __future__ import annotations

import json
import math
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from encoderlab.core.errors import EncoderlabError, argument, command, option_name
from encoderlab.core.io import atomic_dir, write_json
from encoderlab.core.quiet import quiet_transformers
from encoderlab.data.tokenizer import refuse_code_from
from encoderlab.hub.folders import prepare_out
from encoderlab.tasks import load_task, offline_root, registry, task_family, unprepared_offline
from encoderlab.tasks import baselines as task_baselines

INSTALL = "pip install 'encoderlab[mteb]'"
ENCODERLAB, SENTENCE_TRANSFORMERS, TRANSFORMERS = "encoderlab", "sentence-transformers", "transformers"
SUMMARY = "summary.json"
Log = Callable[[str], None]


@dataclass
class Model:
    path: Path  # as given
    kind: str  # ENCODERLAB, SENTENCE_TRANSFORMERS or TRANSFORMERS


@dataclass
class Task:
    name: str  # as given
    mteb: Any  # the mteb task object
    offline: Any = None  # the encoderlab task, for an offline task


def check_installed() -> None:
    try:
        import mteb  # noqa: F401
    except ImportError:
        who = command("encoderlab mteb", "encoderlab.mteb")
        raise EncoderlabError(f"{who} needs the mteb package: {INSTALL}") from None


def model_kind(path: Path) -> Model:
    """What MODEL is, refused in one line when it is none of the three or asks for code of its own. A named encoder
    (`minilm-l6`) is its unpacked folder."""
    from encoderlab.runs.encoders import NAMED, named_encoder, transformer_module

    if not path.exists() and str(path) in NAMED:
        path = named_encoder(str(path))
    if not path.is_dir():
        raise EncoderlabError(f"{argument('model', path)} does not exist or is not a folder: give an encoderlab "
                              "checkpoint or run folder, a sentence-transformers folder, a transformers encoder "
                              f"folder or {', '.join(NAMED)}")
    if (path / "state.json").exists() or (path / "LATEST").exists():
        return Model(path, ENCODERLAB)
    body = transformer_module(path) or path  # sentence-transformers' older layout: the model in 0_Transformer/
    if not (body / "config.json").exists():
        raise EncoderlabError(f"{argument('model', path)} is not a model folder: it holds neither an encoderlab "
                              "checkpoint (state.json) or run (LATEST) nor a transformers config.json")
    refuse_code_from(body)
    check_folder(body)
    modules = path / "modules.json"
    if not modules.exists():
        return Model(path, TRANSFORMERS)
    try:
        types = [str(m.get("type", "")) for m in json.loads(modules.read_text(encoding="utf-8"))]
    except (ValueError, AttributeError, TypeError):
        raise EncoderlabError(f"{modules}: not the module list sentence-transformers writes") from None
    foreign = [t for t in types if not t.startswith("sentence_transformers.")]
    if foreign:
        raise EncoderlabError(f"{modules} names {', '.join(foreign)}, a module outside sentence-transformers: "
                              "encoderlab runs no code from a model folder")
    return Model(path, SENTENCE_TRANSFORMERS)


def check_folder(path: Path) -> None:
    """What fine-tuning checks of a transformers folder (runs/encoders.py), checked before MTEB embeds with it:
    safetensors only and inside the folder, every weight of the body with its shape, a tokenizer of its own whose ids
    fit the embeddings. sentence-transformers would load a pickle, a shard from anywhere, or a body with weights
    missing (starting them random) without a word."""
    from encoderlab.runs.encoders import load_body, transformers_config

    cfg = transformers_config(path, own_backbone=True)  # its tokenizer's ids too
    load_body(path, cfg)  # loaded to be checked, then dropped


def allowed_families() -> list[str]:
    return [f.name for f in registry.families() if f.mteb is not None]


def check_task(name: str, root: Path) -> Any:
    """The family record of an offline task MTEB can score, or the MTEB task of that name (its data not loaded);
    refused in one line: an offline task of another family, an unknown name, an MTEB task without the Hub, a path."""
    if name in ("", ".", "..") or any(c in name for c in "/\\\0"):  # root/NAME would be a folder elsewhere
        raise EncoderlabError(f"task {name!r}: give an offline task or an MTEB task by its name, not a path")
    if (root / name / "task.json").exists():
        record = registry.family(task_family(name, root=root))
        if record.mteb is None:
            raise EncoderlabError(f"task {name!r} is a {record.name} task: MTEB scores offline tasks of the "
                                  f"{' and '.join(allowed_families())} families only")
        return record
    if unprepared := unprepared_offline(name, root):  # before MTEB's own names, which are never the suite's
        raise EncoderlabError(unprepared)
    import mteb

    try:
        found = mteb.get_tasks(tasks=[name])
    except KeyError:
        found = []
    if not found:
        raise EncoderlabError(unknown_task(name, root))
    check_hub_for(name)
    return found[0]


def check_tasks(names: list[str], root: Path | None = None) -> None:
    """What `run_mteb` checks of its tasks, for a study to refuse them before any job runs."""
    check_installed()
    for name in names:
        check_task(name, root or offline_root())


def resolve_task(name: str, root: Path) -> Task:
    """An offline task (an MTEB custom task) or an MTEB task by name, refused in one line before any work."""
    found = check_task(name, root)
    if isinstance(found, registry.Family):
        task = load_task(name, root=root)
        return Task(name, found.mteb(task), task)  # type: ignore[misc]
    return Task(name, found)


def unknown_task(name: str, root: Path) -> str:
    """The refusal of a name that is no task: the offline tasks MTEB scores (a tokens or QA task would be refused
    next), and the MTEB task of that name in other letter case (mteb's names are case-sensitive)."""
    import mteb

    from encoderlab.tasks import offline_task_names

    scored = set(allowed_families())
    offline = ", ".join(sorted(n for n in offline_task_names(root) if task_family(n, root=root) in scored))
    said = (f"unknown task {name!r}: neither an offline task MTEB scores ({offline or 'none prepared'}) nor an MTEB "
            "task name (mteb.get_tasks knows it, e.g. SciFact, Banking77Classification)")
    cased = [t.metadata.name for t in mteb.get_tasks() if t.metadata.name.lower() == name.lower()]
    return f"{said}; did you mean {cased[0]!r}?" if cased else said


def check_hub_for(name: str) -> None:
    """An MTEB task downloads its data from the Hub: refuse it in one line, in seconds, when the Hub is out of
    reach (data/hub_access.py, as the paper's datasets are checked)."""
    from encoderlab.data.hub_access import offline_variable, probe_hub

    reason = f"{offline_variable()} is set" if offline_variable() else None
    if reason is None:
        try:
            probe_hub(name)
        except EncoderlabError:
            reason = "no connection"
    if reason:
        raise EncoderlabError(f"MTEB task {name!r} downloads its data from the Hugging Face Hub, which is unreachable "
                              f"({reason}); offline, MTEB runs the offline suite's retrieval and classification "
                              "tasks (e.g. wiki-title, rt-polarity)")


def sentence_model(model: Model, scratch: Path, log: Log):
    """The SentenceTransformer of MODEL; an encoderlab checkpoint is exported into `scratch` first."""
    from sentence_transformers import SentenceTransformer

    from encoderlab.hub.exporter import export_checkpoint

    folder = model.path
    if model.kind == ENCODERLAB:
        folder = scratch / "sentence-transformers"
        export_checkpoint(model.path, folder, "sentence-transformers", log=log)
    try:
        with quiet_transformers():  # its body was checked as fine-tuning checks it (`check_folder`)
            st = SentenceTransformer(str(folder), trust_remote_code=False, local_files_only=True)
    except Exception as exc:  # transformers and sentence-transformers name the problem, not always the folder
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise EncoderlabError(f"{argument('model', model.path)}: sentence-transformers cannot load it: "
                              f"{first[:300]}") from None
    tok = st.tokenizer
    if tok.pad_token is None:  # padding is masked out: EOS (or SEP) serves, as in encoderlab's fine-tuning
        tok.pad_token = tok.eos_token or tok.sep_token
    if tok.pad_token is None:
        raise EncoderlabError(f"{argument('model', model.path)}: its tokenizer has no pad, EOS or SEP token to pad "
                              "batches with")
    return st


def wrapped(st, model: Model):
    """mteb's wrapper of the SentenceTransformer, named after the folder (mteb's results/NAME/REVISION/)."""
    from mteb.models import SentenceTransformerEncoderWrapper

    wrapper = SentenceTransformerEncoderWrapper(st)
    name = f"{model.kind}/{model.path.resolve().name}"
    wrapper.mteb_model_meta = wrapper.mteb_model_meta.model_copy(update={"name": name, "revision": "local"})
    return wrapper


def run_mteb(model: str | Path, tasks: list[str], out: str | Path, *, force: bool = False,
             batch_size: int = 32, log: Log = lambda message: None) -> dict:
    """Run MTEB on `tasks` with `model`; write mteb's result files and summary.json into `out` (module docstring)."""
    check_installed()
    if not tasks:
        raise EncoderlabError(f"no task given: {option_name('tasks')} names offline tasks (e.g. wiki-title, "
                              "rt-polarity) or MTEB tasks")
    started, out, found = time.perf_counter(), Path(out), model_kind(Path(model))
    prepare_out(out, force, keep=found.path)
    root = offline_root()
    resolved = [resolve_task(name, root) for name in dict.fromkeys(tasks)]
    import mteb

    with tempfile.TemporaryDirectory(prefix="encoderlab-mteb-") as scratch, warnings.catch_warnings():
        # mteb calls sentence-transformers methods that newer versions renamed: its warnings, not the user's
        warnings.filterwarnings("ignore", category=FutureWarning, module="mteb")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="mteb")
        encoder = wrapped(sentence_model(found, Path(scratch), log), found)  # loaded before --out is written
        log(f"mteb {mteb.__version__}: {len(resolved)} tasks with {found.path} ({found.kind})")
        with atomic_dir(out) as tmp:
            result = mteb.evaluate(encoder, [t.mteb for t in resolved], cache=mteb.ResultCache(tmp),
                                   overwrite_strategy="always", show_progress_bar=False,
                                   encode_kwargs={"batch_size": batch_size})
            summary = {"model": str(found.path), "model_kind": found.kind, "weights": weights_of(found),
                       "mteb_version": mteb.__version__, "out": str(out), "results": str(out / "results"),
                       "tasks": [summary_row(t, result) for t in resolved],
                       "seconds": round(time.perf_counter() - started, 1)}
            write_json(tmp / SUMMARY, summary)
    return summary


def weights_of(model: Model) -> str | None:
    """The SHA-256 of the model's weights (a transformers folder's: of its weights, config and tokenizer files), as
    its fine-tuning records name them (a study's MTEB job is done for these only); None for weights not held in
    safetensors files."""
    from encoderlab.runs.encoders import encoder_digest, resolve_encoder

    try:
        return encoder_digest(resolve_encoder(model.path))
    except (EncoderlabError, OSError):
        return None


def summary_row(task: Task, result) -> dict:
    """One task's line of the summary: its main score on test (in percent, as encoderlab reports) and, for an
    offline task, its baselines' scores of the same metric."""
    metadata = task.mteb.metadata
    scored = next(r for r in result.task_results if r.task_name == metadata.name)
    split = "test" if "test" in scored.scores else next(iter(scored.scores))
    main = [s["main_score"] for s in scored.scores[split]]  # one per subset (language)
    score = 100 * sum(main) / len(main)
    if not math.isfinite(score):
        raise EncoderlabError(f"MTEB task {metadata.name}: its {metadata.main_score} is {score}")
    row = {"task": task.name, "mteb_task": metadata.name, "type": metadata.type, "metric": metadata.main_score,
           "split": split, "score": round(score, 4), "baselines": {}}
    if task.offline is not None:
        standard = registry.family(task.offline.family).standard_metric
        on_test = task_baselines.every(task.offline)["test"]
        row["baselines"] = {task_baselines.LABELS[name]: round(scores["standard"], 4)
                            for name, scores in on_test.items()}
        row["baseline_metric"] = standard
        trivial = task_baselines.trivial_name(task.offline)
        said = at_chance(row["score"], task_baselines.LABELS[trivial], on_test[trivial]["standard"],
                         len(task.offline.gold["test"]) if metadata.type == "Classification" else None)
        if said:
            row["warning"] = said
    return row


def at_chance(score: float, trivial: str, value: float, n_test: int | None) -> str | None:
    """What the summary says of a score its trivial baseline explains: an accuracy within the majority rate's
    one-sided 95% sampling margin over the test examples (a frozen model is scored once, so the test draw is the
    noise), or a retrieval score not above a random ranking's."""
    if n_test is None:
        return f"learned nothing: not above the {trivial} ({value:.2f})" if score <= value else None
    rate = value / 100
    bound = value + 100 * 1.645 * math.sqrt(rate * (1 - rate) / max(n_test, 1))
    if score > bound:
        return None
    return (f"learned nothing: within chance of the {trivial} ({value:.2f}; its 95% bound over {n_test} test "
            f"examples is {bound:.2f})")
