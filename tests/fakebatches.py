"""OpenAI's Files and Batch APIs on the scripted fake server (``tests/fakeopenai.py``).

``FakeBatches(fake)`` attaches itself to a :class:`~fakeopenai.FakeOpenAI`; from then on the
fake also answers

* ``POST /v1/files`` (a multipart upload: ``purpose`` and ``file``), ``GET /v1/files`` and
  ``GET /v1/files/{id}`` / ``GET /v1/files/{id}/content``;
* ``POST /v1/batches`` (create, with ``metadata``), ``GET /v1/batches`` (list, newest
  first), ``GET /v1/batches/{id}`` (retrieve) and ``POST /v1/batches/{id}/cancel``.

A batch runs when it is retrieved ``delay`` seconds (on ``clock``) after it was created: each
line of its input file is answered as the same chat request would be, by the fake's
script for the agent named before the ``:`` of the line's ``custom_id`` (the batch line has
no ``x-ragjury-agent`` header to say it). What can go wrong is scripted too:

* ``fail(custom_id) -> str | None``: that line goes to the error file as a 400 with this
  message;
* ``malformed(custom_id) -> bool``: that line's output is not JSON;
* ``expire_after``: the batch answers only that many lines and then ends ``expired``;
* ``refuse_create``: ``POST /v1/batches`` answers this error once (a provider hiccup).

With the fake's ``Behaviour(count_tokens=True)`` a batch line's usage is counted from its
text, as a direct answer's is.

``created`` lists the batches in creation order, so a test can see that nothing was
submitted twice; ``polls`` counts retrieves; ``lines_answered`` counts the chat lines
answered.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from fakeopenai import AGENT_HEADER, RecordedRequest, Reply, _answer_text, count_tokens, error

__all__ = ["BATCH_HEADER", "FakeBatches", "batched"]

BATCH_HEADER = "x-fake-batch"
"""Set on the recorded chat request of a batch line: the id of the batch that answered it."""

_ids = itertools.count(1)


@dataclass
class _Batch:
    id: str
    input_file_id: str
    endpoint: str
    metadata: dict[str, str] | None
    created_at: float
    created_epoch: int
    status: str = "validating"
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(
        default_factory=lambda: {"total": 0, "completed": 0, "failed": 0}
    )

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": None,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_epoch,
            "request_counts": dict(self.counts),
            "metadata": self.metadata,
        }


class FakeBatches:
    """The Files and Batch APIs of a fake server (see the module docstring)."""

    def __init__(
        self,
        fake: Any,
        *,
        delay: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fake = fake
        self.delay = delay
        self.clock = clock
        self.fail: Callable[[str], str | None] = lambda custom_id: None
        self.malformed: Callable[[str], bool] = lambda custom_id: False
        self.expire_after: int | None = None
        self.refuse_create: Reply | None = None
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, _Batch] = {}
        self.created: list[str] = []
        self.lines_answered = 0
        self.polls = 0
        self._lock = threading.RLock()
        fake.batches = self

    # -- the hook fakeopenai calls ------------------------------------------------------

    def reply(self, request: RecordedRequest) -> Reply | None:
        """The answer to a Files or Batch API request; None for any other path."""
        path = request.path.rstrip("/")
        path = path[3:] if path.startswith("/v1/") else path
        parts = path.strip("/").split("/")
        if parts[0] not in ("files", "batches"):
            return None
        with self._lock:
            if parts[0] == "files":
                return self._files(request, parts[1:])
            return self._batches(request, parts[1:])

    # -- files --------------------------------------------------------------------------

    def _files(self, request: RecordedRequest, rest: list[str]) -> Reply:
        if not rest and request.method == "POST":
            purpose, name, content = _multipart(request)
            file_id = f"file-fake{next(_ids)}"
            self.files[file_id] = content
            return Reply(body=_file_body(file_id, name, purpose, content))
        if not rest and request.method == "GET":
            data = [_file_body(i, "file.jsonl", "batch", c) for i, c in self.files.items()]
            return Reply(body={"object": "list", "data": data, "has_more": False})
        if rest and rest[0] in self.files:
            content = self.files[rest[0]]
            if len(rest) == 1 and request.method == "GET":
                return Reply(body=_file_body(rest[0], "file.jsonl", "batch", content))
            if rest[1:] == ["content"] and request.method == "GET":
                return Reply(
                    body=content.decode("utf-8"),
                    headers={"Content-Type": "application/octet-stream"},
                )
        return error(404, f"no file {'/'.join(rest)!r}")

    # -- batches ------------------------------------------------------------------------

    def _batches(self, request: RecordedRequest, rest: list[str]) -> Reply:
        if not rest and request.method == "POST":
            if self.refuse_create is not None:
                refused, self.refuse_create = self.refuse_create, None
                return refused
            body = request.body if isinstance(request.body, dict) else {}
            file_id = body.get("input_file_id")
            if file_id not in self.files:
                return error(400, f"input_file_id {file_id!r} was never uploaded")
            batch = _Batch(
                id=f"batch_fake{next(_ids)}",
                input_file_id=str(file_id),
                endpoint=str(body.get("endpoint")),
                metadata=body.get("metadata"),
                created_at=self.clock(),
                created_epoch=int(time.time()),
            )
            batch.counts["total"] = len(_lines(self.files[batch.input_file_id]))
            self.batches[batch.id] = batch
            self.created.append(batch.id)
            return Reply(body=batch.body())
        if not rest and request.method == "GET":
            data = [b.body() for b in reversed(list(self.batches.values()))]
            return Reply(body={"object": "list", "data": data, "has_more": False})
        found = self.batches.get(rest[0]) if rest else None
        if found is None:
            return error(404, f"no batch {'/'.join(rest)!r}")
        if len(rest) == 1 and request.method == "GET":
            self.polls += 1
            self._advance(found)
            return Reply(body=found.body())
        if rest[1:] == ["cancel"] and request.method == "POST":
            if found.status in ("validating", "in_progress", "finalizing"):
                found.status = "cancelled"
            return Reply(body=found.body())
        return error(404, f"unknown batch path {request.path}")

    def _advance(self, batch: _Batch) -> None:
        """Run a batch whose time has come."""
        if batch.status not in ("validating", "in_progress"):
            return
        if self.clock() - batch.created_at < self.delay:
            batch.status = "in_progress"
            return
        outputs: list[str] = []
        errors: list[str] = []
        lines = _lines(self.files[batch.input_file_id])
        if self.expire_after is not None:
            lines = lines[: self.expire_after]
        for line in lines:
            custom_id = str(line.get("custom_id"))
            message = self.fail(custom_id)
            if message is not None:
                errors.append(json.dumps(_error_line(custom_id, message)))
                batch.counts["failed"] += 1
                continue
            outputs.append(self._answer(batch.id, custom_id, line))
            batch.counts["completed"] += 1
        batch.status = "expired" if self.expire_after is not None else "completed"
        if outputs:
            batch.output_file_id = self._store_file(outputs)
        if errors:
            batch.error_file_id = self._store_file(errors)

    def _answer(self, batch_id: str, custom_id: str, line: dict[str, Any]) -> str:
        if self.malformed(custom_id):
            return '{"custom_id": "' + custom_id + '", "response": {"status_code": 200, "bo'
        agent = custom_id.split(":", 1)[0]
        chat = RecordedRequest(
            method="POST",
            path="/v1/chat/completions",
            headers={AGENT_HEADER: agent, BATCH_HEADER: batch_id},
            body=line.get("body"),
            agent=agent,
            received_at=time.monotonic(),
        )
        if self.fake._keep_requests:
            self.fake.requests.append(chat)
        reply = self.fake._reply_for(chat)
        self.lines_answered += 1
        body = reply.body if isinstance(reply.body, dict) else {"raw": reply.body}
        behaviour = self.fake._behaviour
        if behaviour is not None and behaviour.count_tokens and isinstance(body.get("usage"), dict):
            # usage from the text, as the fake counts a direct answer's (benchmarks)
            prompt, completion = count_tokens(chat.text()), count_tokens(_answer_text(body))
            usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}  # fmt: skip
            body = {**body, "usage": usage}
        response = {"status_code": reply.status, "request_id": f"req_{next(_ids)}", "body": body}
        return json.dumps({"id": f"batch_req_{next(_ids)}", "custom_id": custom_id,
                           "response": response, "error": None})  # fmt: skip

    def _store_file(self, lines: list[str]) -> str:
        file_id = f"file-fake{next(_ids)}"
        self.files[file_id] = ("\n".join(lines) + "\n").encode("utf-8")
        return file_id


def batched(request: RecordedRequest) -> bool:
    """Whether a recorded chat request came in a batch (else directly)."""
    return BATCH_HEADER in request.headers


def _lines(content: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in content.decode("utf-8").splitlines() if line.strip()]


def _error_line(custom_id: str, message: str) -> dict[str, Any]:
    body = {"error": {"message": message, "type": "invalid_request_error"}}
    return {
        "id": f"batch_req_{next(_ids)}",
        "custom_id": custom_id,
        "response": {"status_code": 400, "request_id": f"req_{next(_ids)}", "body": body},
        "error": None,
    }


def _file_body(file_id: str, name: str, purpose: str, content: bytes) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": len(content),
        "created_at": int(time.time()),
        "filename": name,
        "purpose": purpose,
        "status": "processed",
    }


def _multipart(request: RecordedRequest) -> tuple[str, str, bytes]:
    """The ``purpose``, file name and file content of a multipart upload."""
    head = f"Content-Type: {request.headers.get('content-type', '')}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + request.raw_body)
    purpose, name, content = "", "upload", b""
    for part in message.iter_parts():
        field_name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        if field_name == "purpose":
            purpose = data.decode("utf-8")
        elif field_name == "file":
            name = str(part.get_filename() or "upload")
            content = data
    return purpose, name, content
