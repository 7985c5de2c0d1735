"""The HTTP side of the scripted server: a threading ``http.server`` on 127.0.0.1 whose
handler reads each request, asks its ``FakeOpenAI`` for the answer (faults, script, shaping),
sleeps a delayed answer while watching for the client hanging up, and writes it.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fakeopenai_replies import AGENT_HEADER, RecordedRequest, Reply

if TYPE_CHECKING:
    from fakeopenai import FakeOpenAI

DISCONNECT_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)
_POLL_INTERVAL = 0.02  # how often a delayed answer checks for stop() / client disconnect


class Server(ThreadingHTTPServer):
    # Handler threads are daemons (a forgotten stop() never blocks interpreter exit), and the
    # stdlib does not join daemon threads in server_close(), so we track and join them.
    daemon_threads = True
    block_on_close = False
    request_queue_size = 512  # listen backlog (stdlib default 5): bursts of connections

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.handler_threads: list[threading.Thread] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=f"fakeopenai-conn-{self.server_address[1]}",
            daemon=True,
        )
        self.handler_threads = [t for t in self.handler_threads if t.is_alive()]
        self.handler_threads.append(thread)  # only the serve_forever thread touches the list
        thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, DISCONNECT_ERRORS) or self.fake._stopping.is_set():
            return  # the client went away: not interesting
        if exc is not None:
            self.fake._record_error(exc)
        traceback.print_exc(file=sys.stderr)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else Nagle + delayed ACK add ~40 ms to every answer
    server: Server

    # -- plumbing -------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.fake._register(self.connection)

    def finish(self) -> None:
        self.server.fake._unregister(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # silence the default stderr request log

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    # -- request handling -----------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self) -> None:
        fake = self.server.fake
        try:
            raw = self._read_body()
        except DISCONNECT_ERRORS:
            self.close_connection = True
            return
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {key.lower(): value for key, value in self.headers.items()}
        request = RecordedRequest(
            method=self.command,
            path=urlsplit(self.path).path,
            headers=headers,
            body=body,
            agent=headers.get(AGENT_HEADER),
            received_at=time.monotonic(),
            raw_body=raw,
        )
        fake._begin(request)
        ended = False
        try:
            reply = fake._fault_for(request) or fake._reply_for(request)
            reply = fake._shaped(request, reply)
            if reply.delay > 0 and not self._wait(reply.delay):
                fake._note_disconnect()
                self.close_connection = True
                return
            # Leave "in flight" before the client can see the answer, so that a client that
            # has its response always finds `in_flight` already decremented.
            fake._end()
            ended = True
            self._send(reply)
        except DISCONNECT_ERRORS:
            fake._note_disconnect()
            self.close_connection = True
        finally:
            if not ended:
                fake._end()

    def _wait(self, delay: float) -> bool:
        """Sleep ``delay``; False if the server stops or the client hangs up meanwhile."""
        fake = self.server.fake
        deadline = time.monotonic() + delay
        watch_peer = True
        while (remaining := deadline - time.monotonic()) > 0:
            if fake._stopping.wait(min(remaining, _POLL_INTERVAL)):
                return False
            if watch_peer:
                gone = self._peer_gone()
                if gone is None:
                    watch_peer = False  # the client sent more data: stop peeking
                elif gone:
                    return False
        return True

    def _peer_gone(self) -> bool | None:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            data = self.connection.recv(1, socket.MSG_PEEK)
        except (OSError, ValueError):
            return True
        return None if data else True

    def _send(self, reply: Reply) -> None:
        payload = reply.encoded()
        self.send_response(reply.status)
        lower = {key.lower() for key in reply.headers}
        if "content-type" not in lower:
            self.send_header("Content-Type", "application/json")
        for key, value in reply.headers.items():
            if key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()
