"""The fake endpoint of ``benchmarks/peers.py``: ragjury's scripted agents and the peers'.

It is ``benchmarks/fakeserver.py`` (every ragjury agent scripted, the same latency, 429s and
500s), answering besides the faithfulness prompts of RAGAS (both its legacy path and its
``collections`` path through instructor) and of DeepEval, told apart by the output schema
each asks for: a tool named after it, a ``response_format`` schema named after it, or the
schema's title written in the prompt. Their answers are valid for their schemas and built
from the sample's own answer (its sentences become the statements or claims, each found
faithful), so every tool does the same work per sample.

``--rate-malformed`` and ``--rate-invalid`` turn that share of the successful answers of
every tool into malformed JSON (cut short) or JSON that parses but misses the schema's
fields: the faults a real model makes, which each tool must notice and ask again.

    python benchmarks/peerserver.py --latency-ms 200 --rate-malformed 0.1   # prints its URL

Besides ``fakeserver.py``'s commands on stdin it takes ``tool NAME`` (count the requests from
now on for that tool) and ``spans NAME`` (each of that tool's requests as [arrival, end] on
``time.monotonic()``); ``stats`` adds ``by_tool``, each tool's requests in flight at the
endpoint (peak and time-weighted mean), so a tool held below its concurrency shows.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakeopenai import FakeOpenAI, RecordedRequest, Reply, Responder, chat_json, tool_call
from fakeserver import parse_args as fake_args
from fakeserver import scripted_server

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_NO_STATEMENT = "The answer states one fact."


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--rate-malformed", type=float, default=0.0)
    parser.add_argument("--rate-invalid", type=float, default=0.0)
    return parser.parse_known_args(argv)


def _prompt(request: RecordedRequest) -> str:
    body = request.body if isinstance(request.body, dict) else {}
    parts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


def _sentences(text: str) -> list[str]:
    found = [s.strip() for s in _SENTENCE.split(text.strip()) if len(s.strip()) > 3]
    return found[:12] or [_NO_STATEMENT]


def _last_json_string(prompt: str, key: str) -> str | None:
    """The value of the last ``"key": "..."`` in ``prompt`` (the sample's, after examples)."""
    found = re.findall(rf'"{key}"\s*:\s*("(?:[^"\\]|\\.)*")', prompt)
    if not found:
        return None
    try:
        value = json.loads(found[-1])
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _after(prompt: str, marker: str, end: str = "\n\nJSON:") -> str:
    start = prompt.rfind(marker)
    if start < 0:
        return ""
    text = prompt[start + len(marker) :]
    stop = text.find(end)
    return text[:stop] if stop >= 0 else text


def _statements_in(prompt: str) -> list[str]:
    """The statements or claims a verdict prompt lists (the last list in the prompt)."""
    for key in ("statements", "claims"):
        block = _after(prompt, f'"{key}": [', "]") if f'"{key}": [' in prompt else ""
        if block:
            try:
                items = json.loads("[" + block + "]")
                return [str(i) for i in items] or [_NO_STATEMENT]
            except ValueError:
                pass
    claims = _after(prompt, "Claims:\n").strip()
    if claims:
        try:
            items = ast.literal_eval(claims)
            if isinstance(items, list):
                return [str(i) for i in items] or [_NO_STATEMENT]
        except (ValueError, SyntaxError):
            pass
    return [_NO_STATEMENT]


def _peer_output(schema: str, prompt: str) -> dict[str, Any] | None:
    """A valid answer for the peer schema named ``schema``, or None if it is not one."""
    if schema == "StatementGeneratorOutput":
        answer = _last_json_string(prompt, "answer") or _last_json_string(prompt, "response")
        return {"statements": _sentences(answer or "")}
    if schema in ("NLIStatementOutput", "StatementFaithfulnessAnswers"):
        return {
            "statements": [
                {"statement": s, "reason": "The context states it.", "verdict": 1}
                for s in _statements_in(prompt)
            ]
        }
    if schema == "Claims":
        return {"claims": _sentences(_after(prompt, "AI Output:\n"))}
    if schema == "Truths":
        return {"truths": _sentences(_after(prompt, "Text:\n"))[:5]}
    if schema == "Verdicts":
        return {
            "verdicts": [
                {"verdict": "yes", "reason": "The context states it."}
                for _ in _statements_in(prompt)
            ]
        }
    if schema == "FaithfulnessScoreReason":
        return {"reason": "Every claim is supported by the retrieval context."}
    return None


_PEER_SCHEMAS = (
    "StatementGeneratorOutput",
    "NLIStatementOutput",
    "StatementFaithfulnessAnswers",
    "FaithfulnessScoreReason",
    "Verdicts",
    "Claims",
    "Truths",
)


def peer_reply(request: RecordedRequest) -> Reply:
    """Answer a RAGAS or DeepEval faithfulness prompt in the form it asked for."""
    body = request.body if isinstance(request.body, dict) else {}
    prompt = _prompt(request)
    tools = body.get("tools") or []
    if tools:
        name = str(tools[0].get("function", {}).get("name", ""))
        output = _peer_output(name, prompt)
        if output is not None:
            return tool_call(name, output)
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        name = str(response_format.get("json_schema", {}).get("name", ""))
        output = _peer_output(name, prompt)
        if output is not None:
            return chat_json(output)
    for name in _PEER_SCHEMAS:  # the schema's title written in the prompt (RAGAS legacy)
        if f'"title": "{name}"' in prompt or f"'title': '{name}'" in prompt:
            output = _peer_output(name, prompt)
            if output is not None:
                return chat_json(output)
    if "claims" in prompt and "AI Output" in prompt:
        return chat_json(_peer_output("Claims", prompt))
    if "truths" in prompt and "Text:" in prompt:
        return chat_json(_peer_output("Truths", prompt))
    if "'verdicts' key" in prompt or '"verdicts"' in prompt:
        return chat_json(_peer_output("Verdicts", prompt))
    return chat_json({"ok": True})


class _Faults:
    """Turns a share of successful answers into malformed or schema-invalid output."""

    def __init__(self, malformed: float, invalid: float, seed: int | None) -> None:
        self._malformed, self._invalid = malformed, invalid
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.counts = {"malformed": 0, "invalid": 0}

    def wrap(self, responder: Reply | Responder) -> Responder:
        def answer(request: RecordedRequest) -> Reply:
            reply = responder if isinstance(responder, Reply) else responder(request)
            return self._spoiled(reply)

        return answer

    def _spoiled(self, reply: Reply) -> Reply:
        if reply.status != 200 or not isinstance(reply.body, dict):
            return reply
        with self._lock:
            draw = self._rng.random()
            kind = (
                "malformed"
                if draw < self._malformed
                else "invalid"
                if draw < self._malformed + self._invalid
                else None
            )
            if kind is not None:
                self.counts[kind] += 1
        if kind is None:
            return reply
        body = json.loads(json.dumps(reply.body))
        message = body["choices"][0]["message"]
        text = '{"statements": ["cut short' if kind == "malformed" else '{"unexpected": true}'
        if message.get("tool_calls"):
            message["tool_calls"][0]["function"]["arguments"] = text
        else:
            message["content"] = text
        return replace(reply, body=body)


class _Concurrency:
    """Requests in flight at the fake, per tool: the harness names the tool about to run
    (``tool NAME`` on stdin) and every request until the next name counts for it (the
    harness runs one tool at a time). Kept per tool: the peak, the time-weighted mean from
    its first request's arrival to its last answer, the HTTP clients seen (``User-Agent``)
    and each request's arrival and end (``spans NAME``), which show a tool's waves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tool = "-"
        self._now: dict[str, int] = {}
        self._figures: dict[str, dict[str, Any]] = {}
        self._spans: dict[str, list[list[float]]] = {}
        self._mine = threading.local()  # the tool and span of a handler thread's request

    def name(self, tool: str) -> None:
        with self._lock:
            self._tool = tool

    def begin(self, request: RecordedRequest) -> None:
        with self._lock:
            tool, now = self._tool, time.monotonic()
            f = self._figures.setdefault(
                tool, {"max": 0, "area": 0.0, "first": now, "last": now, "clients": {}}
            )
            self._advance(tool, f, now)
            self._now[tool] = self._now.get(tool, 0) + 1
            f["max"] = max(f["max"], self._now[tool])
            agent = request.headers.get("user-agent", "-")
            f["clients"][agent] = f["clients"].get(agent, 0) + 1
            span = [now, now]
            self._spans.setdefault(tool, []).append(span)
            self._mine.tool, self._mine.span = tool, span

    def end(self) -> None:
        with self._lock:
            tool, now = self._mine.tool, time.monotonic()
            self._advance(tool, self._figures[tool], now)
            self._now[tool] -= 1
            self._mine.span[1] = now

    def _advance(self, tool: str, f: dict[str, Any], now: float) -> None:
        f["area"] += self._now.get(tool, 0) * (now - f["last"])
        f["last"] = now

    def figures(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            out = {}
            for tool, f in self._figures.items():
                span = f["last"] - f["first"]
                out[tool] = {
                    "in_flight_max": f["max"],
                    "in_flight_mean": round(f["area"] / span, 2) if span > 0 else 0.0,
                    "busy_span_seconds": round(span, 3),
                    "first_request_at": f["first"],  # time.monotonic(), as every process reads it
                    "last_answer_at": f["last"],
                    "clients": dict(f["clients"]),
                }
            return out

    def spans(self, tool: str) -> list[list[float]]:
        with self._lock:
            return [list(s) for s in self._spans.get(tool, [])]


class _FaultyFake(FakeOpenAI):
    faults: _Faults | None = None
    concurrency = _Concurrency()

    def _begin(self, request: RecordedRequest) -> None:
        super()._begin(request)
        self.concurrency.begin(request)

    def _end(self) -> None:
        self.concurrency.end()
        super()._end()

    def route(self, agent: str, *replies: Reply | Responder) -> None:
        faults = self.faults
        super().route(agent, *(faults.wrap(r) if faults else r for r in replies))

    def fallback(self, responder: Responder | Reply) -> None:
        faults = self.faults
        super().fallback(faults.wrap(responder) if faults else responder)


def main(argv: list[str] | None = None) -> int:
    ours, rest = parse_args(argv)
    args = fake_args(rest)
    faults = _Faults(ours.rate_malformed, ours.rate_invalid, args.seed)
    _FaultyFake.faults = faults
    fake = scripted_server(args, make=_FaultyFake)
    fake.fallback(peer_reply)
    try:
        print(fake.base_url, flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "stats":
                stats = {
                    **fake.stats(),
                    **faults.counts,
                    "cpu_seconds": round(time.process_time(), 3),
                    "by_tool": _FaultyFake.concurrency.figures(),
                }
                print(json.dumps(stats), flush=True)
            elif command.startswith("spans "):
                print(json.dumps(_FaultyFake.concurrency.spans(command[6:])), flush=True)
            elif command.startswith("tool "):
                _FaultyFake.concurrency.name(command.split(maxsplit=1)[1])
                print("{}", flush=True)
            elif command:
                print(json.dumps({"error": f"unknown command {command!r}"}), flush=True)
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
