"""Signed packs end to end (docs/security.md): `tcc compile --sign KEY`, then `tcc run`,
`tcc run --runtime c`, `tccrt run` and `tcc.rt.load` with `--require-signature PUBKEY`. A
good signature runs; an unsigned pack, a pack changed after signing, another key, a bad key
file and a missing libcrypto are each refused with one line, before anything is loaded."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import tcc
import tcc.rt
from tcc.cli.main import cli
from tests.cli.test_cli_output_paths import _model
from tests.runtime_c.test_reader import _make, members_of, repack, tar

crypto = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")
from cryptography.hazmat.primitives import serialization  # noqa: E402

HAVE_TOOLS = shutil.which("cc") is not None and shutil.which("make") is not None


def _keypair(d: Path, name: str) -> tuple[Path, Path]:
    key = crypto.Ed25519PrivateKey.generate()
    private, public = d / f"{name}.pem", d / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("signed")
    key, pub = _keypair(d, "key")
    _, other_pub = _keypair(d, "other")
    import onnx

    onnx.save(_model(), d / "m.onnx")
    r = CliRunner().invoke(cli, ["compile", str(d / "m.onnx"), "--sign", str(key), "-o", str(d / "signed.tvmpack")])
    assert r.exit_code == 0 and "signed" in r.output, r.output
    tcc.compile(_model(), output=d / "unsigned.tvmpack")
    np.save(d / "x.npy", np.arange(-4, 4, dtype=np.float32).reshape(2, 4))
    build = _make(d / "tccrt-build") if HAVE_TOOLS else None
    return {"dir": d, "key": key, "pub": pub, "other_pub": other_pub, "build": build}


def _every_runtime(files, pack: Path, pub: Path, env=None) -> list[tuple[int, str]]:
    """(exit status, first line) of each way to run `pack` with --require-signature `pub`."""
    x = files["dir"] / "x.npy"
    out = []
    for runtime in ("python", "c"):
        if runtime == "c" and files["build"] is None:
            continue
        r = CliRunner().invoke(cli, ["run", str(pack), "--input", f"x={x}", "--runtime", runtime,
                                     "--require-signature", str(pub)],
                               env={"TCCRT": str(files["build"] / "tccrt") if files["build"] else "", **(env or {})})
        out.append((r.exit_code, r.output.strip().splitlines()[0] if r.output.strip() else ""))
    if files["build"] is not None:
        r = subprocess.run([str(files["build"] / "tccrt"), "run", str(pack), "--input", f"x={x}",
                            "--require-signature", str(pub)], capture_output=True, text=True,
                           env=env)
        out.append((r.returncode, (r.stdout + r.stderr).strip().splitlines()[0]))
    return out


def test_a_signed_pack_runs_in_every_runtime(files):
    pack = files["dir"] / "signed.tvmpack"
    assert "manifest.sig" in members_of(pack.read_bytes())
    for code, line in _every_runtime(files, pack, files["pub"]):
        assert code == 0 and line.startswith("y: float32[2, 4]"), line
    with tcc.rt.load(pack, require_signature=files["pub"]) as m:
        (y,) = m["main"](np.ones((1, 4), np.float32))
        np.testing.assert_array_equal(y, np.ones((1, 4), np.float32))


def test_signed_and_unsigned_packs_run_without_the_option(files):
    for name in ("signed", "unsigned"):
        r = CliRunner().invoke(cli, ["run", str(files["dir"] / f"{name}.tvmpack"), "--random-inputs"])
        assert r.exit_code == 0, r.output


def _refused_everywhere(files, pack: Path, pub: Path, message: str, env=None):
    results = _every_runtime(files, pack, pub, env)
    assert results and all(code == 2 for code, _ in results), results
    assert {line for _, line in results} == {f"error: {message}"}, results


def test_unsigned_pack_is_refused(files):
    pack = files["dir"] / "unsigned.tvmpack"
    _refused_everywhere(files, pack, files["pub"],
                        f"{pack}: the pack is not signed (no manifest.sig); sign it with `tcc compile "
                        "--sign KEY`, or run it without --require-signature")


def test_another_key_is_refused(files):
    pack = files["dir"] / "signed.tvmpack"
    _refused_everywhere(files, pack, files["other_pub"],
                        f"{pack}: the signature does not match the public key (the pack was changed "
                        "after signing, or signed with another key)")


def test_a_pack_changed_after_signing_is_refused(files, tmp_path):
    signed = (files["dir"] / "signed.tvmpack").read_bytes()
    members = members_of(signed)

    def evil_weights(m):  # re-sealed: every hash holds, only the signature is stale
        m["target"] = m["target"] + " "

    changed = repack(signed, edit=evil_weights)
    members_after = members_of(changed)
    assert members_after["manifest.sig"] == members["manifest.sig"]
    pack = tmp_path / "changed.tvmpack"
    pack.write_bytes(changed)
    _refused_everywhere(files, pack, files["pub"],
                        f"{pack}: the signature does not match the public key (the pack was changed "
                        "after signing, or signed with another key)")
    short = dict(members, **{"manifest.sig": b"\0" * 10})
    pack = tmp_path / "short.tvmpack"
    pack.write_bytes(tar(short))
    _refused_everywhere(files, pack, files["pub"],
                        f"{pack}: manifest.sig is 10 bytes, not the 64 of an Ed25519 signature")


def test_a_bad_public_key_file_is_refused(files, tmp_path):
    pack = files["dir"] / "signed.tvmpack"
    bad = tmp_path / "bad.pub"
    bad.write_text("-----BEGIN PUBLIC KEY-----\nnot a key\n-----END PUBLIC KEY-----\n")
    _refused_everywhere(files, pack, bad,
                        f"{bad}: not an Ed25519 public key in PEM format; make one with: openssl pkey "
                        "-in key.pem -pubout -out key.pub")
    _refused_everywhere(files, pack, files["key"],  # the private key where the public one goes
                        f"{files['key']}: not an Ed25519 public key in PEM format; make one with: "
                        "openssl pkey -in key.pem -pubout -out key.pub")


def test_a_bad_signing_key_is_refused(files, tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_bytes(files["pub"].read_bytes())
    r = CliRunner().invoke(cli, ["compile", str(files["dir"] / "m.onnx"), "--sign", str(bad),
                                 "-o", str(tmp_path / "x.tvmpack")])
    assert r.exit_code == 2 and r.output.strip() == (
        f"error: --sign {bad}: not an Ed25519 private key in PEM format; make one with: "
        "openssl genpkey -algorithm ed25519 -out key.pem"), r.output
    assert not (tmp_path / "x.tvmpack").exists()


@pytest.mark.skipif(not HAVE_TOOLS, reason="needs cc and make")
def test_without_libcrypto_tccrt_refuses_rather_than_skipping(files, tmp_path):
    """A loader path that holds no libcrypto: the C runtime cannot check, so it refuses."""
    fake = tmp_path / "lib"
    fake.mkdir()
    (fake / "libcrypto.so.3").write_bytes(b"not a library")
    pack = files["dir"] / "signed.tvmpack"
    r = subprocess.run([str(files["build"] / "tccrt"), "run", str(pack), "--input", f"x={files['dir'] / 'x.npy'}",
                        "--require-signature", str(files["pub"])], capture_output=True, text=True,
                       env={"LD_LIBRARY_PATH": str(fake)})
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: --require-signature needs OpenSSL 3's libcrypto, which cannot be loaded"), r.stderr
    assert r.stdout == ""


def test_signing_changes_nothing_but_the_signature_member(files):
    signed = members_of((files["dir"] / "signed.tvmpack").read_bytes())
    unsigned = members_of((files["dir"] / "unsigned.tvmpack").read_bytes())
    signed.pop("manifest.sig")
    assert signed == unsigned
    with tarfile.open(fileobj=io.BytesIO((files["dir"] / "signed.tvmpack").read_bytes())) as tf:
        assert tf.getnames()[-1] == "manifest.sig"


def test_without_the_cryptography_package_both_options_say_how_to_install(files, tmp_path, monkeypatch):
    import sys

    for name in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cryptography", None)  # import cryptography -> ImportError
    r = CliRunner().invoke(cli, ["run", str(files["dir"] / "signed.tvmpack"), "--random-inputs",
                                 "--require-signature", str(files["pub"])])
    assert r.exit_code == 2 and r.output.strip() == (
        "error: --require-signature needs the cryptography package: pip install 'tcc[sign]'"), r.output
    r = CliRunner().invoke(cli, ["compile", str(files["dir"] / "m.onnx"), "--sign", str(files["key"]),
                                 "-o", str(tmp_path / "x.tvmpack")])
    assert r.exit_code == 2 and r.output.strip() == (
        "error: --sign needs the cryptography package: pip install 'tcc[sign]'"), r.output
