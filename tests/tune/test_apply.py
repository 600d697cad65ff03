"""Compiling with a tuning database: the best record of a kernel's workload on the target
schedules it; records of other targets and records that do not replay are not used, and the
pack computes the same either way."""

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto as TP
from onnx import helper

import tcc.rt
from tcc.api import StageTimes, compile_to_bytes, lower
from tcc.cli.main import cli
from tcc.frontend.onnx import from_onnx
from tcc.ir.module import IRModule
from tcc.ir.printer import print_module
from tcc.lower.passes import run_pipeline
from tcc.lower.rules import _stages
from tcc.lower.schedule import Schedule
from tcc.target import host_target
from tcc.tune.apply import reverted_kernels, tuned_prim_funcs
from tcc.tune.database import Database, ModelCheck, Record, trace_digest
from tcc.tune.tasks import model_key, workload_key


def _model():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 16])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [helper.make_tensor("w", TP.FLOAT, [16, 8],
                                              np.linspace(-1, 1, 128).tolist())])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _lowered():
    target = host_target()
    return lower(run_pipeline(from_onnx(_model()), target=target)), str(target)


def _hand_record(func, target: str, factor: int = 2, **kw) -> Record:
    """A schedule written by hand: the first stage's outer loop split by `factor` and parallel."""
    sch = Schedule(func)
    block = sch.get_block(_stages(func)[0])
    outer, _ = sch.split(sch.get_loops(block)[0], [None, factor])
    sch.parallel(outer)
    return Record(workload_key(func), target, sch.trace.as_json(), (1e-4,), **kw)


def _run(pack: bytes, tmp_path, x):
    path = tmp_path / "m.tvmpack"
    path.write_bytes(pack)
    with tcc.rt.load(path) as m:
        return m["main"]({"x": x})


def test_the_best_record_schedules_its_kernel_and_the_pack_computes_the_same(tmp_path):
    lowered, target = _lowered()
    (name, func), = [(n, f) for n, f in lowered.prim_funcs.items()]
    db = Database(tmp_path / "t.db")
    db.append(_hand_record(func, target))
    tuned, warnings = tuned_prim_funcs(lowered, target, db)
    assert list(tuned) == [name] and warnings == []
    text = print_module(IRModule({name: tuned[name]}))
    assert "in parallel(0, (n + 1) // 2):" in text  # the record's loop, not the rules'
    times = StageTimes()
    pack = compile_to_bytes(_model(), db=tmp_path / "t.db", times=times)
    assert times.tuned == 1 and "tuning" in times.seconds
    assert compile_to_bytes(_model(), db=tmp_path / "t.db") == pack  # byte-identical
    assert pack != compile_to_bytes(_model())
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    np.testing.assert_array_equal(_run(pack, tmp_path, x), _run(compile_to_bytes(_model()), tmp_path, x))


def test_records_of_another_target_are_never_applied(tmp_path):
    lowered, target = _lowered()
    (func,) = lowered.prim_funcs.values()
    db = Database(tmp_path / "t.db")
    db.append(_hand_record(func, "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver9"))
    assert tuned_prim_funcs(lowered, target, db) == ({}, [])


def test_a_record_that_does_not_replay_falls_back_to_the_default_with_one_warning(tmp_path):
    lowered, target = _lowered()
    (name, func), = lowered.prim_funcs.items()
    record = _hand_record(func, target)
    broken = Record(record.workload, target, {**record.trace, "instructions": [
        {"kind": "get_block", "inputs": [], "attrs": {"name": "no_such_block"}, "outputs": ["b0"]}]},
        (1e-5,))
    db = Database(tmp_path / "t.db")
    db.append(broken)
    tuned, warnings = tuned_prim_funcs(lowered, target, db)
    assert tuned == {} and len(warnings) == 1 and "\n" not in warnings[0]
    assert f"the best record of kernel {name!r}" in warnings[0] and "default schedule" in warnings[0]
    r = CliRunner().invoke(cli, ["compile", str(_onnx(tmp_path)), "-o", str(tmp_path / "m.tvmpack"),
                                 "--db", str(tmp_path / "t.db")])
    assert r.exit_code == 0, r.output
    assert "warning: " in r.output and "does not replay" in r.output


def test_a_schedule_not_provably_in_bounds_is_not_applied(tmp_path, monkeypatch):
    """Records are input from outside: one whose kernel the bounds proof rejects is left out."""
    import tcc.tune.apply as apply

    lowered, target = _lowered()
    (name, func), = lowered.prim_funcs.items()
    db = Database(tmp_path / "t.db")
    db.append(_hand_record(func, target))
    monkeypatch.setattr(apply, "guard_accesses", lambda f, n: (f, ["load x[i + 9]: unproven"]))
    tuned, (warning,) = tuned_prim_funcs(lowered, target, db)
    assert tuned == {}
    assert "leaves 1 access(es) not provably in bounds (first: load x[i + 9]: unproven)" in warning


def _verdict(model: str, target: str, reverted: dict) -> ModelCheck:
    return ModelCheck(model, target, {"x": [4, 16]}, ({"tuned": 1, "ms": [2.0]},
                                                     {"tuned": 0, "ms": [1.0]}), 1, reverted)


def test_a_kernel_the_in_model_check_reverted_keeps_the_default_while_its_best_is_unchanged(
        tmp_path):
    lowered, target = _lowered()
    (name, func), = lowered.prim_funcs.items()
    record = _hand_record(func, target)
    db = Database(tmp_path / "t.db")
    db.append(record)
    reverted = {record.workload: trace_digest(record.trace)}
    db.append(_verdict("another model", target, reverted))
    db.append(_verdict(model_key(lowered), "llvm -mcpu=another", reverted))
    assert list(tuned_prim_funcs(lowered, target, db)[0]) == [name]  # not this model's verdicts
    assert reverted_kernels(lowered, target, db) == set()
    db.append(_verdict(model_key(lowered), target, reverted))
    assert reverted_kernels(lowered, target, db) == {name}
    assert tuned_prim_funcs(lowered, target, db) == ({}, [])
    assert list(tuned_prim_funcs(lowered, target, db, reverted=set())[0]) == [name]
    assert compile_to_bytes(_model(), db=tmp_path / "t.db") == compile_to_bytes(_model())
    # `tcc compile -v` counts the kernel the check kept on its default (from the pack cache
    # too: the second compile)
    for _ in range(2):
        r = CliRunner().invoke(cli, ["compile", str(_onnx(tmp_path)), "-o",
                                     str(tmp_path / "m.tvmpack"), "--db", str(tmp_path / "t.db"),
                                     "-v"])
        assert r.exit_code == 0, r.output
        assert ("0 kernel(s) scheduled by " in r.output
                and "(1 more kept on the default schedule by its in-model check)" in r.output), \
            r.output
    # a later tune found a better schedule: the verdict was on another, and does not apply
    db.append(_hand_record(func, target, factor=4, baseline=(1e-3,), confirmed=True))
    assert reverted_kernels(lowered, target, db) == set()
    assert list(tuned_prim_funcs(lowered, target, db)[0]) == [name]


def _onnx(tmp_path):
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    return path


def test_db_show_and_merge(tmp_path):
    lowered, target = _lowered()
    (func,) = lowered.prim_funcs.values()
    db = Database(tmp_path / "a.db")
    db.append(Record(workload_key(func), target, _hand_record(func, target).trace, (4e-3,),
                     default=True))
    db.append(_hand_record(func, target))
    (tmp_path / "a.db").write_text((tmp_path / "a.db").read_text() + "{oops\n")
    r = CliRunner().invoke(cli, ["db", "show", str(tmp_path / "a.db")])
    assert r.exit_code == 0, r.output
    assert f"warning: {tmp_path / 'a.db'}:3: not a JSON record" in r.output
    assert workload_key(func)[:12] in r.output and "40.00x" in r.output
    assert "in-model check" not in r.output
    hand = _hand_record(func, target)
    db.append(_verdict(model_key(lowered), target, {hand.workload: trace_digest(hand.trace)}))
    r = CliRunner().invoke(cli, ["db", "show", str(tmp_path / "a.db")])
    assert (f"in-model check of model {model_key(lowered)[:12]} (llvm -mcpu=" in r.output
            and "x=4x16): keeps 0 of 1 tuned kernels, 1.0000 ms against 1.0000 ms untuned; "
                "default schedule kept for: " + workload_key(func)[:12] in r.output), r.output
    r = CliRunner().invoke(cli, ["db", "merge", str(tmp_path / "a.db"), str(tmp_path / "a.db"),
                                 "-o", str(tmp_path / "c.db")])
    assert r.exit_code == 0 and "3 records" in r.output, r.output
    r = CliRunner().invoke(cli, ["db", "show", str(tmp_path / "missing.db")])
    assert r.exit_code == 2 and "missing.db: no such file" in r.output


def test_db_show_times_the_default_by_all_its_measurements(tmp_path):
    """A default timed once while the machine was busy (8 ms for a kernel of microseconds)
    does not set the table's times: every candidate measured the default beside it."""
    lowered, target = _lowered()
    (func,) = lowered.prim_funcs.values()
    db = Database(tmp_path / "a.db")
    trace = _hand_record(func, target).trace
    db.append(Record(workload_key(func), target, trace, (8e-3, 8e-3, 8e-3), default=True))
    for _ in range(2):
        db.append(Record(workload_key(func), target, trace, (2e-6, 2e-6, 2e-6),
                         baseline=(5e-6, 5e-6, 5e-6)))
    r = CliRunner().invoke(cli, ["db", "show", str(tmp_path / "a.db")])
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if workload_key(func)[:12] in line)
    assert "0.005" in row and "0.002" in row and "2.50x" in row, row
    assert "8.000" not in row


@pytest.mark.parametrize("command", ["compile", "emit"])
def test_a_missing_database_is_a_one_line_error(tmp_path, command):
    source = _onnx(tmp_path)
    if command == "emit":
        r = CliRunner().invoke(cli, ["import", str(source), "-o", str(tmp_path / "m.tcir")])
        source = tmp_path / "m.tcir"
    r = CliRunner().invoke(cli, [command, str(source), "-o", str(tmp_path / "m.tvmpack"),
                                 "--db", str(tmp_path / "none.db")])
    assert r.exit_code == 2 and r.output.strip().endswith("none.db: no such file"), r.output
