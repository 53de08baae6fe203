"""Extract a screened subset of ROCm/aiter's tuned (measured) kernel tables into demos/zoo/vendor_data/.

Reads the tables straight out of a git clone of ROCm/aiter (bare is fine) with ``git show COMMIT:path``,
applies the screening rules described in demos/zoo/vendor_data/README.md, and writes ``aiter_gemm.csv`` and
``aiter_moe.csv`` deterministically (same clone and commit: same bytes). Prints the rows each rule dropped,
per source file, so the README's counts can be checked against a rerun::

    python scripts/extract_aiter_tables.py --repo /path/to/aiter.git [--commit SHA] [--out DIR]
    python scripts/extract_aiter_tables.py --check   # regenerate into a temporary folder and compare

Standard library only.
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import math
import subprocess
import sys
import tempfile
from pathlib import Path

COMMIT = "e4048607a535ace3a2b51ded31b1c8c2d45c0879"
DEFAULT_REPO = "/work/.mirror/ROCm+aiter/repo"
OUT_DIR = Path(__file__).resolve().parent.parent / "demos" / "zoo" / "vendor_data"

# The (gfx, cu_num) pairs kept, and the arch given to rows of legacy files without a gfx column: aiter itself
# backfills those from cu_num with this map (aiter/jit/utils/chip_info.py, _LEGACY_CU_NUM_TO_GFX).
KEEP = {("gfx942", 304), ("gfx950", 256)}
LEGACY_GFX = {304: "gfx942", 256: "gfx950", 80: "gfx942"}

ERR_LIMIT = 0.05  # a row whose error column says more than 5% of outputs mismatched is dropped
# The tuner writes the FLOP rate it measured (column tflops) beside us. A row whose tflops disagrees with the
# rate recomputed from its own key and us by more than this (and by more than TFLOPS_ABS, the column's rounding)
# was measured at another shape than its key says (a copied or relabelled row) and is dropped.
TFLOPS_REL = 0.05
TFLOPS_ABS = 0.01
ARTEFACT_MIN = 3  # one us at >= 3 different M (or token) values, all else equal: copied, not measured
# At most this many M values per (arch, dtype, n, k) shape, spread log-uniformly (smallest and largest kept).
M_PER_SHAPE = {"gfx942": 32, "gfx950": 12}

# Dense peak FLOP/s per (arch, dtype) for the sanity screen: MI300X for gfx942 and MI355X (the faster CDNA4
# part, 2.4 GHz) for gfx950, as in demos/zoo/hardware/gpus.py. A row above its peak cannot be a real time.
PEAK = {
    ("gfx942", "fp8_block"): 2614.9e12,
    ("gfx942", "bf16"): 1307.4e12,
    ("gfx950", "fp8_block"): 8192 * 256 * 2.4e9,
    ("gfx950", "bf16"): 4096 * 256 * 2.4e9,
    ("gfx950", "mxfp4"): 16384 * 256 * 2.4e9,
}
# A fused MoE is held to the peak of its activations' dtype (the MFMA runs at the activation precision: BF16
# activations with FP4 or INT4 weights dequantize the weights; FP8 with FP4 weights is held to FP8).
MOE_PEAK_DTYPE = {
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8_block",
    "float8_e4m3fnuz": "fp8_block",
    "float4_e2m1fn_x2": "mxfp4",
}

OUTPUTS = ("aiter_gemm.csv", "aiter_moe.csv")
GEMM_COLUMNS = ["arch", "cu_num", "dtype", "m", "n", "k", "us", "file"]
MOE_COLUMNS = [
    "arch",
    "cu_num",
    "tokens",
    "hidden",
    "inter",
    "experts",
    "top_k",
    "act",
    "w_dtype",
    "a_dtype",
    "quant",
    "us",
    "file",
]
MOE_OUT_KEY = MOE_COLUMNS[2:11]

# Key columns of each table kind as aiter looks its rows up (besides gfx and cu_num); the row variable
# (M or token) comes first and is what the artefact rule varies.
GEMM_KEYS = ["M", "N", "K"]
BF16_KEYS = ["M", "N", "K", "bias", "dtype", "outdtype", "scaleAB", "bpreshuffle"]
MOE_KEYS = [
    "token",
    "model_dim",
    "inter_dim",
    "expert",
    "topk",
    "act_type",
    "dtype",
    "q_dtype_a",
    "q_dtype_w",
    "q_type",
    "use_g1u1",
    "doweight_stage1",
]
ERR_COLUMNS = ("err_ratio", "errRatio", "err1", "err2")

RULES = [
    "other_arch",
    "bf16_variant",
    "us_not_positive",
    "artefact_run",
    "err_above_5pct",
    "tflops_mismatch",
    "duplicate_in_file",
    "merged_same_key",
    "over_peak",
    "stratified_out",
]


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def classify(path: str) -> str | None:
    """The table kind of a tuned CSV under aiter/configs, or None for those left out (README: left out)."""
    name = path.rsplit("/", 1)[-1]
    if "untuned" in name or "tuned" not in name or not name.endswith(".csv"):
        return None
    if "batched" in name or "fhmoe" in name or "grouped_fmoe" in name or "chunk_gdn" in name:
        return None
    if "fmoe" in name:
        return "moe"
    if "gemm" not in name:
        return None
    if "a8w8_blockscale" in name:
        return "fp8_block"
    if "a4w4_blockscale" in name:
        return "mxfp4"
    if "bf16_tuned_gemm" in name:
        return "bf16"
    return None  # FP8 with per-token/per-channel scales (a8w8 without block scales)


def err_fraction(text: str) -> float:
    """An error column as a fraction: GEMM tables write 0.0156, MoE tables 1.6%."""
    text = text.strip()
    if not text:
        return 0.0
    if text.endswith("%"):
        return float(text[:-1]) / 100.0
    return float(text)


def artefact_keys(rows: list[tuple[tuple, int, float]]) -> set[tuple]:
    """The (group, us) pairs of ``(group, variable, us)`` rows where one us stands at >= ARTEFACT_MIN values."""
    seen = collections.defaultdict(set)
    for group, variable, us in rows:
        seen[(group, us)].add(variable)
    return {g for g, vs in seen.items() if len(vs) >= ARTEFACT_MIN}


def read_table(text: str, path: str, kind: str, counts: collections.Counter, notes: collections.Counter) -> list:
    """One file's kept rows, each a dict: arch, cu, key (the file's lookup key, row variable first), us, row (the
    output fields but arch, cu_num, us, file), file. Rules in order: arch, bf16 variant, us > 0, artefact run,
    error column, duplicate key (the fastest kept)."""
    table = list(csv.reader(io.StringIO(text)))
    header, body = table[0], [r for r in table[1:] if r]
    col = {name: i for i, name in enumerate(header)}
    keys = MOE_KEYS if kind == "moe" else BF16_KEYS if kind == "bf16" else GEMM_KEYS
    needed = ["cu_num", "us", *keys]
    missing = [c for c in needed if c not in col]
    if missing:
        raise SystemExit(f"{path}: header lacks {missing}: {','.join(header)}")
    used = [col[c] for c in needed] + [col[c] for c in ERR_COLUMNS if c in col] + [col.get("gfx", 0)]
    rows = []
    for raw in body:
        tflops_at = col.get("tflops")
        if len(raw) != len(header):
            # Some MoE rows lack one field, the flat column just before tflops (written before that column
            # was added): every key, us and error column lies before the gap; tflops sits one place left.
            if len(raw) == len(header) - 1 and max(used) < col["flat"] == col["tflops"] - 1:
                notes["short_row"] += 1
                tflops_at = col["flat"]
            else:
                raise SystemExit(f"{path}: a row of {len(raw)} fields under a header of {len(header)}: {raw}")
        cu = int(raw[col["cu_num"]])
        gfx = raw[col["gfx"]] if "gfx" in col else LEGACY_GFX.get(cu, "?")
        if (gfx, cu) not in KEEP:
            counts["other_arch"] += 1
            continue
        if kind == "bf16" and (
            raw[col["bias"]] != "False" or raw[col["scaleAB"]] != "False" or raw[col["dtype"]] != "torch.bfloat16"
        ):
            counts["bf16_variant"] += 1
            continue
        us = float(raw[col["us"]])
        if not (us > 0 and math.isfinite(us)):
            counts["us_not_positive"] += 1
            continue
        err = max((err_fraction(raw[col[c]]) for c in ERR_COLUMNS if c in col), default=0.0)
        key = tuple(raw[col[c]] for c in keys)
        if kind == "moe":
            out = {
                "tokens": int(raw[col["token"]]),
                "hidden": int(raw[col["model_dim"]]),
                "inter": int(raw[col["inter_dim"]]),
                "experts": int(raw[col["expert"]]),
                "top_k": int(raw[col["topk"]]),
                "act": raw[col["act_type"]].removeprefix("ActivationType."),
                "w_dtype": raw[col["q_dtype_w"]].removeprefix("torch."),
                "a_dtype": raw[col["q_dtype_a"]].removeprefix("torch."),
                "quant": raw[col["q_type"]].removeprefix("QuantType."),
            }
        else:
            out = {"dtype": kind, "m": int(raw[col["M"]]), "n": int(raw[col["N"]]), "k": int(raw[col["K"]])}
        if kind == "moe":
            # g1u1: gate and up projections (2 x inter) then down, for tokens x top_k rows.
            flops = 6 * out["tokens"] * out["top_k"] * out["hidden"] * out["inter"]
        else:
            flops = 2 * out["m"] * out["n"] * out["k"]
        try:
            tflops = float(raw[tflops_at]) if tflops_at is not None else 0.0
        except ValueError:
            tflops = 0.0
        mine = flops / us * 1e-6
        if tflops > 0:
            mismatch = abs(tflops - mine) > max(TFLOPS_REL * mine, TFLOPS_ABS)
        else:
            mismatch = False
        row = {"arch": gfx, "cu": cu, "key": key, "us": us, "err": err, "row": out, "file": path}
        row["mismatch"], row["unchecked"] = mismatch, tflops <= 0
        rows.append(row)

    # Artefact runs, before the error rule so that a run is seen whole.
    bad = artefact_keys([((r["arch"], r["cu"], r["key"][1:]), int(r["key"][0]), r["us"]) for r in rows])
    kept = [r for r in rows if ((r["arch"], r["cu"], r["key"][1:]), r["us"]) not in bad]
    counts["artefact_run"] += len(rows) - len(kept)
    notes["artefact_groups"] += len(bad)
    pairs = collections.Counter(((r["arch"], r["cu"], r["key"][1:]), r["us"]) for r in kept)
    notes["same_us_at_two_values"] += sum(1 for n in pairs.values() if n == 2)

    rows, kept = kept, [r for r in kept if r["err"] <= ERR_LIMIT]
    counts["err_above_5pct"] += len(rows) - len(kept)
    # ... and where most rows of one configuration (every key but the row variable) fail it, the rest of that
    # configuration goes too: they agree with their keys by chance.
    tally = collections.defaultdict(lambda: [0, 0])
    for r in kept:
        tally[(r["arch"], r["cu"], r["key"][1:])][r["mismatch"]] += 1
    tainted = {g for g, (ok, bad) in tally.items() if bad > ok}
    rows, kept = kept, [r for r in kept if not r["mismatch"] and (r["arch"], r["cu"], r["key"][1:]) not in tainted]
    counts["tflops_mismatch"] += len(rows) - len(kept)

    best: dict[tuple, dict] = {}
    for r in kept:
        k = (r["arch"], r["cu"], r["key"])
        if k not in best or r["us"] < best[k]["us"]:
            best[k] = r
    counts["duplicate_in_file"] += len(kept) - len(best)
    return list(best.values())


def spread(ms: list[int], cap: int) -> set[int]:
    """At most ``cap`` of the sorted distinct ``ms``: the one nearest (in log M) to each of ``cap`` log-uniform
    targets from the smallest to the largest, so both ends are always kept."""
    if len(ms) <= cap:
        return set(ms)
    lo, hi = math.log(ms[0]), math.log(ms[-1])
    chosen = set()
    for i in range(cap):
        t = lo + (hi - lo) * i / (cap - 1)
        chosen.add(min(ms, key=lambda m: (abs(math.log(m) - t), m)))
    return chosen


def gemm_ratio(r: dict) -> float:
    """A GEMM row's FLOP rate over its dense peak."""
    row = r["row"]
    return 2.0 * row["m"] * row["n"] * row["k"] / (r["us"] * 1e-6) / PEAK[(r["arch"], row["dtype"])]


def moe_ratio(r: dict) -> float:
    """A fused MoE row's FLOP rate (g1u1: 6 tokens top_k hidden inter) over its activations' dense peak."""
    row = r["row"]
    flops = 6.0 * row["tokens"] * row["top_k"] * row["hidden"] * row["inter"]
    return flops / (r["us"] * 1e-6) / PEAK[(r["arch"], MOE_PEAK_DTYPE[row["a_dtype"]])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default=DEFAULT_REPO, help="a git clone (bare is fine) of ROCm/aiter")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--out", default=str(OUT_DIR), help="where to write the CSVs")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if the CSVs in --out differ")
    args = ap.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            extract(args.repo, args.commit, Path(tmp), report=False)
            stale = [n for n in OUTPUTS if (Path(tmp) / n).read_bytes() != (Path(args.out) / n).read_bytes()]
        print(f"differ from a regeneration: {', '.join(stale)}" if stale else "up to date")
        return 1 if stale else 0
    extract(args.repo, args.commit, Path(args.out), report=True)
    return 0


def extract(repo: str, commit: str, out: Path, report: bool) -> None:
    """Write the two CSVs into ``out``; with ``report``, print the rows each rule dropped."""
    paths = sorted(git(repo, "ls-tree", "-r", "--name-only", commit, "aiter/configs").split())
    per_file: dict[str, collections.Counter] = {}
    notes: dict[str, collections.Counter] = {}
    source_rows: dict[str, int] = {}
    gemm: list[dict] = []
    moe: list[dict] = []
    left_out = []
    for path in paths:
        kind = classify(path)
        if kind is None:
            if path.endswith(".csv") and "tuned" in path and "untuned" not in path:
                left_out.append(path)
            continue
        text = git(repo, "show", f"{commit}:{path}")
        source_rows[path] = sum(1 for line in text.splitlines()[1:] if line.strip())
        per_file[path], notes[path] = collections.Counter(), collections.Counter()
        rows = read_table(text, path, kind, per_file[path], notes[path])
        (moe if kind == "moe" else gemm).extend(rows)

    # One output key from several rows (several files; for fp8_block plain and bpreshuffle kernels; for bf16
    # the fp32 and bf16 outputs and preshuffled weights; for MoE the doweight_stage1 variants): the fastest,
    # its own file named. Ties go to the file that sorts first.
    merged = collections.Counter()

    def merge(rows: list[dict], key_of) -> list[dict]:
        best: dict[tuple, dict] = {}
        for r in sorted(rows, key=lambda r: (r["us"], r["file"])):
            k = key_of(r)
            if k not in best:
                best[k] = r
            else:
                per_file[r["file"]]["merged_same_key"] += 1
                if r["row"].get("dtype") == "fp8_block":
                    pre = ("bpreshuffle" in r["file"], "bpreshuffle" in best[k]["file"])
                    if pre[0] != pre[1]:
                        merged["fp8_block key in plain and bpreshuffle"] += 1
                        merged["  of which bpreshuffle faster"] += pre[1]
        return list(best.values())

    gemm = merge(gemm, lambda r: (r["arch"], r["row"]["dtype"], r["row"]["m"], r["row"]["n"], r["row"]["k"]))
    moe = merge(moe, lambda r: (r["arch"], *(r["row"][c] for c in MOE_OUT_KEY)))

    # Peak screen: a kernel faster than the GPU's dense peak allows is not a real time.
    for rows, ratio in ((gemm, gemm_ratio), (moe, moe_ratio)):
        for r in rows:
            if ratio(r) >= 1.0:
                per_file[r["file"]]["over_peak"] += 1
                print(f"over peak x{ratio(r):.2f}: {r['arch']} {r['row']} {r['us']} us {r['file']}", file=sys.stderr)
    gemm = [r for r in gemm if gemm_ratio(r) < 1.0]
    moe = [r for r in moe if moe_ratio(r) < 1.0]

    # Stratify M per shape.
    shapes = collections.defaultdict(list)
    for r in gemm:
        shapes[(r["arch"], r["row"]["dtype"], r["row"]["n"], r["row"]["k"])].append(r)
    gemm = []
    for (arch, *_), rows in sorted(shapes.items()):
        keep = spread(sorted({r["row"]["m"] for r in rows}), M_PER_SHAPE[arch])
        for r in rows:
            if r["row"]["m"] in keep:
                gemm.append(r)
            else:
                per_file[r["file"]]["stratified_out"] += 1

    out.mkdir(parents=True, exist_ok=True)
    gemm_lines = sorted(
        (r["arch"], r["cu"], r["row"]["dtype"], r["row"]["n"], r["row"]["k"], r["row"]["m"], r["us"], r["file"])
        for r in gemm
    )
    with open(out / "aiter_gemm.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(GEMM_COLUMNS)
        for arch, cu, dtype, n, k, m, us, file in gemm_lines:
            w.writerow([arch, cu, dtype, m, n, k, repr(us), file])
    # Sorted by configuration, then tokens.
    moe_lines = sorted(
        moe, key=lambda r: (r["arch"], r["cu"], *(r["row"][c] for c in MOE_OUT_KEY[1:]), r["row"]["tokens"], r["us"])
    )
    with open(out / "aiter_moe.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(MOE_COLUMNS)
        for r in moe_lines:
            w.writerow([r["arch"], r["cu"], *(r["row"][c] for c in MOE_OUT_KEY), repr(r["us"]), r["file"]])

    if not report:
        return
    kept_per_file = collections.Counter(r["file"] for r in gemm + moe)
    print(f"# aiter {commit[:8]}: per source file: rows, rule drops, kept (notes)")
    totals, note_totals = collections.Counter(), collections.Counter()
    for path in sorted(per_file):
        c, n = per_file[path], notes[path]
        totals.update(c)
        note_totals.update(n)
        totals["source"] += source_rows[path]
        totals["kept"] += kept_per_file[path]
        drops = ", ".join(f"{rule} {c[rule]}" for rule in RULES if c[rule])
        extra = ", ".join(f"{k} {v}" for k, v in sorted(n.items()) if v)
        print(
            f"{path}: {source_rows[path]}; {drops or '-'}; kept {kept_per_file[path]}"
            + (f" ({extra})" if extra else "")
        )
    print("# totals: " + ", ".join(f"{k} {totals[k]}" for k in ["source", *RULES, "kept"]))
    unchecked = collections.Counter(r["file"] for r in gemm + moe if r["unchecked"])
    merged["kept rows without a tflops figure to check"] = sum(unchecked.values())
    print("# notes: " + ", ".join(f"{k} {v}" for k, v in sorted((note_totals + merged).items())))
    print("# kept without tflops: " + ", ".join(f"{p.rsplit('/', 1)[-1]} {n}" for p, n in sorted(unchecked.items())))
    per_arch = collections.Counter((r["arch"], r["row"]["dtype"]) for r in gemm)
    print("# GEMM rows per (arch, dtype): " + ", ".join(f"{a} {d} {n}" for (a, d), n in sorted(per_arch.items())))
    per_moe = collections.Counter(r["arch"] for r in moe)
    print("# MoE rows per arch: " + ", ".join(f"{a} {n}" for a, n in sorted(per_moe.items())))
    worst = {}
    for r in gemm:
        k = (r["arch"], r["row"]["dtype"])
        worst[k] = max(worst.get(k, 0.0), gemm_ratio(r))
    for r in moe:
        k = (r["arch"], "moe a=" + r["row"]["a_dtype"])
        worst[k] = max(worst.get(k, 0.0), moe_ratio(r))
    print("# max FLOP rate / dense peak: " + ", ".join(f"{a} {d} {v:.3f}" for (a, d), v in sorted(worst.items())))
    print(f"# written: aiter_gemm.csv {len(gemm_lines)} rows, aiter_moe.csv {len(moe_lines)} rows")
    print("# tuned tables left out: " + ", ".join(p.removeprefix("aiter/configs/") for p in left_out))


if __name__ == "__main__":
    sys.exit(main())
