"""A study's plan.json of any format, in the current one: what the report reads the plan through.

`encoderlab study run` writes plan.json (study/plan.py `Plan.record`) each time it runs, so a study folder holds the
plan of the code that ran it last; the report reads it as it was left. Format 1: `format_version: 1`, the protocol
in its own current format (finetuning/migrate_protocol.py), the runs and the evaluations. Format 0 (no
`format_version`) may lack settings its protocol has since (a plan from before `lr_choice` is read under
mean_over_seeds, the rule of its time) and the study file's `findings` and `comparisons` (read as the paper's
findings and none).
"""
from __future__ import annotations

from pathlib import Path

from encoderlab.core import formats
from encoderlab.core.errors import EncoderlabError, command, given_as
from encoderlab.core.io import read_json
from encoderlab.finetuning import migrate_protocol

FORMAT = 1
FILE = "plan.json"


def run_again() -> str:
    """How a study folder gets its plan again, as the caller runs a study (command line or Python API)."""
    again = command("encoderlab study run STUDY_FILE", "encoderlab.run_study(STUDY_FILE)")
    return f"run the study again (`{again}`) to write it"


def read(root: Path) -> dict:
    """The plan of the study folder `root`, in the current format; refused in one line when there is none, it
    is not a plan, or its format is newer than this code's."""
    path = root / FILE
    if not path.exists():
        raise EncoderlabError(f"{given_as(root)}{root} is not a study folder (no {FILE}): give the folder that "
                              f"{command('`encoderlab study run` printed', '`encoderlab.run_study(...)` returned')}, "
                              "e.g. studies/demo")
    plan = read_json(path, run_again())
    if not isinstance(plan, dict) or not {"protocol", "evaluations", "runs"} <= plan.keys() \
            or not isinstance(plan["protocol"], dict):
        raise EncoderlabError(f"{path} is not a study's plan (protocol, evaluations and runs expected): {run_again()}")
    plan = formats.upgrade(plan, path, [_from_unversioned])
    return {**plan, "protocol": migrate_protocol.upgrade(plan["protocol"], f"{path} (its protocol)")}


def _from_unversioned(plan: dict) -> dict:
    """Its study file could not turn the paper's findings on or off, nor declare comparisons: it was reported with
    the paper's findings whatever it trained, and keeps them. (Its protocol is upgraded by its own migration.)"""
    spec = dict(plan.get("spec") or {})
    spec.setdefault("findings", "paper")
    spec.setdefault("comparisons", [])
    return {**plan, "spec": spec}
