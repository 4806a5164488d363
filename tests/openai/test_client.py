"""corral serve driven by the real `openai` Python client (run by scripts/test-openai).

Starts `corral serve --port 0` with the default model, reads the address it prints, and
checks what an application written against OpenAI's API relies on: chat completions,
structured output through `.parse()` with a pydantic model, streaming, the extensions
passed through `extra_body`, completions, and errors raised as the client's exceptions.
"""

import json
import os
import re
import subprocess
import sys
import unittest

import openai
import pydantic

CORRAL = os.environ.get("CORRAL_BIN", "target/release/corral")


class Cat(pydantic.BaseModel):
    name: str
    age: int
    indoor: bool


class ServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc = subprocess.Popen(
            [CORRAL, "serve", "--port", "0", "--api-key", "test-key", "--model-name", "default"],
            stderr=subprocess.PIPE,
            text=True,
        )
        line = cls.proc.stderr.readline()
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            cls.proc.kill()
            raise RuntimeError(f"corral serve did not start: {line!r}")
        base = m.group(1)
        cls.client = openai.OpenAI(base_url=f"{base}/v1", api_key="test-key", max_retries=0)
        # Wait for the model: /health answers 503 until it is loaded.
        import time
        import urllib.request

        for _ in range(600):
            try:
                with urllib.request.urlopen(f"{base}/health") as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        cls.base = base

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        code = cls.proc.wait(timeout=60)
        assert code == 0, f"corral serve exited with {code} on SIGTERM"

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual(len(models.data), 1)
        self.assertEqual(models.data[0].id, "default")
        # A model the server does not serve: 404, as OpenAI answers.
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "x"}], max_tokens=2
            )
        self.assertEqual(e.exception.code, "model_not_found")

    def test_logprobs_under_a_schema(self):
        r = self.client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "Describe a cat."}],
            response_format={"type": "json_schema", "json_schema": {"name": "cat", "schema": Cat.model_json_schema()}},
            logprobs=True,
            top_logprobs=2,
            max_tokens=60,
            temperature=0,
        )
        lp = r.choices[0].logprobs.content
        self.assertEqual(len(lp), r.usage.completion_tokens)
        self.assertEqual("".join(t.token for t in lp), r.choices[0].message.content)
        for t in lp:
            self.assertLessEqual(t.logprob, 0.0)
            self.assertEqual(t.top_logprobs[0].token, t.token)
        Cat.model_validate_json(r.choices[0].message.content)

    def test_parse_with_a_pydantic_model(self):
        completion = self.client.chat.completions.parse(
            model="default",
            messages=[{"role": "user", "content": "Describe a cat."}],
            response_format=Cat,
            max_tokens=80,
            temperature=0,
        )
        choice = completion.choices[0]
        self.assertEqual(choice.finish_reason, "stop")
        cat = choice.message.parsed
        self.assertIsInstance(cat, Cat)
        self.assertGreater(completion.usage.completion_tokens, 0)

    def test_json_object(self):
        r = self.client.chat.completions.create(
            model="default",
            messages=[{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "A dog?"}],
            response_format={"type": "json_object"},
            max_tokens=60,
            temperature=0,
        )
        self.assertIsInstance(json.loads(r.choices[0].message.content), dict)

    def test_streaming_with_usage(self):
        stream = self.client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "Count to five."}],
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=30,
            extra_body={"regex": "1, 2, 3, 4, 5"},
        )
        text, finish, usage = "", None, None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage:
                usage = chunk.usage
        self.assertEqual(text, "1, 2, 3, 4, 5")
        self.assertEqual(finish, "stop")
        self.assertIsNotNone(usage)
        self.assertGreater(usage.completion_tokens, 0)

    def test_extensions_through_extra_body(self):
        r = self.client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "Is the sky blue?"}],
            extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
        )
        self.assertIn(r.choices[0].message.content, ("yes", "no"))
        r = self.client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "A date."}],
            extra_body={"grammar": 'root ::= [0-9]{4} "-" [0-9]{2} "-" [0-9]{2}'},
        )
        self.assertRegex(r.choices[0].message.content, r"^\d{4}-\d{2}-\d{2}$")

    def test_completions(self):
        r = self.client.completions.create(
            model="default", prompt="The capital of France is", max_tokens=5, temperature=0, stop=["."]
        )
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.choices[0].text)

    TOOLS = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["c", "f"]}},
                    "required": ["city", "unit"],
                    "additionalProperties": False,
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "maxLength": 30}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        },
    ]

    def check_call(self, call):
        args = json.loads(call.function.arguments)
        self.assertIsInstance(args["city"], str)
        self.assertLessEqual(len(args["city"]), 30)
        if call.function.name == "get_weather":
            self.assertEqual(set(args), {"city", "unit"})
            self.assertIn(args["unit"], ("c", "f"))
        else:
            self.assertEqual(call.function.name, "get_time")
            self.assertEqual(set(args), {"city"})

    def test_tool_choice_required(self):
        r = self.client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "What's the weather in Paris?"}],
            tools=self.TOOLS,
            tool_choice="required",
            temperature=0,
        )
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertEqual(len(choice.message.tool_calls), 1)
        self.check_call(choice.message.tool_calls[0])

    def test_named_tool(self):
        r = self.client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "What's the weather in Paris?"}],
            tools=self.TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_time"}},
        )
        call = r.choices[0].message.tool_calls[0]
        self.assertEqual(call.function.name, "get_time")
        self.check_call(call)

    def test_strict_json_schema_output_validates(self):
        schema = {
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 40},
                "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
                "genres": {"type": "array", "items": {"enum": ["drama", "comedy", "horror"]}, "maxItems": 3},
            },
            "required": ["title", "year", "genres"],
            "additionalProperties": False,
        }
        r = self.client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "A film, as JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "film", "schema": schema, "strict": True}},
            max_tokens=100,
        )
        film = json.loads(r.choices[0].message.content)
        self.assertEqual(set(film), {"title", "year", "genres"})
        self.assertLessEqual(len(film["title"]), 40)
        self.assertTrue(1900 <= film["year"] <= 2030)
        self.assertLessEqual(len(film["genres"]), 3)
        self.assertTrue(all(g in ("drama", "comedy", "horror") for g in film["genres"]))

    def test_streamed_chunks_reassemble_to_the_whole_response(self):
        kwargs = dict(
            model="default",
            messages=[{"role": "user", "content": "Name a colour."}],
            temperature=0,
            max_tokens=20,
            extra_body={"regex": "[A-Za-z ]{1,40}"},
        )
        whole = self.client.chat.completions.create(**kwargs).choices[0].message.content
        parts = [
            c.choices[0].delta.content or ""
            for c in self.client.chat.completions.create(stream=True, **kwargs)
            if c.choices
        ]
        self.assertEqual("".join(parts), whole)

    def test_eight_concurrent_streaming_clients_all_get_valid_output(self):
        import threading

        schema = {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "population": {"type": "integer", "minimum": 0}},
            "required": ["city", "population"],
            "additionalProperties": False,
        }
        results, errors = [None] * 8, []

        def run(i):
            try:
                stream = self.client.chat.completions.create(
                    model="default",
                    messages=[{"role": "user", "content": f"A city, number {i}, as JSON."}],
                    response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
                    stream=True,
                    max_tokens=60,
                    seed=i,
                )
                results[i] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        for text in results:
            city = json.loads(text)
            self.assertEqual(set(city), {"city", "population"})
            self.assertLessEqual(len(city["city"]), 20)
            self.assertGreaterEqual(city["population"], 0)

    def test_errors_are_the_clients_exceptions(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model="default",
                messages=[{"role": "user", "content": "x"}],
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "s", "schema": {"type": "object", "properties": {"a": {"type": "integer", "minimum": "zero"}}}},
                },
            )
        self.assertIn("minimum", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(
                model="default",
                messages=[{"role": "user", "content": "x"}],
                extra_body={"grammar": 'root ::= "a" | b'},
            )
        self.assertIn("undefined rule 'b'", str(e.exception))
        with self.assertRaises(openai.BadRequestError):
            self.client.chat.completions.create(
                model="default", messages=[{"role": "user", "content": "x"}], n=2
            )
        bad = openai.OpenAI(base_url=f"{self.base}/v1", api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            bad.models.list()
        # Still serving.
        r = self.client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "x"}], extra_body={"regex": "ok"}
        )
        self.assertEqual(r.choices[0].message.content, "ok")


if __name__ == "__main__":
    unittest.main(verbosity=2)
