#!/usr/bin/env python3
"""Writes ggml-quantizers.json: the blocks ggml's reference quantizers make of fixed rows.

`kindle quantize` (`kindle_gguf::quant::quantize`) is checked against this file
(`crates/gguf/tests/ggml_quantizers.rs`). It is made by calling ggml's
`quantize_row_<type>_ref` (what `llama-quantize` runs for these types when no importance
matrix is given) in the `libggml-base.so` of the llama.cpp that `llama-cpp-python==0.3.36`
bundles (build it as docs/performance.md says for llama-bench), through ctypes:

    python3 testdata/reference/ggml_quantizers.py path/to/libggml-base.so > \
        testdata/reference/ggml-quantizers.json

Inputs are fixed (a seeded generator), so the file is the same on every run. `Q2_K` and
`Q3_K` are in ggml-low-k-quants.json (with their decoders' outputs). `IQ4_NL` and `IQ4_XS` are
made by `quantize_iq4_nl` / `quantize_iq4_xs` (what llama-quantize runs for them), and their
decoders' outputs are kept under "decoded".
"""

import ctypes
import json
import random
import struct
import sys

QK_K = 256
# ggml's name for each type's reference quantizer, and its block's values and bytes.
TYPES = {
    "Q8_0": ("q8_0", 32, 34),
    "Q4_0": ("q4_0", 32, 18),
    "Q4_1": ("q4_1", 32, 20),
    "Q5_0": ("q5_0", 32, 22),
    "Q5_1": ("q5_1", 32, 24),
    "Q4_K": ("q4_K", QK_K, 144),
    "Q5_K": ("q5_K", QK_K, 176),
    "Q6_K": ("q6_K", QK_K, 210),
}
# The non-linear types: llama-quantize calls `quantize_<name>(src, dst, nrow, n_per_row, NULL)`
# (15 trial scales a block), not their `_ref` functions (one). Their decoders' outputs are
# kept too (`dequantize_row_<name>`, as `f32` bits).
NON_LINEAR = {
    "IQ4_NL": ("iq4_nl", 32, 18),
    "IQ4_XS": ("iq4_xs", QK_K, 136),
}


def random_rows(rng: random.Random) -> list:
    """Rows of 4 super-blocks: gaussian, uniform, with outliers, all positive, sparse,
    constant then zero, all negative, and tiny."""
    n = 4 * QK_K
    rows = []
    rows.append([rng.gauss(0, 1) for _ in range(n)])
    rows.append([rng.uniform(-0.05, 0.05) for _ in range(n)])
    row = [rng.gauss(0, 0.02) for _ in range(n)]
    for _ in range(12):
        row[rng.randrange(len(row))] = rng.choice([-1, 1]) * rng.uniform(0.5, 2)
    rows.append(row)
    rows.append([abs(rng.gauss(0, 1)) + 0.1 for _ in range(n)])
    rows.append([rng.gauss(0, 1) if rng.random() < 0.1 else 0.0 for _ in range(n)])
    rows.append([0.25] * QK_K + [0.0] * QK_K + [-1.5] * (QK_K // 2) + [3.0] * (QK_K // 2) + [0.0] * QK_K)
    rows.append([-abs(rng.gauss(0, 0.1)) - 0.01 for _ in range(n)])
    rows.append([rng.gauss(0, 1e-6) for _ in range(n)])
    return rows


def bits(values) -> list:
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in values]


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    rng = random.Random(20261128)
    rows = random_rows(rng)
    result = {
        "source": "ggml (llama-cpp-python==0.3.36's llama.cpp), libggml-base.so via ctypes",
        "rows": [bits(row) for row in rows],
        "types": {},
    }
    for ty, (name, block, block_bytes) in TYPES.items():
        quantize = getattr(lib, f"quantize_row_{name}_ref")
        quantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        blocks = []
        for row in rows:
            n = len(row)
            src = (ctypes.c_float * n)(*row)
            dst = ctypes.create_string_buffer(n // block * block_bytes)
            quantize(src, dst, n)
            blocks.append(dst.raw.hex())
        result["types"][ty] = blocks
    result["decoded"] = {}
    for ty, (name, block, block_bytes) in NON_LINEAR.items():
        quantize = getattr(lib, f"quantize_{name}")
        quantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        quantize.restype = ctypes.c_size_t
        dequantize = getattr(lib, f"dequantize_row_{name}")
        dequantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        blocks, decoded = [], []
        for row in rows:
            n = len(row)
            src = (ctypes.c_float * n)(*row)
            dst = ctypes.create_string_buffer(n // block * block_bytes)
            assert quantize(src, dst, 1, n, None) == n // block * block_bytes
            out = (ctypes.c_float * n)()
            dequantize(dst, out, n)
            blocks.append(dst.raw.hex())
            decoded.append(bits(out))
        result["types"][ty] = blocks
        result["decoded"][ty] = decoded
    json.dump(result, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
