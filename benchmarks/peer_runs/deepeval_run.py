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
    from deepeval.evaluate.configs import AsyncConfig, CacheConfig, DisplayConfig, ErrorConfig
    from deepeval.metrics import FaithfulnessMetric
    from deepeval.models import OpenAIModel
    from deepeval.test_case import LLMTestCase
    from openai import DEFAULT_CONNECTION_LIMITS, DefaultAsyncHttpxClient

    samples = [json.loads(line) for line in Path(samples_file).read_text("utf-8").splitlines()]
    # One HTTP client for every call (DeepEval's option for it): without it OpenAIModel builds a
    # new client, with a new TLS context and connection pool, for each call it makes. Its
    # connections are capped at the concurrency: DeepEval's max_concurrent counts test cases,
    # and a faithfulness case sends two requests at once, so the cap keeps DeepEval to the
    # same number of requests in flight as every other tool.
    limits = DEFAULT_CONNECTION_LIMITS.__class__(
        max_connections=concurrency, max_keepalive_connections=concurrency
    )
    model = OpenAIModel(
        model="gpt-4o-mini",
        base_url=base_url,
        api_key="sk-bench",
        async_http_client=DefaultAsyncHttpxClient(limits=limits),
    )
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
        # its default rewrites (and fsyncs) its whole cache file and test-run file after each
        # test case, on the event loop: a cost that grows with the square of the samples
        cache_config=CacheConfig(write_cache=False),
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
