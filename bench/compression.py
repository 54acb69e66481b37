#!/usr/bin/env python3
"""What zstd and byte-grouped zstd would save on first-install downloads of exported programs
and data files (issue 49: serve a compressed representation only if it saves at least 10% on
FP32 programs). Stdlib plus the zstd command line (Debian's zstd).

Byte grouping (the trick Hugging Face's Xet uses for float weights) splits the file into 4-byte
words and stores byte 0 of every word, then byte 1, and so on, so that the sign-and-exponent
bytes of float32 weights sit together; it is applied to the whole file here (weights dominate
every file measured), which slightly overstates what grouping the weight segments alone gives.

Usage: compression.py FILE... (prints a Markdown table; sizes in bytes, savings in percent)."""

import subprocess
import sys
import time


def zstd(data: bytes, level: int) -> tuple[int, float]:
    start = time.perf_counter()
    out = subprocess.run(
        ["zstd", f"-{level}", "-c", "-q", "-T1"] + (["--ultra"] if level > 19 else []),
        input=data,
        stdout=subprocess.PIPE,
        check=True,
    ).stdout
    return len(out), time.perf_counter() - start


def grouped(data: bytes, width: int = 4) -> bytes:
    return b"".join(data[i::width] for i in range(width))


def main() -> None:
    print("| file | bytes | zstd -3 | zstd -19 | grouped zstd -3 | grouped zstd -19 |")
    print("|---|---|---|---|---|---|")
    for path in sys.argv[1:]:
        data = open(path, "rb").read()
        cells = []
        for d in (data, grouped(data)):
            for level in (3, 19):
                n, _ = zstd(d, level)
                cells.append(f"{n} ({100 * (1 - n / len(data)):.1f}%)")
        name = path.rsplit("/", 1)[-1]
        print(f"| {name} | {len(data)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
