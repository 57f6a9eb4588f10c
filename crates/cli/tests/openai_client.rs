//! The official `openai` Python client (from PyPI, in a virtual environment this test makes
//! under the target directory, reused when present) against `kindle serve` on the real model:
//! completions and chat completions, streamed and not, `n=2`, `stop`, `seed`, logprobs and
//! `top_logprobs`, tool calling (`tools`, `tool_choice`, the call read back, streamed and
//! answered), `echo` with logprobs and no new tokens (lm-eval-harness's log-likelihood
//! request), `stream_options.include_usage`, structured output (`parse` with a pydantic
//! model: `response_format` `json_schema`, strict), and the client's error classes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::server::Served;

/// A virtual environment with `openai` installed: made once under the target directory.
fn venv_python() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openai-venv");
    let python = venv.join("bin").join("python");
    let has_openai = |python: &Path| {
        Command::new(python)
            .args(["-c", "import openai"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if python.exists() && has_openai(&python) {
        return python;
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .expect("running python3 -m venv");
    assert!(
        made.status.success(),
        "python3 -m venv failed (on Debian: apt-get install python3-venv): {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pip = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "openai"])
        .output()
        .expect("running pip");
    assert!(
        pip.status.success(),
        "pip install openai failed: {}",
        String::from_utf8_lossy(&pip.stderr)
    );
    assert!(
        has_openai(&python),
        "openai does not import after pip install"
    );
    python
}

const SCRIPT: &str = r#"
import json, sys
import openai
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="sesame")
bad = OpenAI(base_url=sys.argv[1] + "/v1", api_key="wrong")
out = {}

models = client.models.list()
model = models.data[0].id
out["model"] = model

# Completions, plain and streamed with usage.
plain = client.completions.create(model=model, prompt="The capital of France is",
                                  max_tokens=12, temperature=0)
text = plain.choices[0].text
assert plain.choices[0].finish_reason in ("stop", "length"), plain
assert plain.usage.completion_tokens > 0 and plain.usage.prompt_tokens == 5, plain.usage
streamed, usage = "", None
for chunk in client.completions.create(model=model, prompt="The capital of France is",
                                       max_tokens=12, temperature=0, stream=True,
                                       stream_options={"include_usage": True}):
    if chunk.choices:
        streamed += chunk.choices[0].text
    if chunk.usage is not None:
        usage = chunk.usage
assert streamed == text, (streamed, text)
assert usage is not None and usage.completion_tokens == plain.usage.completion_tokens, usage
out["completion"] = text

# Chat, plain and streamed.
messages = [{"role": "user", "content": "What is the capital of France?"}]
chat = client.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                      temperature=0)
reply = chat.choices[0].message.content
assert chat.choices[0].message.role == "assistant"
streamed, usage = "", None
for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}):
    if chunk.choices and chunk.choices[0].delta.content:
        streamed += chunk.choices[0].delta.content
    if chunk.usage is not None:
        usage = chunk.usage
assert streamed == reply, (streamed, reply)
assert usage is not None and usage.total_tokens == chat.usage.total_tokens, (usage, chat.usage)
out["chat"] = reply

# n=2 with a seed: two choices, the same again with the same seed.
first = client.chat.completions.create(model=model, messages=messages, max_tokens=10,
                                       temperature=1.0, seed=7, n=2)
again = client.chat.completions.create(model=model, messages=messages, max_tokens=10,
                                       temperature=1.0, seed=7, n=2)
assert [c.index for c in first.choices] == [0, 1]
assert [c.message.content for c in first.choices] == [c.message.content for c in again.choices]
out["n2"] = [c.message.content for c in first.choices]

# stop: cut before the stop string.
word = text.split()[1] if len(text.split()) > 1 else text.strip()[:2]
stopped = client.completions.create(model=model, prompt="The capital of France is",
                                    max_tokens=12, temperature=0, stop=[word])
assert word not in stopped.choices[0].text, (word, stopped.choices[0].text)
assert stopped.choices[0].finish_reason == "stop"
assert text.startswith(stopped.choices[0].text)

# logprobs: completions (top 3) and chat (top_logprobs 2), streamed too.
lp = client.completions.create(model=model, prompt="The capital of France is", max_tokens=4,
                               temperature=0, logprobs=3).choices[0].logprobs
assert len(lp.tokens) == 4 and len(lp.token_logprobs) == 4 and len(lp.top_logprobs[0]) == 3, lp
lp = client.chat.completions.create(model=model, messages=messages, max_tokens=4,
                                    temperature=0, logprobs=True,
                                    top_logprobs=2).choices[0].logprobs
assert len(lp.content) == 4 and len(lp.content[0].top_logprobs) == 2, lp
assert lp.content[0].logprob <= 0
count = 0
for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=4,
                                            temperature=0, logprobs=True, top_logprobs=2,
                                            stream=True):
    if chunk.choices and chunk.choices[0].logprobs is not None:
        count += len(chunk.choices[0].logprobs.content)
assert count == 4, count

# echo with logprobs and no new tokens, as lm-eval-harness's loglikelihood asks (token ids
# in, the context's share sliced off): every prompt token scored, the first null.
ids = [504, 3575, 282, 4649, 314, 7042, 30]  # "The capital of France is Paris."
scored = client.completions.create(model=model, prompt=ids, echo=True, max_tokens=0,
                                   logprobs=1, temperature=0).choices[0]
assert scored.text == "The capital of France is Paris.", scored.text
lp = scored.logprobs
assert lp.tokens[0] == "The" and len(lp.tokens) == 7, lp
assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, lp
continuation = lp.token_logprobs[5:]
assert all(x < 0 for x in continuation), lp
greedy = [max(top, key=top.get) == tok for tok, top in zip(lp.tokens[5:], lp.top_logprobs[5:])]
assert greedy == [True, True], (lp.tokens, lp.top_logprobs)
out["echo_logprob"] = sum(continuation)

# Tool calling, against a second server whose chat template renders tools: the client sends
# `tools` and `tool_choice`, and reads the call back as its own types.
tooled = OpenAI(base_url=sys.argv[2] + "/v1", api_key="none")
weather = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}
asked = [{"role": "user", "content": "What is the weather in Paris?"}]
called = tooled.chat.completions.create(model="kindle", messages=asked, tools=[weather],
                                        tool_choice="required", parallel_tool_calls=False,
                                        max_tokens=60, temperature=0).choices[0]
assert called.finish_reason == "tool_calls", called
call = called.message.tool_calls[0]
assert call.type == "function" and call.function.name == "get_weather", call
assert isinstance(json.loads(call.function.arguments)["city"], str), call
# Streamed, the client gathers the call from its deltas (name first, arguments in pieces).
pieces, name = [], None
for chunk in tooled.chat.completions.create(model="kindle", messages=asked, tools=[weather],
                                            tool_choice="required", parallel_tool_calls=False,
                                            max_tokens=60, temperature=0, stream=True):
    for d in chunk.choices[0].delta.tool_calls or []:
        assert d.index == 0, d
        name = name or d.function.name
        pieces.append(d.function.arguments or "")
assert name == "get_weather" and len(pieces) > 3, pieces
assert "".join(pieces) == call.function.arguments, (pieces, call)
answered = tooled.chat.completions.create(model="kindle", tools=[weather], max_tokens=8,
    temperature=0, messages=asked + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}])
assert answered.choices[0].message.role == "assistant", answered
try:
    client.chat.completions.create(model=model, messages=asked, tools=[weather])
    raise SystemExit("tools were accepted by a template that never reads them")
except openai.BadRequestError as e:
    assert e.body["param"] == "tools", e.body
out["tool_call"] = call.function.arguments

# Structured output: the client sends the pydantic model's strict JSON schema as
# response_format and parses the answer back into the model.
# Bounds keep a 135M model from spinning in one field (it repeats digits without them).
from pydantic import BaseModel, Field

class City(BaseModel):
    name: str = Field(max_length=40)
    country: str = Field(max_length=40)
    population: int = Field(ge=0, le=100_000_000)

parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
parsed = parse(model=model, response_format=City, max_tokens=120, temperature=0,
               messages=[{"role": "user", "content": "Describe the city of Paris as JSON."}])
message = parsed.choices[0].message
assert parsed.choices[0].finish_reason == "stop", parsed.choices[0].finish_reason
assert message.parsed is not None, message.content
out["structured"] = message.parsed.model_dump()
try:
    client.chat.completions.create(model=model, messages=messages, max_tokens=4,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "bad", "schema": {"type": "strange"}}})
    raise SystemExit("an invalid schema was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "response_format", e.body

# Errors come back as the client's exception classes.
try:
    client.completions.create(model=model, prompt="x", temperature=5)
    raise SystemExit("temperature=5 was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "temperature", e.body
try:
    client.completions.create(model="gpt-4", prompt="x")
    raise SystemExit("an unknown model was accepted")
except openai.NotFoundError:
    pass
try:
    bad.models.list()
    raise SystemExit("a wrong key was accepted")
except openai.AuthenticationError:
    pass

print(json.dumps(out))
"#;

#[test]
fn the_official_openai_python_client_works_unchanged() {
    let Some(model) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let python = venv_python();
    let server = Served::start(
        &model,
        &["--parallel", "4", "-c", "1024", "--api-key", "sesame"],
    );
    // A second server whose chat template renders tools (SmolLM2's does not).
    let template = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openai_tools.jinja");
    std::fs::write(&template, common::server::TOOLS_TEMPLATE).expect("writing the template");
    let tooled = Served::start(
        &model,
        &[
            "-c",
            "1024",
            "--chat-template-file",
            template.to_str().unwrap(),
        ],
    );
    let script = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openai_client_check.py");
    std::fs::write(&script, SCRIPT).expect("writing the script");
    let out = Command::new(&python)
        .arg(&script)
        .arg(server.url())
        .arg(tooled.url())
        .output()
        .expect("running the Python client");
    assert!(
        out.status.success(),
        "the openai client script failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the script's JSON line");
    assert!(
        result["completion"].as_str().unwrap().contains("Paris"),
        "{result}"
    );
    assert_eq!(result["n2"].as_array().unwrap().len(), 2);
    let city = &result["structured"];
    assert!(
        city["name"].is_string() && city["country"].is_string() && city["population"].is_i64(),
        "{result}"
    );
    let (status, lines) = tooled.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");
    let (status, lines) = server.terminate();
    assert!(status.success(), "exit status {status:?}: {lines:?}");
}
