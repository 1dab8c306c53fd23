"""encoderlab: pretrain text encoders with MLM, CLM or any schedule of the two, and evaluate them.

The Python API (docs/api.md) is importable from here: `encoderlab.prepare_data`, `pretrain`, `load`, `finetune`,
`sweep`, `run_study`, `report_study`, `export`, `import_hf`, `mteb`, the error they raise, `EncoderlabError`, and
the warning they give, `EncoderlabWarning`.
It is loaded on first use, so that importing one part of the package (a worker process, the command line) does not
import every layer.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["__version__", "CONFIGS", "DEFAULT_PROTOCOL", "Encoder", "EncoderlabError", "EncoderlabWarning", "export",
           "finetune", "import_hf", "load", "mteb", "prepare_data", "pretrain", "report_study", "run_study", "sweep"]
API = frozenset(__all__[1:])

if TYPE_CHECKING:
    from encoderlab.api import (CONFIGS, DEFAULT_PROTOCOL, Encoder, EncoderlabError, EncoderlabWarning, export,
                                finetune, import_hf, load, mteb, prepare_data, pretrain, report_study, run_study,
                                sweep)


def __getattr__(name: str):
    if name in API:
        from encoderlab import api

        return getattr(api, name)
    raise AttributeError(f"module 'encoderlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(["__version__", *API])
