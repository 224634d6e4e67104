#!/usr/bin/env python3
"""Regenerate the committed protobuf/gRPC modules from our own .proto files.

Every ``src/topodra/**/proto/*.proto`` is compiled with grpcio-tools into the
same directory (``*_pb2.py``, ``*_pb2.pyi`` and, for files with services,
``*_pb2_grpc.py``). ``--check`` compiles into a temporary tree and fails when
the result differs from what is committed (tests/test_generated.py runs it).
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def proto_files() -> list[Path]:
    return sorted(p for p in SRC.glob("topodra/**/proto/*.proto"))


def generate(out: Path) -> list[Path]:
    from grpc_tools import protoc  # dev dependency

    written: list[Path] = []
    for proto in proto_files():
        rel = proto.relative_to(SRC)
        has_service = "\nservice " in proto.read_text()
        args = ["protoc", f"-I{SRC}", f"--python_out={out}", f"--pyi_out={out}"]
        if has_service:
            args.append(f"--grpc_python_out={out}")
        args.append(str(rel))
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed for {rel}")
        stem = rel.with_suffix("")
        for suffix in ("_pb2.py", "_pb2.pyi") + (("_pb2_grpc.py",) if has_service else ()):
            written.append(Path(str(stem) + suffix))
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail if the committed modules are stale")
    args = ap.parse_args()
    if not args.check:
        for rel in generate(SRC):
            print(f"wrote src/{rel}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        stale = []
        for rel in generate(out):
            committed = SRC / rel
            if not committed.exists() or not filecmp.cmp(out / rel, committed, shallow=False):
                stale.append(str(rel))
        if stale:
            print("stale generated modules (run scripts/genproto.py):", *stale, sep="\n  ")
            return 1
    print(f"{len(proto_files())} proto file(s) up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
