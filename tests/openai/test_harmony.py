"""A harmony (gpt-oss) tool-call round trip through the real `openai` client (run by
scripts/test-openai).

Starts `corral serve` on a random-weight gpt-oss folder with the real gpt-oss tokenizer
(`CORRAL_GPT_OSS`, written by `examples/random_gpt_oss.rs`). A random network writes no
harmony of its own, so the first turn requires the call (`tool_choice`): the commentary
header is forced once its reasoning budget is spent, and the grammar makes the recipient
and the arguments valid under the tool's parameters. The second turn sends the call and the
tool's result back, as an application does, and gets an answer. Each turn is also streamed.
The transcript (requests and replies) is printed as JSON lines, or written to
`CORRAL_TRANSCRIPT` when set.
"""

import json
import os
import re
import subprocess
import sys
import time
import unittest
import urllib.request

import openai

CORRAL = os.environ.get("CORRAL_BIN", "target/release/corral")
FOLDER = os.environ.get("CORRAL_GPT_OSS")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city, for the next days.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"enum": ["Paris", "Lima", "Oslo"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 3},
                },
                "required": ["city", "days"],
                "additionalProperties": False,
            },
        },
    }
]


def check_arguments(text):
    """The arguments are valid under get_weather's parameters."""
    args = json.loads(text)
    assert set(args) == {"city", "days"}, args
    assert args["city"] in ("Paris", "Lima", "Oslo"), args
    assert isinstance(args["days"], int) and 1 <= args["days"] <= 3, args
    return args


class HarmonyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not FOLDER:
            raise RuntimeError("CORRAL_GPT_OSS names no gpt-oss folder (scripts/test-openai makes one)")
        cls.proc = subprocess.Popen(
            [CORRAL, "serve", "-m", FOLDER, "--port", "0", "--model-name", "gpt-oss-random"],
            stderr=subprocess.PIPE,
            text=True,
        )
        line = cls.proc.stderr.readline()
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            cls.proc.kill()
            raise RuntimeError(f"corral serve did not start: {line!r}")
        base = m.group(1)
        for _ in range(1200):
            try:
                with urllib.request.urlopen(f"{base}/health") as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        cls.client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
        cls.transcript = []

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        code = cls.proc.wait(timeout=60)
        out = os.environ.get("CORRAL_TRANSCRIPT")
        lines = [json.dumps(t) for t in cls.transcript]
        if out:
            with open(out, "w") as f:
                f.write("\n".join(lines) + "\n")
        else:
            print("\n".join(lines))
        assert code == 0, f"corral serve exited with {code} on SIGTERM"

    def record(self, request, reply):
        # A copy: the conversation's list grows after the request was sent.
        self.transcript.append({"request": json.loads(json.dumps(request)), "reply": reply})

    def test_a_tool_call_round_trip(self):
        messages = [
            {"role": "system", "content": "Use the tools."},
            {"role": "user", "content": "What is the weather in Oslo tomorrow?"},
        ]
        first = dict(
            model="gpt-oss-random",
            messages=messages,
            tools=TOOLS,
            tool_choice="required",
            reasoning_effort="low",
            max_tokens=80,
            extra_body={"reasoning_budget": 4},
        )
        r = self.client.chat.completions.create(**first)
        self.record(first, r.model_dump())
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertEqual(len(choice.message.tool_calls), 1)
        call = choice.message.tool_calls[0]
        self.assertEqual(call.function.name, "get_weather")
        args = check_arguments(call.function.arguments)

        # The application runs the tool and sends its result back.
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": call.function.arguments},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": json.dumps({"city": args["city"], "sky": "clear", "high_c": 4}),
            }
        )
        second = dict(
            model="gpt-oss-random",
            messages=messages,
            tools=TOOLS,
            tool_choice="none",
            max_tokens=24,
            extra_body={"reasoning_budget": 4},
        )
        r = self.client.chat.completions.create(**second)
        self.record(second, r.model_dump())
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertIsNone(r.choices[0].message.tool_calls)

    def test_a_streamed_call(self):
        req = dict(
            model="gpt-oss-random",
            messages=[{"role": "user", "content": "Weather in Lima?"}],
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=80,
            stream=True,
            extra_body={"reasoning_budget": 2},
        )
        name, args, finish, chunks = "", "", None, []
        for chunk in self.client.chat.completions.create(**req):
            chunks.append(chunk.model_dump())
            c = chunk.choices[0]
            for t in c.delta.tool_calls or []:
                name += t.function.name or ""
                args += t.function.arguments or ""
            finish = c.finish_reason or finish
        self.record({k: v for k, v in req.items()}, {"chunks": len(chunks), "name": name, "arguments": args, "finish_reason": finish})
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(name, "get_weather")
        check_arguments(args)

    def test_refusals_are_the_clients_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model="gpt-oss-random",
                messages=[{"role": "user", "content": "x"}],
                reasoning_effort="extreme",
            )
        self.assertIn("reasoning_effort", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model="gpt-oss-random", messages=[{"role": "user", "content": "x"}], stop=["\n"]
            )
        self.assertIn("stop", str(e.exception))


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
