"""The `.tcir` container: module text + raw little-endian arrays + a JSON manifest.

Layout (see docs/tcir.md): a 64-byte header, then the text and each array as sections that
start at 64-byte aligned offsets, then the manifest. The header holds the manifest's sha256 and
the manifest holds every section's sha256, so any corrupted byte outside the zero padding is
caught at load. Writing is atomic (tcc/outfile.py). Reading checks everything
before trusting it; every problem with the file is an IRFileError whose one-line message starts
with the path. This module knows nothing about the IR itself: the text is an opaque string.
"""

import hashlib
import json
import os
import re
import struct

import numpy as np

from tcc.infile import not_a_file
from tcc.ir.dtype import to_numpy
from tcc.ir.errors import IRFileError
from tcc.outfile import open_output

FORMAT_VERSION = 1
MAGIC = b"TCIR\x00\r\n\x1a"  # 8 bytes; the \r\n and \x1a catch text-mode/newline mangling
ALIGN = 64
# magic, format version, reserved (0), manifest offset, manifest length, manifest sha256
_HEADER = struct.Struct("<8sIIQQ32s")
HEADER_SIZE = _HEADER.size  # 64
# The low-precision types are held as ml_dtypes arrays, one element per byte; the sub-byte
# ones keep the value in the low bits of the byte and zeros above, which reading checks.
_LOW_PRECISION = tuple(
    "float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn "
    "int4 uint4 int2 uint2".split()
)
DTYPES = (
    tuple("bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64".split())
    + _LOW_PRECISION
)
# The largest byte an array of these one-byte dtypes may hold.
_BYTE_MAX = {"bool": 1, "int4": 0x0F, "uint4": 0x0F, "float4_e2m1fn": 0x0F, "int2": 3, "uint2": 3}
_MAX_NDIM = 64
_SHA_RE = re.compile(r"[0-9a-f]{64}\Z")


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _le_dtype(name: str) -> np.dtype:
    if name in _LOW_PRECISION:  # one byte each: no byte order
        return to_numpy(name)
    return np.dtype(name).newbyteorder("<")


def _array_bytes(a: np.ndarray) -> bytes:
    """C-order little-endian bytes; sub-byte values with the unused high bits cleared."""
    if a.dtype.name in _BYTE_MAX and a.dtype.name != "bool":
        return (np.ascontiguousarray(a).view(np.uint8) & _BYTE_MAX[a.dtype.name]).tobytes()
    # tobytes(order="C") handles 0-d, non-contiguous and byte-swapped input alike
    return a.astype(_le_dtype(a.dtype.name), copy=False).tobytes(order="C")


def write_container(path, text: str, arrays: dict[str, np.ndarray], producer: str) -> None:
    """Write `text` and `arrays` to `path` atomically; on failure nothing is left behind."""
    where = os.fsdecode(path)
    if not isinstance(text, str) or not isinstance(producer, str):
        raise TypeError("write_container: text and producer must be str")
    try:
        text_bytes = text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise IRFileError(f"{where}: module text is not valid Unicode at index {e.start}") from None
    for name in arrays:
        if not isinstance(name, str):
            raise IRFileError(f"{where}: array names must be strings, got {name!r}")
    items = []
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        if a.dtype.name not in DTYPES:
            raise IRFileError(
                f"{where}: cannot store array {name!r}: dtype {a.dtype} is not supported "
                f"(supported: {', '.join(DTYPES)}); convert it with .astype() first"
            )
        items.append((name, a))

    with open_output(where, f"{where}: cannot write IR file", IRFileError) as f:
        f.write(bytes(HEADER_SIZE))  # placeholder; the real header goes in last
        text_info = _write_section(f, text_bytes)
        entries = []
        for name, a in items:
            info = _write_section(f, _array_bytes(a))
            entries.append(
                {
                    "name": name,
                    "dtype": a.dtype.name,
                    "shape": list(a.shape),
                    "offset": info["offset"],
                    "nbytes": info["length"],
                    "sha256": info["sha256"],
                }
            )
        manifest = {
            "format_version": FORMAT_VERSION,
            "producer": producer,
            "text": text_info,
            "arrays": entries,
        }
        blob = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode("utf-8")
        m_info = _write_section(f, blob)
        digest = hashlib.sha256(blob).digest()
        f.seek(0)
        f.write(_HEADER.pack(MAGIC, FORMAT_VERSION, 0, m_info["offset"], len(blob), digest))


def _write_section(f, data: bytes) -> dict:
    offset = _align(f.tell())
    f.write(bytes(offset - f.tell()))
    f.write(data)
    return {"offset": offset, "length": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def read_container(path, mmap: bool = True) -> tuple[str, dict[str, np.ndarray], dict]:
    """Read and fully verify a .tcir file; returns (text, arrays, manifest), arrays read-only."""
    where = os.fsdecode(path)

    def bad(msg: str) -> IRFileError:
        return IRFileError(f"{where}: {msg}")

    buf = _load_bytes(where, mmap, bad)
    size = len(buf)
    head = bytes(buf[:512])
    if not head:
        raise bad("file is empty; re-export or re-copy it")
    if head[:8] != MAGIC[: len(head[:8])]:
        raise bad(_bad_magic(head, where))
    if size < HEADER_SIZE:
        raise bad(
            f"file is truncated: {size} bytes, but the header alone is {HEADER_SIZE}; "
            "re-export or re-copy it"
        )
    _, version, reserved, m_off, m_len, m_sha = _HEADER.unpack(head[:HEADER_SIZE])
    if version > FORMAT_VERSION:
        raise bad(
            f"written by a newer tcc (format version {version}, this tcc reads up to "
            f"{FORMAT_VERSION}); upgrade tcc"
        )
    if version < 1:
        raise bad(f"unknown format version {version} (this tcc reads 1 to {FORMAT_VERSION})")
    if reserved != 0:
        raise bad(f"corrupted header: reserved field is {reserved}, expected 0")
    if m_off < HEADER_SIZE or m_off % ALIGN:
        raise bad(
            f"corrupted header: manifest offset {m_off} is not a {ALIGN}-aligned offset "
            "after the header"
        )
    if m_off + m_len > size:
        raise bad(
            f"file is truncated: the header says it is {m_off + m_len} bytes but it has "
            f"{size}; re-export or re-copy it"
        )
    if m_off + m_len < size:
        raise bad(
            f"{size - m_off - m_len} unexpected bytes after the manifest (corrupted or "
            "appended to); re-export it"
        )
    blob = bytes(buf[m_off:size])
    if hashlib.sha256(blob).digest() != m_sha:
        raise bad("corrupted: checksum mismatch in the manifest")
    try:
        manifest = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise bad(f"manifest is not valid JSON ({str(e).splitlines()[0]})") from None
    text_sec, entries = _check_manifest(manifest, version, bad)

    # every section must sit between the header and the manifest, aligned, without overlap
    sections = [(text_sec["offset"], text_sec["length"], "the module text")]
    sections += [(e["offset"], e["nbytes"], f"array {e['name']!r}") for e in entries]
    end, prev = HEADER_SIZE, "the header"
    for off, length, what in sorted(sections, key=lambda s: (s[0], s[1])):
        if off % ALIGN:
            raise bad(f"corrupted manifest: {what} starts at {off}, not {ALIGN}-aligned")
        if off < end:
            raise bad(f"corrupted manifest: {what} at offset {off} overlaps {prev}")
        if off + length > m_off:
            raise bad(
                f"corrupted manifest: {what} (offset {off}, {length} bytes) runs past the "
                f"manifest at {m_off}"
            )
        end, prev = off + length, what

    raw_text = buf[text_sec["offset"] : text_sec["offset"] + text_sec["length"]]
    if hashlib.sha256(raw_text).hexdigest() != text_sec["sha256"]:
        raise bad("corrupted: checksum mismatch in the module text")
    try:
        text = bytes(raw_text).decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad(f"module text is not valid UTF-8 at byte {e.start}") from None

    arrays = {}
    for e in entries:
        raw = buf[e["offset"] : e["offset"] + e["nbytes"]]
        if hashlib.sha256(raw).hexdigest() != e["sha256"]:
            raise bad(f"corrupted: checksum mismatch in array {e['name']!r}")
        top = _BYTE_MAX.get(e["dtype"])
        if top is not None and raw.size and raw.max() > top:
            allowed = "0 and 1" if top == 1 else f"0 to {top}"
            raise bad(f"array {e['name']!r} is {e['dtype']} but holds bytes other than {allowed}")
        dtype = _le_dtype(e["dtype"])
        try:
            if raw.size:
                a = raw.view(dtype).reshape(e["shape"])
            else:
                a = np.zeros(e["shape"], dtype)
        except (ValueError, MemoryError):
            raise bad(f"array {e['name']!r} has an unusable shape {e['shape']}") from None
        a.flags.writeable = False
        arrays[e["name"]] = a
    return text, arrays, manifest


def _load_bytes(where: str, mmap: bool, bad) -> np.ndarray:
    """The whole file as a uint8 array: memory-mapped read-only, or read into memory."""
    why = not_a_file(where)
    if why:
        raise bad("is a directory, not a tcc IR file" if why.startswith("is a directory") else why)
    try:
        with open(where, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not mmap or size < HEADER_SIZE:
                data = bytearray(size)
                n = f.readinto(data)
                return np.frombuffer(data, np.uint8)[:n] if n else np.zeros(0, np.uint8)
        return np.memmap(where, dtype=np.uint8, mode="r")
    except FileNotFoundError:
        raise bad("no such file") from None
    except (OSError, ValueError) as e:
        raise bad(f"cannot read file: {getattr(e, 'strerror', None) or e}") from None


def _bad_magic(head: bytes, where: str) -> str:
    msg = "not a tcc IR file (bad magic)"
    if head.startswith(MAGIC.replace(b"\r\n", b"\n")[:7]) and not head.startswith(MAGIC):
        return msg + "; its newlines were converted, copy it in binary mode"
    if head.startswith(b"PK\x03\x04"):
        return msg + "; it looks like a zip archive: extract it, or import with `tcc import`"
    if head[257:262] == b"ustar" or head.startswith(b"\x1f\x8b"):
        return msg + "; it looks like a tar/gzip archive: extract it, or import with `tcc import`"
    if head.startswith(b"\x08") or where.lower().endswith(".onnx"):
        return msg + "; it looks like an ONNX model: convert it with `tcc import` first"
    return msg


def _check_manifest(m, version: int, bad) -> tuple[dict, list[dict]]:
    """Check the manifest's keys and types; returns (text section, array entries)."""

    def field(obj, key, kind, what):
        value = obj.get(key) if isinstance(obj, dict) else None
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if ok and kind is int and value < 0:
            ok = False
        if ok and key == "sha256":
            ok = bool(_SHA_RE.match(value))
        if not ok:
            expected = {
                int: "a non-negative integer",
                str: "a string",
                dict: "an object",
                list: "a list",
            }[kind]
            raise bad(f"corrupted manifest: {what}{key} is missing or not {expected}")
        return value

    if not isinstance(m, dict):
        raise bad("corrupted manifest: expected a JSON object")
    if field(m, "format_version", int, "") != version:
        raise bad(
            f"corrupted: manifest format version {m['format_version']} disagrees with "
            f"the header's {version}"
        )
    field(m, "producer", str, "")
    text = field(m, "text", dict, "")
    for key in ("offset", "length"):
        field(text, key, int, "text.")
    field(text, "sha256", str, "text.")
    entries = field(m, "arrays", list, "")
    prev = None
    for i, e in enumerate(entries):
        at = f"arrays[{i}]."
        name = field(e, "name", str, at)
        if prev is not None and name <= prev:
            raise bad(f"corrupted manifest: array names are not unique and sorted at {name!r}")
        prev = name
        if field(e, "dtype", str, at) not in DTYPES:
            raise bad(f"corrupted manifest: array {name!r} has unsupported dtype {e['dtype']!r}")
        shape = field(e, "shape", list, at)
        if len(shape) > _MAX_NDIM:
            raise bad(f"corrupted manifest: array {name!r} has {len(shape)} dimensions (max 64)")
        if not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**62 for d in shape
        ):
            raise bad(f"corrupted manifest: array {name!r} has an invalid shape {shape}")
        for key in ("offset", "nbytes"):
            field(e, key, int, at)
        field(e, "sha256", str, at)
        expected = int(np.prod(shape, dtype=object)) * _le_dtype(e["dtype"]).itemsize
        if e["nbytes"] != expected:
            raise bad(
                f"corrupted manifest: array {name!r} has {e['nbytes']} bytes but dtype "
                f"{e['dtype']} x shape {shape} needs {expected}"
            )
    return text, entries


# ---------------------------------------------------------------------------------------------
# modules


def save_module(path, mod, producer: str = "tcc") -> None:
    """Write an IRModule (text + constant values) to a .tcir file, atomically. `producer` is
    recorded in the manifest (the CLI passes "tcc <version>"; tcc.ir knows no version)."""
    from tcc.ir.printer import print_module

    missing = sorted(set(mod.const_types) - set(mod.const_values))
    if missing:
        raise IRFileError(f"{os.fsdecode(path)}: constant {missing[0]!r} has no value to save")
    write_container(path, print_module(mod), dict(mod.const_values), producer)


def load_module(path, mmap: bool = True):
    """Read an IRModule from a .tcir file; constants are memory-mapped, read-only arrays."""
    from tcc.ir.dtype import to_numpy
    from tcc.ir.errors import ParseError
    from tcc.ir.parser import parse_module
    from tcc.ir.verify import verify_module

    where = os.fsdecode(path)
    text, arrays, _ = read_container(path, mmap=mmap)
    try:
        mod = parse_module(text, filename=f"{where}:<module text>")
    except ParseError as e:
        raise IRFileError(f"{where}: module text does not parse: {e}") from None
    verify_module(mod, where)
    for name, ttype in mod.const_types.items():
        arr = arrays.get(name)
        if arr is None:
            raise IRFileError(f"{where}: constant {name!r} is declared in the module text but has no stored array")
        if tuple(arr.shape) != tuple(ttype.shape) or _dtype_name(arr) != to_numpy(ttype.dtype).name:
            raise IRFileError(
                f"{where}: constant {name!r} is declared {ttype} but stored as {arr.dtype}{list(arr.shape)}"
            )
    extra = sorted(set(arrays) - set(mod.const_types))
    if extra:
        raise IRFileError(f"{where}: stored array {extra[0]!r} is not declared in the module text")
    mod.const_values = dict(arrays)
    return mod


def _dtype_name(arr: np.ndarray) -> str:
    return np.dtype(arr.dtype).newbyteorder("=").name
