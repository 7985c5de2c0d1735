"""No secret leaks: a password in a URL, an API key, a token in a query string or a header
is never stored, printed or logged (ours or a third party's log records), and a warning for
people reads as a sentence while ``serve``'s logs keep it as a field."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from test_hardening import SAMPLE, samples_file

from ragjury.cli import main

from evalfakes import script_judges
from fakeopenai import FakeOpenAI


def test_a_password_in_the_base_url_is_never_stored_or_printed(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    url = fake.base_url.replace("http://", "http://alice:hunter2@")
    samples = samples_file(tmp_path, [SAMPLE])
    args = ["evaluate", str(samples), "--out", str(tmp_path / "r.jsonl")]
    args += ["--log-level", "debug"]  # every request and message logged: none with the secret
    assert (
        main([*args, "--db", str(tmp_path / "run.db"), "--base-url", url, "--api-key", "sk-x"]) == 0
    )
    printed = capsys.readouterr()
    assert "llm_request" in printed.err
    assert "hunter2" not in printed.err + printed.out
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("run.db*"))
    assert b"hunter2" not in stored
    assert b"sk-x" not in stored
    assert b"alice:***@" in stored  # the URL is kept, redacted
    assert stat.S_IMODE((tmp_path / "run.db").stat().st_mode) == 0o600
    dead = url.rsplit(":", 1)[0] + ":9/v1"  # the same credentials at a closed port
    code = main(["evaluate", str(samples), "--out", str(tmp_path / "r.jsonl"), "--db",
                 str(tmp_path / "other.db"), "--base-url", dead, "--api-key", "k",
                 "--max-transport-retries", "0", "--no-cache"])  # fmt: skip
    assert code == 4  # nothing judged: the endpoint refused the connection
    err = capsys.readouterr().err
    assert "alice:***@" in err
    assert "hunter2" not in err


def test_secrets_in_urls_are_redacted_from_any_text_ragjury_logs_or_stores(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import structlog

    from ragjury.logs import configure_logging
    from ragjury.urls import redact_text

    configure_logging("info", json=True)
    structlog.get_logger("ragjury.test").warning("llm_retry", error="at http://bob:pa55@h/v1")
    logged = capsys.readouterr().err
    assert "bob:***@h/v1" in logged
    assert "pa55" not in logged

    line = "ConnectError: http://bob:pa55@10.0.0.1:8000/v1 refused (https://h/x?api_key=k1&a=2)"
    assert redact_text(line) == (
        "ConnectError: http://bob:***@10.0.0.1:8000/v1 refused (https://h/x?api_key=***&a=2)"
    )
    assert redact_text("postgresql://u@db/x and no secret") == "postgresql://u@db/x and no secret"


def test_a_secret_noted_where_its_url_entered_is_hidden_even_cut_out_of_the_url() -> None:
    from ragjury.config import Settings
    from ragjury.evaluation.targets import HttpTarget
    from ragjury.urls import redact_text

    Settings(db="postgresql://u:dbSecret9@h/x", base_url="http://a:llmSecret9@h/v1")
    HttpTarget("http://h/rag?token=tokSecret9", headers={"Authorization": "Bearer hdrSecret9"})
    # an exporter that moved the query string, a driver that quotes only the password
    line = "url: /?token=tokSecret9/v1; password dbSecret9 llmSecret9 rejected; Bearer hdrSecret9"
    assert redact_text(line) == "url: /?token=*** password *** *** rejected; ***"
    HttpTarget("http://u:ab@h/rag")  # too short to hide alone: inside its URL it still is
    assert redact_text("a cab at http://u:ab@h/rag") == "a cab at http://u:***@h/rag"


def test_third_party_log_records_pass_the_same_redaction(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import logging

    from ragjury.logs import configure_logging

    configure_logging("info")
    logging.getLogger("some.exporter").warning("cannot reach %s", "http://o:pa55word@h:1/v1")
    assert "pa55word" not in capsys.readouterr().err


def test_a_warning_for_people_is_a_sentence_and_serves_logs_keep_it_as_a_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    import structlog

    from ragjury.logs import configure_logging

    log = structlog.get_logger("ragjury.test")
    configure_logging("warning", json=True)  # a command's (stderr is not a terminal here)
    log.warning(
        "endpoint_down", endpoint="http://bob:pa55@h/v1", say="http://bob:pa55@h/v1 is down"
    )
    assert capsys.readouterr().err == "ragjury: warning: http://bob:***@h/v1 is down\n"

    configure_logging("warning", json=True, sentences=False)  # serve's
    log.warning("endpoint_down", endpoint="h", say="h is down")
    logged = json.loads(capsys.readouterr().err)
    assert (logged["event"], logged["say"]) == ("endpoint_down", "h is down")
