"""The decoder-only transformer (``decoder``) and how its attention is computed (``attention``: SDPA,
FlexAttention, explicit; blocks of query rows at long lengths). Neither knows configs: ``pe_bench.build`` makes a
model from one."""
