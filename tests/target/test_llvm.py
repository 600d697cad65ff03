"""Target strings: the host default, cross triples, canonical spelling, and clear errors."""

import llvmlite.binding as llvm
import pytest

from tcc.target import LLVMTarget, TargetError, host_target, parse_target


def test_plain_llvm_is_the_host_with_its_features():
    t = parse_target("llvm")
    assert t == host_target()
    assert t.triple == llvm.get_process_triple() and t.cpu == llvm.get_host_cpu_name()
    assert t.is_host and t.kind == "llvm"
    assert parse_target("llvm -mcpu=native") == t


def test_canonical_text_round_trips():
    for text in (
        "llvm",
        "llvm -mtriple=aarch64-linux-gnu",
        "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell",
    ):
        t = parse_target(text)
        assert parse_target(str(t)) == t
    assert parse_target(parse_target("llvm")) == parse_target("llvm")  # a Target passes through


def test_cross_target_gets_the_generic_cpu():
    t = parse_target("llvm -mtriple=aarch64-linux-gnu")
    assert t == LLVMTarget("aarch64-linux-gnu", "generic", "")
    assert str(t) == "llvm -mtriple=aarch64-linux-gnu -mcpu=generic"
    assert t.arch == "aarch64" and not t.is_host


def test_features_are_sorted_and_the_last_setting_wins():
    t = parse_target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+neon,+crc,-neon")
    assert t.cpu == "cortex-a72" and t.features == "+crc,-neon"
    native = parse_target("llvm -mcpu=native -mattr=-avx512f")
    assert "-avx512f" in native.features.split(",")


@pytest.mark.parametrize(
    "text, message",
    [
        ("rocm", "unknown target kind 'rocm'"),
        ("", "unknown target kind ''"),
        ("llvm -mcpu", "bad target option '-mcpu'"),
        ("llvm -O3", "bad target option '-O3'"),
        ("llvm -mcpu=a -mcpu=b", "-mcpu is given twice"),
        ("llvm -mattr=avx2", "CPU feature 'avx2' must start with \\+ or -"),
        (
            "llvm -mtriple=nonsense-unknown-none",
            "LLVM cannot generate code for triple 'nonsense-unknown-none'",
        ),
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=native", "-mcpu=native names this machine"),
    ],
)
def test_bad_targets(text, message):
    with pytest.raises(TargetError, match=message):
        parse_target(text)


def test_target_machine_emits_for_the_triple():
    tm = parse_target("llvm -mtriple=aarch64-linux-gnu").target_machine()
    assert tm.triple.startswith("aarch64")
