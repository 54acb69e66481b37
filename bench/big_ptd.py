#!/usr/bin/env python3
"""Exports the 1 GiB-weights program of the cached-load benchmark with the real exporter: one
16384x16384 fp32 linear layer (portable kernels) whose weights go to a separate .ptd data file
(external constants). Usage: big_ptd.py OUT_DIR [FEATURES]  (writes big-ptd.pte and big-ptd.ptd
there; FEATURES 11585 gives 512 MiB of weights)"""

import os
import shutil
import sys
import tempfile

import torch
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

FEATURES = int(sys.argv[2]) if len(sys.argv) > 2 else 16384  # 16384^2 * 4 bytes: 1 GiB
out = sys.argv[1]
torch.manual_seed(0)
with torch.no_grad():
    model = torch.nn.Linear(FEATURES, FEATURES, bias=False).eval()
example = (torch.randn(1, FEATURES),)
manager = to_edge_transform_and_lower(torch.export.export(model, example), partitioner=[]).to_executorch(
    ExecutorchBackendConfig(external_constants=True)
)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "big-ptd.pte"), "wb") as f:
    f.write(manager.buffer)
tmp = tempfile.mkdtemp(dir=out)
manager.write_tensor_data_to_file(tmp)
(ptd,) = [f for f in os.listdir(tmp) if f.endswith(".ptd")]
shutil.move(os.path.join(tmp, ptd), os.path.join(out, "big-ptd.ptd"))
os.rmdir(tmp)
