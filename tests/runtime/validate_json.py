#!/usr/bin/env python3
"""Checks constrained answers with the reference validator (Debian's
python3-jsonschema). stdin: one {"schema": ..., "text": "..."} per line.
stdout: "ok" or "bad <line>: <why>" per line. Exit 0 if all are ok."""
import json
import sys

import jsonschema

bad = 0
for n, line in enumerate(sys.stdin, 1):
    case = json.loads(line)
    try:
        value = json.loads(case["text"])
        jsonschema.Draft202012Validator(case["schema"]).validate(value)
        print("ok")
    except Exception as e:  # noqa: BLE001 - every failure is reported
        bad += 1
        print(f"bad {n}: {type(e).__name__}: {str(e)[:200]!r} text={case['text'][:200]!r}")
sys.exit(1 if bad else 0)
