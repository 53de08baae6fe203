#!/usr/bin/env python3
"""Regenerate ``demos/zoo/vendor_data/mori_ep.csv`` and ``ep_published.csv`` from pinned git mirrors.

Stdlib only. Each source is read at a pinned commit of a bare git mirror (``git show COMMIT:path``),
so the output is the same whatever the mirror's HEAD later becomes:

* ROCm/mori: the measured tuning tables ``python/mori/ops/tuning_configs/*.json`` (-> ``mori_ep.csv``)
  and the two MORI-EP benchmark tables of ``README.md`` (-> ``ep_published.csv``).
* uccl-project/uccl: the result tables of ``ep/README.md`` (-> ``ep_published.csv``).
* awslabs/awsome-distributed-ai: ``micro-benchmarks/expert-parallelism/ep-backend-comparison/RESULTS*.md``
  (-> ``ep_published.csv``).

Every table is parsed from the markdown/HTML; what the prose around a table states (hardware, token
count, dtypes) is parsed too where it is stated, and the few facts that are not in a form worth parsing
(which network a heading's NIC is, which library a backend label names) are the literal maps below.
``demos/zoo/vendor_data/README-ep.md`` documents every rule.

Usage::

    python scripts/extract_ep_tables.py            # write both CSVs
    python scripts/extract_ep_tables.py --check    # exit 1 if the committed CSVs differ
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

MIRRORS = Path("/work/.mirror")
REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = REPO_ROOT / "demos" / "zoo" / "vendor_data"

MORI = {
    "name": "ROCm/mori",
    "git": MIRRORS / "ROCm+mori" / "repo",
    "commit": "624002c897a30928ec04c14fc167bf2b8a93f6ce",
}
UCCL = {
    "name": "uccl-project/uccl",
    "git": MIRRORS / "uccl-project+uccl" / "repo",
    "commit": "da914a2054c29725464803e379bb3b98de90dfa1",
}
AWS = {
    "name": "awslabs/awsome-distributed-ai",
    "git": MIRRORS / "awslabs+awsome-distributed-ai" / "repo",
    "commit": "95b939cdc5b24ded03a70da21533964f9354b731",
}

TUNING_DIR = "python/mori/ops/tuning_configs/"
# AsyncLL tables are left out: their latencies grow to ~0.24-0.47 s at 4096 tokens with ~1 GB/s, two to
# three orders of magnitude off the same GPUs' InterNodeV1LL tables (README-ep.md).
DROPPED_KERNEL_TYPES = {"AsyncLL"}

_MEASURED = (
    "block_num",
    "rdma_block_num",
    "warp_per_block",
    "latency_us",
    "bandwidth_gbps",
    "rdma_gbps",
    "xgmi_gbps",
    "ll_gbps",
)
"""A MoRI tuning row's measured fields (after its shape's): two rows equal in shape and these are one."""

MORI_COLUMNS = [
    "gpu",
    "kernel_type",
    "ep",
    "phase",
    "dtype",
    "quant",
    "zero_copy",
    "tokens",
    "hidden",
    "top_k",
    *_MEASURED,
    "copies",
    "file",
]

PUBLISHED_COLUMNS = [
    "source",
    "commit",
    "file",
    "run",
    "instance",
    "gpu",
    "network",
    "nics_per_gpu",
    "nic_gbps",
    "library",
    "mode",
    "ep",
    "tokens",
    "hidden",
    "top_k",
    "experts",
    "kernel",
    "dispatch_dtype",
    "latency_us",
    "bandwidth_gbs",
    "bandwidth_kind",
    "link",
    "stale",
    "note",
]


def git_show(src: dict, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(src["git"]), "show", f"{src['commit']}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def git_ls(src: dict) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(src["git"]), "ls-tree", "-r", "--name-only", src["commit"]],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()


def num(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value


def cell(value) -> str:
    """A CSV cell: '' for None, 1/0 for booleans, the number as the source wrote it otherwise."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# ---------------------------------------------------------------------------------------------------
# MoRI tuning tables -> mori_ep.csv
# ---------------------------------------------------------------------------------------------------


def mori_rows(log: list[str]) -> list[dict]:
    rows: list[dict] = []
    names = sorted(n for n in git_ls(MORI) if n.startswith(TUNING_DIR) and n.endswith(".json"))
    dropped_files = dropped_rules = collapsed = 0
    for name in names:
        base = name[len(TUNING_DIR) :]
        data = json.loads(git_show(MORI, name))
        arch, model, kernel_type, ep_tag, phase = base[: -len(".json")].split("_")
        # the file's own header must agree with its name
        assert (data["gpu_arch"], data["gpu_model"], data["kernel_type"]) == (arch, model, kernel_type), base
        assert (f"ep{data['ep_size']}", data["phase"]) == (ep_tag, phase), base
        if kernel_type in DROPPED_KERNEL_TYPES:
            dropped_files += 1
            dropped_rules += len(data["rules"])
            log.append(f"mori: dropped {base} ({len(data['rules'])} rules, kernel type {kernel_type})")
            continue
        groups: dict[tuple, list[dict]] = {}
        for rule in data["rules"]:
            internode = "avg_latency_us" in rule
            row = {
                "gpu": data["gpu_model"].lower(),
                "kernel_type": kernel_type,
                "ep": data["ep_size"],
                "phase": phase,
                "dtype": rule["dtype"],
                "quant": rule.get("quant_type"),
                "zero_copy": rule.get("zero_copy"),
                "tokens": rule["num_tokens"],
                "hidden": rule["hidden_dim"],
                "top_k": rule.get("topk"),
                "block_num": rule["block_num"],
                "rdma_block_num": rule["rdma_block_num"],
                "warp_per_block": rule["warp_per_block"],
                "latency_us": rule["avg_latency_us"] if internode else rule["latency_us"],
                "bandwidth_gbps": rule["bandwidth_gbps"],
                "rdma_gbps": rule.get("avg_rdma_bandwidth_gbps"),
                "xgmi_gbps": rule.get("avg_xgmi_bandwidth_gbps"),
                "ll_gbps": rule.get("avg_ll_bandwidth_gbps"),
                "file": base,
            }
            key = (row["dtype"], row["tokens"], row["hidden"], row["top_k"]) + tuple(row[k] for k in _MEASURED)
            groups.setdefault(key, []).append(row)
        for members in groups.values():
            # Rows that differ only in (zero_copy, quant) but carry the very same measured figures are one
            # measurement filed under several labels: keep one, quant "none" and zero-copy first.
            members.sort(key=lambda r: (r["quant"] not in (None, "none"), r["quant"] or "", r["zero_copy"] is False))
            kept = dict(members[0], copies=len(members))
            if len(members) > 1:
                collapsed += len(members) - 1
            rows.append(kept)
    rows.sort(
        key=lambda r: (
            r["gpu"],
            r["kernel_type"],
            r["ep"],
            r["phase"],
            r["dtype"],
            r["quant"] or "",
            -1 if r["zero_copy"] is None else int(r["zero_copy"]),
            r["hidden"],
            r["top_k"] or 0,
            r["tokens"],
        )
    )
    log.append(f"mori: {dropped_files} files / {dropped_rules} rules dropped (AsyncLL)")
    log.append(f"mori: {collapsed} duplicate rules collapsed into kept rows")
    log.append(f"mori: {len(rows)} rows written")
    return rows


# ---------------------------------------------------------------------------------------------------
# Published tables -> ep_published.csv
# ---------------------------------------------------------------------------------------------------


def blank_row(src: dict, path: str, **fields) -> dict:
    row = {c: None for c in PUBLISHED_COLUMNS}
    row.update(source=src["name"], commit=src["commit"], file=path, stale=0)
    row.update(fields)
    return row


def md_tables(text: str) -> list[tuple[list[str], int, list[list[str]]]]:
    """Every pipe table in ``text``: (the headings above it, its first line number, its rows of cells)."""
    tables = []
    headings: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^(#+)\s+(.*)", line)
        if m:
            depth = len(m.group(1))
            headings = headings[: depth - 1] + [""] * (depth - 1 - len(headings)) + [m.group(2).strip()]
        if line.lstrip().startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[i + 1]):
            start = i
            body = []
            header = split_row(line)
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                body.append(split_row(lines[i]))
                i += 1
            tables.append((list(headings), start, [header] + body))
            continue
        i += 1
    return tables


def split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def prose_between(text: str, start_line: int) -> str:
    """The text from the last heading above ``start_line`` down to the table."""
    lines = text.splitlines()[:start_line]
    for j in range(len(lines) - 1, -1, -1):
        if lines[j].startswith("#"):
            return "\n".join(lines[j:])
    return "\n".join(lines)


_GBS = re.compile(r"([0-9.]+)\s*GB/s(\*)?(?:\s*\(([^)]+)\))?")
_US = re.compile(r"([0-9.]+)\s*(?:us|µs)(\*)?")


# -- MoRI README -------------------------------------------------------------------------------------

_MORI_HW = {
    # README hardware label -> (gpu, network, note)
    "MI300X + CX7": ("mi300x", "ib", "NIC: NVIDIA ConnectX-7 (InfiniBand)"),
    "MI355X + AINIC": ("mi355x", "roce", "NIC: AMD AINIC (Pollara); the README names it AINIC"),
}


def mori_published(log: list[str]) -> list[dict]:
    path = "README.md"
    text = git_show(MORI, path)
    rows = []
    for m in re.finditer(r"\*\*(Bandwidth|Latency)\*\* \(([^)]*)\)\s*<table>(.*?)</table>", text, re.S):
        which, params, table = m.group(1), m.group(2), m.group(3)
        tokens = int(re.search(r"(\d+) tokens", params).group(1))
        hidden = int(re.search(r"(\d+) hidden", params).group(1))
        top_k = int(re.search(r"top-(\d+) experts", params).group(1))
        dispatch_dtype = re.search(r"(\w+) dispatch", params).group(1).lower()
        trs = re.findall(r"<tr>(.*?)</tr>", table, re.S)
        header = re.findall(r"<th>(.*?)</th>", trs[0])
        hw = None
        for tr in trs[1:]:
            tds = re.findall(r"<td[^>]*>(.*?)</td>", tr)
            if len(tds) == len(header):
                hw, tds = tds[0], tds[1:]
            label, values = tds[0], tds[1:]
            gpu, network, hw_note = _MORI_HW[hw]
            lm = re.fullmatch(r"EP(\d+)(-V1)?(-LL)?", label)
            ep = int(lm.group(1))
            mode = "low-latency" if lm.group(3) else "normal"
            kernel_name = {(False, False): "IntraNode", (True, False): "InterNodeV1", (True, True): "InterNodeV1LL"}[
                (bool(lm.group(2)), bool(lm.group(3)))
            ]
            if ep == 8:
                network = "xgmi"
            base = dict(
                run=f"readme-{which.lower()}",
                gpu=gpu,
                network=network,
                library="mori",
                mode=mode,
                ep=ep,
                tokens=tokens,
                hidden=hidden,
                top_k=top_k,
                # not printed beside the tables: MoRI's benchmark scripts fix 256 experts (256 // world_size
                # per rank) in tests/python/ops/bench_dispatch_combine.py and test_dispatch_combine_internode.py
                experts=256,
                dispatch_dtype=dispatch_dtype,
            )
            note = f"MoRI row label {label} (kernel {kernel_name}); {hw} system; " + (
                hw_note if ep > 8 else "one node, XGMI only"
            )
            for col, value in zip(header[2:], values):
                if value.strip() == "x":
                    continue
                kernel = col.split()[0].lower()
                stale = "*" in value
                if which == "Bandwidth":
                    link = col.split()[1].lower()
                    gbs = _GBS.search(value)
                    rows.append(
                        blank_row(
                            MORI,
                            path,
                            **base,
                            kernel=kernel,
                            bandwidth_gbs=num(gbs.group(1)),
                            bandwidth_kind="algbw",
                            link=link,
                            stale=int(stale),
                            note=note,
                        )
                    )
                else:
                    # one row per phase: its latency and its BW cell
                    if col.endswith("Latency"):
                        lat = _US.search(value)
                        rows.append(
                            blank_row(MORI, path, **base, kernel=kernel, latency_us=num(lat.group(1)), stale=int(stale))
                        )
                        rows[-1]["note"] = note
                    else:
                        gbs = _GBS.search(value)
                        last = rows[-1]
                        assert last["kernel"] == kernel and last["ep"] == ep
                        last["bandwidth_gbs"] = num(gbs.group(1))
                        # EP8: received bytes / time (XGMI algbw); V1-LL: tokens x top-k x token bytes / time
                        if mode == "low-latency":
                            last["bandwidth_kind"], last["link"] = "per-rank", None
                        else:
                            last["bandwidth_kind"], last["link"] = "algbw", "xgmi"
                        last["stale"] = int(last["stale"] or stale)
    log.append(f"mori README: {len(rows)} rows")
    return rows


# -- UCCL README -------------------------------------------------------------------------------------

_UCCL_AMD_NIC = [
    # heading keyword -> (network, note)
    ("CX7", "ib", "NIC: NVIDIA ConnectX-7 (InfiniBand)"),
    (
        "Pollara",
        "roce",
        "NIC: AMD Pollara AI NIC, an Ethernet RoCE NIC; the heading says 'Pollara AI NIC InfiniBand'",
    ),
    ("Thor2", "roce", "NIC: Broadcom Thor2 (RoCE)"),
]


def _uccl_commands(text: str) -> dict[str, dict[str, int]]:
    """The README's benchmark command lines: script -> {num-tokens, hidden, num-topk, num-experts}."""
    out = {}
    for m in re.finditer(r"bench/(test_\w+)\.py([^`]*?)```", text, re.S):
        args = dict(re.findall(r"--(num-tokens|hidden|num-topk|num-experts)[ =](\d+)", m.group(2)))
        out[m.group(1)] = {k: int(v) for k, v in args.items()}
    return out


def uccl_published(log: list[str]) -> list[dict]:
    path = "ep/README.md"
    text = git_show(UCCL, path)
    commands = _uccl_commands(text)
    rows = []
    for headings, start, table in md_tables(text):
        section = headings[2] if len(headings) > 2 else ""
        if not section.startswith(("Normal kernels", "Low-latency kernels")):
            continue
        heading = headings[3]
        prose = prose_between(text, start)
        low_latency = section.startswith("Low-latency")
        hw = re.search(r"(\d+)x (\w+) \+ (\d+)x (\d+)\s*Gb/s EFA", prose)
        instance = re.search(r"(p\d\w*(?:-\w+)?)", heading)
        amd = re.search(r"MI\d+X", heading)
        if amd:
            gpu, instance_name = amd.group(0).lower(), None
            network, hw_note = next((n, note) for key, n, note in _UCCL_AMD_NIC if key in heading)
            nics_per_gpu = nic_gbps = None
        else:
            gpus, gpu_name, nics, gbps = hw.groups()
            gpu, instance_name, network = gpu_name.lower(), instance.group(1), "efa"
            nics_per_gpu, nic_gbps = int(nics) // int(gpus), int(gbps)
            hw_note = f"{gpus}x {gpu_name} + {nics}x {gbps} Gb/s EFA per node"
        stated_tokens = re.search(r"(\d+) tokens per batch", prose)
        stated_fp8 = re.search(r"FP8 dispatch", prose)
        header = table[0]
        for body in table[1:]:
            # column groups: a '#EP' column and the metric columns after it
            groups = []
            for col, value in zip(header, body):
                if col.endswith("#EP"):
                    groups.append((col[: -len("#EP")].strip(), int(value), []))
                elif groups:
                    groups[-1][2].append((col, value))
            row_type = body[0] if not low_latency else "Internode"
            for group, ep_value, metrics in groups:
                kernel = "combine" if group.endswith("Combine") else "dispatch"
                ep, ep_note = ep_value, None
                others = {g[1] for g in groups if not g[0].startswith("BF16")}
                if group.startswith("BF16") and len(others) == 1 and ep_value not in others:
                    # the AMD tables' EP64 rows read 'Internode | 64 | .. | 32 | .. | 64 | ..': the BF16-dispatch
                    # #EP cell disagrees with the row's other two; taken as the row's EP (a typo in the source)
                    ep = others.pop()
                    ep_note = f"the source's BF16-dispatch #EP cell on this row reads {ep_value}; taken as {ep}"
                if group.startswith("FP8"):
                    dispatch_dtype = "fp8"
                elif group.startswith("BF16"):
                    dispatch_dtype = "bf16"
                elif stated_fp8:
                    dispatch_dtype = "fp8"
                else:
                    dispatch_dtype = None
                intranode = row_type == "Intranode"
                script = "test_low_latency" if low_latency else ("test_intranode" if intranode else "test_internode")
                cmd = commands[script]
                tokens = int(stated_tokens.group(1)) if stated_tokens else cmd["num-tokens"]
                experts = cmd["num-experts"] if cmd["num-experts"] % ep == 0 else None
                notes = [hw_note]
                if not stated_tokens:
                    notes.append(f"tokens/hidden/top-k from the README's {script} command")
                if experts is None:
                    notes.append(f"experts not stated ({cmd['num-experts']} of the README's command does not divide)")
                else:
                    notes.append(f"experts from the README's {script} command")
                if ep_note:
                    notes.append(ep_note)
                row = blank_row(
                    UCCL,
                    path,
                    run=slug(("low-latency " if low_latency else "normal ") + heading.replace("On ", "")),
                    instance=instance_name,
                    gpu=gpu,
                    network=("xgmi" if amd else "nvlink") if intranode else network,
                    nics_per_gpu=nics_per_gpu,
                    nic_gbps=nic_gbps,
                    library="uccl-ep",
                    mode="low-latency" if low_latency else "normal",
                    ep=ep,
                    tokens=tokens,
                    hidden=cmd["hidden"],
                    top_k=cmd["num-topk"],
                    experts=experts,
                    kernel=kernel,
                    dispatch_dtype=dispatch_dtype,
                    bandwidth_kind="per-rank" if low_latency else "bottleneck",
                )
                for col, value in metrics:
                    gbs, us = _GBS.search(value), _US.search(value)
                    if gbs:
                        row["bandwidth_gbs"] = num(gbs.group(1))
                        link = (gbs.group(3) or ("RDMA" if "RDMA" in col else "")).lower()
                        row["link"] = link or None
                    if us:
                        row["latency_us"] = num(us.group(1))
                row["note"] = "; ".join(notes)
                rows.append(row)
    log.append(f"uccl README: {len(rows)} rows")
    return rows


# -- AWS RESULTS ----------------------------------------------------------------------------------------

_AWS_DIR = "micro-benchmarks/expert-parallelism/ep-backend-comparison/"
_AWS_LIBRARY = {"NVSHMEM (DeepEP)": "nvshmem-deepep", "UCCL (UCCL-EP)": "uccl-ep"}
_AWS_MODE = {"internode (RDMA)": "normal", "low-latency": "low-latency"}


def _aws_env(text: str) -> dict:
    env = {}
    for _, _, table in md_tables(text):
        if table[0][:2] == ["Field", "Value"]:
            env = {r[0]: r[1] for r in table[1:]}
            break
    hw = env["Hardware"]
    instance = re.search(r"`([^`]+)`", hw).group(1)
    gpu = re.search(r"\b([BH]\d{3})\b", hw).group(1).lower()
    gpus, nics = re.search(r"(\d+) GPU \+ \**(\d+) EFA", hw).groups()
    cfg = env["EP config"]
    return {
        "date": env["Date"],
        "instance": instance,
        "gpu": gpu,
        "nics_per_gpu": int(nics) // int(gpus),
        "tokens": int(re.search(r"num-tokens=(\d+)", cfg).group(1)),
        "ll_tokens": int(re.search(r"LL: (\d+)", cfg).group(1)),
        "hidden": int(re.search(r"hidden=(\d+)", cfg).group(1)),
        "top_k": int(re.search(r"num-topk=(\d+)", cfg).group(1)),
        "experts": int(re.search(r"num-experts=(\d+)", cfg).group(1)),
    }


def _aws_row(path: str, env: dict, run: str, library: str, mode: str, ranks: int, kernel: str, gbs, note: str):
    ll = mode == "low-latency"
    nccl = library == "nccl"
    return blank_row(
        AWS,
        path,
        run=run,
        instance=env["instance"],
        gpu=env["gpu"],
        network="efa",
        nics_per_gpu=env["nics_per_gpu"],
        library=library,
        mode=mode,
        ep=ranks,
        tokens=None if nccl else (env["ll_tokens"] if ll else env["tokens"]),
        hidden=None if nccl else env["hidden"],
        top_k=None if nccl else env["top_k"],
        experts=None if nccl else env["experts"],
        kernel=kernel,
        # internode: the last 'Best dispatch' line DeepEP's test prints, BF16; low-latency: the FP8 timed phase
        dispatch_dtype=None if nccl else ("fp8" if ll else "bf16"),
        bandwidth_gbs=gbs,
        bandwidth_kind="busbw" if nccl else ("per-rank" if ll else "bottleneck"),
        link=None if (nccl or ll) else "rdma",
        note=note,
    )


def aws_published(log: list[str]) -> list[dict]:
    rows = []
    names = sorted(n for n in git_ls(AWS) if n.startswith(_AWS_DIR) and re.search(r"/RESULTS[^/]*\.md$", n))
    log.append("aws: result files " + ", ".join(n[len(_AWS_DIR) :] for n in names))
    skipped = 0
    for path in names:
        text = git_show(AWS, path)
        env = _aws_env(text)
        for headings, _, table in md_tables(text):
            section = headings[1] if len(headings) > 1 else ""
            header = table[0]
            ranks_m = re.search(r"(\d+) ranks", section)
            run = slug(f"{env['date']} {section}")
            if header[:2] == ["Backend", "Mode"]:
                ranks = int(ranks_m.group(1))
                for body in table[1:]:
                    library, mode = _AWS_LIBRARY[body[0]], _AWS_MODE[body[1]]
                    for kernel, value in (("dispatch", body[2]), ("combine", body[3])):
                        gbs = float(re.match(r"[0-9.]+", value).group(0))
                        note = "max over ranks (collect_results.py)" if mode == "low-latency" else "RDMA leg"
                        if "¹" in value:
                            note += "; FP8 round_scale=False sub-case (the source's footnote 1)"
                        rows.append(_aws_row(path, env, run, library, mode, ranks, kernel, gbs, note))
            elif header[0].startswith("Reference (NCCL"):
                ranks = int(ranks_m.group(1))
                for body in table[1:]:
                    mode = "alltoall-matched" if body[1] == "matched-size" else "alltoall-peak"
                    note = body[0].replace("busbw ", "nccl-tests alltoall_perf busbw ")
                    rows.append(_aws_row(path, env, run, "nccl", mode, ranks, "alltoall", float(body[2]), note))
            elif header[:2] == ["nodes", "ranks"]:
                run = slug("2026-07-14 scale run " + section.split("—")[0])
                for body in table[1:]:
                    ranks = int(body[1])
                    cols = zip(header[2:], body[2:])
                    for col, value in cols:
                        parts = [p.strip().strip("*") for p in value.split("/")]
                        if len(parts) == 1:
                            parts = parts * 2  # 'constructor abort' covers both legs
                        if col.startswith("NCCL"):
                            pairs = (
                                ("alltoall-matched", "alltoall", parts[0]),
                                ("alltoall-peak", "alltoall", parts[1]),
                            )
                            library = "nccl"
                        else:
                            library = next(v for k, v in _AWS_LIBRARY.items() if col.split()[0] == k.split()[0])
                            pairs = (("normal", "dispatch", parts[0]), ("normal", "combine", parts[1]))
                        for mode, kernel, value in pairs:
                            if not re.fullmatch(r"[0-9.]+", value):
                                skipped += 1
                                continue
                            note = "2026-07-14 scale run, us-east-1-atl-2a local zone"
                            note += "; RDMA leg" if library != "nccl" else "; nccl-tests alltoall_perf busbw"
                            rows.append(_aws_row(path, env, run, library, mode, ranks, kernel, float(value), note))
    log.append(f"aws: {len(rows)} rows; {skipped} scale-run cells without a figure (aborts) skipped")
    return rows


AWS_V2 = {**AWS, "commit": "46793a8d47446418333a501540c7cbb1f437566d"}
"""RESULTS-b200.md is newer than the mirror's snapshot: its rows are transcribed below from the file at this
commit (read from the stored index of public repositories), not parsed."""

# (mode, ep, kernel, dispatch dtype of the case, latency us, scale-out GB/s): the DeepEP V2 operation table of
# RESULTS-b200.md (p6-b200, NCCL GIN over EFA, GPU-initiated), the matched set: FP8 dispatch, BF16 combine.
_AWS_V2_ROWS = (
    ("low-latency", 16, "dispatch", "fp8", 185.637, 5),
    ("low-latency", 16, "combine", "bf16", 197.481, 9),
    ("low-latency", 32, "dispatch", "fp8", 275.659, 10),
    ("low-latency", 32, "combine", "bf16", 370.928, 14),
    ("normal", 16, "dispatch", "fp8", 864.688, 35),
    ("normal", 16, "combine", "bf16", 1615.0, 36),
    ("normal", 32, "dispatch", "fp8", 2041.0, 41),
    ("normal", 32, "combine", "bf16", 3745.0, 43),
)


def aws_v2_published(log: list[str]) -> list[dict]:
    path = _AWS_DIR + "RESULTS-b200.md"
    rows = [
        blank_row(
            AWS_V2,
            path,
            run="2026-08-23-deepep-v2-b200",
            instance="p6-b200",
            gpu="b200",
            network="efa-gda",
            nics_per_gpu=1,
            nic_gbps=400,
            library="deepep-v2",
            mode=mode,
            ep=ep,
            tokens=128 if mode == "low-latency" else 4096,
            hidden=7168,
            top_k=8,
            experts=256,
            kernel=kernel,
            dispatch_dtype=dtype,
            latency_us=us,
            bandwidth_gbs=so,
            bandwidth_kind="scale-out",
            link="rdma",
            note="DeepEP V2 over NCCL GIN (NCCL_GIN_TYPE=5, EFA-GDA); one start per cell; transcribed",
        )
        for mode, ep, kernel, dtype, us, so in _AWS_V2_ROWS
    ]
    log.append(f"aws (RESULTS-b200.md at {AWS_V2['commit'][:8]}, transcribed): {len(rows)} rows")
    return rows


def published_rows(log: list[str]) -> list[dict]:
    rows = mori_published(log) + uccl_published(log) + aws_published(log) + aws_v2_published(log)
    key_cols = (
        "source",
        "run",
        "gpu",
        "network",
        "library",
        "mode",
        "ep",
        "tokens",
        "kernel",
        "dispatch_dtype",
        "link",
    )
    keys = [tuple(cell(r[c]) for c in key_cols) for r in rows]
    assert len(set(keys)) == len(keys), "duplicate published rows"
    order = {"dispatch": 0, "combine": 1, "alltoall": 2}
    rows.sort(
        key=lambda r: (
            r["source"],
            r["run"],
            r["gpu"],
            r["library"],
            r["mode"],
            r["ep"],
            r["tokens"] or 0,
            order[r["kernel"]],
            r["dispatch_dtype"] or "",
            r["link"] or "",
        )
    )
    return rows


def render(columns: list[str], rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell(row[c]) for c in columns])
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="folder to write the CSVs to")
    parser.add_argument("--check", action="store_true", help="compare with the files in --out, write nothing")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    log: list[str] = []
    outputs = {
        "mori_ep.csv": render(MORI_COLUMNS, mori_rows(log)),
        "ep_published.csv": render(PUBLISHED_COLUMNS, published_rows(log)),
    }
    if not args.quiet:
        print("\n".join(log))
    status = 0
    for name, content in outputs.items():
        target = args.out / name
        if args.check:
            same = target.exists() and target.read_text() == content
            print(f"{name}: {'up to date' if same else 'DIFFERS'}")
            status |= not same
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            print(f"wrote {target} ({content.count(chr(10)) - 1} rows)")
    return status


if __name__ == "__main__":
    sys.exit(main())
