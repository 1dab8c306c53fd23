"""A classification label's class name, and each reading of it encoderlab has had (oldest first, `READINGS`).

A label is one class whatever file format holds it: JSON's number `1e2` and a CSV's text `1e2`, `100` or `1.0e2`
are all class `100`; JSON's `true` and a CSV's `true`, `True` or `TRUE` are all class `true`. The earlier readings
are kept because a task file's fingerprint says which of them reads its labels as today's does
(tasks/families/classification.py `label_reading`): records made under another reading are of other classes.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

INTEGER_DECIMAL = re.compile(r"(-?\d+)\.0*")  # "1.0", "-2.00", "3.": what a CSV writer makes of a float column
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
PLUS_NUMBER = re.compile(r"\+(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")  # "+1": a CSV's +1/-1 labels (JSON has no "+")
EXPONENT_NUMBER = re.compile(r"-?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # "1e2": how JSON and CSV writers give 100.0 too
# JSON's spelling of its booleans, which a CSV writer spells as its language does (Python's True, Excel's TRUE)
BOOLEANS = {spelling: word for word in ("true", "false") for spelling in (word, word.title(), word.upper())}
MINUS_ZERO = re.compile(r"-0+")
LARGEST_EXPONENT = 308  # a float's: a larger whole number is no number a JSON writer writes; it stays as written


def label_name_first(v: Any) -> str:
    """A label's class name as encoderlab first read it (only JSON's 1.0 was 1)."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return "" if v is None else str(v).strip()


def label_name_second(v: Any) -> str:
    """The second reading: 1, 1.0, "1", "1.0" and "+1" the same class (a JSON writer may give one column's numbers as
    1 on some rows and 1.0 on others, a CSV writer "1" and "1.0", or +1/-1)."""
    name = label_name_first(v)
    name = name[1:] if PLUS_NUMBER.fullmatch(name) else name  # "+1" is 1, as "1.0" is
    return str(int(m[1])) if (m := INTEGER_DECIMAL.fullmatch(name)) else name


def label_name(v: Any) -> str:
    """A label as a class name: JSON null and blanks are empty; a whole number the class of its integer however it is
    written (1, 1.0, 1e0 in JSON; "1", "1.0", "+1", "1e0" in a CSV); a boolean `true` or `false` (JSON's true, a
    CSV's true, True or TRUE), so that a CSV and a JSONL file of the same rows make the same classes. A number that
    is not whole stays as written ("1.5", "1.10" beside "1.1"): such labels are as often names (of sections, of
    versions) as numbers."""
    if isinstance(v, bool):  # before the numbers: True is the int 1 to Python, never the class 1
        return "true" if v else "false"
    name = label_name_second(v)
    if name in BOOLEANS:
        return BOOLEANS[name]
    if MINUS_ZERO.fullmatch(name):  # JSON's -0 is 0, as "-0.0" is
        return "0"
    return whole_number(name) if EXPONENT_NUMBER.fullmatch(name) else name


def whole_number(name: str) -> str:
    """The integer a number in exponent form is, where it is whole; else the text as written."""
    try:
        value = Decimal(name)  # exactly: a float would make 2**53 and 2**53 + 1 one class
    except InvalidOperation:  # an exponent beyond any Decimal's
        return name
    if value.adjusted() <= LARGEST_EXPONENT and value == value.to_integral_value():
        return str(int(value))
    return name


READINGS = (label_name_first, label_name_second, label_name)  # every reading so far, oldest first; the last is today's
