"""The Python half of scripts/gpu-check: corral.torch.apply_token_bitmask_inplace on CUDA
tensors against the same call on CPU tensors, with bitmasks that corral's Matchers filled
under a JSON Schema (three sequences in one batch, with and without `indices`). Prints a
table row; exits non-zero when a check fails.

Usage: python3 torch_check.py TOKENIZER.json SCHEMA.json [DEVICE]   (DEVICE: cuda, or cpu
for a dry run on a machine without a GPU)"""

import json
import random
import sys

import numpy as np
import torch

import corral
import corral.torch as ct

tokenizer_path, schema_path = sys.argv[1], sys.argv[2]
device = sys.argv[3] if len(sys.argv) > 3 else "cuda"
schema = json.load(open(schema_path))
vocab = corral.Tokenizer.from_file(tokenizer_path).vocab_size
width = vocab + 64  # logits wider than the vocabulary, as models pad them
tok = corral.Tokenizer.from_file(tokenizer_path, vocab_size=width)

# Three sequences in one batch, each on its own seeded random walk through the grammar
# (started over when it ends), so the rows hold different masks at each step.
grammar = corral.Grammar.from_json_schema(schema)
batch = 3
matchers = [corral.Matcher(grammar, tok) for _ in range(batch)]
rngs = [random.Random(i) for i in range(batch)]
bitmask = corral.allocate_token_bitmask(batch, width)
gen = torch.Generator().manual_seed(0)
steps = same = same_indices = inf_right = 0
for step in range(40):
    corral.fill_next_token_bitmask_batch(matchers, bitmask, list(range(batch)))
    logits = torch.randn(batch, width, generator=gen)
    on_cpu = logits.clone()
    on_dev = logits.clone().to(device)
    ct.apply_token_bitmask_inplace(on_cpu, bitmask)
    ct.apply_token_bitmask_inplace(on_dev, torch.from_numpy(bitmask).to(device))
    steps += 1
    same += bool(torch.equal(on_cpu, on_dev.cpu()))
    # The allowed set read off the bitmask bit by bit, against the -inf positions.
    bits = np.unpackbits(bitmask.view(np.uint8), bitorder="little").reshape(batch, -1)[:, :width]
    inf_right += bool(np.array_equal(bits == 0, torch.isinf(on_dev).cpu().numpy()))
    # Two rows of a bigger logits tensor, picked by `indices`.
    big = torch.randn(5, width, generator=gen)
    big_cpu, big_dev = big.clone(), big.clone().to(device)
    ct.apply_token_bitmask_inplace(big_cpu, bitmask[:2], indices=[4, 1])
    ct.apply_token_bitmask_inplace(big_dev, torch.from_numpy(bitmask[:2]).to(device), indices=[4, 1])
    same_indices += bool(torch.equal(big_cpu, big_dev.cpu()))
    for i, m in enumerate(matchers):
        allowed = np.flatnonzero(bits[i])
        assert len(allowed), f"step {step}: nothing allowed in row {i}"
        assert m.accept_token(int(rngs[i].choice(allowed)))
        if m.is_terminated():
            m.reset()

ok = steps >= 5 and same == steps and same_indices == steps and inf_right == steps
print(f"| corral.torch.apply_token_bitmask_inplace, {device} against CPU ({batch} rows, vocabulary {vocab}) "
      f"| {same} of {steps} steps equal; with indices {same_indices}; -inf exactly where a bit is 0: {inf_right} "
      f"| all, at least 5 steps | {'yes' if ok else 'NO'} |")
name = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
print(f"torch {torch.__version__}, {name}")
sys.exit(0 if ok else 1)
