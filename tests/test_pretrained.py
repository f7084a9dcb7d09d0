"""Pretrained checkpoints (pe_bench.pretrained), held against transformers on tiny random checkpoints made here:
pe-bench's path gives the model's own logits, pe-bench's RoPE formulas give transformers' logits for every method
transformers implements, and `pe-bench eval DIR` writes a run directory that `pe-bench report` reads."""

import csv
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

transformers = pytest.importorskip("transformers", reason="needs the hf extra: pip install '.[hf]'")

from pe_bench.cli import app  # noqa: E402
from pe_bench.data import embedded_plays  # noqa: E402
from pe_bench.pretrained.checkpoint import encode, load_tokenizer, open_checkpoint, token_bytes  # noqa: E402
from pe_bench.pretrained.evaluate import PretrainedLM  # noqa: E402
from pe_bench.pretrained.methods import load_model, model_config, rope_scheme  # noqa: E402
from pe_bench.runs import Run  # noqa: E402
from pe_bench.schemes.rope import RoPEScaling  # noqa: E402

CPU = torch.device("cpu")
L = 32  # the checkpoints' context


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A byte-level BPE of 320 tokens trained on a Shakespeare play, saved as transformers saves one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = embedded_plays()["train"][0][1]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel
                                                        .alphabet(), special_tokens=["<eos>"]))
    out = tmp_path_factory.mktemp("tokenizer")
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>").save_pretrained(out)
    return out


def _save(model, tokenizer_dir, path):
    model.save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def llama(tokenizer_dir, tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=L)
    return _save(transformers.LlamaForCausalLM(cfg), tokenizer_dir, tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def neox(tokenizer_dir, tmp_path_factory):
    torch.manual_seed(1)
    cfg = transformers.GPTNeoXConfig(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, max_position_embeddings=L, rotary_pct=0.5)
    return _save(transformers.GPTNeoXForCausalLM(cfg), tokenizer_dir, tmp_path_factory.mktemp("tiny-neox"))


@pytest.fixture(scope="module")
def qwen2(tokenizer_dir, tmp_path_factory):
    torch.manual_seed(2)
    cfg = transformers.Qwen2Config(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=L,
                                   use_sliding_window=False, sliding_window=4096)
    return _save(transformers.Qwen2ForCausalLM(cfg), tokenizer_dir, tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="module")
def phi(tokenizer_dir, tmp_path_factory):
    torch.manual_seed(3)
    cfg = transformers.PhiConfig(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, max_position_embeddings=L, partial_rotary_factor=0.5)
    return _save(transformers.PhiForCausalLM(cfg), tokenizer_dir, tmp_path_factory.mktemp("tiny-phi"))


@pytest.fixture(scope="module")
def mistral(tokenizer_dir, tmp_path_factory):
    torch.manual_seed(4)
    cfg = transformers.MistralConfig(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=L,
                                     sliding_window=None)
    return _save(transformers.MistralForCausalLM(cfg), tokenizer_dir, tmp_path_factory.mktemp("tiny-mistral"))


@pytest.fixture(scope="module")
def qwen3(tokenizer_dir, tmp_path_factory):
    torch.manual_seed(5)
    cfg = transformers.Qwen3Config(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=L)
    return _save(transformers.Qwen3ForCausalLM(cfg), tokenizer_dir, tmp_path_factory.mktemp("tiny-qwen3"))


ARCHITECTURES = ["llama", "neox", "qwen2", "qwen3", "phi", "mistral"]


def _logits(model, x):
    with torch.no_grad():
        return model(x).logits if not isinstance(model, PretrainedLM) else model(x)


X = torch.randint(0, 320, (2, 4 * L), generator=torch.Generator().manual_seed(0))  # 4L tokens


@pytest.mark.parametrize("which", ARCHITECTURES)
def test_pe_benchs_path_without_a_method_gives_the_models_own_logits(which, request, monkeypatch):
    ck = open_checkpoint(request.getfixturevalue(which))
    own = transformers.AutoModelForCausalLM.from_pretrained(ck.path, attn_implementation="eager").eval()
    plain = PretrainedLM(load_model(ck, RoPEScaling(), CPU, torch.float32), rope_scheme(ck, RoPEScaling()))
    torch.testing.assert_close(_logits(plain, X), _logits(own, X), atol=1e-5, rtol=0)
    # the per-token nll the evaluator sums, by chunks of positions (here 16 at a time)
    monkeypatch.setattr("pe_bench.pretrained.evaluate.NLL_CHUNK", 16)
    with torch.no_grad():
        nll = plain.token_nll(X[:, :-1], X[:, 1:])
        full = torch.nn.functional.cross_entropy(_logits(own, X[:, :-1]).transpose(1, 2), X[:, 1:], reduction="none")
    torch.testing.assert_close(nll, full, atol=1e-5, rtol=0)
    # pe-bench's explicit attention (the logit methods' path) with no pair moved: the same function
    wide = RoPEScaling(type="rerope", window=10 * L)
    explicit = load_model(ck, wide, CPU, torch.float32)
    assert explicit.config._attn_implementation == "pe_bench_rerope"
    torch.testing.assert_close(_logits(explicit, X), _logits(own, X), atol=1e-5, rtol=0)


def _with_pe_bench_frequencies(ck, sc: RoPEScaling, seq_len: int):
    """The checkpoint with plain rope_parameters and its rotary module's frequencies and attention factor replaced
    by pe-bench's own (RoPE.frequencies at ``seq_len``)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(ck.path, attn_implementation="eager").eval()
    theta, attention = rope_scheme(ck, sc).frequencies(seq_len)
    rotary = [m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), torch.Tensor)]
    assert len(rotary) == 1
    rotary[0].inv_freq = theta.float()
    rotary[0].attention_scaling = attention
    return model


METHODS = {
    "linear": RoPEScaling(type="linear", factor=4.0),
    "dynamic": RoPEScaling(type="dynamic", factor=4.0),
    "yarn": RoPEScaling(type="yarn", factor=4.0),
    "yarn, no temperature": RoPEScaling(type="yarn", factor=4.0, attention_factor=1.0),
    "llama3": RoPEScaling(type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0),
}


@pytest.mark.parametrize("which", ARCHITECTURES)
@pytest.mark.parametrize("method", [*METHODS, "longrope"])
def test_pe_benchs_rope_formulas_give_transformers_logits_for_each_method_transformers_implements(which, method,
                                                                                                 request):
    ck = open_checkpoint(request.getfixturevalue(which))
    rot_dim = rope_scheme(ck, RoPEScaling()).rot_dim
    if method == "longrope":
        rng = np.random.default_rng(0)
        sc = RoPEScaling(type="longrope", factor=4.0, long_factor=(1 + 3 * rng.random(rot_dim // 2)).tolist(),
                         short_factor=(1 + rng.random(rot_dim // 2)).tolist())
    else:
        sc = METHODS[method]
    theirs = transformers.AutoModelForCausalLM.from_pretrained(ck.path, config=model_config(ck, sc),
                                                               attn_implementation="eager").eval()
    ours = _with_pe_bench_frequencies(ck, sc, X.shape[1])
    assert not torch.allclose(_logits(ours, X), _logits(open_plain(ck), X), atol=1e-3)  # the method changes them
    torch.testing.assert_close(_logits(ours, X), _logits(theirs, X), atol=1e-4, rtol=0)


def open_plain(ck):
    return transformers.AutoModelForCausalLM.from_pretrained(ck.path, attn_implementation="eager").eval()


@pytest.mark.parametrize("sc", [RoPEScaling(type="ntk", factor=4.0), RoPEScaling(resonance=True),
                                RoPEScaling(type="yarn", factor=4.0, resonance=True)], ids=["ntk", "resonance",
                                                                                           "yarn+resonance"])
def test_the_methods_transformers_lacks_act_through_pe_benchs_own_frequencies(sc, llama):
    ck = open_checkpoint(llama)
    loaded = load_model(ck, sc, CPU, torch.float32)
    torch.testing.assert_close(_logits(loaded, X), _logits(_with_pe_bench_frequencies(ck, sc, X.shape[1]), X),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind", ["rerope", "self_extend", "lm_infinite", "streaming", "dual_chunk"])
def test_a_logit_method_is_causal_and_leaves_the_first_l_positions_as_trained(kind, llama):
    ck = open_checkpoint(llama)
    sc = RoPEScaling(type=kind, factor=4.0) if kind == "self_extend" else RoPEScaling(type=kind)
    model = load_model(ck, sc, CPU, torch.float32)
    got, plain = _logits(model, X), _logits(open_plain(ck), X)
    assert not torch.allclose(got[:, 2 * L :], plain[:, 2 * L :], atol=1e-3)  # far pairs moved or dropped
    if kind != "dual_chunk":  # dual chunk moves every pair into its chunks, even the near ones
        torch.testing.assert_close(got[:, : L // 2], plain[:, : L // 2], atol=1e-5, rtol=0)
    later = X.clone()
    later[:, 3 * L :] = (later[:, 3 * L :] + 1) % 320
    torch.testing.assert_close(_logits(model, later)[:, : 3 * L], got[:, : 3 * L], atol=1e-5, rtol=0)  # causal


def test_token_bytes_of_a_byte_level_vocabulary_add_up_to_the_texts_utf8_bytes(llama):
    tok = load_tokenizer(open_checkpoint(llama))
    text = "Wherefore art thou — Romeo? ½ 東京\n"
    ids = encode(tok, [text], "")
    assert int(token_bytes(tok)[ids].sum()) == len(text.encode("utf-8"))


def test_eval_of_a_checkpoint_writes_a_run_directory_that_report_reads(llama, tmp_path):
    results = tmp_path / "results"
    runner = CliRunner()
    common = ["eval", str(llama), "eval=smoke", "eval.ratios=[1,2,4]", f"results_dir={results}", "--no-progress"]
    r = runner.invoke(app, common)
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, [*common, "scheme.scaling.type=yarn", "scheme.scaling.factor=4"])
    assert r.exit_code == 0, r.output
    (run_dir,) = (results / "pretrained").iterdir()
    run = Run(run_dir)
    ck = open_checkpoint(llama)
    assert run_dir.name == f"{ck.name}-shakespeare-L{L}-{ck.weights_sha256[:8]}"
    meta = json.loads(run.meta_path.read_text())
    assert meta["status"] == "done" and meta["pretrained"] == ck.record()
    assert meta["pretrained"]["transformers"] == transformers.__version__
    with run.eval_csv.open() as f:
        rows = list(csv.DictReader(f))
    assert {r["scheme"] for r in rows} == {"rope", "rope+yarn×4"}
    assert {int(r["L_eval"]) for r in rows} == {L, 2 * L, 4 * L} and all(r["status"] == "ok" for r in rows)
    out = tmp_path / "report"
    r = runner.invoke(app, ["report", str(results / "pretrained"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    md = (out / "comparison.md").read_text()
    assert "rope+yarn×4" in md and "| rope |" in md


@pytest.mark.parametrize("args, message", [
    (["meta-llama/Llama-3.1-8B"], "meta-llama/Llama-3.1-8B is not a local checkpoint directory: pe-bench never "
                                  "downloads at run time; download it first (`hf download meta-llama/Llama-3.1-8B"),
    (["{llama}", "model.n_layers=2"], "model.n_layers cannot be set when evaluating a checkpoint"),
    (["{llama}", "scheme.scaling.type=yarn", "scheme.scaling.factor=0.5"], "scheme.scaling.factor"),
    (["{gpt2}"], "is a gpt2 model; pe-bench evaluates RoPE-family checkpoints"),
    (["{empty}"], "holds no Hugging Face checkpoint (config.json and *.safetensors or *.bin); save one"),
    (["{scaled}", "scheme.scaling.type=linear", "scheme.scaling.factor=2"],
     "scheme.scaling.type=linear cannot stack on"),
])
def test_bad_checkpoint_input_is_one_line_exit_2_and_nothing_written(args, message, llama, tokenizer_dir, tmp_path):
    gpt2 = _save(transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=320, n_embd=32, n_layer=1,
                                                                      n_head=2)), tokenizer_dir, tmp_path / "gpt2")
    scaled_cfg = transformers.AutoConfig.from_pretrained(llama)
    scaled_cfg.rope_parameters = {**scaled_cfg.rope_parameters, "rope_type": "linear", "factor": 2.0}
    scaled = _save(transformers.LlamaForCausalLM(scaled_cfg), tokenizer_dir, tmp_path / "scaled")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    args = [a.format(llama=llama, gpt2=gpt2, scaled=scaled, empty=tmp_path / "empty") for a in args]
    r = CliRunner().invoke(app, ["eval", *args, f"results_dir={tmp_path / 'results'}"])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert not (tmp_path / "results").exists()


# ---------------------------------------------------------------------------------------------------------------
# pe-bench export: a trained run as a transformers checkpoint computing the same function
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Smoke runs of every exportable scheme (and ALiBi, which is not), trained here: {scheme: run directory}."""
    results = tmp_path_factory.mktemp("export") / "results"
    schemes = ["rope", "nope", "learned", "sinusoidal", "alibi", "rope[rotary_fraction=0.5]"]
    r = CliRunner().invoke(app, ["sweep", "scheme=rope,nope,learned,sinusoidal,alibi", "seed=0", "train=smoke",
                                 "model.n_layers=2", "model.d_model=64", "eval.variants=false", f"results_dir={results}",
                                 "--out", str(results / "report"), "--no-progress"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["train", "scheme=rope", "scheme.rotary_fraction=0.5", "train=smoke",
                                 "model.n_layers=2", "model.d_model=64", "model.init=fan_in", "eval.variants=false",
                                 f"results_dir={results}", "--no-progress"])
    assert r.exit_code == 0, r.output
    runs = sorted((results / "runs").iterdir())
    out = {}
    for d in runs:
        cfg = Run(d).load_config()
        name = cfg.scheme["name"] + ("[rotary_fraction=0.5]" if cfg.scheme.get("rotary_fraction", 1) != 1 else "")
        out[name] = d
    assert sorted(out) == sorted(schemes)
    return out


@pytest.mark.parametrize("scheme, architecture", [("rope", "GPTNeoXForCausalLM"), ("nope", "GPTNeoXForCausalLM"),
                                                  ("rope[rotary_fraction=0.5]", "GPTNeoXForCausalLM"),
                                                  ("learned", "GPT2LMHeadModel"), ("sinusoidal", "GPT2LMHeadModel")])
def test_an_exported_run_computes_pe_benchs_logits_in_transformers(scheme, architecture, trained, tmp_path):
    from pe_bench.build import build_model  # noqa: F401 - the run's own model, as pe-bench evaluates it
    from pe_bench.train import load_trained

    out = tmp_path / "hf"
    r = CliRunner().invoke(app, ["export", str(trained[scheme]), str(out)])
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.output
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf).__name__ == architecture
    run = Run(trained[scheme])
    model, _ = load_trained(run, run.load_config(), CPU)
    L = run.load_config().train.seq_len
    x = torch.randint(0, 256, (2, 2 * L if scheme != "learned" else L), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=x).logits, model.eval()(x), atol=1e-5, rtol=0)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert tok("Hi é", add_special_tokens=False)["input_ids"] == list("Hi é".encode())  # id = the byte
    assert tok.decode(list("Hi é".encode())) == "Hi é"
    r = CliRunner().invoke(app, ["export", str(trained[scheme]), str(out)])  # an earlier export is replaced
    assert r.exit_code == 0, r.output


def test_a_scheme_no_architecture_computes_is_refused_and_nothing_written(trained, tmp_path):
    r = CliRunner().invoke(app, ["export", str(trained["alibi"]), str(tmp_path / "hf")])
    assert r.exit_code == 2, r.output
    assert "cannot be exported: scheme alibi has no architecture in transformers" in r.output
    assert not (tmp_path / "hf").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    r = CliRunner().invoke(app, ["export", str(trained["rope"]), str(tmp_path / "mine")])
    assert r.exit_code == 2 and "is not an earlier pe-bench export" in r.output
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


# ---------------------------------------------------------------------------------------------------------------
# Tasks on a checkpoint: passkey and the multi-key needle in its tokenizer, greedy exact match
# ---------------------------------------------------------------------------------------------------------------
def _task_cfg(task: str, **options):
    from pe_bench.config import compose

    over = [f"task={task}", "train.seq_len=256"] + [f"task.{k}={v}" for k, v in options.items()]
    return compose(over + (["task.filler=text"] if task == "passkey" else []))


@pytest.mark.parametrize("task", ["passkey", "needle_multikey"])
def test_a_task_prompt_is_exactly_the_length_with_its_needles_in_the_corpus_text(task, llama):
    from pe_bench.pretrained.tasks import build_example

    tok = load_tokenizer(open_checkpoint(llama))
    filler = encode(tok, [p for _, p in embedded_plays()["validation"]], "\n\n")
    encode_one = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    cfg = _task_cfg(task)
    for n in (600, 901):
        ids, answer = build_example(task, cfg, encode_one, filler, n, 0.5 if task == "passkey" else None,
                                    np.random.default_rng(n))
        text = tok.decode(ids)
        assert len(ids) == n and answer.isdigit()
        if task == "passkey":
            assert len(answer) == 5 and text.count(f"The pass key is {answer}. Remember it.") == 1
            assert text.endswith("What is the pass key? The pass key is")
            middle = text.index("The pass key is") / len(text)
            assert 0.35 < middle < 0.65  # depth 0.5 of the filler
        else:
            assert text.count("One of the special magic numbers for") == 4 and f"is: {answer}." in text
    with pytest.raises(ValueError, match="cannot hold the task's"):
        build_example(task, cfg, encode_one, filler, 20, None, np.random.default_rng(0))


def test_greedy_exact_match_takes_the_answer_not_followed_by_another_digit():
    from pe_bench.pretrained.tasks import greedy, solved

    assert solved(" 71432.", "71432") == (True, 5) and solved("71432", "71432") == (True, 5)
    assert solved(" 714321", "71432") == (False, 5) and solved(" 71532", "71432") == (False, 4)
    script = [5, 6, 7]

    class Scripted(torch.nn.Module):  # writes the script after any prompt of 4 tokens
        def forward(self, x, last=False):
            logits = torch.zeros(*x.shape, 10)
            logits[:, -1, script[x.shape[1] - 4]] = 1.0
            return logits

    assert greedy(Scripted(), [1, 2, 3, 4], 3, CPU) == script


def test_a_task_on_a_checkpoint_writes_accuracy_rows_that_report_reads(llama, tmp_path):
    results = tmp_path / "results"
    r = CliRunner().invoke(app, ["eval", str(llama), "--context", "512", "task=needle_multikey", "eval.ratios=[1,2]",
                                 "task.eval_examples=3", f"results_dir={results}", "--no-progress"])
    assert r.exit_code == 0, r.output
    (run_dir,) = (results / "pretrained").iterdir()
    assert run_dir.name.startswith(f"{llama.name}-needle_multikey-shakespeare-L512-")
    with Run(run_dir).accuracy_csv.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["task"], r["L_eval"], r["examples"], r["status"]) for r in rows] == [
        ("needle_multikey", "512", "3", "ok"), ("needle_multikey", "1024", "3", "ok")]
    assert all(len(r["outcomes"]) == 3 and set(r["outcomes"]) <= {"x", "."} for r in rows)
    r = CliRunner().invoke(app, ["report", str(results / "pretrained"), "--out", str(tmp_path / "report")])
    assert r.exit_code == 0, r.output
    assert "needle_multikey" in (tmp_path / "report" / "accuracy.md").read_text()


def test_one_command_evaluates_a_checkpoint_with_every_method_it_can_take(llama, tmp_path):
    from pe_bench.config import compose, scheme_spec, to_dict

    results = tmp_path / "results"
    r = CliRunner().invoke(app, ["eval", str(llama), "eval=smoke", "eval.variants=true", "eval.ratios=[1,2]",
                                 f"results_dir={results}", "--no-progress"])
    assert r.exit_code == 0, r.output
    (run_dir,) = (results / "pretrained").iterdir()
    with Run(run_dir).eval_csv.open() as f:
        labels = {row["scheme"] for row in csv.DictReader(f)}
    variants = scheme_spec(to_dict(compose(["scheme=rope"]))["scheme"]).eval_variants
    assert len(labels) == 1 + len(variants) == 14  # rope and each variant of configs/scheme/rope.yaml
    assert {"rope", "rope+yarn×8", "rope+rerope", "rope+self_extend×16", "rope+dual_chunk", "rope+resonance"} <= labels
