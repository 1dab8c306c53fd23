"""Models named by their Hugging Face Hub id, and the paper's released checkpoints by their names (`610m-clm-42k`:
`MLMvsCLM/610m-clm-42k`), fetched where the Hub is reachable.

Only data is downloaded (`ALLOWED`: config, safetensors weights, tokenizer files): a repository's Python files never
reach the disk, let alone run. The download goes to huggingface_hub's own cache; offline, or with the Hub
unreachable, the answer is one line within seconds saying to give a local folder instead.
"""
from __future__ import annotations

import re
from pathlib import Path

from encoderlab.core.errors import EncoderlabError

PAPER_ORG = "MLMvsCLM"  # the authors' Hugging Face organisation (configs/studies/paper-released.yaml)
ALLOWED = ("config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
           "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "*.model",
           "generation_config.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json")
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def paper_names() -> list[str]:
    """The released checkpoints' names, as the paper's released-grid study lists them."""
    from encoderlab.core.config import load_yaml
    from encoderlab.core.io import CONFIGS

    return list(load_yaml(CONFIGS / "studies" / "paper-released.yaml")["models"])


def hub_repo(src: str) -> str | None:
    """The Hub repository `src` names: a released checkpoint's name, or `owner/name`; None for neither."""
    if src in paper_names():
        return f"{PAPER_ORG}/{src}"
    return src if _REPO.fullmatch(src) and Path(src).suffix != ".gguf" else None


def download(repo: str) -> Path:
    """The local folder of `repo`'s config, weights and tokenizer (nothing else), fetched once."""
    from huggingface_hub import snapshot_download

    from encoderlab.data.hub_access import is_network_error, offline_variable, probe_hub

    local = "give the model's local folder instead (config.json, safetensors weights, tokenizer files)"
    if offline := offline_variable():
        raise EncoderlabError(f"{repo}: not a local folder, and {offline} is set: {local}")
    try:
        probe_hub(repo)
    except EncoderlabError:  # its message speaks of datasets: this one of models
        raise EncoderlabError(f"{repo}: not a local folder, and the Hugging Face Hub cannot be reached: {local}") \
            from None
    try:
        return Path(snapshot_download(repo_id=repo, allow_patterns=list(ALLOWED)))
    except Exception as exc:
        why = "the Hugging Face Hub cannot be reached" if is_network_error(exc) else f"{type(exc).__name__}"
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 160 else detail[:160].rsplit(" ", 1)[0] + " ..."
        raise EncoderlabError(f"{repo}: not a local folder, and {why} ({detail}): {local}") from None
