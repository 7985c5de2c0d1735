"""RAGAS faithfulness through its legacy ``evaluate()`` path (LangChain), in RAGAS's own venv.

``python ragas_legacy.py SAMPLES.jsonl BASE_URL CONCURRENCY`` prints one JSON line: samples
scored, samples lost (NaN: RAGAS's legacy path turns a failed sample into NaN and goes on)
and the seconds inside the run. Run by ``benchmarks/peers.py``; it imports nothing of ragjury.
"""

import json
import math
import sys
import time
import warnings
from pathlib import Path


def main(samples_file: str, base_url: str, concurrency: int) -> dict[str, float]:
    warnings.filterwarnings("ignore")
    from langchain_openai import ChatOpenAI
    from ragas import EvaluationDataset, RunConfig, evaluate
    from ragas.llms import LangchainLLMWrapper
    from ragas.metrics import faithfulness

    samples = [json.loads(line) for line in Path(samples_file).read_text("utf-8").splitlines()]
    dataset = EvaluationDataset.from_list(
        [
            {
                "user_input": s["question"],
                "response": s["answer"],
                "retrieved_contexts": s["contexts"],
            }
            for s in samples
        ]
    )
    chat = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="sk-bench", max_retries=6)
    start = time.perf_counter()
    result = evaluate(
        dataset,
        metrics=[faithfulness],
        llm=LangchainLLMWrapper(chat),
        run_config=RunConfig(max_workers=concurrency, max_retries=6),
        show_progress=False,
        raise_exceptions=False,
    )
    seconds = time.perf_counter() - start
    scores = [row.get("faithfulness") for row in result.scores]
    lost = sum(1 for v in scores if v is None or (isinstance(v, float) and math.isnan(v)))
    return {"scored": len(samples) - lost, "lost": lost, "in_run_seconds": round(seconds, 3)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))), flush=True)
