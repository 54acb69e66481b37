#!/usr/bin/env python3
"""Exports the releases the delta-update benchmark (bench/delta.sh) downloads, with the real
exporter: a stack of fp32 linear layers whose weights go to a separate .ptd data file
(external_constants), the way on-device LLMs ship their weights. Run with the exporter's
virtualenv (tests/fixtures/export.sh makes it).

Usage: delta_model.py OUT_DIR TOTAL_MIB [RELEASE ...]

Writes these folders under OUT_DIR (all four unless some are named), each with model.pte and
model.ptd:

  base       the first release (seed 0)
  finetune   base with 5% of the weight bytes rewritten in one region (the middle rows of the
             last layer, as a fine-tune of the last layers does)
  reexport   base's weights, byte for byte, behind a changed program (an extra output scale)
  unrelated  another model of the same shape (seed 1)
"""

import os
import shutil
import sys

import torch
from torch.export import export

from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

LAYERS = 8


class Stack(torch.nn.Module):
    def __init__(self, width, scale=None):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(width, width, bias=False) for _ in range(LAYERS)
        )
        self.scale = scale

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        if self.scale is not None:
            x = x * self.scale
        return x


def build(width, seed, scale=None):
    torch.manual_seed(seed)
    model = Stack(width, scale).eval()
    for layer in model.layers:
        torch.nn.init.normal_(layer.weight, std=width ** -0.5)
    return model


def write(model, width, out):
    os.makedirs(out, exist_ok=True)
    example = (torch.randn(1, width),)
    manager = to_edge_transform_and_lower(export(model, example), partitioner=[]).to_executorch(
        ExecutorchBackendConfig(external_constants=True)
    )
    tmp = os.path.join(out, "tmp")
    os.makedirs(tmp, exist_ok=True)
    manager.write_tensor_data_to_file(tmp)
    (ptd,) = [f for f in os.listdir(tmp) if f.endswith(".ptd")]
    shutil.move(os.path.join(tmp, ptd), os.path.join(out, "model.ptd"))
    os.rmdir(tmp)
    with open(os.path.join(out, "model.pte"), "wb") as f:
        f.write(manager.buffer)


def main():
    out, total_mib = sys.argv[1], int(sys.argv[2])
    wanted = sys.argv[3:] or ["base", "finetune", "reexport", "unrelated"]
    # LAYERS square fp32 matrices of width w: LAYERS * w * w * 4 bytes.
    width = int((total_mib * (1 << 20) / (LAYERS * 4)) ** 0.5)
    if "base" in wanted:
        write(build(width, 0), width, os.path.join(out, "base"))
    if "finetune" in wanted:
        tuned = build(width, 0)
        with torch.no_grad():
            last = tuned.layers[-1].weight
            # 5% of all weight bytes: 40% of the last layer's rows, one contiguous region.
            rows = int(width * 0.05 * LAYERS)
            start = (width - rows) // 2
            last[start : start + rows] += 0.01 * torch.randn(rows, width)
        write(tuned, width, os.path.join(out, "finetune"))
    if "reexport" in wanted:
        write(build(width, 0, scale=0.5), width, os.path.join(out, "reexport"))
    if "unrelated" in wanted:
        write(build(width, 1), width, os.path.join(out, "unrelated"))
    print(f"{LAYERS} layers of {width}x{width} fp32 in {out}")


if __name__ == "__main__":
    main()
