"""Read the history and summary of an offline wandb run file (``run-*.wandb``).

wandb 0.31 no longer ships a Python reader, so this follows the file format directly: a 7-byte
header (":W&B", magic, version), then LevelDB-log framing (32 KiB blocks, records with a 7-byte
header: crc32, length, type) around protobuf ``Record`` messages from ``wandb.proto``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _payloads(data: bytes):
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:  # block trailer padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            buf = chunk
        elif kind == MIDDLE:
            buf += chunk
        elif kind == LAST:
            yield buf + chunk
        elif kind == 0 and length == 0:
            break


def read_run(path: str | Path) -> tuple[list[dict], dict]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a wandb run file"
    history, summary = [], {}
    for payload in _payloads(data):
        rec = pb.Record()
        rec.ParseFromString(payload)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            for i in rec.summary.update:
                summary[i.key or "/".join(i.nested_key)] = json.loads(i.value_json)
    return history, summary
