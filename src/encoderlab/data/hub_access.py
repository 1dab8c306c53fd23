"""Whether the Hugging Face Hub can be reached, found in milliseconds: huggingface_hub itself retries 5 times with
backoff (about 24 s per attempt, even when DNS fails at once). Used by every reader of hub data (corpora here, the
paper's evaluation sets in tasks/)."""
from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

from encoderlab.core.errors import DataError, command, prepare_command

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
_NETWORK_WORDS = (
    "couldn't reach", "connect", "offline", "timed out", "timeout", "name or service not known",
    "name resolution", "failed to resolve", "getaddrinfo", "network is unreachable", "max retries",
)  # fmt: skip
_HUB_PROBE_TIMEOUT_S = 5.0


def _hub_unreachable(spec: str, reason: str) -> DataError:
    reason = " ".join(reason.split())[:200]  # one line, whatever the library put in its message
    return DataError(
        f"{spec!r} is not a local path and the Hugging Face Hub cannot be reached ({reason}); download the "
        f"dataset on a machine with access and pass its local .parquet/.jsonl files (or their folder) as "
        f"{command('PATH', 'source')}, or run `{prepare_command('offline')}`"
    )


def probe_hub(spec: str) -> None:
    """Fail within milliseconds (at most _HUB_PROBE_TIMEOUT_S) when the hub's host cannot be reached.

    Without it, huggingface_hub retries 5 times with backoff (1+2+4+8+8 s): about 24 s per attempt even when
    DNS fails at once, and its timeout settings do not shorten those sleeps. Skipped behind a proxy, where a
    failing direct connection says nothing about the hub.
    """
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return
    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=_HUB_PROBE_TIMEOUT_S).close()
    except OSError as e:
        raise _hub_unreachable(spec, f"cannot connect to {host}:{port}: {e}") from e


def is_network_error(e: BaseException) -> bool:
    chain: BaseException | None = e
    for _ in range(20):  # bounded: an exception chain can, rarely, be cyclic
        if chain is None:
            return False
        text = f"{type(chain).__name__} {chain}".lower()
        if isinstance(chain, (ConnectionError, TimeoutError)) or any(w in text for w in _NETWORK_WORDS):
            return True
        chain = chain.__cause__ or chain.__context__
    return False


def offline_variable() -> str | None:
    """The first of Hugging Face's offline variables that is set, if any: then no hub access is tried at all."""
    return next((v for v in _OFFLINE_VARS if os.environ.get(v, "").upper() in {"1", "ON", "YES", "TRUE"}), None)
