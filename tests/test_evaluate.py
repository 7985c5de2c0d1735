"""`ragjury evaluate` and `Jury.evaluate_one` against a real HTTP server and SQLite file."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from ragjury import Jury
from ragjury.agents.verdict_judge import context_windows
from ragjury.cli import main

from conftest import make_settings, read_jsonl, read_summary
from evalfakes import (
    passages_of,
    script_judges,
    statements_of,
    verdict_reply,
)
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat, chat_json, error

EIFFEL = {
    "id": "eiffel",
    "question": "Where is the Eiffel Tower and what is it made of?",
    "answer": "The Eiffel Tower is in Paris. The Eiffel Tower is made of cheese.",
    "contexts": ["The Eiffel Tower is in Paris. The tower is made of wrought iron."],
    "reference": "Paris",
    "must_contain": ["Paris"],
    "must_not_contain": ["cheese"],
}
TOKYO = {
    "id": "tokyo",
    "question": "What is the capital of Japan?",
    "answer": "Tokyo is the capital of Japan.",
    "contexts": ["Tokyo is the capital of Japan."],
    "reference": "Tokyo",
}
REFUSAL = {
    "id": "refusal",
    "question": "Who wrote Hamlet?",
    "answer": "I don't know.",
    "contexts": ["Hamlet is a play by William Shakespeare."],
    "reference": "William Shakespeare",
}


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def evaluate(fake: FakeOpenAI | None, tmp_path: Path, samples: Path, *extra: str) -> int:
    """``ragjury evaluate`` on ``samples`` against ``fake`` (None: no endpoint at all)."""
    endpoint = ["--base-url", fake.base_url, "--api-key", "test-key"] if fake else []
    return main(
        [
            "evaluate",
            str(samples),
            "--out",
            str(tmp_path / "results.jsonl"),
            "--summary",
            str(tmp_path / "summary.json"),
            "--db",
            str(tmp_path / "ragjury.db"),
            *endpoint,
            *extra,
        ]
    )


def results(tmp_path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in read_jsonl(tmp_path / "results.jsonl")}


def test_default_metrics_score_faithfulness_correctness_and_keywords(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO, REFUSAL])

    assert evaluate(fake, tmp_path, samples) == 0

    out = results(tmp_path)
    assert list(out) == ["eiffel", "tokyo", "refusal"]  # input order
    eiffel = out["eiffel"]["metrics"]
    assert set(eiffel) == {"faithfulness", "correctness", "keywords"}
    faith = eiffel["faithfulness"]
    assert (faith["outcome"], faith["score"], faith["passing"]) == ("scored", 0.5, False)
    assert [s["supported"] for s in faith["statements"]] == [True, False]
    assert faith["statements"][0]["evidence"] == "The Eiffel Tower is in Paris"
    assert faith["statements"][1]["reason"] == "not in the passages"
    assert eiffel["correctness"]["score"] == 5
    assert eiffel["correctness"]["reasoning"] == "scripted: 5"
    assert eiffel["keywords"]["checks"] == [
        {"type": "must_contain", "keyword": "Paris", "passed": True},
        {"type": "must_not_contain", "keyword": "cheese", "passed": False},
    ]
    assert out["tokyo"]["metrics"]["keywords"]["outcome"] == "not_applicable"

    s = read_summary(tmp_path)
    assert s["samples"] == 3
    assert s["invalid_input"] == 0
    assert s["llm_calls"] == len(fake.requests)
    assert s["metrics"]["faithfulness"] == {
        "mean": 0.75,
        "mean_interval": [0.5, 1.0],
        "median": 0.75,
        "pass_rate": 0.5,
        "pass_rate_interval": [0.0, 1.0],
        "scored": 2,
        "not_applicable": 1,
        "failed": 0,
        "llm_calls": 5,
    }
    assert s["metrics"]["correctness"]["pass_rate"] == pytest.approx(2 / 3, abs=1e-3)
    assert s["metrics"]["keywords"]["failure_rates"]["must_not_contain"]["failure_rate"] == 1.0
    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        stored = [row[0] for row in db.execute("SELECT id FROM samples ORDER BY position")]
    assert stored == ["eiffel", "tokyo", "refusal"]


def test_a_metric_lost_to_an_endpoint_outage_is_judged_again_by_the_same_command(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    fake.route("correctness_judge", error(500, "upstream down"))
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO])
    assert evaluate(fake, tmp_path, samples, "--max-transport-retries", "0") == 0
    first = results(tmp_path)["tokyo"]["metrics"]["correctness"]
    assert first["outcome"] == "failed"
    assert first["error"]["transient"] is True
    splits = len(fake.requests_for("statement_splitter"))

    script_judges(fake)  # the endpoint is back
    assert evaluate(fake, tmp_path, samples) == 0

    out = results(tmp_path)
    assert [out[s]["metrics"]["correctness"]["outcome"] for s in out] == ["scored", "scored"]
    assert len(fake.requests_for("statement_splitter")) == splits  # faithfulness was cached
    assert read_summary(tmp_path)["metrics"]["correctness"]["failed"] == 0


def test_a_refusal_is_not_applicable_with_the_reason(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)

    assert evaluate(fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [REFUSAL])) == 0

    faith = results(tmp_path)["refusal"]["metrics"]["faithfulness"]
    assert faith["outcome"] == "not_applicable"
    assert faith["score"] is None
    assert "no factual statement" in faith["reason"]
    assert fake.requests_for("verdict_judge") == []


def test_faithfulness_costs_one_split_plus_one_call_per_batch(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    facts = [f"Setting number {n} defaults to {n * 7}." for n in range(10)]
    long = {
        "id": "long",
        "question": "Defaults?",
        "answer": " ".join(facts),
        "contexts": [" ".join(facts)],
    }

    code = evaluate(
        fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [long]), "--verdict-batch", "4"
    )

    assert code == 0
    faith = results(tmp_path)["long"]["metrics"]["faithfulness"]
    assert faith["score"] == 1.0
    assert len(fake.requests_for("statement_splitter")) == 1
    assert [len(statements_of(r)) for r in fake.requests_for("verdict_judge")] == [4, 4, 2]
    assert faith["llm_calls"] == 1 + 3


def test_a_verdict_batch_with_a_missing_verdict_is_reasked(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    calls = 0

    def short_then_full(request: RecordedRequest) -> Reply:
        nonlocal calls
        calls += 1
        full = verdict_reply(request)
        if calls == 1:
            body = json.loads(full.body["choices"][0]["message"]["content"])  # type: ignore[index]  # chat body
            return chat_json({"verdicts": body["verdicts"][:1]})
        return full

    fake.route("verdict_judge", short_then_full)

    assert evaluate(fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [EIFFEL])) == 0

    reask = fake.requests_for("verdict_judge")[1].text()
    assert "one verdict for each statement 0..1" in reask
    assert results(tmp_path)["eiffel"]["metrics"]["faithfulness"]["score"] == 0.5


def test_an_invented_quote_is_reasked(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    invented = {
        "statement_index": 0,
        "reason": "r",
        "evidence": "Tokyo has 40 million people",
        "supported": True,
    }
    fake.route("verdict_judge", chat_json({"verdicts": [invented]}), verdict_reply)

    assert evaluate(fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [TOKYO])) == 0

    assert "does not occur in the contexts" in fake.requests_for("verdict_judge")[1].text()
    faith = results(tmp_path)["tokyo"]["metrics"]["faithfulness"]
    assert faith["statements"][0]["evidence"] == "Tokyo is the capital of Japan"


def test_a_judge_that_never_validates_fails_only_its_metric(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    fake.route("correctness_judge", chat_json({"reasoning": "fine", "score": 9}))

    code = evaluate(
        fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [TOKYO]), "--max-retries", "1"
    )

    assert code == 0
    metrics = results(tmp_path)["tokyo"]["metrics"]
    assert metrics["faithfulness"]["outcome"] == "scored"
    failed = metrics["correctness"]
    assert failed["outcome"] == "failed"
    assert failed["score"] is None
    assert failed["error"]["stage"] == "correctness_judge"
    assert failed["error"]["attempts"] == 2
    assert '"score": 9' in failed["error"]["last_raw_output"]
    assert read_summary(tmp_path)["metrics"]["correctness"]["mean"] is None


def test_long_contexts_are_judged_in_windows_and_any_window_supports(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    filler = "Unrelated words fill this passage. " * 40
    sample = {
        "id": "w",
        "question": "q",
        "answer": "The port is 8000. The host is local.",
        "contexts": [filler + "The port is 8000.", filler + "The host is local."],
    }

    code = evaluate(
        fake,
        tmp_path,
        write_jsonl(tmp_path / "s.jsonl", [sample]),
        "--context-window-chars",
        "1500",
    )

    assert code == 0
    windows = [passages_of(r) for r in fake.requests_for("verdict_judge")]
    assert len(windows) == 2
    assert all(len(w) < 1700 for w in windows)
    # the second window only re-judges what the first did not support
    assert len(statements_of(fake.requests_for("verdict_judge")[1])) == 1
    assert results(tmp_path)["w"]["metrics"]["faithfulness"]["score"] == 1.0


def test_context_windows_never_exceed_the_budget() -> None:
    windows = context_windows(["a" * 2500, "b" * 300, "c" * 300], budget=1000)
    assert all(sum(len(p) for p in w) <= 1000 for w in windows)
    assert windows[0][0] == "a" * 1000  # a long context is cut to the budget
    pieces = [piece for window in windows for piece in window]
    assert "b" * 300 in pieces  # short contexts stay whole
    assert "c" * 300 in pieces
    assert sum(piece.count("a") for piece in pieces) > 2500  # the cuts overlap


def test_ragas_deepeval_and_generate_records_are_read_without_mapping(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    ragas = {
        "user_input": "What is the capital of Japan?",
        "response": "Tokyo is the capital of Japan.",
        "retrieved_contexts": ["Tokyo is the capital of Japan."],
        "reference": "Tokyo",
    }
    deepeval = {
        "input": "Capital of Japan?",
        "actual_output": "Tokyo is the capital of Japan.",
        "retrieval_context": ["Tokyo is the capital of Japan."],
        "expected_output": "Tokyo",
    }
    samples = write_jsonl(tmp_path / "s.jsonl", [ragas, deepeval])

    assert evaluate(fake, tmp_path, samples) == 0

    out = list(results(tmp_path).values())
    assert [r["metrics"]["faithfulness"]["score"] for r in out] == [1.0, 1.0]
    assert [r["metrics"]["correctness"]["score"] for r in out] == [5, 5]


def test_generated_dataset_is_answered_by_an_http_target(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    generated = {
        "id": "g1",
        "question": "What is the capital of Japan?",
        "answer": "Tokyo",
        "context": "Tokyo is the capital of Japan.",
        "source": "jp.md",
        "chunk_id": "jp.md::0",
        "critiques": {},
        "outcome": "kept",
    }
    with rag_server(
        {"reply": "Tokyo is the capital of Japan.", "docs": ["Tokyo is the capital of Japan."]}
    ) as url:
        code = evaluate(
            fake,
            tmp_path,
            write_jsonl(tmp_path / "s.jsonl", [generated]),
            "--target",
            url,
            "--target-answer-field",
            "reply",
            "--target-contexts-field",
            "docs",
        )

    assert code == 0
    record = results(tmp_path)["g1"]
    assert record["answer"] == "Tokyo is the capital of Japan."
    assert record["metrics"]["correctness"]["score"] == 5  # graded against the generated answer
    assert read_summary(tmp_path)["answered_by_target"] == 1


def test_a_callable_target_answers_samples_without_an_answer(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script_judges(fake)
    (tmp_path / "myrag.py").write_text(
        "async def ask(question):\n"
        "    return {'answer': 'Tokyo is the capital of Japan.',\n"
        "            'contexts': ['Tokyo is the capital of Japan.']}\n"
    )
    monkeypatch.chdir(tmp_path)  # a user runs ragjury beside their module
    samples = write_jsonl(tmp_path / "s.jsonl", [{"id": "q", "question": "Capital of Japan?"}])

    assert evaluate(fake, tmp_path, samples, "--target", "myrag:ask") == 0

    assert results(tmp_path)["q"]["metrics"]["faithfulness"]["score"] == 1.0


def test_an_invalid_record_is_reported_by_line_and_the_rest_are_scored(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps(TOKYO) + "\n{not json\n" + json.dumps({"answer": "x"}) + "\n")

    assert evaluate(fake, tmp_path, samples) == 1

    err = capsys.readouterr().err
    assert "s.jsonl:2:" in err
    assert "s.jsonl:3:" in err
    assert list(results(tmp_path)) == ["tokyo"]
    assert read_summary(tmp_path)["invalid_input"] == 2


def test_keyword_only_runs_need_no_llm_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGJURY_BASE_URL", "RAGJURY_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    sample = {
        "id": "k",
        "question": "q",
        "answer": "  Sorry, Paris.",
        "must_contain": ["paris"],
        "must_not_start_with": ["sorry"],
    }

    code = main(
        [
            "evaluate",
            str(write_jsonl(tmp_path / "s.jsonl", [sample])),
            "--out",
            str(tmp_path / "results.jsonl"),
            "--metrics",
            "keywords",
            "--db",
            str(tmp_path / "r.db"),
        ]
    )

    assert code == 0
    checks = results(tmp_path)["k"]["metrics"]["keywords"]["checks"]
    assert [c["passed"] for c in checks] == [True, False]


def test_rubric_similarity_and_confidence_metrics(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    with_logprobs = {**TOKYO, "answer_logprobs": [-0.1, -0.3]}

    code = evaluate(
        fake,
        tmp_path,
        write_jsonl(tmp_path / "s.jsonl", [with_logprobs, REFUSAL]),
        "--metrics",
        "rubric,similarity,confidence",
    )

    assert code == 0
    tokyo, refusal = results(tmp_path)["tokyo"]["metrics"], results(tmp_path)["refusal"]["metrics"]
    assert tokyo["rubric"]["score"] == 5
    assert tokyo["rubric"]["toxicity"] == {"score": 5, "reasoning": "scripted", "confidence": None}
    assert tokyo["similarity"]["score"] == pytest.approx(0.6)
    assert tokyo["confidence"]["answer_perplexity"] == pytest.approx(1.2214, abs=1e-3)
    assert refusal["confidence"]["outcome"] == "not_applicable"
    assert "unavailable" in refusal["confidence"]["reason"]
    # confidence asks the judges' endpoint for logprobs
    assert all(r.body["logprobs"] is True for r in fake.requests_for("rubric_judge"))


@pytest.mark.anyio
async def test_jury_evaluate_one_inside_a_running_application(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    ticks = 0

    async def other_work() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.001)

    async with anyio.create_task_group() as app:
        app.start_soon(other_work)
        async with Jury(make_settings(fake, tmp_path)) as jury:
            result = await jury.evaluate_one(
                question=str(EIFFEL["question"]),
                answer=str(EIFFEL["answer"]),
                contexts=list(EIFFEL["contexts"]),
                reference="Paris",
            )
        app.cancel_scope.cancel()

    assert result["faithfulness"].score == 0.5
    assert result["faithfulness"].passing is False
    assert result["correctness"].passing is True
    assert result.passing is False
    assert result.feedback.startswith("faithfulness: did not pass, score 0.5 (1 of 2 statements")
    assert ticks > 0


class _RagHandler(BaseHTTPRequestHandler):
    reply: ClassVar[dict[str, Any]] = {}

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps(self.reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class rag_server:
    """A tiny RAG system on loopback that answers every question with ``reply``."""

    def __init__(self, reply: dict[str, Any]) -> None:
        handler = type("Handler", (_RagHandler,), {"reply": reply})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return f"http://127.0.0.1:{self._server.server_address[1]}/ask"

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def test_judge_confidence_is_the_probability_of_the_score_it_chose(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    tokens = [
        ('{"', -0.01),
        ("reasoning", 0.0),
        ('":', 0.0),
        (' "', 0.0),
        ("same", -0.2),
        ('",', 0.0),
        (' "', 0.0),
        ("score", 0.0),
        ('":', 0.0),
        (" ", 0.0),
        ("5", math.log(0.9)),
        ("}", 0.0),
    ]
    content = "".join(token for token, _ in tokens)
    fake.route("correctness_judge", chat(content, logprobs=tokens))

    code = evaluate(
        fake,
        tmp_path,
        write_jsonl(tmp_path / "s.jsonl", [TOKYO]),
        "--metrics",
        "correctness,confidence",
    )

    assert code == 0
    correctness = results(tmp_path)["tokyo"]["metrics"]["correctness"]
    assert correctness["score"] == 5
    assert correctness["confidence"] == pytest.approx(0.9)


def test_a_custom_prompt_template_replaces_a_judges_prompt(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    template = tmp_path / "strict.j2"
    template.write_text(
        "You are a very strict grader.\n--- user ---\n"
        "Question: {{ question }}\n\nReference answer:\n{{ reference }}\n\n"
        "Answer to grade:\n{{ answer }}\n"
    )

    code = evaluate(
        fake,
        tmp_path,
        write_jsonl(tmp_path / "s.jsonl", [TOKYO]),
        "--metrics",
        "correctness",
        "--prompt",
        f"correctness={template}",
    )

    assert code == 0
    assert "very strict grader" in fake.requests_for("correctness_judge")[0].text()
    assert results(tmp_path)["tokyo"]["metrics"]["correctness"]["score"] == 5


def test_an_unknown_prompt_name_is_a_clear_error(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = evaluate(
        fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [TOKYO]), "--prompt", "judge=x.j2"
    )

    assert code == 2
    assert "unknown prompt 'judge'" in capsys.readouterr().err


def test_rubric_confidence_follows_each_criterion_whatever_the_key_order() -> None:
    from ragjury.agents.judges import _per_criterion

    raw = (
        '{"relevance": {"reasoning": "r", "score": 4}, "toxicity": {"reasoning": "t", "score": 5}}'
    )
    tokens = [(c, math.log(0.5) if c == "4" else math.log(0.8) if c == "5" else 0.0) for c in raw]

    found = _per_criterion(raw, tokens, ["toxicity", "relevance"])

    assert found == [pytest.approx(0.8), pytest.approx(0.5)]


def test_jury_keeps_the_applications_stdout_clean(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    script = tmp_path / "app.py"
    script.write_text(
        "import anyio\n"
        "from ragjury import Jury, Settings\n"
        "async def main():\n"
        f"    settings = Settings(base_url={fake.base_url!r}, api_key='k',\n"
        f"                        db={str(tmp_path / 'r.db')!r})\n"
        "    async with Jury(settings) as jury:\n"
        "        r = await jury.evaluate_one(question='Capital of Japan?',\n"
        "            answer='Tokyo is the capital of Japan.',\n"
        "            contexts=['Tokyo is the capital of Japan.'])\n"
        "    print('passing', r.passing)\n"
        "anyio.run(main)\n"
    )

    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout == "passing True\n"
    assert "message_handled" not in done.stderr  # info lines stay below the default level


def test_stored_evidence_is_the_span_found_in_the_context_not_the_models_label(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    labelled = {
        "statement_index": 0,
        "reason": "r",
        "evidence": "[1] tokyo is  the CAPITAL of japan",
        "supported": True,
    }
    fake.route("verdict_judge", chat_json({"verdicts": [labelled]}))

    assert evaluate(fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [TOKYO])) == 0

    faith = results(tmp_path)["tokyo"]["metrics"]["faithfulness"]
    assert faith["statements"][0]["evidence"] == "Tokyo is the capital of Japan"
