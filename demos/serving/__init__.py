"""DBO over a serving run (issue 44): requests arrive, each engine's scheduler forms every step's batch
per data-parallel rank, the engine's own rule decides whether the step runs split, and the predictor
prices the step. See docs/serving.md.

Modules (one idea each):

* ``requests``: ``Request`` (arrival, prompt and output tokens) and what the run records of each;
* ``arrivals``: where requests come from: a closed loop at fixed concurrency, an open-loop Poisson rate,
  request traces (Azure LLM inference 2023 CSV, Mooncake JSONL);
* ``batch``: ``RankBatch``, what one data-parallel rank runs in one step, and ``SplitDecision``;
* ``split_rules``: each engine's per-step rule for running a step as two micro-batches (vLLM's vote,
  padding and empty-ubatch abort; SGLang's mode agreement), written from the pinned releases;
* ``schedulers``: each engine's scheduler per data-parallel rank and its request router;
* ``step_times``: the predictor's step time of a step's real mix, from a grid of predicted points;
* ``run``: ``simulate(...) -> ServingRun``, the discrete-event run at step granularity, and its metrics.
"""
