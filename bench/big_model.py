#!/usr/bin/env python3
"""Exports the 50 MiB program the client benchmark downloads: one 3620x3620 fp32 linear layer
lowered to XNNPACK with the real exporter (run with the exporter's virtualenv, see
tests/fixtures/export.sh). Usage: big_model.py OUT.pte"""

import sys

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

torch.manual_seed(0)
FEATURES = 3620  # 3620 * 3620 * 4 bytes of weights: 50.0 MiB
model = torch.nn.Linear(FEATURES, FEATURES, bias=False).eval()
example = (torch.randn(1, FEATURES),)
program = to_edge_transform_and_lower(
    torch.export.export(model, example), partitioner=[XnnpackPartitioner()]
).to_executorch()
with open(sys.argv[1], "wb") as f:
    f.write(program.buffer)
