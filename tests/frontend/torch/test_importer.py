"""The program as a whole: inputs, constants and output names from the signature, one
size variable per dynamic dimension, every unsupported op listed at once with its source
line, and one-line errors for what tcc cannot take."""

import pytest

from tcc.frontend.torch import find_unsupported, from_exported_program, load_program
from tcc.frontend.torch.importer import decomposed
from tcc.ir.errors import FrontendError
from tcc.ir.expr import Var
from tests.frontend.torch.common import check, export, torch

nn = torch.nn
Dim = torch.export.Dim


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.register_buffer("offset", torch.full((3,), 0.25))

    def forward(self, tokens, features):
        return {"scores": self.fc(features) + self.offset, "count": tokens.sum(-1)}


def test_signature_names_and_shared_size_variables():
    b = Dim("batch", min=1, max=16)
    ep = export(Net(), torch.ones(2, 5, dtype=torch.int64), torch.randn(2, 4),
                dynamic=[{0: b}, {0: b}])
    mod = from_exported_program(ep)
    main = mod["main"]
    assert main.input_names == ("tokens", "features")
    assert main.output_names == ("scores", "count")
    tokens, features = main.params
    assert isinstance(tokens.type.shape[0], Var)
    assert tokens.type.shape[0] is features.type.shape[0]  # one symbol, one variable
    assert str(tokens.type.shape[0]) == "tokens_dim0"
    assert {"fc.bias", "offset"} <= set(mod.const_types)  # named after the module's state


def test_unused_buffers_are_not_kept():
    bn = nn.BatchNorm1d(3).eval()  # num_batches_tracked is a buffer no op reads
    mod = from_exported_program(export(bn, torch.randn(2, 3)))
    assert not any("num_batches_tracked" in name for name in mod.const_types)


class Spectrum(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs() + torch.special.i0(x)[:4]


def test_every_unsupported_op_is_listed_with_its_source_line():
    ep = decomposed(export(Spectrum(), torch.randn(6)))
    found = dict(find_unsupported(ep))
    assert len(found) >= 2
    with pytest.raises(FrontendError) as e:
        from_exported_program(ep)
    message = str(e.value)
    assert message.startswith("unsupported ATen ops: ")
    assert "\n" not in message
    assert "test_importer.py:" in message and "torch.fft.rfft(x)" in message  # the user's line


def test_dropout_in_training_mode_is_refused():
    model = nn.Dropout(0.5).train()
    ep = torch.export.export(model, (torch.randn(4),))
    with pytest.raises(FrontendError, match=r"eval"):
        from_exported_program(ep)


def test_in_place_buffer_update_is_refused():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("n", torch.zeros(1))

        def forward(self, x):
            self.n.add_(1)
            return x + self.n

    with pytest.raises(FrontendError, match=r"writes to n.*without state"):
        from_exported_program(torch.export.export(Counter(), (torch.randn(2),)))


def test_bad_program_files(tmp_path):
    (tmp_path / "junk.pt2").write_bytes(b"not a zip")
    with pytest.raises(FrontendError, match=r"junk.pt2: not a program saved by torch.export.save"):
        load_program(tmp_path / "junk.pt2")
    with pytest.raises(FrontendError, match=r"missing.pt2: no such file"):
        load_program(tmp_path / "missing.pt2")
    with pytest.raises(FrontendError, match="expected a torch.export.ExportedProgram"):
        from_exported_program(42)


def test_saved_program_round_trip(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))
    x = torch.randn(1, 3, 6, 6)
    model(x)
    path = tmp_path / "m.pt2"
    torch.export.save(export(model, x), path)
    check(model, x)
    mod = from_exported_program(path)
    assert mod["main"].input_names == ("input",)


def test_a_converter_shape_bug_names_the_node(monkeypatch):
    """Each converted value is checked against torch's own record of its shape."""
    from tcc.frontend.torch import base
    from tcc.ir.errors import InternalError

    def wrong(ctx, node):
        return ctx.emit("transpose", node.arg(0, "self"), axes=[1, 0])

    monkeypatch.setitem(base.CONVERTERS, "aten.relu.default", wrong)
    with pytest.raises(InternalError, match=r"node 'relu'.*torch computes shape \(2, 3\)"):
        from_exported_program(export(torch.relu, torch.randn(2, 3)))


def test_a_size_outside_the_exported_range_stops_the_run_in_one_line(tmp_path):
    """torch.export's Dim ranges are checked when the pack runs, in the reference
    interpreter and in both runtimes alike; sizes inside them run."""
    import numpy as np

    from tcc.api import compile_to_bytes
    from tcc.ir.errors import TccError
    from tcc.ir.interp import run
    from tcc.rt import load

    b = Dim("batch", min=2, max=8)
    ep = export(Net(), torch.ones(3, 5, dtype=torch.int64), torch.randn(3, 4),
                dynamic=[{0: b}, {0: b}])
    mod = from_exported_program(ep)
    pack = tmp_path / "net.tvmpack"
    pack.write_bytes(compile_to_bytes(mod, "llvm"))

    def inputs(n):
        return [np.ones((n, 5), np.int64), np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)]

    words = "input 'tokens' dimension 0 must be from 2 to 8, the range the program was exported for"
    with load(pack) as m:
        for n in (2, 8):
            want = ep.module()(*(torch.from_numpy(a) for a in inputs(n)))["scores"].detach().numpy()
            np.testing.assert_allclose(m.main(*inputs(n))[0], want, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(run(mod, inputs(n))[0], want, rtol=1e-5, atol=1e-6)
        for n in (1, 9):
            with pytest.raises(TccError, match=f"{words}.*tokens_dim0 = {n}") as e:
                m.main(*inputs(n))
            assert "\n" not in str(e.value)
            with pytest.raises(TccError, match=words):
                run(mod, inputs(n))
    from tests.runtime_c.capi import CRuntime, CRuntimeError, build_runtime

    crt = CRuntime(build_runtime(tmp_path / "crt") / "libtccrt.so").load(pack)
    with pytest.raises(CRuntimeError, match=f"{words}.*tokens_dim0 = 9"):
        crt.run("main", inputs(9))
    crt.close()


def test_a_program_without_ranges_has_no_checks():
    ep = export(Net(), torch.ones(2, 5, dtype=torch.int64), torch.randn(2, 4))
    assert "input_ranges" not in str(from_exported_program(ep)["main"])


class Prefix(nn.Module):
    """A size read from a tensor (`.item()`: torch's unbacked `u0`), with the program's own
    checks on it."""

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= x.shape[0])
        return x[:k] * 2, torch.arange(k, dtype=torch.float32).sum()


def test_a_value_read_from_a_tensor_is_a_size_and_the_programs_checks_run(tmp_path):
    """`.item()` of an integer tensor binds a size variable when the program runs (named
    after the tensor: `n_item`), the shapes torch computed from it use that variable, and
    each `torch._check` on it is checked when the pack runs, in the reference interpreter
    and in both runtimes: a value outside stops the run in one line, naming the check."""
    import numpy as np

    from tcc.api import compile_to_bytes
    from tcc.ir.errors import TccError
    from tcc.ir.interp import run
    from tcc.rt import load
    from tests.runtime_c.capi import CRuntime, CRuntimeError, build_runtime

    ep = export(Prefix(), torch.randn(8, 4), torch.tensor(5),
                dynamic=[{0: Dim("rows", min=2, max=64)}, None])
    mod = from_exported_program(ep)
    assert "n_item" in str(mod["main"])
    pack = tmp_path / "prefix.tvmpack"
    pack.write_bytes(compile_to_bytes(mod, "llvm"))
    crt = CRuntime(build_runtime(tmp_path / "crt") / "libtccrt.so").load(pack)
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    with load(pack) as m:
        for k in (0, 3, 8):
            n = np.array(k, np.int64)
            want = [w.numpy() for w in Prefix()(torch.from_numpy(x), torch.tensor(k))]
            for got in (run(mod, [x, n]), m.main(x, n), crt.run("main", [x, n])):
                assert got[0].shape == (k, 4)
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])
        for k, check in ((9, "n_item <= x_dim0"), (-1, "n_item >= 0")):
            n = np.array(k, np.int64)
            words = f"the program's check {check} failed"
            with pytest.raises(TccError, match=f"{words}.*n_item = {k}") as e:
                m.main(x, n)
            assert "\n" not in str(e.value)
            with pytest.raises(TccError, match=words):
                run(mod, [x, n])
            with pytest.raises(CRuntimeError, match=words):
                crt.run("main", [x, n])
    crt.close()


def test_a_float_read_from_a_tensor_is_refused_in_one_line():
    ep = export(lambda x: x * x.max().item(), torch.randn(3))
    with pytest.raises(FrontendError, match="SymFloat read from a tensor"):
        from_exported_program(ep)


class Trim(nn.Module):
    def forward(self, x):
        return x[:, : x.shape[1] - 3] * 2


def test_the_exported_ranges_are_facts_the_shape_rules_and_kernels_use(tmp_path):
    """`x[:, :n - 3]` has a length only where n >= 3: with Dim(min=5), import proves it from
    the range (without it, the slice was refused), and each kernel over n states the
    range among its preconditions, which its entry checks and its proofs use."""
    import numpy as np

    from tcc.api import compile_to_bytes, lower
    from tcc.ir.verify import PRECONDITIONS_ATTR
    from tcc.lower.passes import run_pipeline
    from tcc.rt import load

    n = Dim("n", min=5, max=4000)
    ep = export(Trim(), torch.randn(2, 100), dynamic=[{1: n}])
    mod = from_exported_program(ep)
    kernels = lower(run_pipeline(mod)).prim_funcs
    stated = [str(c) for f in kernels.values() for c in dict(f.attrs).get(PRECONDITIONS_ATTR, ())]
    assert kernels and "x_dim1 >= 5" in stated and "x_dim1 <= 4000" in stated
    pack = tmp_path / "trim.tvmpack"
    pack.write_bytes(compile_to_bytes(mod, "llvm"))
    with load(pack) as m:
        for size in (5, 6, 100):
            x = np.random.default_rng(size).standard_normal((2, size)).astype(np.float32)
            np.testing.assert_array_equal(m.main(x)[0], Trim()(torch.from_numpy(x)).numpy())
