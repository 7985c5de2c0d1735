"""DeepEval's FaithfulnessMetric, in DeepEval's own venv.

``python deepeval_run.py SAMPLES.jsonl BASE_URL CONCURRENCY`` prints one JSON line: samples
scored, samples lost (an error instead of a score) and the seconds inside the run. Run by
``benchmarks/peers.py``; it imports nothing of ragjury.
"""

import json
import os
import sys
import time
from pathlib import Path


def main(samples_file: str, base_url: str, concurrency: int) -> dict[str, float]:
    os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
    os.environ.setdefault("DEEPEVAL_DISABLE_PROGRESS_BAR", "YES")
    from deepeval import evaluate
    from deepeval.evaluate.configs import AsyncConfig, DisplayConfig, ErrorConfig
    from deepeval.metrics import FaithfulnessMetric
    from deepeval.models import GPTModel
    from deepeval.test_case import LLMTestCase

    samples = [json.loads(line) for line in Path(samples_file).read_text("utf-8").splitlines()]
    model = GPTModel(model="gpt-4o-mini", base_url=base_url, api_key="sk-bench")
    cases = [
        LLMTestCase(input=s["question"], actual_output=s["answer"], retrieval_context=s["contexts"])
        for s in samples
    ]
    start = time.perf_counter()
    result = evaluate(
        cases,
        [FaithfulnessMetric(model=model, async_mode=True)],
        async_config=AsyncConfig(run_async=True, max_concurrent=concurrency),
        display_config=DisplayConfig(show_indicator=False, print_results=False),
        error_config=ErrorConfig(ignore_errors=True),
    )
    seconds = time.perf_counter() - start
    scored = sum(
        1
        for test in result.test_results
        for metric in (test.metrics_data or [])
        if metric.error is None and metric.score is not None
    )
    return {"scored": scored, "lost": len(samples) - scored, "in_run_seconds": round(seconds, 3)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))), flush=True)
