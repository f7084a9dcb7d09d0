"""The training forward under torch.compile: every registered scheme traces into one graph (a graph break there
recompiles each layer as its own frame, and past dynamo's recompile limit runs the rest eagerly), and the traced
model gives the eager model's loss and gradients — at the forward's own positions and at randomized training
positions (values up to the trained range, past T). aot_eager: dynamo and autograd tracing without inductor's
code generation, which the cuda-marked tests compile for real."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from pe_bench import schemes
from pe_bench.build import build_model
from pe_bench.config import compose
from pe_bench.model.decoder import random_positions

T, VOCAB = 24, 50


def model_of(name: str, *more: str):
    cfg = compose([f"scheme={name}", "model=tiny", "model.n_layers=2", f"train.seq_len={T}", *more])
    torch.manual_seed(0)
    return build_model(cfg, VOCAB)


@pytest.mark.parametrize("name", schemes.available())
def test_every_schemes_training_forward_is_one_graph_under_torch_compile(name):
    model = model_of(name)
    x = torch.randint(0, VOCAB, (2, T), generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, [str(b.reason).splitlines()[0] for b in explained.break_reasons]


@pytest.mark.parametrize("name", ["sandwich", "xl", "shaw", "learned", "t5"])
@pytest.mark.parametrize("randomized", [False, True])
def test_the_compiled_forward_gives_the_eager_loss_and_gradients(name, randomized):
    """Where a table is sized from the positions (Sandwich's and Transformer-XL's per-distance tables, Shaw's far
    keys, the learned table's range check), the traced path takes its size from the shapes and the trained range."""
    more = ("train.random_positions=64",) if randomized else ()
    model = model_of(name, *more)
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, VOCAB, (2, T), generator=g)
    positions = random_positions(64, T, g) if randomized else None
    grads, losses = [], []
    torch._dynamo.reset()  # one compiled Decoder.forward per test, not one per scheme across tests
    for fwd in (model, torch.compile(model, backend="aot_eager", fullgraph=True)):
        model.zero_grad()
        logits = fwd(x) if positions is None else fwd(x, positions)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x.flatten())
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(grads[0], grads[1]):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
