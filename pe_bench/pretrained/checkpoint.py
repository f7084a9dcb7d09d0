"""A local Hugging Face checkpoint: opened without the network, hashed, and its tokenizer's view of a corpus."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pe_bench.errors import ConfigError

WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def transformers_module():
    """transformers, or one ConfigError line saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ConfigError("evaluating a Hugging Face checkpoint needs transformers: pip install 'pe-bench[hf]'") from None
    return transformers


@dataclass(frozen=True)
class Checkpoint:
    """What pe-bench records of a checkpoint directory, and what it reads from its config."""

    path: Path
    name: str  # the directory's name
    model_type: str
    context: int  # L: the length the model was trained at (max_position_embeddings unless given)
    config_sha256: str
    weights_sha256: str
    transformers: str
    config: Any  # the transformers config as loaded

    def record(self) -> dict[str, Any]:
        """meta.json's ``pretrained`` field."""
        return {"path": str(self.path), "model_type": self.model_type, "context": self.context,
                "config_sha256": self.config_sha256, "weights_sha256": self.weights_sha256,
                "transformers": self.transformers}


def open_checkpoint(path: str | Path, context: int | None = None) -> Checkpoint:
    """A local checkpoint directory (config.json and weights). A hub id, or a directory without them, is one
    ConfigError line saying how to get one; nothing is downloaded."""
    p = Path(os.path.expanduser(str(path)))
    if not p.is_dir():
        hint = (f"download it first (`hf download {path} --local-dir DIR`, on a machine with network) and pass DIR"
                if HUB_ID.match(str(path)) else "give a directory holding config.json and the weights")
        raise ConfigError(f"{path} is not a local checkpoint directory: pe-bench never downloads at run time; {hint}")
    weights = sorted(f for pattern in WEIGHT_FILES for f in p.glob(pattern))
    if not (p / "config.json").is_file() or not weights:
        raise ConfigError(f"{p} holds no Hugging Face checkpoint (config.json and *.safetensors or *.bin); save one "
                          "with model.save_pretrained(DIR)")
    transformers = transformers_module()
    config = transformers.AutoConfig.from_pretrained(p, local_files_only=True)
    L = context or getattr(config, "max_position_embeddings", None)
    if not L:
        raise ConfigError(f"{p}/config.json gives no max_position_embeddings: say the model's context with --context N")
    return Checkpoint(p.resolve(), p.resolve().name, config.model_type, int(L), _sha256([p / "config.json"]),
                      _sha256(weights), transformers.__version__, config)


def _sha256(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def load_tokenizer(ck: Checkpoint):
    """The checkpoint's own tokenizer (local files only); one ConfigError line when it has none."""
    transformers = transformers_module()
    try:
        return transformers.AutoTokenizer.from_pretrained(ck.path, local_files_only=True)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{ck.path} has no tokenizer pe-bench can load ({first}); save the model's tokenizer "
                          "beside it with tokenizer.save_pretrained(DIR)") from None


def encode(tokenizer, texts: list[str], separator: str) -> np.ndarray:
    """The documents joined by ``separator`` as one token stream, (N,) int64, no special tokens added (windows
    start anywhere in the text, as pe-bench's own models see it)."""
    ids = tokenizer(separator.join(t for t in texts if t), add_special_tokens=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64)


def token_bytes(tokenizer) -> np.ndarray:
    """(vocab,) the UTF-8 bytes each token stands for, for bits per byte: with a byte-level BPE (GPT-2, Llama 3, Qwen)
    each character of a piece is one byte; with a SentencePiece-style vocabulary a piece is its text with ▁ as a
    space, and a byte-fallback piece <0xNN> is one byte. Special tokens count 0."""
    import json

    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = json.loads(backend.to_str()).get("decoder") or {} if backend is not None else {}
    byte_level = "ByteLevel" in json.dumps(decoder)
    n = len(tokenizer)
    out = np.zeros(n, dtype=np.int64)
    special = set(tokenizer.all_special_ids)
    for i, piece in enumerate(tokenizer.convert_ids_to_tokens(list(range(n)))):
        if i in special or piece is None:
            continue
        if byte_level:
            out[i] = len(piece)
        elif re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", piece):
            out[i] = 1
        else:
            out[i] = len(piece.replace("\u2581", " ").encode("utf-8"))
    return out
