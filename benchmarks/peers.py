"""ragjury against RAGAS (both paths) and DeepEval: faithfulness on the same samples, the same
fake endpoint, in one run, each as a whole process.

Each tool judges the same faithfulness samples (a question, an answer of a few sentences and
two real documentation chunks as contexts, from ``../shared/data`` or the example corpus)
against ``benchmarks/peerserver.py``: 200 ms a call and the same concurrency for all. Each run
is timed as a whole process, start-up included, as a user who times the command sees it; the
tool's own figure for the time inside the run is kept beside it. With faults, 20% of the
answers are bad: 10% malformed JSON, 5% JSON that misses the schema, 3% 429 and 2% 500, and
every sample a tool fails to score is counted as lost.

The peers are installed in their own venvs (``--peers-dir``, made on first use with pip from
PyPI), never into ragjury's environment:

    python benchmarks/peers.py                      # 300 samples, with and without faults
    python benchmarks/peers.py --quick              # 60 samples
    python benchmarks/peers.py --tools ragjury,deepeval --faults on

The ratio column is each tool's whole-process seconds over ragjury's (above 1: slower).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import RESULTS, FakeEndpoint, show, write_result

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
RUNS = BENCHMARKS / "peer_runs"
SHARED_CHUNKS = (
    ROOT.parent / "shared" / "data" / "corpus" / "anthropic-docs" / "anthropic_docs.json"
)

PEERS: dict[str, tuple[str, ...]] = {
    # venv name -> what pip installs into it
    # the versions measured; RAGAS 0.4.3 imports a LangChain module that 1.x removed
    "ragas": (
        "ragas==0.4.3",
        "langchain<1",
        "langchain-core<1",
        "langchain-community<0.4",
        "langchain-openai<1",
    ),
    "deepeval": ("deepeval==4.3.1",),
}
RUNNERS: dict[str, tuple[str, str]] = {
    # peer -> (its venv, its runner script in peer_runs/); ragjury runs as its command line
    "ragas": ("ragas", "ragas_collections.py"),
    "ragas-legacy": ("ragas", "ragas_legacy.py"),
    "deepeval": ("deepeval", "deepeval_run.py"),
}
TOOLS = ("ragjury", *RUNNERS)
# ragjury's re-asks of output that does not validate (its default is 3): at 15% malformed or
# schema-invalid answers, 4 in a row (about 1 in 2,000 calls) would fail a sample in some runs
MAX_RETRIES = 5
# The peers' documented opt-outs of usage telemetry. RAGAS posts a usage event with
# `requests` inside every LLM call, on the event loop (a blocking call of up to 1 s): with no
# route to its server each post stalls the loop (about 0.1 s here), which held RAGAS to one
# or two requests in flight in this benchmark before
TELEMETRY_OFF = {"RAGAS_DO_NOT_TRACK": "true", "DEEPEVAL_TELEMETRY_OPT_OUT": "YES"}
WARM_UP_SAMPLES = 4
FAULTS = {"rate_malformed": 0.10, "rate_invalid": 0.05, "rate_429": 0.03, "rate_500": 0.02}
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
# A sentence that opens with a pronoun is no statement on its own: ragjury asks the splitter
# again for it (the fake splitter copies sentences), so answers are built without them.
_PRONOUN = re.compile(r"(he|she|it|its|they|them|their|this|that|these|those|his|her)\b", re.I)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument(
        "--tools", default=",".join(TOOLS), help="comma-separated, of: " + ", ".join(TOOLS)
    )
    parser.add_argument("--faults", choices=["both", "off", "on"], default="both")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each tool; the median is kept"
    )
    parser.add_argument(
        "--peers-dir",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ragjury-peers",
        help="where the peers' venvs live (made on first use)",
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        default=SHARED_CHUNKS,
        help="a JSON list of {text} chunks (default: ../shared/data's anthropic-docs; "
        "the example corpus if it is not there)",
    )
    parser.add_argument("--quick", action="store_true", help="60 samples, faults on and off")
    parser.add_argument("--out", type=Path, default=RESULTS / "peers.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.samples = min(args.samples, 60)
    unknown = set(args.tools.split(",")) - set(TOOLS)
    if unknown:
        parser.error(
            f"unknown --tools {', '.join(sorted(unknown))}; choose from {', '.join(TOOLS)}"
        )
    return args


class PeerEndpoint(FakeEndpoint):
    """``benchmarks/peerserver.py`` in a subprocess: the fake that answers the peers too."""

    def __init__(
        self,
        *,
        latency_ms: float,
        rate_429: float,
        rate_500: float,
        rate_malformed: float,
        rate_invalid: float,
    ) -> None:
        super().__init__(latency_ms=latency_ms, rate_429=rate_429, rate_500=rate_500)
        self._argv[1] = str(BENCHMARKS / "peerserver.py")
        self._argv[2:2] = [f"--rate-malformed={rate_malformed}", f"--rate-invalid={rate_invalid}"]

    def __enter__(self) -> PeerEndpoint:
        super().__enter__()
        return self

    def name_tool(self, tool: str) -> None:
        """Count the requests from now on for ``tool`` (its in-flight figures in stats())."""
        self._command(f"tool {tool}")


def peer_python(peers_dir: Path, venv: str) -> Path:
    """The venv's interpreter, made and filled with pip on first use."""
    python = peers_dir / venv / "bin" / "python"
    if not python.exists():
        print(f"installing {venv} into {peers_dir / venv} (first use; a few minutes)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(peers_dir / venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PEERS[venv]], check=True)
    return python


def chunks(corpus: Path) -> list[str]:
    """Real documentation chunks of about 1 KB: the anthropic-docs JSON where it is, else
    the example corpus's Markdown pages cut into runs of paragraphs of about 1 KB."""
    if corpus.suffix == ".json" and corpus.exists():
        return [c["text"] for c in json.loads(corpus.read_text(encoding="utf-8"))]
    texts, current = [], ""
    for page in sorted((ROOT / "examples" / "fastapi-docs").rglob("*.md")):
        for paragraph in page.read_text(encoding="utf-8").split("\n\n"):
            current = f"{current}\n\n{paragraph}".strip()
            if len(current) >= 1000:
                texts.append(current)
                current = ""
    return texts


def samples(n: int, corpus: Path = SHARED_CHUNKS) -> list[dict[str, Any]]:
    """``n`` distinct faithfulness samples: an answer of three sentences of one chunk, that
    chunk and another as the contexts (no two samples alike, so no tool's cache helps)."""
    texts = chunks(corpus)
    out: list[dict[str, Any]] = []
    k = 0
    while len(out) < n:
        text = texts[k % len(texts)]
        sentences = [
            s
            for s in _SENTENCE.split(" ".join(text.split()))
            if len(s) > 20 and not _PRONOUN.match(s)
        ]
        offset = (k // len(texts)) * 3
        answer = " ".join(sentences[offset : offset + 3])
        if answer:
            heading = sentences[0][:80].rstrip(".")
            out.append(
                {
                    "id": f"p{k}",
                    "question": f"What does the documentation say about {heading}?",
                    "answer": answer,
                    "contexts": [text, texts[(k + 7) % len(texts)]],
                }
            )
        k += 1
        if k > 50 * n:
            raise SystemExit(f"could not build {n} distinct samples from {len(texts)} chunks")
    return out


def run_tool(
    tool: str, python: Path | None, samples_file: Path, base_url: str, concurrency: int, work: Path
) -> dict[str, Any]:
    """One whole-process run of ``tool``: its wall seconds and what it scored."""
    if tool == "ragjury":
        db, out = work / f"run-{time.monotonic_ns()}.db", work / "results.jsonl"
        argv = [
            sys.executable, "-m", "ragjury", "evaluate", str(samples_file),
            "--metrics", "faithfulness", "--base-url", base_url, "--model", "gpt-4o-mini",
            "--concurrency", str(concurrency), "--db", str(db), "--out", str(out),
            "--summary", str(work / "summary.json"), "--max-retries", str(MAX_RETRIES),
        ]  # fmt: skip
        env = {**os.environ, "OPENAI_API_KEY": "sk-bench", "RAGJURY_LOG_LEVEL": "error"}
    else:
        assert python is not None
        argv = [str(python), str(RUNS / RUNNERS[tool][1]), str(samples_file), base_url]
        argv.append(str(concurrency))
        env = {**os.environ, "OPENAI_API_KEY": "sk-bench", **TELEMETRY_OFF}
        env.pop("PYTHONPATH", None)
    # every tool loads its compiled modules, as an installed package does (a shell that sets
    # PYTHONDONTWRITEBYTECODE would make only the tool without .pyc files compile at each run)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start, cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work)
    end = time.monotonic()
    wall = end - start
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
    row: dict[str, Any]
    if tool == "ragjury":
        summary = (
            json.loads((work / "summary.json").read_text()) if done.returncode in (0, 3, 4) else {}
        )
        figures = summary.get("metrics", {}).get("faithfulness", {})
        scored = int(figures.get("scored", 0))
        row = {"scored": scored, "lost": len(samples_file.read_text().splitlines()) - scored}
        row["in_run_seconds"] = summary.get("wall_seconds")
    else:
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        row = (
            json.loads(lines[-1]) if lines else {"scored": 0, "lost": None, "in_run_seconds": None}
        )
    if done.returncode not in (0, 3, 4) or row.get("lost") is None:
        sys.stderr.write(f"{tool} exited {done.returncode}:\n{done.stderr[-2000:]}\n")
    return {
        "tool": tool,
        "wall_seconds": round(wall, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "started_at": start,
        "ended_at": end,
        "exit": done.returncode,
        **row,
    }


def warm_up(args: argparse.Namespace, python: dict[str, Path], work: Path) -> None:
    """One untimed run of each tool on a few samples: each finds its modules compiled and
    its files in the OS cache, as on a user's second run, whatever ran before."""
    few = work / "warm-up" / "samples.jsonl"
    few.parent.mkdir()
    lines = (work / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    few.write_text("\n".join(lines[:WARM_UP_SAMPLES]) + "\n", encoding="utf-8")
    with PeerEndpoint(
        latency_ms=args.latency_ms, rate_429=0, rate_500=0, rate_malformed=0, rate_invalid=0
    ) as fake:
        for tool in args.tools.split(","):
            run_tool(tool, python.get(tool), few, fake.base_url, args.concurrency, few.parent)


def measure(
    args: argparse.Namespace, faults: bool, python: dict[str, Path], work: Path
) -> list[dict[str, Any]]:
    samples_file = work / "samples.jsonl"
    rows = []
    extra = {k: v for k, v in FAULTS.items() if faults}
    with PeerEndpoint(
        latency_ms=args.latency_ms,
        rate_429=extra.get("rate_429", 0.0),
        rate_500=extra.get("rate_500", 0.0),
        rate_malformed=extra.get("rate_malformed", 0.0),
        rate_invalid=extra.get("rate_invalid", 0.0),
    ) as fake:
        for tool in args.tools.split(","):
            runs = []
            for attempt in range(args.repeat):
                label = f"{tool}/{'faults' if faults else 'clean'}/{attempt}"
                fake.name_tool(label)
                before = fake.stats()
                run = run_tool(
                    tool, python.get(tool), samples_file, fake.base_url, args.concurrency, work
                )
                after = fake.stats()
                for key in ("chat_requests", "status_429", "status_500", "malformed", "invalid"):
                    run[key] = after.get(key, 0) - before.get(key, 0)
                run["server_cpu_seconds"] = round(after["cpu_seconds"] - before["cpu_seconds"], 3)
                run["requests"] = run.pop("chat_requests")
                run.update(after.get("by_tool", {}).get(label, {}))
                started, ended = run.pop("started_at"), run.pop("ended_at")
                if "first_request_at" in run:  # where the whole process's time went
                    run["to_first_request_seconds"] = round(run["first_request_at"] - started, 3)
                    run["after_last_answer_seconds"] = round(ended - run.pop("last_answer_at"), 3)
                    del run["first_request_at"]
                runs.append(run)
                mode = "faults" if faults else "clean "
                print(
                    f"  {tool:<13} {mode} {run['wall_seconds']:7.2f} s  "
                    f"scored {run['scored']}  lost {run['lost']}  requests {run['requests']}  "
                    f"in flight max {run.get('in_flight_max')} mean {run.get('in_flight_mean')}  "
                    f"cpu {run['cpu_seconds']} s, server cpu {run['server_cpu_seconds']} s, "
                    f"to first request {run.get('to_first_request_seconds')} s, "
                    f"after last answer {run.get('after_last_answer_seconds')} s",
                    flush=True,
                )
            runs.sort(key=lambda r: r["wall_seconds"])
            rows.append(
                {
                    **runs[len(runs) // 2],
                    "faults": faults,
                    "walls": [r["wall_seconds"] for r in runs],
                }
            )
    ours = next((r["wall_seconds"] for r in rows if r["tool"] == "ragjury"), None)
    for row in rows:
        row["ratio_to_ragjury"] = round(row["wall_seconds"] / ours, 3) if ours else None
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tools = args.tools.split(",")
    python = {t: peer_python(args.peers_dir, RUNNERS[t][0]) for t in tools if t in RUNNERS}
    modes = {"both": [False, True], "off": [False], "on": [True]}[args.faults]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with (work / "samples.jsonl").open("w", encoding="utf-8") as f:
            for sample in samples(args.samples, args.corpus):
                f.write(json.dumps(sample) + "\n")
        warm_up(args, python, work)
        for faults in modes:
            rows += measure(args, faults, python, work)
    path = write_result(
        "peers",
        {
            "settings": {
                "samples": args.samples,
                "concurrency": args.concurrency,
                "latency_ms": args.latency_ms,
                "faults": FAULTS,
            },
            "versions": {t: _version(python.get(t), t) for t in tools},
            "rows": rows,
        },
        args.out,
    )
    show(
        f"faithfulness, {args.samples} samples, concurrency {args.concurrency}, "
        f"{args.latency_ms:.0f} ms a call: whole process",
        ["tool", "faults", "wall s", "ratio to ragjury", "in-run s", "scored", "lost", "requests",
         "in flight max", "in flight mean", "CPU s"],
        [
            [r["tool"], "20%" if r["faults"] else "none", f"{r['wall_seconds']:.2f}",
             f"{r['ratio_to_ragjury']:.2f}" if r["ratio_to_ragjury"] else "-",
             f"{r['in_run_seconds']:.2f}" if r.get("in_run_seconds") else "-",
             r["scored"], r["lost"], r["requests"], r.get("in_flight_max", "-"),
             r.get("in_flight_mean", "-"), f"{r['cpu_seconds']:.1f}"]
            for r in rows
        ],
        path,
    )  # fmt: skip
    return 0


def _version(python: Path | None, tool: str) -> str:
    if python is None:
        from ragjury import __version__

        return __version__
    package = "deepeval" if tool == "deepeval" else "ragas"
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version('{package}'))"],
        capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip()


if __name__ == "__main__":
    raise SystemExit(main())
