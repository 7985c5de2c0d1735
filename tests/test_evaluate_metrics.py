"""`ragjury evaluate`'s other metrics and `Jury.evaluate_one`: rubrics, similarity,
confidence from logprobs, custom prompt templates, and evidence spans."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from ragjury import Jury

from conftest import make_settings
from evalcli import EIFFEL, REFUSAL, TOKYO, evaluate, results, write_jsonl
from evalfakes import (
    script_judges,
)
from fakeopenai import FakeOpenAI, chat, chat_json


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


def test_evidence_span_takes_a_verbatim_quote_as_it_stands_and_finds_a_loose_one() -> None:
    from ragjury.schemas.responses import evidence_span

    contexts = ["Paris is the capital.", "The  Eiffel Tower is made of iron. It was built in 1889."]
    assert evidence_span("Eiffel Tower is made of iron", contexts) == "Eiffel Tower is made of iron"
    assert evidence_span("[2] the eiffel tower IS made", contexts) == "The  Eiffel Tower is made"
    assert evidence_span("made of iron ... built in 1889.", contexts) == (
        "made of iron … built in 1889"
    )
    assert evidence_span("made of gold", contexts) == "made of gold"  # not found: as given
