"""The four built-in task families, each one module ending with its `register(Family(...))` (tasks/registry.py).

Imported by the registry on its first lookup, so these are always known, in this order: the order of their
categories in every report (SC, TC, QA, IR).
"""
import importlib

BUILT_IN = ("classification", "tokens", "qa", "retrieval")

for _name in BUILT_IN:  # in this order, which import sorting would not keep
    importlib.import_module(f"encoderlab.tasks.families.{_name}")
