"""Each benchmark runs, at tiny sizes, and writes a well-formed JSON result.

Only the shape is checked here: speed and memory targets are what the benchmarks measure and
report, never what a unit test asserts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_benchmark(name: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), "--quick", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert f"JSON: {out}" in " ".join(completed.stdout.split())  # the table names its file
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == name
    assert {"recorded_at", "machine", "settings"} <= result.keys()
    return result


def test_throughput_reports_a_ratio_to_the_limit_for_every_run(tmp_path: Path) -> None:
    result = run_benchmark("throughput", tmp_path, "--calls=24", "--latency-ms=5", "--repeat=2")
    runs = {run["run"].split(",")[0]: run for run in result["runs"]}
    assert set(runs) == {
        "openai client alone (the fake's ceiling)",
        "openai client alone on aiohttp (ragjury's transport)",
        "generate",
        "evaluate",
    }
    assert len(result["runs"]) == 6
    for run in result["runs"]:
        assert run["failed"] == 0
        assert run["requests_served"] >= 24
        assert run["limit_seconds"] > 0
        assert run["ratio"] == pytest.approx(run["limit_seconds"] / run["wall_seconds"], abs=0.01)
        assert run["ratio"] in run["ratios"]  # the median run is one of the runs made
    # fault-free runs are repeated (the median is reported); the 429 runs are made once
    assert [len(run["ratios"]) for run in result["runs"]] == [2, 2, 2, 2, 1, 1]
    assert runs["generate"]["complete"]
    assert runs["evaluate"]["complete"]
    # client CPU per request, and as a multiple of each bare client's in the same run
    bare = runs["openai client alone (the fake's ceiling)"]
    aiohttp = runs["openai client alone on aiohttp (ragjury's transport)"]
    assert bare["client_cpu_x_bare"] == 1.0
    assert aiohttp["client_cpu_x_bare_aiohttp"] == 1.0
    for run in result["runs"]:
        cpu = run["client_cpu_ms_per_request"]
        assert run["client_cpu_x_bare"] == pytest.approx(
            cpu / bare["client_cpu_ms_per_request"], abs=0.01
        )
        assert run["client_cpu_x_bare_aiohttp"] == pytest.approx(
            cpu / aiohttp["client_cpu_ms_per_request"], abs=0.01
        )
        assert 0 <= run["client_cpu_ms_per_request_off_loop"] <= cpu


def test_ratelimit_reports_each_run_with_its_429s_and_outage_requests(tmp_path: Path) -> None:
    args = ["--calls=40", "--latency-ms=5", "--rps=400", "--tps=400000", "--window=0.5"]
    result = run_benchmark("ratelimit", tmp_path, *args, "--outage=0.3", "--outage-after=0.1")
    # requests, tokens, minute, per-second, misleading, two-serve, noise, and outage's two
    assert len(result["runs"]) == 9
    for run in result["runs"]:
        assert {"requests_served", "status_429", "share_429", "outage_requests", "ratio"} <= (
            run.keys()
        )
        assert run["failed"] == 0


def test_statements_counts_calls_per_sample_for_both_approaches(tmp_path: Path) -> None:
    result = run_benchmark("statements", tmp_path, "--samples=1")
    sizes = {row["statements"]: row for row in result["sizes"]}
    assert set(sizes) == {3, 10, 30}
    # these are counts, not timings: split once, then ceil(n / 8) batches vs n single calls
    assert {n: row["ragjury"]["calls"] for n, row in sizes.items()} == {3: 2, 10: 3, 30: 5}
    assert {n: row["one_call_per_statement"]["calls"] for n, row in sizes.items()} == {
        3: 4,
        10: 11,
        30: 31,
    }
    assert all(row["ragjury"]["prompt_tokens"] > 0 for row in sizes.values())


def test_retrieval_counts_calls_per_sample_for_both_approaches(tmp_path: Path) -> None:
    result = run_benchmark("retrieval", tmp_path, "--samples=1")
    sizes = {row["contexts"]: row for row in result["sizes"]}
    assert set(sizes) == {3, 5, 10}
    # counts: relevance 1 + precision 1 + answer relevance 1 + two splits + two verdict batches,
    # against a call per context twice, 1 + 4 per split text twice, and answer relevance
    assert {n: row["ragjury"]["calls"] for n, row in sizes.items()} == {3: 7, 5: 7, 10: 7}
    assert {n: row["one_call_each"]["calls"] for n, row in sizes.items()} == {
        3: 17,
        5: 21,
        10: 31,
    }
    assert all(row["ragjury"]["all_scored"] for row in sizes.values())


def test_memory_reports_peak_rss_per_size(tmp_path: Path) -> None:
    result = run_benchmark("memory", tmp_path, "--multiples=1,2", "--doc-kb=1", "--latency-ms=0")
    rows = result["sizes"]
    assert [row["documents"] for row in rows] == [4, 8]  # --quick: a bus buffer of 4
    assert all(row["peak_rss_mib"] > 0 and row["failed"] == 0 for row in rows)
    assert [row["kept"] for row in rows] == [4, 8]


def test_startup_times_each_command_against_the_bare_interpreter(tmp_path: Path) -> None:
    result = run_benchmark("startup", tmp_path)
    runs = {run["run"]: run for run in result["runs"]}
    assert list(runs) == [
        "python -c pass",
        "ragjury --version",
        "ragjury --help",
        "ragjury evaluate --help",
        'python -c "import openai"',
        "evaluate: first request",
        "evaluate: whole run",
        "openai client alone: first request",
        'first request less "import openai"',
    ]
    assert runs["python -c pass"]["ratio_to_python"] == 1.0
    for run in runs.values():
        assert len(run["seconds"]) == result["settings"]["runs"] == 3  # --quick
        assert run["min_seconds"] <= run["median_seconds"] <= run["max_seconds"]
    first, whole = runs["evaluate: first request"], runs["evaluate: whole run"]
    # each run's first request came after its start and before its end
    assert all(0 < f < w for f, w in zip(first["seconds"], whole["seconds"], strict=True))
    # what ragjury adds to openai's import before its first request, round by round
    openai, added = runs['python -c "import openai"'], runs['first request less "import openai"']
    assert added["seconds"] == pytest.approx(
        [f - o for f, o in zip(first["seconds"], openai["seconds"], strict=True)], abs=2e-4
    )
    assert added["cpu_seconds"] == []  # a difference of wall times: no process of its own
    assert runs["ragjury --help"]["median_cpu_seconds"] > 0
    # the yardstick: the bare client's own first request, timed the same way, and its CPU
    bare = runs["openai client alone: first request"]
    assert all(s > 0 for s in bare["seconds"])
    assert len(bare["cpu_seconds"]) == 3


def test_bus_reports_a_rate_for_each_bus_and_the_bare_stream(tmp_path: Path) -> None:
    result = run_benchmark("bus", tmp_path, "--messages=300", "--repeats=1")
    paths = result["paths"]
    assert paths[0]["path"] == "bare anyio memory object stream"
    assert paths[0]["ratio_to_bare"] == 1.0
    assert [p["path"].split(",")[0] for p in paths[1:]] == [
        "MemoryBus",
        "MemoryBus",
        "DurableBus on SQLite",
        "DurableBus on SQLite",
    ]
    assert all(p["messages_per_second"] > 0 for p in paths)


def test_scale_reports_time_memory_and_bytes_per_item_at_each_size(tmp_path: Path) -> None:
    args = ("--keywords=40,80", "--faithfulness=20", "--generate=10")
    result = run_benchmark("scale", tmp_path, *args)
    rows = result["sizes"]
    assert [(r["metric"], r["command"], r["samples"]) for r in rows] == [
        ("keywords", "evaluate --dry-run", 40),
        ("keywords", "evaluate --dry-run", 80),
        ("keywords", "plain python loop", 40),
        ("keywords", "plain python loop", 80),
        ("keywords", "evaluate", 40),
        ("keywords", "evaluate", 80),
        ("keywords", "status", 40),
        ("keywords", "status", 80),
        ("keywords", "export", 40),
        ("keywords", "export", 80),
        ("faithfulness", "evaluate", 20),
        ("generate", "generate", 10),
    ]
    for row in rows:
        assert row["failed"] == 0
        assert row["scored"] == row["samples"]  # every sample really judged, counted, written
        assert row["peak_rss_mib"] > 0
        # a dry run and the plain loop store nothing; the others have the run's database
        stores = row["command"] not in ("evaluate --dry-run", "plain python loop")
        assert (row["db_bytes_per_item"] > 0) == stores
    assert [r["time_per_item_ratio"] for r in rows if r["samples"] == 40] == [1.0] * 5
    # the marginal time needs a smaller size of the same command before it
    marginal = [r["marginal_ms_per_item"] is not None for r in rows]
    assert marginal == [False, True] * 5 + [False, False]
    # keyword samples carry real-size contexts (two of 1-2 KB): about 4 KB a record
    evaluated = [r for r in rows if r["metric"] == "keywords" and r["command"] == "evaluate"]
    assert all(3000 < r["input_bytes_per_item"] < 6000 for r in evaluated)
    no_llm = result["no_llm"]
    assert no_llm["compared"] == [40, 80]
    assert no_llm["time_per_sample_ratio"] == evaluated[1]["time_per_item_ratio"]
    assert no_llm["peak_rss_ratio"] == evaluated[1]["rss_ratio"]
    assert no_llm["samples_per_second"] == {"40": evaluated[0]["items_per_second"],
                                            "80": evaluated[1]["items_per_second"]}  # fmt: skip
    # the yardstick: the same file through a plain loop, in the same run, as a multiple
    plain = {r["samples"]: r for r in rows if r["command"] == "plain python loop"}
    assert no_llm["time_vs_plain_loop"] == {
        str(r["samples"]): round(r["seconds"] / plain[r["samples"]]["seconds"], 2)
        for r in evaluated
    }
    assert all(ratio > 1 for ratio in no_llm["cpu_vs_plain_loop"].values())
    assert no_llm["plain_loop_samples_per_cpu_second"] == {
        str(n): round(n / r["cpu_seconds"], 1) for n, r in plain.items()
    }


def test_scale_prints_each_no_llm_target_and_whether_it_holds() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from scale import target_lines

    figures = {
        "compared": [2000, 20000],
        "samples_per_second": {"2000": 900.0, "20000": 1000.0},
        "samples_per_cpu_second": {"2000": 700.0, "20000": 800.0},
        "plain_loop_samples_per_cpu_second": {"2000": 8000.0, "20000": 9000.0},
        "cpu_vs_plain_loop": {"2000": 11.4, "20000": 11.25},
        "time_per_sample_ratio": 1.6,
        "peak_rss_ratio": 1.01,
        "at_least_2000_per_second": False,
        "time_within_1_5x": False,
        "rss_within_1_25x": True,
    }
    lines = target_lines(figures)
    assert lines[0].endswith("1.6x (at most 1.5x: NO)")
    assert lines[1].endswith("1.01x (at most 1.25x: yes)")
    assert "1,000 samples/s at 20,000" in lines[2]
    assert lines[2].endswith("2,000: NO)")
    # the multiple of the plain loop's CPU is what carries to another machine
    assert "2,000 x 11.25 = 22,500 per CPU second" in lines[3]


def test_scale_leaves_out_a_kind_given_size_zero(tmp_path: Path) -> None:
    # no ../shared/data (a fresh clone): the real contexts come from the example corpus
    missing = str(tmp_path / "no-such-corpus.json")
    args = ("--keywords=30", "--faithfulness=0", "--generate=0", f"--corpus={missing}")
    result = run_benchmark("scale", tmp_path, *args)
    assert {r["command"] for r in result["sizes"]} == {
        "evaluate --dry-run",
        "plain python loop",
        "evaluate",
        "status",
        "export",
    }
    [evaluated] = [r for r in result["sizes"] if r["command"] == "evaluate"]
    assert 3000 < evaluated["input_bytes_per_item"] < 6000
    assert result["no_llm"] == {}  # one size: nothing to compare


def test_scaleout_measures_each_layout_on_both_stores(tmp_path: Path, postgres: object) -> None:
    result = run_benchmark("scaleout", tmp_path, "--samples=30", "--concurrency=4")
    runs = result["runs"]
    assert [(r["store"], r["layout"].split(",")[0]) for r in runs] == [
        (store, layout)
        for store in ("sqlite", "postgresql")
        for layout in ("1 process", "2 processes", "4 processes", "3 processes")
    ]
    assert result["settings"]["messages_per_sample"] == 2  # splitter, verdict judge: counted
    for run in runs:
        assert run["failed"] == 0
        assert run["items_per_second"] > 0
        assert run["steady_items_per_second"] > 0
    assert all(r["db_cpu_ms_per_message"] > 0 for r in runs if r["store"] == "postgresql")
    assert runs[0]["ratio_to_one_process"] == 1.0
    # the steady window's CPU a message, the workers' and the endpoint's (the server's too on
    # PostgreSQL), adds up to the machine's, and gives each every-agent ratio its ceiling
    for run in runs:
        parts = ["steady_workers_cpu_ms_per_message", "steady_endpoint_cpu_ms_per_message"]
        parts += ["steady_db_cpu_ms_per_message"] if run["store"] == "postgresql" else []
        assert all(run[p] > 0 for p in parts)
        assert run["steady_machine_cpu_ms_per_message"] == pytest.approx(
            sum(run[p] for p in parts), abs=0.01
        )
        assert ("cpu_ceiling_ratio" in run) == run["layout"].endswith("every agent")
    assert [r["cpu_ceiling_ratio"] for r in runs if "1 process" in r["layout"]] == [1.0, 1.0]


def test_peers_times_ragjury_as_a_whole_process_and_loses_no_sample_to_faults(
    tmp_path: Path,
) -> None:
    # Only ragjury here: the peers are installed by the benchmark into venvs of their own.
    args = ["--tools=ragjury", "--samples=6", "--latency-ms=5", "--peers-dir", str(tmp_path)]
    result = run_benchmark("peers", tmp_path, *args)
    rows = {row["faults"]: row for row in result["rows"]}
    assert set(rows) == {False, True}
    for row in rows.values():
        assert row["tool"] == "ragjury"
        assert (row["scored"], row["lost"]) == (6, 0)
        assert row["ratio_to_ragjury"] == 1.0
        assert row["wall_seconds"] > row["in_run_seconds"] > 0
    for row in rows.values():  # what the endpoint saw of ragjury's requests, and its CPU
        assert 1 <= row["in_flight_max"] <= 6  # one sample's step at a time: 6 at most
        assert 0 < row["in_flight_mean"] <= row["in_flight_max"]
        assert row["cpu_seconds"] > 0
    faulty = rows[True]
    # the 20% of bad answers reached ragjury and were asked again
    assert faulty["malformed"] + faulty["invalid"] + faulty["status_429"] + faulty["status_500"] > 0
    assert faulty["requests"] > rows[False]["requests"]


def test_the_peers_fake_counts_requests_in_flight_for_the_tool_named_before_them() -> None:
    # The figure that tells a tool held below its concurrency (one request at a time) from
    # one that uses it: four requests in a row, then four at once, against the real server.
    sys.path.insert(0, str(BENCHMARKS))
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from peers import PeerEndpoint

    def ask(client: httpx.Client, url: str) -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        client.post(f"{url}/chat/completions", json=body).raise_for_status()

    faults = {"rate_429": 0.0, "rate_500": 0.0, "rate_malformed": 0.0, "rate_invalid": 0.0}
    with PeerEndpoint(latency_ms=100, **faults) as fake, httpx.Client(timeout=10) as client:
        fake.name_tool("serial")
        for _ in range(4):
            ask(client, fake.base_url)
        fake.name_tool("parallel")
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: ask(client, fake.base_url), range(4)))
        by_tool = fake.stats()["by_tool"]
    assert by_tool["serial"]["in_flight_max"] == 1
    assert by_tool["serial"]["in_flight_mean"] <= 1
    assert by_tool["parallel"]["in_flight_max"] == 4
    assert by_tool["parallel"]["in_flight_mean"] > 2
    assert sum(by_tool["parallel"]["clients"].values()) == 4


def test_the_peers_fake_answers_each_peer_schema_from_the_sample_it_is_given() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from fakeopenai import RecordedRequest
    from peerserver import peer_reply

    def ask(prompt: str, **body: Any) -> Any:
        request = RecordedRequest(
            method="POST",
            path="/v1/chat/completions",
            headers={},
            body={"messages": [{"role": "user", "content": prompt}], **body},
            agent=None,
            received_at=0.0,
            raw_body=b"",
        )
        reply = peer_reply(request)
        assert isinstance(reply.body, dict)
        return reply.body["choices"][0]["message"]

    answer = "Paris is the capital of France. It lies on the Seine."
    tools = [{"type": "function", "function": {"name": "StatementGeneratorOutput"}}]
    message = ask(f'Example: {{"answer": "x"}}\nInput: {{"answer": "{answer}"}}', tools=tools)
    statements = json.loads(message["tool_calls"][0]["function"]["arguments"])["statements"]
    assert statements == ["Paris is the capital of France.", "It lies on the Seine."]

    schema = {"type": "json_schema", "json_schema": {"name": "Verdicts"}}
    claims = "Claims:\n['Paris is the capital of France.', 'It lies on the Seine.']\n\nJSON:"
    verdicts = json.loads(ask(claims, response_format=schema)["content"])["verdicts"]
    assert [v["verdict"] for v in verdicts] == ["yes", "yes"]


def test_batch_reports_requests_cost_and_wall_time_of_both_modes(tmp_path: Path) -> None:
    result = run_benchmark(
        "batch", tmp_path, "--samples=6", "--latency-ms=5", "--batch-delay=0.2", "--batch-wait=1"
    )
    direct, batch = result["runs"]
    assert (direct["mode"], batch["mode"]) == ("direct", "batch")
    assert result["same_results"]
    # counts, not timings: every call answered once in each mode, 3 per sample
    assert direct["llm_calls"] == batch["llm_calls"] == 18
    assert direct["direct_chat_requests"] == 18
    assert batch["direct_chat_requests"] == 0
    assert batch["batch_lines"] == 18
    assert batch["batches"] >= 2  # the statements, then the verdicts that need them
    assert batch["prompt_tokens"] == direct["prompt_tokens"]
    assert result["cost_ratio"] == pytest.approx(0.5, abs=0.002)
    assert all(run["wall_seconds"] > 0 and run["failed"] == 0 for run in result["runs"])
