"""tcc.rt ships alone: loading it pulls in numpy and the standard library, nothing of the
compiler (DESIGN.md §2)."""

import json
import subprocess
import sys


def test_loader_imports_nothing_of_the_compiler():
    code = (
        "import sys, json, tcc.rt; "
        "print(json.dumps(sorted(m.split('.')[0] if not m.startswith('tcc') else m for m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = set(json.loads(out.stdout))
    assert not modules & {"onnx", "onnxruntime", "llvmlite", "click", "rich", "ml_dtypes"}
    assert {m for m in modules if m.startswith("tcc.")} <= {
        "tcc.errors", "tcc.rt", "tcc.rt.errors", "tcc.rt.format", "tcc.rt.pack", "tcc.rt.tensor", "tcc.rt.vm",
        "tcc.rt.kernels", "tcc.rt.arena", "tcc.rt.threads", "tcc.rt.elf", "tcc.rt.host_pool",
    }
