"""Pretrained checkpoints on pe-bench's grid: a local Hugging Face causal LM evaluated with pe-bench's protocols and
RoPE's eval-time methods (``pe-bench eval DIR``), with transformers as an optional extra (``pip install
'pe-bench[hf]'``).

- ``checkpoint`` — a local checkpoint directory opened (a hub id refused with how to download it), hashed, its
  tokenizer and the byte length of each token;
- ``methods``    — a pe-bench ``scheme.scaling`` applied to a RoPE-family model: through transformers' own
  ``rope_parameters`` where transformers implements the type, through the rotary module's frequencies (NTK,
  Resonance) or an attention function registered with transformers' ``AttentionInterface`` (the types that act on
  the logits) for the rest;
- ``evaluate``   — the results directory of one checkpoint on one corpus: pe-bench's evaluator run on it, its rows
  in the files a trained run has, its meta recording the checkpoint.
"""
