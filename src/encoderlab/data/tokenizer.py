"""Tokenizers: train a byte-level BPE, or load any `tokenizer.json` / Hugging Face tokenizer folder.

Whatever the origin, the result is a `TextTokenizer` that knows its BOS, EOS, PAD and MASK ids. MLM needs a mask
token; when a loaded tokenizer has none, one is added (and recorded in `added_tokens`) so the model's embedding
matrix can grow by one row. Where the id it would get is already another token's, only a reader that needs the mask
refuses the tokenizer; for the others (fine-tuning, embedding) it has no mask (`mask_id` None). Text that happens
to contain a special token's string (e.g. "<mask>") is encoded as plain text, never as the special id. What
`transformers` needs beyond `tokenizer.json` (chat template, unk token..., `HF_SETTINGS`) is carried along from a
Hugging Face folder, so a saved folder behaves as the one loaded.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from encoderlab.core.errors import DataError, given_as, option_value, resolved

SPECIAL_TOKENS = ("<bos>", "<eos>", "<pad>", "<mask>")
MANIFEST = "encoderlab_tokenizer.json"
SENTENCEPIECE_FILES = ("sentencepiece.bpe.model", "spm.model", "tokenizer.model")
# Names used by common tokenizers for each role, most specific first (Llama-3, Llama-2, GPT-2, BERT, EuroBERT...).
_ROLE_CANDIDATES = {
    "bos": ("<bos>", "<|begin_of_text|>", "<s>", "<|endoftext|>", "[CLS]", "<|im_start|>"),
    "eos": ("<eos>", "<|end_of_text|>", "</s>", "<|endoftext|>", "[SEP]", "<|im_end|>"),
    "pad": ("<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>"),
    "mask": ("<mask>", "<|mask|>", "[MASK]"),
}
# tokenizer_config.json keys a saved folder keeps from the loaded one; all else is either in tokenizer.json (the
# post-processor: BOS/EOS behaviour) or set by encoderlab (bos/eos/pad/mask, tokenizer_class, model_max_length).
HF_SETTINGS = ("chat_template", "unk_token", "cls_token", "sep_token", "additional_special_tokens",
               "clean_up_tokenization_spaces", "padding_side")


@dataclass
class TextTokenizer:
    tokenizer: Tokenizer
    bos_id: int
    eos_id: int
    pad_id: int
    mask_id: int | None  # None: no mask token (only a tokenizer loaded with needs_mask=False)
    origin: str
    added_tokens: list[str] = field(default_factory=list)
    hf_settings: dict = field(default_factory=dict)  # HF_SETTINGS of the folder it was loaded from

    def __post_init__(self) -> None:
        # Special-token strings inside documents stay text: a review quoting "<mask>" must not become a mask.
        self.tokenizer.encode_special_tokens = True
        # encoderlab frames, cuts and pads every sequence itself: a tokenizer.json that pads or truncates (a
        # sentence-transformers folder's fixed padding to 128, say) would add pad ids to every text and cut it.
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()

    @property
    def vocab_size(self) -> int:
        """The size of the id space, largest id + 1: one embedding row per id and the width of packed tokens. A
        tokenizer whose ids leave gaps has more ids than tokens, and counting tokens would cut its largest ids off
        (beyond 16 bits they would not even fit the packed dtype)."""
        return max(self.tokenizer.get_vocab(with_added_tokens=True).values(), default=-1) + 1

    @functools.cached_property
    def unk_id(self) -> int | None:
        """The id of the token the model gives text it has no token for (WordPiece's `[UNK]`, a Unigram's `<unk>`);
        None where there is none: a byte-level BPE spells any text in bytes."""
        model = json.loads(self.tokenizer.to_str())["model"]
        if model.get("unk_id") is not None:  # Unigram names it by id
            return int(model["unk_id"])
        token = model.get("unk_token")
        return self.tokenizer.token_to_id(token) if token else None

    @property
    def special_ids(self) -> list[int]:
        return sorted({self.bos_id, self.eos_id, self.pad_id, self.mask_id} - {None})

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids without BOS/EOS (the packer adds those). Runs on all cores (Rust threads). The `_fast` variant
        (tokenizers >= 0.20) skips the character offsets nobody here reads, ~15% of the tokenizer's time."""
        return [e.ids for e in self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.tokenizer.id_to_token(token_id)

    def info(self) -> dict:
        return {"origin": self.origin, "vocab_size": self.vocab_size, "bos_id": self.bos_id, "eos_id": self.eos_id,
                "pad_id": self.pad_id, "mask_id": self.mask_id,
                "special_tokens": {r: self.token(getattr(self, f"{r}_id")) for r in ("bos", "eos", "pad", "mask")},
                "added_tokens": self.added_tokens}

    def save(self, folder: Path, model_max_length: int | None = None, origin: str | None = None) -> None:
        """A folder that `load_tokenizer` and `transformers.AutoTokenizer` read, 4.x and 5.x alike: tokenizer.json
        and a tokenizer_config.json naming `PreTrainedTokenizerFast`, the class both versions build straight from
        tokenizer.json (model-specific classes such as LlamaTokenizerFast rewrite the post-processor). `origin`:
        what the manifest says in place of `self.origin` (an export's, without the local paths it holds)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.tokenizer.encode_special_tokens = False  # not a property HF should inherit in the saved file
        try:
            self.tokenizer.save(str(folder / "tokenizer.json"))
        finally:
            self.tokenizer.encode_special_tokens = True
        roles = {f"{r}_token": self.token(getattr(self, f"{r}_id")) for r in ("bos", "eos", "pad", "mask")
                 if getattr(self, f"{r}_id") is not None}
        limit = {"model_max_length": model_max_length} if model_max_length else {}
        config = {"tokenizer_class": "PreTrainedTokenizerFast", **self.hf_settings, **roles, **limit}
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        (folder / MANIFEST).write_text(json.dumps({**self.info(), "origin": origin or self.origin}, indent=2) + "\n")


def check_bpe_size(vocab_size: int) -> None:
    if vocab_size < 256 + len(SPECIAL_TOKENS) + 1:
        raise DataError(f"{option_value('vocab-size', vocab_size)} is too small: a byte-level BPE needs at least "
                        f"{256 + len(SPECIAL_TOKENS) + 1} (256 bytes, {len(SPECIAL_TOKENS)} special tokens, 1 merge)")


def train_bpe(texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2) -> TextTokenizer:
    """Byte-level BPE (GPT-2/Llama-3 style: no unknown token) with <bos>, <eos>, <pad>, <mask> as ids 0-3."""
    check_bpe_size(vocab_size)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    ids = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
    # fewer than asked where the text has no more pairs seen `min_frequency` times: the origin says the size it has
    reached = tok.get_vocab_size(with_added_tokens=True)
    asked = f" ({vocab_size} asked)" if reached < vocab_size else ""
    return TextTokenizer(tok, *ids, origin=f"trained byte-level BPE, vocab {reached}{asked}")


def load_tokenizer(path: str | Path, *, as_transformers: bool = False, needs_mask: bool = True) -> TextTokenizer:
    """Load `tokenizer.json`, a folder holding one, or any Hugging Face tokenizer folder; add a mask if missing.
    `needs_mask` False (readers that never mask: fine-tuning, embedding): a mask that cannot be added without taking
    another token's id is left out (`mask_id` None) instead of refusing the tokenizer.
    `as_transformers` takes a folder's tokenizer as `AutoTokenizer` builds it, even from a tokenizer.json: a
    model-specific class may change what tokenizer.json says (e.g. LlamaTokenizerFast sets whether BOS and EOS are
    added from `add_bos_token`), and an import must encode as the source model's users do."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{given_as(path)}tokenizer not found: {resolved(path)} "
                        "(give a tokenizer.json file or a folder containing one)")
    folder = path if path.is_dir() else path.parent
    config = _read_special_config(folder)
    if path.is_file() or ((folder / "tokenizer.json").exists() and not as_transformers):
        file = path if path.is_file() else folder / "tokenizer.json"
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the Rust error names the problem but not the file
            raise DataError(f"{file} is not a valid tokenizer.json: {exc}") from exc
    else:
        tok = _from_transformers(folder)
    manifest = json.loads((folder / MANIFEST).read_text()) if (folder / MANIFEST).exists() else {}
    text = _with_roles(tok, config, origin=manifest.get("origin", str(path)), added=manifest.get("added_tokens", []),
                       needs_mask=needs_mask)
    text.hf_settings = hf_settings(folder)
    return text


def hf_settings(folder: Path) -> dict:
    """The HF_SETTINGS of a Hugging Face tokenizer folder, special tokens as plain strings; the chat template also
    from chat_template.jinja, where transformers 5 writes it."""
    file = folder / "tokenizer_config.json"
    config = json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}
    if isinstance(config.get("extra_special_tokens"), list):  # transformers 5's name
        config.setdefault("additional_special_tokens", config["extra_special_tokens"])
    if (folder / "chat_template.jinja").exists():
        config["chat_template"] = (folder / "chat_template.jinja").read_text(encoding="utf-8")

    def plain(value):  # an AddedToken is saved as {"content": ..., "__type": "AddedToken", ...}
        return value.get("content") if isinstance(value, dict) and "content" in value else value

    settings = {k: config[k] for k in HF_SETTINGS if config.get(k) is not None}
    if "additional_special_tokens" in settings:
        settings["additional_special_tokens"] = [plain(t) for t in settings["additional_special_tokens"]]
    return {k: plain(v) if k.endswith("_token") else v for k, v in settings.items()}


def _read_special_config(folder: Path) -> dict[str, str]:
    """Role -> token string from tokenizer_config.json / special_tokens_map.json when the folder has them."""
    roles: dict[str, str] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        file = folder / name
        if file.exists():
            for role in _ROLE_CANDIDATES:
                value = json.loads(file.read_text()).get(f"{role}_token")
                if isinstance(value, dict):
                    value = value.get("content")
                if isinstance(value, str) and role not in roles:
                    roles[role] = value
    return roles


def refuse_code_from(folder: Path, names: tuple[str, ...] = ("config.json", "tokenizer_config.json")) -> None:
    """Refuse, in one line naming the file, a model or tokenizer folder whose config.json or tokenizer_config.json
    asks for a class transformers does not have through an `auto_map` (Python files in the folder). Every
    transformers call passes trust_remote_code=False, so such code never runs; this says why the folder cannot be
    read instead of transformers' advice to trust it. An auto_map beside a built-in class is left alone: transformers
    then builds its own class (as for EuroBERT's original folders). `names`: the files to judge (a config.json that
    the caller reads without transformers is not)."""
    for name in names:
        try:
            config = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # absent or unreadable: whoever reads it says so
        wanted = _wants_code(name, config) if isinstance(config, dict) and "auto_map" in config else None
        if wanted:
            raise DataError(f"{folder / name} asks for {wanted}, which only Python code in {folder} provides "
                            "(its auto_map): encoderlab runs no code from a model folder, only the tokenizers and "
                            "architectures built into transformers")


def code_not_run(folder: Path) -> str | None:
    """The note for a folder whose config.json or tokenizer_config.json names its own classes (`auto_map`) beside
    built-in ones: `refuse_code_from` lets it through and transformers builds its own class, which may compute
    otherwise than the folder's, so the user is told which was used (None: no auto_map)."""
    named = []
    for name in ("config.json", "tokenizer_config.json"):
        try:
            config = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        found = config.get("auto_map") if isinstance(config, dict) else None
        values = found.values() if isinstance(found, dict) else [found] if found else []
        classes = sorted({str(c) for v in values for c in (v if isinstance(v, list) else [v]) if c})
        if classes:
            named.append(f"{name}'s auto_map ({', '.join(classes)})")
    if not named:
        return None
    return (f"{folder}: {' and '.join(named)} not followed: encoderlab runs no code from a model folder, so "
            "transformers' built-in classes of its model_type were used, not the folder's own")


def _wants_code(name: str, config: dict) -> str | None:
    """What the file asks for that transformers does not have (None: nothing)."""
    if name == "config.json":
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        kind = config.get("model_type")
        return None if isinstance(kind, str) and kind in CONFIG_MAPPING_NAMES else f"model_type {kind!r}"
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    cls = config.get("tokenizer_class")
    known = isinstance(cls, str) and (tokenizer_class_from_name(cls) or tokenizer_class_from_name(cls + "Fast"))
    return None if known else f"tokenizer_class {cls!r}"


def _from_transformers(folder: Path) -> Tokenizer:
    from transformers import AutoTokenizer

    from encoderlab.core.quiet import quiet_transformers

    refuse_code_from(folder)
    try:
        with quiet_transformers():  # what is wrong is said in one line below, not in transformers' paragraphs
            hf = AutoTokenizer.from_pretrained(str(folder), use_fast=True, trust_remote_code=False)
    except Exception as exc:
        raise DataError(f"{folder}: {_unreadable(folder, exc)}") from None
    if not getattr(hf, "is_fast", False):
        raise DataError(f"{folder}: only fast (tokenizers-backed) tokenizers are supported")
    return hf.backend_tokenizer


def _unreadable(folder: Path, exc: Exception) -> str:
    """Why transformers could not build a folder's tokenizer. A sentencepiece model alone (older XLM-R, CamemBERT
    saves) needs the sentencepiece package, without which transformers falls back to reading it as a tiktoken file
    and names the wrong package."""
    import importlib.util

    # transformers' reason for these two is `Couldn't instantiate the backend tokenizer from one of: `
    if not any(folder.iterdir()):
        return "is an empty folder: give a tokenizer.json or a folder holding a tokenizer"
    if (folder / "checkpoints").is_dir():  # a run with a LATEST was read as its checkpoint before this
        return ("is an encoderlab run without a LATEST checkpoint: give one of its checkpoint folders "
                "(checkpoints/step-N, each holds its tokenizer/), or pretrain until one is saved")
    if (folder / "tokenizer.json").exists():
        return f"transformers could not load its tokenizer ({_first_line(exc)})"
    spm = next((n for n in SENTENCEPIECE_FILES if (folder / n).is_file()), None)
    if spm is not None and importlib.util.find_spec("sentencepiece") is None:
        return (f"holds no tokenizer.json, and its {spm} is read by the sentencepiece package, which is not "
                "installed: pip install sentencepiece (or save the tokenizer with a tokenizer.json)")
    return f"holds no tokenizer.json and transformers could not load its tokenizer ({_first_line(exc)})"


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _with_roles(tok: Tokenizer, config: dict[str, str], *, origin: str, added: list[str],
                needs_mask: bool = True) -> TextTokenizer:
    vocab = tok.get_vocab(with_added_tokens=True)

    def find(role: str) -> int | None:
        names = ((config[role],) if role in config else ()) + _ROLE_CANDIDATES[role]
        return next((vocab[n] for n in names if n in vocab), None)

    bos, eos, pad, mask = (find(r) for r in ("bos", "eos", "pad", "mask"))
    added = list(added)
    if eos is None and bos is None:
        raise DataError(f"tokenizer {origin} has neither a BOS nor an EOS token that encoderlab recognises "
                        f"(looked for {', '.join(_ROLE_CANDIDATES['bos'] + _ROLE_CANDIDATES['eos'])})")
    bos = bos if bos is not None else eos  # GPT-2 style tokenizers separate documents with one token
    eos = eos if eos is not None else bos
    if mask is None:
        mask = _add_special(tok, "<|mask|>" if str(tok.id_to_token(bos)).startswith("<|") else "<mask>", added,
                            origin, needs_mask)
    if pad is None:
        pad = eos  # padding is always masked out of attention and loss, so EOS can serve
    return TextTokenizer(tok, bos, eos, pad, mask, origin=origin, added_tokens=added)  # type: ignore[arg-type]


def _add_special(tok: Tokenizer, content: str, added: list[str], origin: str, needs_mask: bool = True) -> int | None:
    """Add `content` as a special token. tokenizers numbers it by counting the vocabulary, so where the ids leave a
    gap that number is already another token's, which would then read as the mask (and the mask as it): refused
    where the mask is needed, else not added (None), so that no reader is given a mask id that is another token's."""
    taken = {i: token for token, i in tok.get_vocab(with_added_tokens=True).items()}
    if not needs_mask and tok.get_vocab_size(with_added_tokens=True) in taken:  # the id it would get, not added yet
        return None
    tok.add_special_tokens([AddedToken(content, special=True, normalized=False)])
    new_id = tok.token_to_id(content)
    if new_id in taken:
        raise DataError(f"tokenizer {origin} has no mask token, and the id {content!r} would get, {new_id}, is "
                        f"already the token {taken[new_id]!r} (its ids leave gaps): give a tokenizer that has a "
                        "mask token (or no gaps in its ids)")
    added.append(content)
    return new_id
