"""Find the measured serving rows that InferenceX ran with speculative decoding, from its published configs.

The measured extra's ``silicon_sample.csv`` holds exports of SemiAnalysis' InferenceX benchmark (rows whose
source is ``source_file=YYYY-MM-DD.csv`` or ``db-dump/...``), but not whether a run decoded speculatively:
InferenceX runs most DeepSeek-R1, GLM-5 and Qwen3.5 layouts twice, once with MTP (multi-token prediction)
and once without, and a row does not say which. InferenceX's benchmark configs say it: every search-space
entry of ``.github/configs/nvidia-master.yaml`` names its model, precision, GPU, engine, container image,
sequence lengths, concurrencies and layout, with ``spec-decoding: mtp`` where the run speculates. This script
reads every version of that file on the pinned commit's history (``git show``), matches each exported row to
the entries that could have produced it, and writes the rows that are not plainly non-speculative to
``demos/zoo/vendor_data/inferencex_speculative.csv`` (``id,speculative``):

* ``mtp``: every entry that matches the row decodes with MTP;
* ``unknown``: entries with and without MTP match it (InferenceX ran the layout both ways then).

A row is plainly non-speculative (not listed) when no entry of its model, precision, GPU and engine had
speculative decoding by the day it was measured, or when every entry that matches it has none. A row that no
entry matches is not listed either (nothing says it speculated). The matching rule, field by field, is in
demos/zoo/vendor_data/README-inferencex.md::

    python scripts/extract_inferencex_speculative.py --repo /path/to/InferenceX.git [--commit SHA]
    python scripts/extract_inferencex_speculative.py --check   # regenerate in memory and compare

Needs PyYAML and the ``measured`` extra (the rows are read from its CSV).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from demos.zoo.measured_rows import source_concurrency
from demos.zoo.vendor_data.inferencex import exported, measured_day

COMMIT = "843c6254ff69b567f772f6a5fd97675af3d04431"
DEFAULT_REPO = "/work/.mirror/SemiAnalysisAI+InferenceX/repo"
CONFIG = ".github/configs/nvidia-master.yaml"
OUT = Path(__file__).resolve().parent.parent / "demos" / "zoo" / "vendor_data" / "inferencex_speculative.csv"

# InferenceX's model-prefix for each model the exports name (DeepSeek-R1's export rows name DeepSeek-V3 too)
PREFIXES = {
    "deepseek-ai/DeepSeek-R1": ("dsr1", "dsr1-fp8", "dsr1-fp4", "DeepSeek-R1-0528"),
    "deepseek-ai/DeepSeek-V3": ("dsr1", "dsr1-fp8", "dsr1-fp4", "DeepSeek-R1-0528"),
    "zhipuai/GLM-5": ("glm5",),
    "openai/gpt-oss-120b": ("gptoss",),
    "moonshotai/Kimi-K2.5": ("kimik2.5",),
    "meta-llama/Llama-3.1-70B": ("llama70b", "70b"),
    "MiniMaxAI/MiniMax-M2.5": ("minimaxm2.5",),
    "Qwen/Qwen3.5-397B-A17B": ("qwen3.5",),
}
FRAMEWORKS = {
    "trtllm": ("trt", "dynamo-trt"),
    "sglang": ("sglang", "dynamo-sglang", "sglang-disagg"),
    "vllm": ("vllm", "dynamo-vllm"),
}
BEFORE_DAYS, AFTER_DAYS = 1, 7  # an entry matches a row measured from a day before it appeared to a week after
_GPU = re.compile(r"(gb300|gb200|b300|b200|h200|h100|h20)")


def _concurrencies(entry: dict) -> tuple[int, ...]:
    """The concurrencies an entry runs: its ``conc-list``, or ``conc-start`` doubling up to ``conc-end``
    (InferenceX's ``generate_sweep_configs.py``, step 2, the end always run)."""
    if entry.get("conc-list"):
        return tuple(int(c) for c in entry["conc-list"])
    start, end = entry.get("conc-start"), entry.get("conc-end")
    if start is None or end is None:
        return ()
    out, c = [], int(start)
    while c <= end:
        out.append(c)
        if c == end:
            break
        c = min(c * 2, int(end))
    return tuple(out)


def _layout(entry: dict) -> tuple:
    if "prefill" in entry:
        p, d = entry["prefill"], entry["decode"]
        side = lambda s: (s.get("num-worker"), s.get("tp"), s.get("ep", 1), bool(s.get("dp-attn", False)))  # noqa: E731
        return ("disagg", *side(p), *side(d))
    return ("agg", entry.get("tp"), entry.get("ep", 1), bool(entry.get("dp-attn", False)))


def entries(text: str) -> set[tuple]:
    """Every (model-prefix, precision, gpu, framework, image tag, isl, osl, concurrency, layout..., spec)
    of one version of the config file."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = set()
    for config in (yaml.load(text, Loader=loader) or {}).values():
        if not isinstance(config, dict):
            continue
        m = _GPU.match(str(config.get("runner", "")))
        base = (
            config.get("model-prefix"),
            config.get("precision"),
            m.group(1) if m else None,
            config.get("framework"),
            str(config.get("image")).split(":")[-1],
        )
        lengths = list(config.get("seq-len-configs") or [])
        lengths += list((config.get("scenarios") or {}).get("fixed-seq-len") or [])
        for sl in lengths:
            for e in sl.get("search-space") or []:
                spec = str(e.get("spec-decoding", "none"))
                for c in _concurrencies(e):
                    out.add((*base, sl.get("isl"), sl.get("osl"), c, *_layout(e), spec))
    return out


def spans(repo: str, commit: str) -> tuple[dict, dict]:
    """``({entry without spec: [(spec, first day, last day)]}, {(prefix, precision, gpu, framework): first
    day with speculative decoding})`` over every version of the config file on ``commit``'s history
    (``index`` of each entry's first and last day)."""
    log = subprocess.run(
        ["git", "-C", repo, "log", commit, "--format=%h %aI", "--", CONFIG], check=True, capture_output=True, text=True
    ).stdout.split()
    days: dict[tuple, list[str]] = {}
    for sha, when in zip(log[::2], log[1::2]):
        text = subprocess.run(["git", "-C", repo, "show", f"{sha}:{CONFIG}"], capture_output=True, text=True)
        if text.returncode:  # the commit that removed the file
            continue
        for e in entries(text.stdout):
            span = days.setdefault(e, [when[:10], when[:10]])
            span[0], span[1] = min(span[0], when[:10]), max(span[1], when[:10])
    return index(days)


def index(days: dict) -> tuple[dict, dict]:
    """``spans``' two maps from ``{entry: (first day, last day)}`` (``entries``' tuples, spec last)."""
    by_key, first_spec = defaultdict(list), {}
    for e, (a, b) in days.items():
        by_key[e[:-1]].append((e[-1], a, b))
        by_key[e[:4] + ("*",) + e[5:-1]].append((e[-1], a, b))  # any image: rows that do not record theirs
        if e[-1] != "none":
            family = e[:4]
            first_spec[family] = min(first_spec.get(family, "9999-12-31"), a)
    return by_key, first_spec


def _day(day: str, days: int) -> str:
    return (dt.date.fromisoformat(day) + dt.timedelta(days=days)).isoformat()


def classify(row: dict, by_key: dict, first_spec: dict) -> str | None:
    """``"mtp"`` or ``"unknown"`` for one exported row, None when plainly non-speculative or not
    an InferenceX export (module docstring)."""
    source = str(row["silicon_data_source"])
    if not exported(source):
        return None
    day = measured_day(source)
    image = re.search(r"(?:image=|; )([^;\s]+:[^;\s]+)\s*$", source)
    tag = image.group(1).split(":")[-1] if image else "*"
    gpu = str(row["system"]).replace("_sxm", "")
    conc = source_concurrency(source)
    disagg = row["mode"] == "disagg"
    if disagg:
        if row["prefill_num_workers"] != row["prefill_num_workers"]:  # NaN: no layout recorded
            return None

        def side(p: str) -> tuple:
            dp = row[f"{p}attention_dp_size"]
            width = int(row[f"{p}tp_size"] * max(1, dp))
            return (int(row[f"{p}num_workers"]), width, int(row[f"{p}moe_ep_size"]), dp > 1)

        layout = ("disagg", *side("prefill_"), *side("decode_"))
        workers = int(row["decode_num_workers"])
        concs = {conc, conc // workers} if workers and conc % workers == 0 else {conc}
    else:
        m = re.search(r"_tp(\d+)(?:_\d+)?_ep(\d+)", str(row["id"]))
        dp = row["attention_dp_size"]
        tp, ep = (
            (int(m.group(1)), int(m.group(2))) if m else (int(row["tp_size"] * max(1, dp)), int(row["moe_ep_size"]))
        )
        layout, concs = ("agg", tp, ep, dp > 1), {conc}
    seen, early = set(), True
    for framework in FRAMEWORKS.get(str(row["backend"]), ()):
        for prefix in PREFIXES.get(str(row["model_path"]), ()):
            started = first_spec.get((prefix, row["precision"], gpu, framework))
            if started and (day is None or started <= _day(day, BEFORE_DAYS)):
                early = False
            for c in concs:
                key = (prefix, row["precision"], gpu, framework, tag, int(row["isl"]), int(row["osl"]), c, *layout)
                for spec, first, last in by_key.get(key, ()):
                    if day is None or _day(first, -BEFORE_DAYS) <= day <= _day(last, AFTER_DAYS):
                        seen.add(spec)
    if early or not seen or seen == {"none"}:
        return None
    return "mtp" if "none" not in seen else "unknown"


def table(repo: str, commit: str) -> str:
    """The CSV text: one line per listed row, sorted by id."""
    import pandas as pd

    from demos.zoo.measured import data_root

    by_key, first_spec = spans(repo, commit)
    rows = pd.read_csv(data_root() / "silicon_sample.csv").to_dict("records")
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(("id", "speculative"))
    for r in sorted(rows, key=lambda r: str(r["id"])):
        got = classify(r, by_key, first_spec)
        if got:
            w.writerow((r["id"], got))
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", default=DEFAULT_REPO, help="a git clone of SemiAnalysisAI/InferenceX (bare is fine)")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--check", action="store_true", help="compare with the checked-in table; exit 1 if it differs")
    a = ap.parse_args(argv)
    text = table(a.repo, a.commit)
    counts = {k: text.count(f",{k}\n") for k in ("mtp", "unknown")}
    if a.check:
        same = OUT.read_text() == text
        print(f"{OUT.name}: {'up to date' if same else 'stale'} ({counts})")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
