"""Replay of the Azure LLM inference trace format (TIMESTAMP, ContextTokens, GeneratedTokens).

Arrival times keep the trace's gaps (times time_scale); token counts are scaled
by length_scale and bounded by the model context by the `overlong` rule.
Prompt ids are synthetic (the trace has no text), seeded per request.
"""
from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from chunklab.config import ChunklabError, WorkloadConfig, trace_length_scale
from chunklab.engine.sequence import Request
from chunklab.workload.synthetic import prompt_ids

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
LONG_PROMPT_TOKENS = 1024  # the class label of a replayed request: "long" at or above this


class TraceError(ChunklabError):
    pass


@dataclass(frozen=True)
class TraceRow:
    line: int
    time_s: float  # seconds since the epoch
    context_tokens: int
    generated_tokens: int


@dataclass(frozen=True)
class TraceStats:
    num_rows: int
    num_clipped: int  # prompts cut to fit the model context (overlong=clip)
    num_overlong: int  # prompts that did not fit, clipped or passed on to be rejected
    num_reordered: int = 0  # rows not in time order in the file, replayed in time order


def parse_timestamp(text: str, where: str) -> float:
    # Seven fractional digits are more than datetime takes; keep microseconds.
    try:
        base, _, frac = text.strip().partition(".")
        t = dt.datetime.strptime(base, "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
        return t.timestamp() + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise TraceError(f"{where}: bad TIMESTAMP {text!r} (want YYYY-MM-DD HH:MM:SS.fffffff)") from None


def read_rows(path: str | Path, start_offset: int, limit: int | None) -> list[TraceRow]:
    """Data rows [start_offset, start_offset + limit) (limit None: to the end), in file order."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"workload.trace.path={str(path)!r}: no such file")
    lines = decode_text(path).splitlines()
    if not lines:
        raise TraceError(f"{path}: empty file (want a {','.join(COLUMNS)} header and rows)")
    reader = csv.reader(lines)
    rows = []
    try:
        header = next(reader)
        if tuple(h.strip() for h in header[:3]) != COLUMNS:
            raise TraceError(f"{path}:1: header {','.join(header)[:80]!r} is not {','.join(COLUMNS)}")
        for index, fields in enumerate(reader):
            if index < start_offset:
                continue
            if limit is not None and len(rows) >= limit:
                break
            rows.append(parse_row(fields, f"{path}:{reader.line_num}", reader.line_num))
    except csv.Error as err:
        raise TraceError(f"{path}:{reader.line_num}: not CSV ({err})") from None
    if not rows:
        raise TraceError(f"{path}: no data rows after workload.trace.start_offset={start_offset}")
    return rows


def decode_text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise TraceError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}); "
                         f"want a CSV of {','.join(COLUMNS)}") from None


def parse_row(fields: list[str], where: str, line: int) -> TraceRow:
    if len(fields) != 3:
        raise TraceError(f"{where}: expected 3 fields, got {len(fields)}: {','.join(fields)!r}")
    try:
        context, generated = int(fields[1]), int(fields[2])
    except ValueError:
        raise TraceError(f"{where}: token counts must be integers, got {fields[1]!r}, {fields[2]!r}") from None
    if context < 1 or generated < 1:
        raise TraceError(f"{where}: token counts must be >= 1, got {context}, {generated}")
    return TraceRow(line, parse_timestamp(fields[0], where), context, generated)


def trace_requests(cfg: WorkloadConfig, max_seq_len: int, vocab_size: int) -> tuple[list[Request], TraceStats]:
    t = cfg.trace
    in_file_order = read_rows(t.path, t.start_offset, cfg.num_requests)
    # Rows out of time order are replayed in time order (stable), and counted: arrivals are
    # measured from the earliest row, so none is ever negative.
    rows = sorted(in_file_order, key=lambda r: r.time_s)
    num_reordered = sum(a is not b for a, b in zip(rows, in_file_order))
    t0 = rows[0].time_s
    requests, clipped, overlong = [], 0, 0
    scale = trace_length_scale(t, max_seq_len)
    for i, row in enumerate(rows):
        num_prompt = max(1, round(row.context_tokens * scale))
        num_output = max(1, round(row.generated_tokens * scale))
        if num_prompt + num_output - 1 > max_seq_len:
            overlong += 1
            if t.overlong == "clip":  # keep the output (up to half the context), cut the prompt
                num_output = min(num_output, max_seq_len // 2)
                num_prompt = min(num_prompt, max_seq_len - num_output + 1)
                clipped += 1
        arrival_s = (row.time_s - t0) * t.time_scale
        label = "long" if num_prompt >= LONG_PROMPT_TOKENS else "short"
        requests.append(Request(i, arrival_s, prompt_ids(cfg.seed, i, num_prompt, vocab_size), num_output, label))
    return requests, TraceStats(len(rows), clipped, overlong, num_reordered)
