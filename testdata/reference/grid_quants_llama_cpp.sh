#!/bin/sh
# Makes SmolLM2 in ggml's grid quants (IQ1_S ... IQ3_M, which kindle reads but does not write:
# their encoders need an importance matrix) with llama.cpp's own tools, and llama.cpp's
# references on each file, for `crates/cli/tests/grid_quants.rs` (an ignored test: CI cannot
# make these files):
#   smol-TYPE.gguf          llama-quantize --imatrix, from the F32 file (`kindle quantize
#                           --type f32` of the Q4_1 file)
#   TYPE-exact.json         llama_cpp_top_logits.c on the file decoded to F32 by llama-quantize
#                           (ggml's decoders; nothing rounded on llama.cpp's side)
#   TYPE-greedy.json        llama_cpp_greedy.c on the file itself (48 steps, three prompts)
# The importance matrix is llama-imatrix's over this repository's documentation (40 chunks of
# 512 tokens): any text serves, the test compares kindle with llama.cpp on the same file.
#
# usage: testdata/reference/grid_quants_llama_cpp.sh LLAMA_CPP SMOLLM2_Q4_1_GGUF OUT_DIR
#   LLAMA_CPP: a llama.cpp source tree built with cmake, with the targets llama-quantize and
#   llama-imatrix (`cmake --build build --target llama-quantize llama-imatrix`).
# then: KINDLE_GRID_QUANTS_DIR=OUT_DIR cargo test --release -p kindle-cli --test grid_quants \
#   -- --ignored --nocapture
set -eu
L=$(cd "$1" && pwd)
MODEL=$2
mkdir -p "$3"
out=$(cd "$3" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
bin=$L/build/bin
export LD_LIBRARY_PATH=$bin
for p in llama_cpp_greedy llama_cpp_top_logits; do
    gcc -O2 -o "$out/$p" "$here/$p.c" -I"$L/include" -I"$L/ggml/include" -L"$bin" \
        -lllama -lggml -lggml-base -lggml-cpu -lm -Wl,-rpath,"$bin"
done
cd "$root"
cargo run --release -q -- quantize "$MODEL" "$out/f32.gguf" --type f32
cat README.md ARCHITECTURE.md docs/*.md | head -c 400000 > "$out/imatrix-text.txt"
"$bin/llama-imatrix" -m "$out/f32.gguf" -f "$out/imatrix-text.txt" -o "$out/imatrix.gguf" \
    --chunks 40 -c 512 > "$out/imatrix.log" 2>&1
python3 - "$out" "$here" <<'PY'
import json, subprocess, sys
out, here = sys.argv[1:]
smol = json.load(open(f"{here}/smollm2-135m-instruct-q4_1.json"))
open(f"{out}/france.txt", "w").write(smol["prompts"]["france"]["prompt"])
open(f"{out}/chat.txt", "w").write(smol["prompts"]["chat"]["prompt"])
f32 = json.load(open(f"{here}/smollm2-f32-llama-cpp.json"))
seqs = [f"{n}={','.join(map(str, c['tokens']))}" for n, c in f32["prompts"].items()]
def run(*args):
    return subprocess.run(args, check=True, capture_output=True).stdout
bin = sys.argv[0]
for t in ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M"]:
    f = f"{out}/smol-{t}.gguf"
    import os
    b = os.environ["LD_LIBRARY_PATH"]
    run(f"{b}/llama-quantize", "--imatrix", f"{out}/imatrix.gguf", f"{out}/f32.gguf", f, t, "2")
    run(f"{b}/llama-quantize", "--allow-requantize", f, f"{out}/{t}-f32.gguf", "F32", "2")
    open(f"{out}/{t}-exact.json", "wb").write(run(f"{out}/llama_cpp_top_logits", f"{out}/{t}-f32.gguf", "10", *seqs))
    os.remove(f"{out}/{t}-f32.gguf")
    open(f"{out}/{t}-greedy.json", "wb").write(run(f"{out}/llama_cpp_greedy", f, "48",
        f"france={out}/france.txt", f"chat={out}/chat.txt", "edit=testdata/speculative/edit_paragraph.txt"))
    print(t, "done", flush=True)
PY
echo "files and references in $out"
