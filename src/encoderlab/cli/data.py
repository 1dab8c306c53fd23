"""`encoderlab data`: prepare corpora, tokenizers and packed shards, and look inside what was packed."""
from __future__ import annotations

import shlex
from pathlib import Path

import typer
from rich.table import Table

from encoderlab.cli.console import emit, interrupt_said, log, out
from encoderlab.cli.paths import PathText
from encoderlab.core.errors import EncoderlabError
from encoderlab.core.io import CONFIGS
from encoderlab.runs.tokenizer_model import not_continued, tokenizer_model

data_app = typer.Typer(help="Prepare corpora, tokenizers and packed shards.", no_args_is_help=True)


@data_app.command("prepare")
def data_prepare(
    source: PathText = typer.Argument(..., help="'offline' (the bundled suite), a local file/folder/glob "
                                            "(.txt .jsonl .parquet .arrow .csv; a datasets save_to_disk folder), "
                                            "or a Hugging Face dataset id."),
    out_dir: Path | None = typer.Option(None, "--out", help="Output folder (default: $ENCODERLAB_HOME/data/NAME)."),
    vocab_size: int = typer.Option(8192, help="Vocabulary of the byte-level BPE to train."),
    seq_len: int = typer.Option(512, help="Tokens per packed window."),
    val_fraction: float = typer.Option(0.005, help="Fraction of documents held out for validation loss."),
    tokenizer: PathText | None = typer.Option(None, help="Use this tokenizer.json / HF tokenizer folder (or "
                                                            "minilm-l6's, or an encoderlab checkpoint's or run's) "
                                                            "instead of training one (a mask token is added if "
                                                            "missing)."),
    text_column: str = typer.Option("text", help="Column holding the text (jsonl, csv, parquet, arrow, HF datasets)."),
    txt_unit: str = typer.Option("paragraph", help="What a document is in .txt files: file, paragraph or line."),
    on_invalid_utf8: str = typer.Option("error", help="Invalid UTF-8 bytes: error, replace or skip."),
    hf_config: str | None = typer.Option(None, help="Hugging Face dataset configuration name."),
    hf_split: str = typer.Option("train", help="Hugging Face dataset split."),
    max_documents: int | None = typer.Option(None, help="Stop after this many documents."),
    max_tokens: str | None = typer.Option(None, help="Stop the train split at exactly this many tokens (100B, 5M, "
                                                     "64K; whole windows) and record it."),
    shard: str | None = typer.Option(None, help="I/N: tokenise only shard I of N into OUT/parts (resumable); "
                                                "then --join N packs them. Needs --tokenizer."),
    join: int | None = typer.Option(None, help="Pack the parts of shards 0..N-1 (checked) into OUT/packed."),
    force: bool = typer.Option(False, help="Rebuild every step even when the cached result is up to date."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout (logs go to stderr)."),
) -> None:
    """Build a pretraining corpus, its tokenizer and packed shards (and, for 'offline', the evaluation tasks)."""
    from encoderlab.core.io import check_writable
    from encoderlab.data.prepare import PrepareOptions, default_out, prepare
    from encoderlab.data.shards import parse_shard, parse_tokens

    from encoderlab.hub.folders import check_data_out
    from encoderlab.runs.encoders import named_tokenizer
    from encoderlab.runs.tokenizer_model import check_windows_fit

    check_writable(out_dir or default_out(source), "--out" if out_dir else "the default --out")
    check_data_out(out_dir or default_out(source), "--out" if out_dir else "the default --out")
    opts = PrepareOptions(vocab_size=vocab_size, seq_len=seq_len, val_fraction=val_fraction,
                          tokenizer=named_tokenizer(tokenizer),
                          text_column=text_column, txt_unit=txt_unit, on_invalid_utf8=on_invalid_utf8,
                          hf_config=hf_config, hf_split=hf_split, max_documents=max_documents,
                          max_tokens=parse_tokens(max_tokens) if max_tokens else None,
                          shard=parse_shard(shard) if shard else None, join=join, force=force)
    if opts.shard is None:  # a shard packs nothing: its windows are the join's
        check_windows_fit(opts.tokenizer, seq_len, tokenizer)
    with interrupt_said(_interrupt_line(out_dir or default_out(source), opts.shard is not None, force)):
        summary = prepare(source, out_dir, opts, log=log)

    def render(s: dict) -> None:
        (_render_shard if shard else render_prepare)(s)
        # the join packs the shards' parts only if read as they were, and packs them as these options asked
        again = opts.flags("text_column", "txt_unit", "on_invalid_utf8", "seq_len", "val_fraction")
        out.print(f"next: {_after_prepare(source, out_dir, s, tokenizer, again)}")

    emit(summary, as_json, render)


def _interrupt_line(out: Path, shard: bool, force: bool) -> str:
    """What Ctrl-C stopped and what it kept. Each step is written whole, so a step cut short leaves nothing; a first
    prepare removes the folders it made; the steps (a shard: the parts) finished before are what the next run reuses,
    which --force would rebuild."""
    kept = shard or out.exists()
    again = "the same command without --force" if force else "the same command"
    return f"data prepare into {out} stopped; nothing half-written was kept" + (
        f" (the {'parts' if shard else 'steps'} it finished are kept: {again} goes on from them)" if kept else "")


def _after_prepare(source: str, out_dir: Path | None, s: dict, tokenizer: str | None,
                   shard_flags: list[str] = ()) -> str:
    """The command to run next, as it can be pasted here: pretrain on the data (the README's path), continue the
    model whose tokenizer packed it (a transformers model, an encoderlab checkpoint or run), or, after a shard, the
    join that packs the shards' parts once all have run (with `shard_flags`, the shard's own options)."""
    if "shard" in s:
        n = s["shard"].partition("/")[2]
        join = ["encoderlab", "data", "prepare", source, "--out", s["root"], "--tokenizer", str(tokenizer), "--join", n,
                *shard_flags]
        return f"once all {n} shards have run, {shlex.join(join)}"
    if tokenizer and (checkpoint := _checkpoint_of(str(tokenizer))) is not None:
        return _continue_checkpoint(checkpoint, s["packed"])
    if (model := tokenizer_model(tokenizer)) is not None:
        return _continue(model.name, model.kind, s["packed"])
    line = _from_scratch(source, out_dir, s)
    why = not_continued(tokenizer)  # a decoder's or an encoder-decoder's: a new model, and the user is told why
    return f"{line} (a new model of this vocabulary: {why})" if why else line


def _from_scratch(source: str, out_dir: Path | None, s: dict) -> str:
    """Pretraining a new model on the data (the README's path; the demo's config for the offline suite)."""
    if source != "offline":
        return shlex.join(["encoderlab", "pretrain", _shipped("pretrain/mini-mlm40.yaml"), "--set",
                           f"data.path={s['packed']}"])
    pretrain = ["encoderlab", "pretrain", _shipped("pretrain/demo-tiny.yaml")]
    if out_dir is not None:  # elsewhere than where `data.path: offline` (the demo configs') reads it
        return shlex.join([*pretrain, "--set", f"data.path={s['packed']}"])
    return f"{shlex.join(pretrain)} (data.path: offline is this data), or encoderlab demo (the demo study)"


# What a run's model takes from its data, not from the checkpoint it continues: the vocabulary and special ids.
FROM_DATA = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "mask_token_id", "initializer_range")


def _checkpoint_of(tokenizer: str) -> str | None:
    """The encoderlab checkpoint or run whose tokenizer this is: the folder given, or the one holding its
    tokenizer/ (what the import's next step names)."""
    from encoderlab.runs.encoders import is_encoderlab_checkpoint

    path = Path(tokenizer)
    for folder in (path, path.parent if path.name == "tokenizer" else None):
        if folder is not None and is_encoderlab_checkpoint(folder):
            return str(folder)
    return None


def _continue_checkpoint(checkpoint: str, packed: str) -> str:
    """Continued pretraining of an encoderlab checkpoint (an import, a run): cpt-encoder.yaml has no `model:`
    section, and a model of the default preset does not fit the checkpoint's weights, so its shapes are set too."""
    import json

    from encoderlab.runs import checkpoint as ckpt

    shapes = json.loads((ckpt.resolve(checkpoint) / "model_config.json").read_text())
    sets = [f"model.{key}={_yaml_value(value)}" for key, value in shapes.items() if key not in FROM_DATA]
    return shlex.join(["encoderlab", "pretrain", _shipped("pretrain/cpt-encoder.yaml"), "--set", f"data.path={packed}",
                       "--set", f"init.from_weights={checkpoint}", *(part for one in sets for part in ("--set", one))])


def _yaml_value(value: object) -> str:
    """A value as `--set` reads it back: JSON, with a float's exponent after a dot (YAML reads `1e-05` as text)."""
    import json

    text = json.dumps(value)
    return text.replace("e", ".0e", 1) if isinstance(value, float) and "e" in text and "." not in text else text


def _continue(model: str, kind: str | None, packed: str) -> str:
    """Continued pretraining of `model` on the data: in transformers' own masked-LM class (`cpt-encoder.yaml`, whose
    init.from_weights the model folder can be), or, for a family encoderlab's own backbone computes, from its import
    (`init.from_weights` of the folder is refused there, and the import's tokenizer is the one to pack with)."""
    from encoderlab.runs.encoders import OWN_BACKBONE

    if kind in OWN_BACKBONE:
        ckpt = f"ckpts/{Path(model).resolve().name}"
        return (f"{shlex.join(['encoderlab', 'import-hf', model, '--out', ckpt])} (a {kind} model is continued on "
                f"encoderlab's own backbone, from its import: pack the corpus with --tokenizer {ckpt}/tokenizer, "
                f"then pretrain with init.from_weights: {ckpt}, docs/hf.md)")
    return shlex.join(["encoderlab", "pretrain", _shipped("pretrain/cpt-encoder.yaml"), "--set", f"data.path={packed}",
                       "--set", f"init.from_weights={model}"])


def _shipped(name: str) -> str:
    """A shipped config as a command run from here can name it: `configs/NAME` where that exists (a clone's root,
    as the docs write it, or a copy of the configs), else its path in the package."""
    local = Path("configs") / name
    return str(local) if local.is_file() else str(CONFIGS / name)


def _render_shard(s: dict) -> None:
    out.print(f"[bold]shard {s['shard']}[/bold] of {s['units']} units: {s['parts_written']} parts written, "
              f"{s['parts_skipped']} already complete -> {s['parts']}")


def render_prepare(s: dict) -> None:
    c = s["corpus"]
    out.print(f"[bold]corpus[/bold]   {c['documents']:,} documents, {c['words']:,} words -> {s['corpus_file']}")
    if "removed" in c:
        r = c["removed"]
        out.print(f"          evaluation text removed: {r['lines_equal_to_an_example']} lines, "
                  f"{r['documents_equal_to_an_example'] + r['documents_containing_an_example']} documents "
                  f"(checked against {c['evaluation_examples_checked']:,} validation/test examples)")
    out.print(f"[bold]tokenizer[/bold] {s['vocab_size']:,} tokens -> {s['tokenizer']}")
    for split, d in s["splits"].items():
        out.print(f"[bold]{split:<9}[/bold] {d['windows']:,} windows x {s['seq_len']} = {d['tokens']:,} tokens "
                  f"({s['dtype']}), {d['documents']:,} documents")
    if "max_tokens" in s:
        out.print(f"[bold]budget[/bold]    {s['max_tokens']:,} train tokens (--max-tokens), reached exactly")
    out.print(f"[bold]shards[/bold]    {s['packed']}")
    if "tasks" in s:
        table = Table(title=f"evaluation tasks ({s['tasks_root']})", title_justify="left")
        for col in ("task", "family", "train", "validation", "test"):
            table.add_column(col, justify="left" if col in ("task", "family") else "right")
        for name, counts in s["tasks"].items():
            table.add_row(name, counts["family"], *(f"{counts[k]:,}" for k in ("train", "validation", "test")))
        out.print(table)
    out.print("time      " + ", ".join(f"{k} {v:.1f}s" for k, v in s["seconds"].items()))


@data_app.command("inspect")
def data_inspect(
    packed: Path = typer.Argument(..., help="A packed dataset folder (the 'packed' folder that prepare wrote)."),
    window: int = typer.Option(0, help="Which window of the train split to decode."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON on stdout."),
) -> None:
    """Show a packed dataset's metadata and decode one window, document by document."""
    from encoderlab.data.loader import PackedDataset
    from encoderlab.data.packing import unknown_of
    from encoderlab.data.tokenizer import load_tokenizer

    ds = PackedDataset(packed)
    if not 0 <= window < len(ds):
        raise EncoderlabError(f"--window {window} is out of range: the train split has {len(ds)} windows")
    tok = load_tokenizer(packed / "tokenizer")
    tokens, docs = ds.windows([window])
    pieces = []
    for d in sorted(set(docs[0].tolist())):
        ids = tokens[0][docs[0] == d].tolist()
        pieces.append({"document": d, "tokens": len(ids), "text": tok.decode(ids, skip_special_tokens=False)})
    summary = {"root": str(packed), "seq_len": ds.seq_len, "windows": len(ds), "tokenizer": tok.info(),
               "window": window, "documents": pieces}
    if "unknown_tokens" in ds.meta:  # a tokenizer with an unknown token, packed since it is counted
        summary["unknown_tokens"] = ds.meta["unknown_tokens"]

    def render(s: dict) -> None:
        out.print(f"{s['root']}: {s['windows']:,} windows of {s['seq_len']} tokens, vocabulary "
                  f"{s['tokenizer']['vocab_size']:,} ({s['tokenizer']['origin']})")
        if unknown := s.get("unknown_tokens"):
            out.print(f"unknown tokens: {unknown['share']:.1%} ({unknown['token']!r}) of {unknown_of(unknown)}")
        for p in s["documents"]:
            out.print(f"[bold]document {p['document']}[/bold] ({p['tokens']} tokens): {p['text'][:300]!r}")

    emit(summary, as_json, render)
