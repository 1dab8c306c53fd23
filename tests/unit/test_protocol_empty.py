"""An empty protocol file (saved before it was written, or cut short) ran as the protocol of every default, 6 LRs x
5 seeds of 1000 steps, without a word: hours of fine-tuning under settings no one chose."""
from __future__ import annotations

import pytest

from encoderlab.core.config import ConfigError
from encoderlab.finetuning.protocol import DEFAULT_PROTOCOL, load_protocol


@pytest.mark.parametrize("text", ["", "\n\n", "# max_steps: 8\n", "---\n"])
def test_an_empty_protocol_file_is_refused(tmp_path, text):
    (tmp_path / "quick.yaml").write_text(text)
    with pytest.raises(ConfigError, match=rf"^protocol file {tmp_path}/quick\.yaml is empty: it holds no setting; "
                                          rf"write its settings \(base: {DEFAULT_PROTOCOL} and the keys to change\) "
                                          r"or give no protocol for the default one \(demo\.yaml\)$"):
        load_protocol(tmp_path / "quick.yaml", [])


def test_a_protocol_of_one_key_is_read(tmp_path):
    (tmp_path / "quick.yaml").write_text(f"base: {DEFAULT_PROTOCOL}\nmax_steps: 8\n")
    assert load_protocol(tmp_path / "quick.yaml", []).max_steps == 8
    (tmp_path / "named.yaml").write_text("name: mine\n")
    assert load_protocol(tmp_path / "named.yaml", []).name == "mine"
