"""NoPE: no positional signal at all; the causal mask alone supplies order (Kazemnejad et al. 2023)."""

from pe_bench.schemes.base import Scheme


class NoPE(Scheme):
    name = "nope"
    description = "no positional encoding; causal masking is the only source of order"
    citation = "Kazemnejad et al. 2023, arXiv:2305.19466"
    acts_on = ()
    relative = True
    style = ("#000000", "o")
