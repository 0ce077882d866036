"""Strict readers for raw json / jsonl files: every error names the file, the row and the key."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from components.data.schema import DataError, cut

Row = tuple[str, dict[str, Any]]  # (where: "path: line 7" / "path: row 3", record)
BOM = b"\xef\xbb\xbf"
_UNSTORABLE_ESCAPE = re.compile(r"\\u(?:[dD][89a-fA-F]|0000)")  # JSON's only ways to a lone surrogate or a NUL


def _decode(path: Path, raw: bytes, line_offset: int = 0) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = line_offset + raw[: err.start].count(b"\n") + 1
        byte = raw[err.start]
        raise DataError(f"{path}: line {line}: not valid UTF-8 (byte {byte:#04x} at offset {err.start})") from None


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    return raw[len(BOM) :] if raw.startswith(BOM) else raw  # utf-8-sig


def _as_record(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def read_jsonl(path: Path) -> Iterator[Row]:
    """Records of a jsonl file, labelled by 1-based line number; blank lines are skipped, a file of none is refused."""
    lines = _read_bytes(path).split(b"\n")
    if not any(raw.strip() for raw in lines):
        raise DataError(f"{path}: line 1: no records (the file is empty or blank)")
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{path}: line {n}"
        text = _decode(path, raw, n - 1)
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            raise DataError(f"{where}: invalid JSON (truncated?): {err.msg} at column {err.colno}") from None
        except (RecursionError, ValueError) as err:
            raise DataError(f"{where}: invalid JSON: {_why(err)}") from None
        if _UNSTORABLE_ESCAPE.search(text):
            check_encodable(obj, where)
        yield where, _as_record(obj, where)


def read_json_list(path: Path) -> Iterator[Row]:
    """Records of a JSON array, labelled by 0-based index; a broken element names its index and line."""
    text = _decode(path, _read_bytes(path))
    dec = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if text[i : i + 1] != "[":
        raise DataError(f"{path}: expected a JSON list of records")
    i, idx = _skip_ws(text, i + 1), 0
    if text[i : i + 1] == "]":
        raise DataError(f"{path}: row 0: no records (an empty list)")
    while True:
        where = f"{path}: row {idx}"
        start = i
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as err:
            raise DataError(f"{where} (line {err.lineno}): invalid JSON (truncated?): {err.msg}") from None
        except (RecursionError, ValueError) as err:
            raise DataError(f"{where} (line {text.count(chr(10), 0, start) + 1}): invalid JSON: {_why(err)}") from None
        if _UNSTORABLE_ESCAPE.search(text, start, i):
            check_encodable(obj, where)
        yield where, _as_record(obj, where)
        i = _skip_ws(text, i)
        sep = text[i : i + 1]
        if sep == "]":
            if text[i + 1 :].strip():
                raise DataError(f"{path}: extra data after the closing ']'")
            return
        if sep != ",":
            raise DataError(f"{where}: invalid JSON (truncated?): expected ',' or ']' after this row")
        i, idx = _skip_ws(text, i + 1), idx + 1


def read_records(path: Path) -> Iterator[Row]:
    """jsonl for a .jsonl file, else a JSON list."""
    return read_jsonl(path) if path.suffix == ".jsonl" else read_json_list(path)


def _why(err: RecursionError | ValueError) -> str:
    if isinstance(err, RecursionError):
        return "nested too deeply"
    return f"number too long ({str(err).split(';')[0]})"  # int() refuses more than sys.get_int_max_str_digits()


def check_encodable(value: Any, where: str, path: str = "") -> None:
    """Every string in `value` (keys included) is text: no lone surrogate (Parquet cannot store one) and no NUL
    (the mark of a binary or corrupted export; no question, answer or passage holds one)."""
    try:
        bad = _first_unstorable(value, path)
    except RecursionError:
        raise DataError(f"{where}: nested too deeply") from None
    if bad is not None:
        at, problem = bad
        raise DataError(f"{where}: field {cut(at)!r}: {problem}")


def _problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"not encodable as UTF-8 (lone surrogate {err.object[err.start]!r} at char {err.start})"
    if "\x00" in text:
        return f"contains a NUL character (\\u0000) at char {text.index(chr(0))}; remove it from the file"
    return None


def _first_unstorable(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        problem = _problem(value)
        return (path, problem) if problem else None
    if isinstance(value, dict):
        items = [(f"{path}.{k}" if path else str(k), k, v) for k, v in value.items()]
        for at, k, v in items:
            found = _first_unstorable(k, at) or _first_unstorable(v, at)
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for j, v in enumerate(value):
            found = _first_unstorable(v, f"{path}[{j}]")
            if found:
                return found
    return None


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def need(row: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    """row[key], which must exist and have type `kind`; strings must be non-blank."""
    if key not in row or row[key] is None:
        raise DataError(f"{where}: missing field {key!r}")
    value = row[key]
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in _types(kind):
        raise DataError(f"{where}: field {key!r} must be {_names(kind)}, got {type(value).__name__}")
    if isinstance(value, str) and not value.strip():
        raise DataError(f"{where}: field {key!r} is empty")
    if isinstance(value, str) and "\x00" in value:  # JSON readers catch it earlier; this is for `datasets` rows
        raise DataError(f"{where}: field {key!r}: {_problem(value)}")
    return value


def answers_of(values: Any, key: str, where: str) -> list[str]:
    """Non-empty list of non-blank answer strings (a single string is one answer)."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise DataError(f"{where}: field {key!r} must be a string or a list of strings")
    answers = [v.strip() for v in values if v.strip()]
    if not answers:
        raise DataError(f"{where}: field {key!r}: empty answers")
    return list(dict.fromkeys(answers))


def _types(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in _types(kind))
