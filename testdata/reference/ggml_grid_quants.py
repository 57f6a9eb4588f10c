#!/usr/bin/env python3
"""Writes ggml-grid-quants.json: ggml's grid quants (`IQ2_XXS` ... `IQ1_M`) and its decoders'
values for them.

kindle's decoders (`kindle_gguf::quant::dequantize`) are checked against this file
(`crates/gguf/tests/ggml_quantizers.rs`). It is made through ctypes from the `libggml-base.so`
of the llama.cpp that `llama-cpp-python==0.3.36` bundles (build it as docs/performance.md says
for llama-bench):

    python3 testdata/reference/ggml_grid_quants.py path/to/libggml-base.so > \
        testdata/reference/ggml-grid-quants.json

For each type, six rows of two super-blocks: four that ggml's own `quantize_<type>` made of
seeded rows under an importance matrix (`x^2` plus a floor: these types need one), as
llama-quantize writes them, and two of seeded random bytes with a sane scale (every index,
sign and scale pattern, including ones the quantizers rarely pick). "decoded" holds
`dequantize_row_<type>` of each, as `f32` bits. Inputs are fixed, so the file is the same on
every run.
"""

import ctypes
import json
import random
import struct
import sys

QK_K = 256
# ggml's name and type id, the block's bytes, and where its `f16` scale lies (None: `IQ1_M`,
# whose scale is spread over the top nibbles of its last eight bytes).
TYPES = {
    "IQ2_XXS": ("iq2_xxs", 16, 66, 0),
    "IQ2_XS": ("iq2_xs", 17, 74, 0),
    "IQ2_S": ("iq2_s", 22, 82, 0),
    "IQ3_XXS": ("iq3_xxs", 18, 98, 0),
    "IQ3_S": ("iq3_s", 21, 110, 0),
    "IQ1_S": ("iq1_s", 19, 50, 0),
    "IQ1_M": ("iq1_m", 29, 56, None),
}
N = 2 * QK_K


def bits(values) -> list:
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in values]


def rows(rng: random.Random) -> list:
    """Gaussian, uniform, with outliers, and sparse rows."""
    out = [[rng.gauss(0, 1) for _ in range(N)], [rng.uniform(-0.05, 0.05) for _ in range(N)]]
    row = [rng.gauss(0, 0.02) for _ in range(N)]
    for _ in range(8):
        row[rng.randrange(N)] = rng.choice([-1, 1]) * rng.uniform(0.5, 2)
    out.append(row)
    out.append([rng.gauss(0, 1) if rng.random() < 0.2 else 0.0 for _ in range(N)])
    return out


def random_blocks(rng: random.Random, block_bytes: int, scale_at) -> bytes:
    blocks = bytearray()
    for _ in range(N // QK_K):
        b = bytearray(rng.getrandbits(8) for _ in range(block_bytes))
        d = struct.pack("<e", rng.uniform(0.001, 0.05))
        if scale_at is None:
            # IQ1_M: the f16 in the top nibbles of the four scale words (bytes 48..56).
            u = struct.unpack("<H", d)[0]
            for i in range(4):
                hi = 49 + 2 * i
                b[hi] = (b[hi] & 0x0F) | (((u >> (4 * i)) & 0xF) << 4)
        else:
            b[scale_at:scale_at + 2] = d
        blocks += b
    return bytes(blocks)


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    rng = random.Random(20261130)
    result = {
        "source": "ggml (llama-cpp-python==0.3.36's llama.cpp), libggml-base.so via ctypes",
        "values": N,
        "types": {},
        "decoded": {},
    }
    for ty, (name, type_id, block_bytes, scale_at) in TYPES.items():
        lib.ggml_quantize_init(type_id)
        quantize = getattr(lib, f"quantize_{name}")
        quantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        quantize.restype = ctypes.c_size_t
        dequantize = getattr(lib, f"dequantize_row_{name}")
        dequantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        size = N // QK_K * block_bytes
        made = []
        for row in rows(rng):
            src = (ctypes.c_float * N)(*row)
            weights = (ctypes.c_float * N)(*[x * x + 1e-3 for x in row])
            dst = ctypes.create_string_buffer(size)
            assert quantize(src, dst, 1, N, weights) == size, ty
            made.append(dst.raw)
        made += [random_blocks(rng, block_bytes, scale_at) for _ in range(2)]
        blocks, decoded = [], []
        for raw in made:
            out = (ctypes.c_float * N)()
            dequantize(ctypes.create_string_buffer(raw, len(raw)), out, N)
            blocks.append(raw.hex())
            decoded.append(bits(out))
        result["types"][ty] = blocks
        result["decoded"][ty] = decoded
    json.dump(result, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
