"""Generate the Python stubs of the kubelet PodResources v1 API from ``api.proto``.

``python -m gpuledger.producers.podresources_v1.generate`` rewrites ``api_pb2.py`` and
``api_pb2_grpc.py`` next to this file (needs grpcio-tools, the ``test`` extra). protoc runs on
a copy of ``api.proto`` laid out as ``gpuledger/producers/podresources_v1/api.proto``, so the
stubs import each other as ``gpuledger.producers.podresources_v1.api_pb2`` - no editing after.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

__all__ = ["PACKAGE_DIR", "PROTO", "STUBS", "generate", "main"]

PACKAGE_DIR = Path(__file__).resolve().parent
PROTO = PACKAGE_DIR / "api.proto"
STUBS = ("api_pb2.py", "api_pb2_grpc.py")
_LAYOUT = Path("gpuledger", "producers", "podresources_v1")


def generate(out_dir: Path, proto: Path = PROTO) -> list[Path]:
    """Compile ``proto`` into ``out_dir`` (``api_pb2.py``, ``api_pb2_grpc.py``); returns their paths."""
    try:
        from grpc_tools import protoc
    except ImportError as exc:
        raise RuntimeError("grpcio-tools is not installed: pip install 'gpuledger[test]' to regenerate "
                           "the PodResources stubs") from exc
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="podresources-protoc-") as tmp:
        root = Path(tmp)
        (root / _LAYOUT).mkdir(parents=True)
        shutil.copyfile(proto, root / _LAYOUT / "api.proto")
        well_known = resources.files("grpc_tools") / "_proto"
        argv = ["grpc_tools.protoc", f"-I{root}", f"-I{well_known}", f"--python_out={root}",
                f"--grpc_python_out={root}", str(_LAYOUT / "api.proto")]
        code = protoc.main(argv)
        if code != 0:
            raise RuntimeError(f"protoc failed on {proto} (exit {code}): see the message above")
        written = []
        for name in STUBS:
            target = out_dir / name
            shutil.copyfile(root / _LAYOUT / name, target)
            written.append(target)
    return written


def main() -> int:
    for path in generate(PACKAGE_DIR):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
