"""Corpora through the real `datasets` library, tokenizers, the token cache."""

import json
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from pe_bench import data
from pe_bench.config import compose
from pe_bench.data import DataError, load_tokens, random_batch


def test_embedded_corpus_split_by_whole_plays_deterministically():
    plays = data.embedded_plays()
    assert [len(plays[s]) for s in ("train", "validation", "test")] == [34, 2, 2]
    titles = {s: {t for t, _ in plays[s]} for s in plays}
    assert not (titles["train"] & titles["validation"]) and not (titles["train"] & titles["test"])
    assert plays == data.embedded_plays()
    text = plays["validation"][0][1]
    assert "**" not in text and "# " not in text and len(text) > 50_000


def test_embedded_tokens_are_cached(monkeypatch, tmp_path):
    cfg = compose([]).data
    first = load_tokens(cfg, tmp_path)
    assert first.vocab_size == 256 and len(first.splits["validation"]) > 100_000
    monkeypatch.setattr(data, "load_corpus", lambda _: pytest.fail("re-tokenized despite the cache"))
    second = load_tokens(cfg, tmp_path)
    np.testing.assert_array_equal(first.splits["validation"], second.splits["validation"])
    assert bytes(second.splits["validation"][:200]).decode("utf-8", "ignore").strip()


def test_local_text_file_is_split_contiguously_at_line_breaks(tmp_path):
    lines = [f"line {i} of a local corpus" for i in range(2000)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    cfg = compose(["data=local", f"data.path={path}"]).data
    toks = load_tokens(cfg, tmp_path / "cache")
    parts = {s: bytes(toks.splits[s]).decode() for s in ("train", "validation", "test")}
    assert parts["train"] + parts["validation"] + parts["test"] == path.read_text()
    assert parts["validation"].startswith("line ") and parts["test"].startswith("line ")
    assert 0.04 < len(parts["test"]) / len(path.read_text()) < 0.06


def test_local_json_with_a_text_field(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps({"body": f"document number {i}. " * 5}) for i in range(300)))
    cfg = compose(["data=local", f"data.path={path}", "data.format=json", "data.text_field=body"]).data
    toks = load_tokens(cfg, tmp_path / "cache")
    assert bytes(toks.splits["train"][:17]).decode() == "document number 0"
    bad = compose(["data=local", f"data.path={path}", "data.format=json"]).data
    with pytest.raises(DataError, match="no column 'text'"):
        load_tokens(bad, tmp_path / "cache2")


def _hub_shaped_repo(root):
    """A local dataset repository laid out like Salesforce/wikitext on the hub (parquet per config and split)."""
    (root / "wikitext-2-raw-v1").mkdir(parents=True)
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: wikitext-2-raw-v1\n  data_files:\n"
        "  - split: train\n    path: wikitext-2-raw-v1/train-*\n"
        "  - split: validation\n    path: wikitext-2-raw-v1/validation-*\n"
        "  - split: test\n    path: wikitext-2-raw-v1/test-*\n---\n")
    for split, n in (("train", 400), ("validation", 60), ("test", 60)):
        rows = [f" = Heading {i} = \n" if i % 10 == 0 else f" {split} sentence {i} . \n" for i in range(n)]
        pq.write_table(pa.table({"text": rows}), root / "wikitext-2-raw-v1" / f"{split}-00000-of-00001.parquet")


def test_hub_code_path_with_a_repository_of_the_same_shape(tmp_path):
    _hub_shaped_repo(tmp_path / "wikitext")
    cfg = compose(["data=wikitext2", f"data.path={tmp_path / 'wikitext'}"]).data
    toks = load_tokens(cfg, tmp_path / "cache")
    val = bytes(toks.splits["validation"]).decode()
    assert val.startswith(" = Heading 0 = \n validation sentence 1 . \n")  # rows joined with "" (data.doc_separator)


def test_hub_failure_is_one_clear_line():
    cfg = compose(["data=wikitext103", "data.path=no-such-org/no-such-dataset-xyz"]).data
    with pytest.raises(DataError, match="could not load hub dataset .* without internet use data=local"):
        data.load_corpus(cfg)


def test_an_unreachable_hub_fails_at_once_with_one_line(monkeypatch):
    """Offline, the datasets library retries each file for ~40 s; pe-bench checks the endpoint first (one connection,
    3 s at most) and loads in offline mode: cached datasets still load, others fail at once (no retry online)."""
    import socket

    import datasets

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens, refused at once
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # (set by conftest) so that the endpoint is really probed
    probes, loads = [], []
    connect, load_dataset = socket.create_connection, datasets.load_dataset

    def probe(address, timeout=None, *args, **kwargs):
        probes.append((address, timeout))
        return connect(address, timeout, *args, **kwargs)

    def load(*args, **kwargs):
        loads.append(datasets.config.HF_HUB_OFFLINE)  # what the library sees while it loads
        return load_dataset(*args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", probe)
    monkeypatch.setattr(datasets, "load_dataset", load)
    assert not data.hub_reachable()
    assert probes == [(("127.0.0.1", 9), 3.0)]
    cfg = compose(["data=wikitext103", "data.path=no-such-org/no-such-dataset-xyz"]).data
    with pytest.raises(DataError, match=r"\(the hub \(http://127.0.0.1:9\) cannot be reached and the dataset is not "
                                        r"in the local cache\); without internet use data=local"):
        data.load_corpus(cfg)
    assert probes == [(("127.0.0.1", 9), 3.0)] * 2  # one bounded probe, and nothing else connected
    assert loads == [True]  # one load, in offline mode: it failed at once, without the library's retries


def test_bpe_tokenizer_trained_locally_counts_bytes_exactly(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"The quick brown fox {i} jumps over the lazy dog — naïve café.\n" for i in range(3000)))
    cfg = compose(["data=local", f"data.path={path}", "data.tokenizer=bpe", "data.vocab_size=400"]).data
    toks = load_tokens(cfg, tmp_path / "cache")
    assert 256 < toks.vocab_size <= 400
    tok = data.get_tokenizer(toks, cfg)
    text = tok.decode(toks.splits["test"].tolist())
    assert int(toks.token_bytes[toks.splits["test"]].sum()) == len(text.encode("utf-8"))
    assert len(toks.splits["test"]) < len(text.encode("utf-8")) / 2  # BPE actually merges


def test_random_batch_targets_are_inputs_shifted_by_one():
    tokens = np.arange(1000, dtype=np.uint16)
    x, y = random_batch(tokens, 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16)
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y - x, torch.ones_like(x))


def test_local_files_per_split(tmp_path):
    for split in ("train", "validation", "test"):
        (tmp_path / f"{split}.txt").write_text(f"{split} text\n" * 500)
    files = ", ".join(f"{s}: {tmp_path / s}.txt" for s in ("train", "validation", "test"))
    cfg = compose(["data=local", f"data.files={{{files}}}"]).data
    toks = load_tokens(cfg, tmp_path / "cache")
    assert bytes(toks.splits["test"][:9]).decode() == "test text"
    assert len(toks.splits["validation"]) == len("validation text\n") * 500
    one = compose(["data=local", f"data.files.train={tmp_path / 'train.txt'}"]).data
    with pytest.raises(DataError, match="data.files lacks validation, test"):
        load_tokens(one, tmp_path / "cache2")


def _rewrite_keeping_size_and_mtime(path, text):
    """New contents of the same length, with the old mtime put back (as `cp -p`, rsync -t or a forged touch would)."""
    st = path.stat()
    assert len(text.encode()) == st.st_size
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_local_cache_follows_the_file_contents(monkeypatch, tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"old line {i:04d}\n" for i in range(2000)))
    cfg = compose(["data=local", f"data.path={path}"]).data
    first = load_tokens(cfg, tmp_path / "cache")
    assert bytes(first.splits["train"][:8]).decode() == "old line"
    assert first.fingerprint and first.fingerprint in first.cache_path.name

    _rewrite_keeping_size_and_mtime(path, "".join(f"new line {i:04d}\n" for i in range(2000)))
    second = load_tokens(cfg, tmp_path / "cache")
    assert bytes(second.splits["train"][:8]).decode() == "new line"
    assert second.fingerprint != first.fingerprint and second.cache_path != first.cache_path

    monkeypatch.setattr(data, "load_corpus", lambda _: pytest.fail("re-tokenized an unchanged file"))
    third = load_tokens(cfg, tmp_path / "cache")
    assert third.fingerprint == second.fingerprint and third.cache_path == second.cache_path
    np.testing.assert_array_equal(third.splits["train"], second.splits["train"])


def test_local_files_per_split_cache_follows_each_file(tmp_path):
    for split in ("train", "validation", "test"):
        (tmp_path / f"{split}.txt").write_text(f"{split} aaaa\n" * 300)
    files = ", ".join(f"{s}: {tmp_path / s}.txt" for s in ("train", "validation", "test"))
    cfg = compose(["data=local", f"data.files={{{files}}}"]).data
    first = load_tokens(cfg, tmp_path / "cache")
    assert load_tokens(cfg, tmp_path / "cache").fingerprint == first.fingerprint
    _rewrite_keeping_size_and_mtime(tmp_path / "validation.txt", "validation bbbb\n" * 300)
    second = load_tokens(cfg, tmp_path / "cache")
    assert second.fingerprint != first.fingerprint
    assert bytes(second.splits["validation"][:15]).decode() == "validation bbbb"
    np.testing.assert_array_equal(second.splits["train"], first.splits["train"])


def test_local_glob_fingerprint_covers_every_matched_file(tmp_path):
    (tmp_path / "docs").mkdir()
    for i in range(3):
        (tmp_path / "docs" / f"{i}.txt").write_text(f"document {i}\n" * 200)
    cfg = compose(["data=local", f"data.path={tmp_path / 'docs'}/*.txt"]).data
    fp = data.local_fingerprint(cfg)
    assert data.local_fingerprint(cfg) == fp
    _rewrite_keeping_size_and_mtime(tmp_path / "docs" / "1.txt", "document X\n" * 200)
    assert data.local_fingerprint(cfg) != fp
    fp = data.local_fingerprint(cfg)
    (tmp_path / "docs" / "3.txt").write_text("one more\n")
    assert data.local_fingerprint(cfg) != fp
    (tmp_path / "docs" / "3.txt").unlink()
    assert data.local_fingerprint(cfg) == fp


def _wait_for_the_clock_to_pass(path):
    """Until a file changed now gets a later ctime than ``path`` has: the filesystem's timestamps (a coarse clock,
    ~1-10 ms; 2 s on FAT) have moved on, however fast the machine got here."""
    probe = path.with_name(".clock-probe")
    deadline = time.monotonic() + 60  # a safety net: one clock tick
    while True:
        probe.write_bytes(b"")
        if probe.stat().st_ctime_ns > path.stat().st_ctime_ns:
            break
        assert time.monotonic() < deadline, f"the ctime of new files stayed at that of {path} for 60 s"
        time.sleep(0.001)
    probe.unlink()


def test_file_hash_memo_is_reused_only_while_the_file_is_untouched(monkeypatch, tmp_path):
    monkeypatch.setattr(data, "_RACY_NS", 0)  # the file was just written: allow memoizing it anyway
    path = tmp_path / "corpus.txt"
    path.write_text("aaaa\n" * 1000)
    cfg = compose(["data=local", f"data.path={path}"]).data
    _wait_for_the_clock_to_pass(path)  # so the file is not "racy" and its rewrite below gets a later ctime
    fp = data.local_fingerprint(cfg, tmp_path / "cache")
    index = json.loads((tmp_path / "cache" / "tokens" / "file-hashes.json").read_text())
    assert str(path) in index
    real = data._sha256_file
    monkeypatch.setattr(data, "_sha256_file", lambda _: pytest.fail("re-hashed an untouched file"))
    assert data.local_fingerprint(cfg, tmp_path / "cache") == fp
    monkeypatch.setattr(data, "_sha256_file", real)
    _rewrite_keeping_size_and_mtime(path, "bbbb\n" * 1000)  # same size and mtime; the ctime still moves
    assert data.local_fingerprint(cfg, tmp_path / "cache") != fp


@pytest.mark.parametrize("override", ["data.path={tmp}/missing.txt", "data.path={tmp}/nothing-*.txt",
                                      "data.files={{train: {tmp}/missing.txt, validation: {tmp}/v.txt, "
                                      "test: {tmp}/v.txt}}"])
def test_local_missing_file_is_one_clear_line(tmp_path, override):
    (tmp_path / "v.txt").write_text("validation\n")
    cfg = compose(["data=local", override.format(tmp=tmp_path)]).data
    with pytest.raises(DataError, match=r"could not read data\.(path|files\.train)=.*(missing\.txt|nothing-).*check "
                                        r"the path and data\.format") as e:
        load_tokens(cfg, tmp_path / "cache")
    assert "\n" not in str(e.value)
