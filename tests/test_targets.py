"""Asking a live RAG system: HttpTarget against a real loopback server, CallableTarget against
functions in tests/eval_targets.py."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ragjury.errors import ConfigurationError
from ragjury.evaluation.targets import (
    CallableTarget,
    HttpTarget,
    TargetAnswer,
    TargetError,
    target_from_spec,
)

import eval_targets


@dataclass
class Reply:
    """What the fake RAG service sends back; ``hold`` keeps it waiting until teardown."""

    body: Any = None
    status: int = 200
    raw: bytes | None = None
    hold: bool = False


@dataclass
class RagService:
    """A real HTTP server on 127.0.0.1 that answers every POST with ``respond(request)``."""

    respond: Callable[[dict[str, Any]], Reply] = lambda request: Reply(
        {"answer": "", "contexts": []}
    )
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    url: str = ""


def _handler(service: RagService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            service.requests.append(body)
            service.headers.append({k.lower(): v for k, v in self.headers.items()})
            reply = service.respond(body)
            if reply.hold:
                service.released.wait(timeout=10)
            payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:  # the client gave up waiting; nobody to answer
                pass

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    return Handler


@pytest.fixture
def service() -> Iterator[RagService]:
    rag = RagService()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(rag))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    rag.url = f"http://127.0.0.1:{server.server_address[1]}/ask"
    try:
        yield rag
    finally:
        rag.released.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _good(request: dict[str, Any]) -> Reply:
    return Reply(
        {
            "answer": f"You asked: {request['question']}",
            "contexts": ["Paris is the capital of France."],
            "logprobs": [-0.1, -0.2],
        }
    )


@pytest.mark.anyio
async def test_http_target_posts_the_question_and_reads_answer_and_contexts(
    service: RagService,
) -> None:
    service.respond = _good

    async with HttpTarget(service.url) as target:
        answer = await target.answer("What is the capital of France?")

    assert service.requests == [{"question": "What is the capital of France?"}]
    assert answer == TargetAnswer(
        answer="You asked: What is the capital of France?",
        contexts=("Paris is the capital of France.",),
        logprobs=(-0.1, -0.2),
    )


@pytest.mark.anyio
async def test_http_target_uses_custom_field_names(service: RagService) -> None:
    service.respond = lambda request: Reply({"text": request["query"], "docs": ["a", "b"]})

    async with HttpTarget(
        service.url, question_field="query", answer_field="text", contexts_field="docs"
    ) as target:
        answer = await target.answer("Why?")

    assert service.requests == [{"query": "Why?"}]
    assert answer == TargetAnswer(answer="Why?", contexts=("a", "b"))


@pytest.mark.anyio
async def test_http_target_sends_the_headers_given(service: RagService) -> None:
    async with HttpTarget(service.url, headers={"Authorization": "Bearer secret"}) as target:
        await target.answer("Who am I?")

    assert service.headers[0]["authorization"] == "Bearer secret"


@pytest.mark.anyio
async def test_http_target_reads_contexts_given_as_documents(service: RagService) -> None:
    service.respond = lambda request: Reply(
        {"answer": "ok", "contexts": [{"page_content": "one"}, {"text": "two", "score": 0.5}]}
    )

    async with HttpTarget(service.url) as target:
        answer = await target.answer("Which?")

    assert answer.contexts == ("one", "two")


@pytest.mark.anyio
async def test_http_target_keeps_the_ids_of_contexts_that_have_one(service: RagService) -> None:
    service.respond = lambda request: Reply(
        {
            "answer": "ok",
            "contexts": [
                {"id": "doc-1", "text": "one"},
                {"text": "two"},
                {"chunk_id": 7, "text": "three"},
            ],
        }
    )

    async with HttpTarget(service.url) as target:
        answer = await target.answer("Which?")

    assert answer.contexts == ("one", "two", "three")
    assert answer.context_ids == ("doc-1", None, "7")


@pytest.mark.anyio
async def test_http_target_gives_no_ids_for_plain_string_contexts(service: RagService) -> None:
    service.respond = lambda request: Reply({"answer": "ok", "contexts": ["one", "two"]})

    async with HttpTarget(service.url) as target:
        answer = await target.answer("Which?")

    assert answer.context_ids == ()


@pytest.mark.anyio
async def test_http_target_reads_a_single_string_context(service: RagService) -> None:
    service.respond = lambda request: Reply({"answer": "ok", "contexts": "only one"})

    async with HttpTarget(service.url) as target:
        answer = await target.answer("Which?")

    assert answer.contexts == ("only one",)


@pytest.mark.anyio
async def test_http_target_raises_on_a_server_error_with_status_and_body(
    service: RagService,
) -> None:
    service.respond = lambda request: Reply({"detail": "index offline"}, status=500)

    async with HttpTarget(service.url) as target:
        with pytest.raises(TargetError, match=r"HTTP 500 .*index offline.*logs") as caught:
            await target.answer("Anyone there?")

    assert service.url in str(caught.value)


@pytest.mark.anyio
async def test_http_target_names_the_fields_of_a_reply_without_the_answer_field(
    service: RagService,
) -> None:
    service.respond = lambda request: Reply({"text": "Paris", "docs": []})

    async with HttpTarget(service.url) as target:
        with pytest.raises(TargetError) as caught:
            await target.answer("Capital?")

    assert "the reply has no 'answer' field (fields: ['docs', 'text'])" in str(caught.value)
    assert "--target-answer-field" in str(caught.value)


@pytest.mark.anyio
async def test_http_target_raises_on_a_reply_that_is_not_json(service: RagService) -> None:
    service.respond = lambda request: Reply(raw=b"<html>Bad gateway</html>")

    async with HttpTarget(service.url) as target:
        with pytest.raises(TargetError, match=r"not JSON .*Bad gateway"):
            await target.answer("Capital?")


@pytest.mark.anyio
async def test_http_target_raises_when_contexts_are_not_text(service: RagService) -> None:
    service.respond = lambda request: Reply({"answer": "ok", "contexts": 3})

    async with HttpTarget(service.url) as target:
        with pytest.raises(TargetError, match=r"'contexts' field, contexts are a number \(3\)"):
            await target.answer("Capital?")


@pytest.mark.anyio
async def test_http_target_gives_up_on_a_slow_reply_after_the_timeout(
    service: RagService,
) -> None:
    service.respond = lambda request: Reply({"answer": "late", "contexts": []}, hold=True)

    async with HttpTarget(service.url, timeout=0.2) as target:
        with pytest.raises(TargetError, match=r"no reply within 0\.2 s.*--target-timeout"):
            await target.answer("Still there?")


@pytest.mark.anyio
async def test_http_target_raises_when_nothing_listens() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/ask"

    async with HttpTarget(url) as target:
        with pytest.raises(TargetError, match=r"cannot connect .*service is running"):
            await target.answer("Hello?")


def test_http_target_refuses_a_url_without_scheme() -> None:
    with pytest.raises(ConfigurationError, match=r"'localhost:8000' must start with http"):
        HttpTarget("localhost:8000")


@pytest.mark.anyio
async def test_callable_target_runs_a_sync_function_in_a_worker_thread() -> None:
    target = CallableTarget.from_spec("eval_targets:sync_answer")

    answer = await target.answer("Capital?")

    assert answer == TargetAnswer(answer="sync: Capital?", contexts=(eval_targets.CONTEXT,))
    assert eval_targets.calling_threads[-1] != threading.get_ident()


@pytest.mark.anyio
async def test_callable_target_awaits_an_async_function() -> None:
    target = CallableTarget.from_spec("eval_targets:async_answer")

    answer = await target.answer("Capital?")

    assert answer == TargetAnswer(
        answer="async: Capital?", contexts=(eval_targets.CONTEXT,), logprobs=(-0.5,)
    )


@pytest.mark.anyio
async def test_callable_target_accepts_an_answer_and_contexts_tuple() -> None:
    target = CallableTarget.from_spec("eval_targets:tuple_answer")

    answer = await target.answer("Capital?")

    assert answer.answer == "tuple: Capital?"
    assert answer.contexts == (eval_targets.CONTEXT, "France is in Europe.")


@pytest.mark.anyio
async def test_callable_target_reads_document_objects_as_contexts() -> None:
    target = CallableTarget.from_spec("eval_targets:document_answer")

    answer = await target.answer("Capital?")

    assert answer.contexts == (eval_targets.CONTEXT,)


@pytest.mark.anyio
async def test_callable_target_reads_the_ids_of_node_objects() -> None:
    target = CallableTarget.from_spec("eval_targets:node_answer")

    answer = await target.answer("Capital?")

    assert answer.contexts == (eval_targets.CONTEXT, "France is in Europe.")
    assert answer.context_ids == ("node-1", "node-2")


@pytest.mark.anyio
async def test_callable_target_follows_a_dotted_attribute() -> None:
    target = CallableTarget.from_spec("eval_targets:assistant.ask")

    answer = await target.answer("Capital?")

    assert answer.answer == "assistant: Capital?"


@pytest.mark.anyio
async def test_callable_target_wraps_the_functions_exception() -> None:
    target = CallableTarget.from_spec("eval_targets:failing_answer")

    with pytest.raises(TargetError, match=r"eval_targets:failing_answer raised RuntimeError") as e:
        await target.answer("Capital?")

    assert isinstance(e.value.__cause__, RuntimeError)
    assert "vector index is not loaded" in str(e.value)


@pytest.mark.anyio
async def test_callable_target_refuses_a_return_value_it_cannot_read() -> None:
    target = CallableTarget.from_spec("eval_targets:string_answer")

    with pytest.raises(TargetError, match=r"returned a string .*'answer' and 'contexts'"):
        await target.answer("Capital?")


def test_callable_spec_without_colon_is_refused() -> None:
    with pytest.raises(
        ConfigurationError, match=r"--target expects an http\(s\):// URL or .*got 'foo'"
    ):
        CallableTarget.from_spec("foo")


def test_callable_spec_with_a_missing_module_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"cannot import module 'no_such_module_here'"):
        CallableTarget.from_spec("no_such_module_here:ask")


def test_callable_spec_with_a_missing_function_lists_what_the_module_has() -> None:
    with pytest.raises(ConfigurationError, match=r"has no attribute 'ask' \(it has: .*sync_answer"):
        CallableTarget.from_spec("eval_targets:ask")


def test_callable_spec_naming_something_not_callable_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"'not_a_function' is int, not a function"):
        CallableTarget.from_spec("eval_targets:not_a_function")


@pytest.mark.anyio
async def test_target_from_spec_gives_an_http_target_for_a_url(service: RagService) -> None:
    target = target_from_spec(service.url, timeout=5.0)
    try:
        assert isinstance(target, HttpTarget)
        assert target.timeout == 5.0
    finally:
        await target.aclose()


def test_target_from_spec_gives_a_callable_target_for_a_function_spec() -> None:
    target = target_from_spec("eval_targets:sync_answer")

    assert isinstance(target, CallableTarget)
    assert target.name == "eval_targets:sync_answer"


@pytest.mark.anyio
async def test_a_reply_with_a_lone_surrogate_is_repaired_like_file_input() -> None:
    def rag(question: str) -> tuple[str, list[str]]:
        return "Paris\ud800 is the answer\x00.", ["A passage\ud83d about Paris."]

    reply = await CallableTarget(rag, name="rag").answer("Where?")

    assert reply.answer == "Paris\ufffd is the answer."
    assert reply.contexts == ("A passage\ufffd about Paris.",)
    reply.answer.encode("utf-8")  # what every later step does: it no longer fails
