"""OpenTelemetry traces: `ragjury evaluate` run as a user runs it, with the standard
OTEL_EXPORTER_OTLP_ENDPOINT pointing at an OTLP/HTTP receiver on 127.0.0.1 that the test
runs, and the spans it received decoded from their protobuf."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evalcli import EIFFEL, TOKYO, write_jsonl
from evalfakes import script_judges, splitter_reply
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, error

trace_service = pytest.importorskip(
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    reason="the otel extra is not installed",
)


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[Any]]]:
    """An OTLP/HTTP endpoint on loopback; yields its URL and the spans it receives."""
    spans: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                request = trace_service.ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        spans.extend(scope.spans)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", spans
    finally:
        server.shutdown()
        server.server_close()


def attributes(span: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        found[kv.key] = getattr(value, value.WhichOneof("value"))
    return found


def test_an_evaluate_run_sends_a_span_per_llm_call_step_and_sample(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO])
    with otlp_receiver() as (endpoint, spans):
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        command = [sys.executable, "-m", "ragjury", "evaluate", str(samples)]
        command += ["--out", str(tmp_path / "r.jsonl"), "--db", str(tmp_path / "r.db")]
        command += ["--base-url", fake.base_url, "--api-key", "k", "--model", "judge-model"]
        command += ["--metrics", "faithfulness,keywords"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode in (0, 5), done.stderr  # 5: eiffel's cheese fails its gate

    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    calls = by_name["chat judge-model"]
    assert len(calls) == len(fake.requests)  # one span per LLM call, none lost at exit
    first = attributes(calls[0])
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "judge-model"
    assert first["gen_ai.usage.input_tokens"] > 0
    assert first["gen_ai.usage.output_tokens"] > 0
    assert first["ragjury.agent"] in {"statement_splitter", "verdict_judge"}

    steps = {span.span_id: span for span in spans if span.name.startswith("ragjury.step ")}
    for call in calls:  # each call sits inside the step that asked for it, in one trace
        parent = steps[call.parent_span_id]
        assert attributes(parent)["ragjury.agent"] == attributes(call)["ragjury.agent"]
        assert parent.trace_id == call.trace_id
        assert parent.start_time_unix_nano <= call.start_time_unix_nano
        assert call.end_time_unix_nano <= parent.end_time_unix_nano

    items = {attributes(s)["ragjury.item"]: attributes(s) for s in by_name["ragjury.item eiffel"]}
    items.update(
        {attributes(s)["ragjury.item"]: attributes(s) for s in by_name["ragjury.item tokyo"]}
    )
    assert items["eiffel"]["ragjury.passing"] is False
    assert items["eiffel"]["ragjury.metric.faithfulness.score"] == 0.5
    assert items["tokyo"]["ragjury.metric.faithfulness.outcome"] == "scored"
    assert items["tokyo"]["ragjury.kind"] == "evaluate"


def test_otel_flag_spans_carry_cost_latency_and_the_failed_calls_outcome(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)

    def splitter(request: RecordedRequest) -> Reply:
        if "Tokyo" in request.text():
            return error(400, "the model refused this one")  # permanent: fails at once
        return splitter_reply(request)

    fake.route("statement_splitter", splitter)
    prices = tmp_path / "prices.json"
    prices.write_text('{"judge-model": {"input": 1.0, "output": 4.0}}', encoding="utf-8")
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO])
    with otlp_receiver() as (endpoint, spans):
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        command = [sys.executable, "-m", "ragjury", "evaluate", str(samples), "--otel"]
        command += ["--out", str(tmp_path / "r.jsonl"), "--db", str(tmp_path / "r.db")]
        command += ["--base-url", fake.base_url, "--api-key", "k", "--model", "judge-model"]
        command += ["--metrics", "faithfulness", "--prices", str(prices)]
        command += ["--max-retries", "0", "--max-transport-retries", "0"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode in (0, 4, 5), done.stderr

    calls = [span for span in spans if span.name == "chat judge-model"]
    assert len(calls) == len(fake.requests)
    failed = [c for c in calls if "error.type" in attributes(c)]
    answered = [c for c in calls if "error.type" not in attributes(c)]
    assert len(failed) == 1
    assert failed[0].status.code == 2  # STATUS_CODE_ERROR
    assert "refused this one" in failed[0].status.message
    for call in answered:  # GenAI attributes, the cost from --prices, the latency as duration
        found = attributes(call)
        tokens = found["gen_ai.usage.input_tokens"], found["gen_ai.usage.output_tokens"]
        assert found["ragjury.cost_usd"] == pytest.approx((tokens[0] * 1.0 + tokens[1] * 4.0) / 1e6)
        assert call.end_time_unix_nano > call.start_time_unix_nano
    [tokyo] = [attributes(s) for s in spans if s.name == "ragjury.item tokyo"]
    assert tokyo["ragjury.metric.faithfulness.outcome"] == "failed"
    [eiffel] = [attributes(s) for s in spans if s.name == "ragjury.item eiffel"]
    assert eiffel["ragjury.metric.faithfulness.outcome"] == "scored"
