"""Batch mode per judge of a panel (``--batch-judges``): the named judges' calls go through
their own endpoint's batch API, the others' directly, with a direct panel's results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakebatches import FakeBatches, batched
from test_panels import endpoints, judges_flag, run_panel, samples

from evalcli import evaluate, results
from fakeopenai import FakeOpenAI, RecordedRequest

__all__ = ["endpoints"]  # the fixture: three judges, each on an endpoint of its own

FAST = ("--batch-wait", "0", "--batch-poll", "0.05")


def _chats(fake: FakeOpenAI) -> list[RecordedRequest]:
    return [r for r in fake.requests if r.path.endswith("/chat/completions")]


def _refused(fakes: dict[str, FakeOpenAI], tmp_path: Path, *extra: str) -> int:
    return evaluate(
        fakes["a"], tmp_path, samples(tmp_path), "--metrics", "correctness",
        "--judges", judges_flag(fakes), *extra,
    )  # fmt: skip


def test_the_judges_named_in_batch_judges_go_through_their_endpoints_batches(
    endpoints: dict[str, FakeOpenAI], tmp_path: Path
) -> None:
    direct = tmp_path / "direct"
    direct.mkdir()
    assert run_panel(endpoints, direct)[0] == 0
    for fake in endpoints.values():
        fake.requests.clear()
    batches = {name: FakeBatches(endpoints[name]) for name in ("b", "c")}  # a has no batch API

    code, summary = run_panel(endpoints, tmp_path, "--batch-judges", "b,c", *FAST)

    assert code == 0
    assert results(tmp_path) == results(direct)
    a, b, c = (_chats(endpoints[name]) for name in ("a", "b", "c"))
    assert len(a) == len(b) == len(c) == 4
    assert not any(batched(r) for r in a)
    assert all(batched(r) for r in (*b, *c))
    assert all(batches[name].created for name in ("b", "c"))
    modes = summary["calls_by_mode"]
    assert (modes["direct"]["llm_calls"], modes["batch"]["llm_calls"]) == (4, 8)
    costs = summary["panel"]["cost_by_judge"]
    assert {j: c["llm_calls"] for j, c in costs.items()} == {"a": 4, "b": 4, "c": 4}


def test_a_batch_judge_whose_endpoint_has_no_batch_api_is_named_before_any_call(
    endpoints: dict[str, FakeOpenAI], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    FakeBatches(endpoints["b"])

    code = _refused(endpoints, tmp_path, "--batch-judges", "a,b", *FAST)

    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "judge 'a' (--batch-judges or --batch) needs the endpoint's /v1/files" in err
    assert endpoints["a"].base_url in err
    assert "leave a out of --batch-judges" in err
    assert not any(_chats(fake) for fake in endpoints.values())


def test_batch_judges_naming_no_judge_of_the_panel_is_refused(
    endpoints: dict[str, FakeOpenAI], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _refused(endpoints, tmp_path, "--batch-judges", "z")

    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--batch-judges names 'z', which --judges does not give (its judges: a, b, c)" in err


def test_with_batch_every_judge_of_the_panel_goes_through_its_endpoints_batches(
    endpoints: dict[str, FakeOpenAI], tmp_path: Path
) -> None:
    direct = tmp_path / "direct"
    direct.mkdir()
    assert run_panel(endpoints, direct)[0] == 0
    for fake in endpoints.values():
        fake.requests.clear()
        FakeBatches(fake)

    code, summary = run_panel(endpoints, tmp_path, "--batch", *FAST)

    assert code == 0
    assert results(tmp_path) == results(direct)
    for fake in endpoints.values():
        chats = _chats(fake)
        assert len(chats) == 4
        assert all(batched(r) for r in chats)
    assert summary["calls_by_mode"]["batch"]["llm_calls"] == 12


def test_dry_run_prices_the_batch_judges_stages_at_the_batch_price(
    endpoints: dict[str, FakeOpenAI], tmp_path: Path
) -> None:
    summary = tmp_path / "estimate.json"
    code = _refused(
        endpoints, tmp_path, "--batch-judges", "b", "--dry-run", "--summary", str(summary)
    )

    assert code == 0
    estimate = json.loads(summary.read_text(encoding="utf-8"))
    modes = {stage: figures["mode"] for stage, figures in estimate["by_stage"].items()}
    assert modes
    assert all(stage.rpartition("@")[2] in "abc" for stage in modes)
    assert {s for s, mode in modes.items() if mode == "batch"} == {
        s for s in modes if s.endswith("@b")
    }
    assert estimate["calls_by_mode"]["batch"]["llm_calls"] > 0
    assert not any(fake.requests for fake in endpoints.values())
