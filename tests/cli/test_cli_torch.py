"""The command line on PyTorch programs (.pt2 from torch.export.save): import, check,
compile and run in both runtimes at two batch sizes from one pack; one line and exit 2 for
a broken file or a missing torch."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from tcc.cli.main import cli

torch = pytest.importorskip("torch")

HAVE_TOOLS = shutil.which("cc") is not None and shutil.which("make") is not None


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, image):
        return self.head(self.conv(image).relu().mean((2, 3))).softmax(-1)


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    d = tmp_path_factory.mktemp("pt2")
    torch.manual_seed(0)
    model = Small().eval()
    batch = torch.export.Dim("batch", min=1, max=32)
    ep = torch.export.export(model, (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: batch},))
    torch.export.save(ep, d / "small.pt2")
    return d, model


@pytest.mark.parametrize("runtime", ["python", pytest.param("c", marks=pytest.mark.skipif(
    not HAVE_TOOLS, reason="needs cc and make"))])
def test_compile_and_run_two_batch_sizes(program, runtime):
    d, model = program
    r = invoke("compile", d / "small.pt2", "-o", d / "small.tvmpack")
    assert r.exit_code == 0, r.output
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        np.save(d / "x.npy", x)
        r = invoke("run", d / "small.tvmpack", "--input", f"image={d / 'x.npy'}",
                   "--output", d / "out.npz", "--runtime", runtime)
        assert r.exit_code == 0, r.output
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        with np.load(d / "out.npz") as z:
            np.testing.assert_allclose(z["output"], want, rtol=1e-3, atol=1e-4)


def test_import_and_check(program):
    d, _ = program
    r = invoke("import", d / "small.pt2", "-o", d / "small.tcir")
    assert r.exit_code == 0 and "imported" in r.output, r.output
    r = invoke("check", d / "small.pt2", "--json")
    report = json.loads(r.output)
    assert r.exit_code == 0 and report["ok"] and report["unsupported"] == []
    assert report["inputs"] == [{"name": "image", "shape": ["image_dim0", 3, 8, 8], "dtype": "float32"}]


def test_check_lists_unsupported_aten_ops(tmp_path):
    class Spectrum(torch.nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).abs()

    torch.export.save(torch.export.export(Spectrum(), (torch.randn(8),)), tmp_path / "fft.pt2")
    r = invoke("check", tmp_path / "fft.pt2", "--json")
    report = json.loads(r.output)
    assert r.exit_code == 1
    assert [u["op_type"] for u in report["unsupported"]] == ["aten._fft_r2c.default"]
    assert "test_cli_torch.py" in report["unsupported"][0]["nodes"][0]
    r = invoke("compile", tmp_path / "fft.pt2")
    assert r.exit_code == 2 and "unsupported ATen op: aten._fft_r2c.default" in r.output


def test_a_broken_program_file_is_one_line(tmp_path):
    (tmp_path / "broken.pt2").write_bytes(b"PK\x03\x04 truncated")
    for command in ("import", "compile", "check"):
        r = invoke(command, tmp_path / "broken.pt2")
        assert r.exit_code == 2, r.output
        assert "broken.pt2: not a program saved by torch.export.save" in r.output
        assert len(r.output.strip().splitlines()) == 1, r.output


def test_without_torch_the_command_says_how_to_install_it(program):
    d, _ = program
    code = ("import sys; sys.modules['torch'] = None\n"
            "from tcc.cli.entry import main\n"
            f"sys.exit(main(['import', {str(d / 'small.pt2')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == ("error: reading PyTorch programs needs PyTorch; install it with "
                                "`pip install 'tcc[torch]'`")
