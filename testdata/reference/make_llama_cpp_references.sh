#!/bin/sh
# Rebuilds the data of the references made with llama.cpp itself (their `about` texts stay):
#   ggml-rope-scaling.json             ggml_rope.c: ggml_rope_ext on fixed vectors
#   tiny-archs-llama-cpp.json          llama_cpp_logits.c: every logit of the tests' tiny files
#   smollm2-rope-scaling-llama-cpp.json  llama_cpp_greedy.c: greedy steps on SmolLM2 rewritten
#                                      with each rotary scaling
#   smollm2-f32-llama-cpp.json         llama_cpp_top_logits.c: SmolLM2 as F32
#   smollm2-iq4-llama-cpp.json         llama_cpp_greedy.c: greedy steps on SmolLM2 as IQ4_NL
#                                      and IQ4_XS
#   smollm2-iq4_xs-f32-llama-cpp.json  llama_cpp_top_logits.c: the IQ4_XS file decoded to F32
# The input files are the ones the tests write (each test's ignored `write_the_*` test) and
# `kindle quantize --type f32|iq4_nl|iq4_xs` (llama-quantize's bytes); the tests check them by
# sha256.
#
# usage: testdata/reference/make_llama_cpp_references.sh LLAMA_CPP SMOLLM2_Q4_1_GGUF
#   LLAMA_CPP: a llama.cpp source tree built with cmake (build/bin holds libllama.so), e.g.
#   vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist (see docs/performance.md).
set -eu
L=$(cd "$1" && pwd)
MODEL=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
out=$(mktemp -d)
build() {
    gcc -O2 -o "$out/$1" "$here/$1.c" -I"$L/include" -I"$L/ggml/include" -L"$L/build/bin" \
        -lllama -lggml -lggml-base -lggml-cpu -lm -Wl,-rpath,"$L/build/bin"
}
for p in ggml_rope llama_cpp_logits llama_cpp_greedy llama_cpp_top_logits; do build $p; done
cd "$root"
mkdir -p "$out/tiny" "$out/var"
KINDLE_TINY_ARCHS_DIR=$out/tiny cargo test --release -q -p kindle-cli --test tiny_archs \
    --test tiny_gpt2 -- --ignored write_the
KINDLE_TINY_ARCHS_DIR=$out/tiny cargo test --release -q -p kindle-model \
    --test gemma3_llama_cpp -- --ignored write_the
KINDLE_ROPE_VARIANTS_DIR=$out/var KINDLE_MODEL=$MODEL cargo test --release -q -p kindle-cli \
    --test rope_scaling -- --ignored write_the
cargo run --release -q -- quantize "$MODEL" "$out/f32.gguf" --type f32
for t in iq4_nl iq4_xs; do
    cargo run --release -q -- quantize "$MODEL" "$out/$t.gguf" --type $t
done
cargo run --release -q -- quantize "$out/iq4_xs.gguf" "$out/iq4_xs-f32.gguf" --type f32
"$out/ggml_rope" > "$out/rope.json"
python3 - "$out" "$here" "$MODEL" <<'PY'
import hashlib, json, subprocess, sys
out, here, model = sys.argv[1:]
def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()
def update(name, change):
    path = f"{here}/{name}"
    data = json.load(open(path))
    change(data)
    indent = "rope-scaling-llama" in name or "iq4-llama" in name
    json.dump(data, open(path, "w"), **({"indent": 1} if indent else {}))
def run(*args):
    return json.loads(subprocess.run(args, check=True, capture_output=True).stdout)
update("ggml-rope-scaling.json", lambda d: d.update(cases=json.load(open(f"{out}/rope.json"))))
def tiny(d):
    for name, case in d["cases"].items():
        f = f"{out}/tiny/{name}.gguf"
        ids = ",".join(map(str, case["tokens"]))
        case.update(sha256=sha(f), logits=run(f"{out}/llama_cpp_logits", f, ids))
update("tiny-archs-llama-cpp.json", tiny)
def variants(d):
    smol = json.load(open(f"{here}/smollm2-135m-instruct-q4_1.json"))
    open(f"{out}/france.txt", "w").write(smol["prompts"]["france"]["prompt"])
    open(f"{out}/chat.txt", "w").write(smol["prompts"]["chat"]["prompt"])
    edit = "testdata/speculative/edit_paragraph.txt"
    for v, case in d["variants"].items():
        f = f"{out}/var/{v}.gguf"
        got = run(f"{out}/llama_cpp_greedy", f, "48", f"france={out}/france.txt",
                  f"chat={out}/chat.txt", f"edit={edit}")
        case.update(sha256=sha(f), prompts=got["prompts"])
update("smollm2-rope-scaling-llama-cpp.json", variants)
def f32(d):
    f = f"{out}/f32.gguf"
    seqs = [f"{n}={','.join(map(str, c['tokens']))}" for n, c in d["prompts"].items()]
    d.update(sha256=sha(f), prompts=run(f"{out}/llama_cpp_top_logits", f, "10", *seqs))
update("smollm2-f32-llama-cpp.json", f32)
def iq4(d):
    for t, case in d["files"].items():
        f = f"{out}/{t.lower()}.gguf"
        got = run(f"{out}/llama_cpp_greedy", f, "48", f"france={out}/france.txt",
                  f"chat={out}/chat.txt", "edit=testdata/speculative/edit_paragraph.txt")
        case.update(sha256=sha(f), prompts=got["prompts"])
update("smollm2-iq4-llama-cpp.json", iq4)
def iq4_xs_f32(d):
    f = f"{out}/iq4_xs-f32.gguf"
    seqs = [f"{n}={','.join(map(str, c['tokens']))}" for n, c in d["prompts"].items()]
    d.update(sha256=sha(f), prompts=run(f"{out}/llama_cpp_top_logits", f, "10", *seqs))
update("smollm2-iq4_xs-f32-llama-cpp.json", iq4_xs_f32)
PY
echo "references rebuilt from $out"
