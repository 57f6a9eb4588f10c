#!/usr/bin/env python3
"""Writes ggml-low-k-quants.json: ggml's own `Q2_K` and `Q3_K` arithmetic on fixed inputs.

kindle's decoders (`kindle_gguf::quant`) and quantizers are checked against this file
(`crates/gguf/src/quant/low_k.rs`). It is made by calling ggml's reference functions
(`dequantize_row_q2_K`, `dequantize_row_q3_K`, `quantize_row_q2_K_ref`,
`quantize_row_q3_K_ref`) in the `libggml-base.so` of the llama.cpp that `llama-cpp-python==0.3.36`
bundles (build it as docs/performance.md says for llama-bench), through ctypes:

    python3 testdata/reference/ggml_low_k_quants.py path/to/libggml-base.so > \
        testdata/reference/ggml-low-k-quants.json

Inputs are fixed (a seeded generator), so the file is the same on every run.
"""

import ctypes
import json
import random
import struct
import sys

QK_K = 256
BLOCK_BYTES = {"Q2_K": 84, "Q3_K": 110}
# Where each block's f16 fields lie.
F16_FIELDS = {"Q2_K": [80, 82], "Q3_K": [108]}


def f16_bits(value: float) -> int:
    return struct.unpack("<H", struct.pack("<e", value))[0]


def random_blocks(rng: random.Random, ty: str, count: int) -> bytes:
    """Random bytes, with the f16 scales set to ordinary values (and a few edge cases)."""
    out = bytearray()
    specials = [0.0, -0.0, 6.1e-5, 1e-7, 65504.0, -3.5]
    for i in range(count):
        block = bytearray(rng.getrandbits(8) for _ in range(BLOCK_BYTES[ty]))
        for k, at in enumerate(F16_FIELDS[ty]):
            if i < len(specials) and k == 0:
                value = specials[i]
            else:
                value = rng.choice([-1, 1]) * 2.0 ** rng.uniform(-14, 2)
            struct.pack_into("<H", block, at, f16_bits(value))
        out += block
    return bytes(out)


def random_rows(rng: random.Random) -> list:
    """Rows of 2 super-blocks: gaussian, uniform, with outliers, all positive, sparse, constant."""
    rows = []
    rows.append([rng.gauss(0, 1) for _ in range(2 * QK_K)])
    rows.append([rng.uniform(-0.05, 0.05) for _ in range(2 * QK_K)])
    row = [rng.gauss(0, 0.02) for _ in range(2 * QK_K)]
    for _ in range(6):
        row[rng.randrange(len(row))] = rng.choice([-1, 1]) * rng.uniform(0.5, 2)
    rows.append(row)
    rows.append([abs(rng.gauss(0, 1)) + 0.1 for _ in range(2 * QK_K)])
    rows.append([rng.gauss(0, 1) if rng.random() < 0.1 else 0.0 for _ in range(2 * QK_K)])
    rows.append([0.25] * QK_K + [0.0] * QK_K)
    return rows


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    rng = random.Random(20261127)
    result = {
        "source": "ggml (llama-cpp-python==0.3.36's llama.cpp), libggml-base.so via ctypes",
        "types": {},
    }
    for ty in ["Q2_K", "Q3_K"]:
        name = ty.lower().replace("_k", "_K")
        dequantize = getattr(lib, f"dequantize_row_{name}")
        quantize = getattr(lib, f"quantize_row_{name}_ref")
        dequantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        quantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]

        def decode(data: bytes) -> list:
            n = len(data) // BLOCK_BYTES[ty] * QK_K
            src = ctypes.create_string_buffer(data, len(data))
            dst = (ctypes.c_float * n)()
            dequantize(src, dst, n)
            return [struct.unpack("<I", struct.pack("<f", v))[0] for v in dst]

        blocks = random_blocks(rng, ty, 12)
        entry = {"blocks": blocks.hex(), "values_bits": decode(blocks), "quantized": []}
        for row in random_rows(rng):
            n = len(row)
            src = (ctypes.c_float * n)(*row)
            dst = ctypes.create_string_buffer(n // QK_K * BLOCK_BYTES[ty])
            quantize(src, dst, n)
            data = dst.raw
            entry["quantized"].append(
                {
                    "input_bits": [
                        struct.unpack("<I", struct.pack("<f", v))[0] for v in src
                    ],
                    "blocks": data.hex(),
                    "values_bits": decode(data),
                }
            )
        result["types"][ty] = entry
    json.dump(result, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
