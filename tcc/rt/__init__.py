"""tcc.rt: the Python loader for `.tvmpack` files (numpy only; ships without the compiler).

    import tcc.rt
    with tcc.rt.load("model.tvmpack") as m:
        (y,) = m["main"](x)            # or m.main(x), or m["main"]({"input": x})
        m.signature("main")            # inputs/outputs with symbolic shapes
        rows = m.profile("main", [x], runs=10)   # time per kernel, largest share first
        outs = m.main.on_device(x)     # a CUDA pack: outputs stay on the GPU (DLPack)

A pack is verified completely when it is opened (tcc.rt.pack); its kernels are loaded from
the pack's shared object (tcc.rt.kernels) and its bytecode is run by tcc.rt.vm.
"""

from __future__ import annotations

import copy

from tcc.rt.elf import host_architecture, triple_architecture
from tcc.rt.errors import KernelError, PackError, PublicKeyError, RunInputError
from tcc.rt.pack import PackContents, read_pack
from tcc.rt.threads import checked_thread_count, env_thread_count
from tcc.rt.vm import ProfileRow, VirtualMachine

__all__ = ["KernelError", "Module", "PackError", "ProfileRow", "PublicKeyError", "RunInputError", "load"]


def load(path, kernel_library=None, require_signature=None) -> Module:
    """Open a pack. A pack is executable code: load only packs from a source you trust, or
    give `require_signature` (the path of an Ed25519 public key in PEM), and the pack must be
    signed by its private key (docs/security.md). `kernel_library` (an object with
    `.call(symbol, arrays)`) replaces the pack's own kernels; tests use it to run bytecode
    against numpy kernels."""
    contents = read_pack(path, public_key=require_signature)
    try:
        owns = kernel_library is None
        if owns:
            kernel_library = _load_kernels(contents)
        return Module(contents, kernel_library, owns_library=owns)
    except BaseException:
        contents.close()
        raise


def _load_kernels(contents: PackContents):
    if not contents.kernel_symbols:
        return None
    libraries = []
    if "cuda" in contents.device_kernels:
        from tcc.rt.cuda import CudaDriverError, load_cuda_library

        try:
            libraries.append(load_cuda_library(contents.device_binaries["cuda"],
                                               contents.device_kernels["cuda"],
                                               contents.weights.values()))
        except CudaDriverError as e:
            raise CudaDriverError(f"{contents.path}: {e}") from None
    on_devices = {s for kernels in contents.device_kernels.values() for s in kernels}
    if any(s not in on_devices for s in contents.kernel_symbols):
        try:
            libraries.append(_load_cpu_kernels(contents))
        except BaseException:
            for lib in libraries:
                lib.close()
            raise
    return libraries[0] if len(libraries) == 1 else _Libraries(libraries)


def _load_cpu_kernels(contents: PackContents):
    arch, host = triple_architecture(contents.target), host_architecture()
    if arch is not None and arch != host:
        raise PackError(f"{contents.path}: the pack's kernels are built for {arch}, and this machine "
                        f"is {host}; compile the model again on this machine")
    if contents.shared_object is None:
        raise PackError(f"{contents.path}: the pack has no shared object for target "
                        f"{contents.target!r}; rebuild it where a linker is available")
    from tcc.rt.kernels import load_cpu_library

    return load_cpu_library(contents.shared_object)


class _Libraries:
    """A pack's kernel libraries (a device's and the CPU's), called by symbol."""

    def __init__(self, libraries):
        self._libraries = libraries

    def call(self, symbol: str, arrays) -> None:
        for lib in self._libraries:
            if lib.has(symbol):
                return lib.call(symbol, arrays)
        raise KernelError(f"no kernel named {symbol!r} in the pack's kernel libraries")

    def set_num_threads(self, n: int) -> None:
        for lib in self._libraries:
            lib.set_num_threads(n)

    def close(self) -> None:
        for lib in self._libraries:
            lib.close()


def _positional_or_named(arrays: tuple, named: dict) -> tuple[tuple, dict | None]:
    """A call's inputs: positional arrays, keywords, or one dict by input name (maybe empty)."""
    if len(arrays) == 1 and isinstance(arrays[0], dict) and not named:
        return (), arrays[0]
    return arrays, named or None


class Function:
    """One entry function of a loaded module: call it with arrays, get a list back."""

    def __init__(self, module: Module, name: str):
        self._module, self.name = module, name

    def __call__(self, *arrays, **named):
        return self._module._vm().run(self.name, *_positional_or_named(arrays, named))

    def on_device(self, *arrays, **named) -> list:
        """Run as a call does, but leave the outputs in GPU memory: tcc.rt.cuda.DeviceArrays,
        which torch.from_dlpack and cupy.from_dlpack take without a copy (np.asarray copies
        one to the host). For a pack whose kernels run on a GPU only."""
        machine = self._module._vm()
        if machine.device is None:
            raise RunInputError(f"{self._module._contents.path}: the pack runs on the CPU; "
                                "its outputs are numpy arrays (call the function itself)")
        return machine.run(self.name, *_positional_or_named(arrays, named), device_outputs=True)

    def __repr__(self):
        return f"<tcc.rt.Function {self.name}>"


class Module:
    """A loaded pack: entry functions by name, signatures, thread count, close()."""

    def __init__(self, contents: PackContents, kernel_library, owns_library: bool = False):
        self._contents = contents
        self._lib = kernel_library
        self._owns = owns_library
        self._machine: VirtualMachine | None = VirtualMachine(contents, kernel_library)
        threads = env_thread_count()
        if threads is not None:
            self.set_num_threads(threads)

    @property
    def entry_functions(self) -> list[str]:
        return list(self._contents.signatures)

    @property
    def target(self) -> str:
        return self._contents.target

    @property
    def executable(self):
        return self._contents.executable

    def signature(self, name: str = "main") -> dict:
        """{"inputs": [{"name", "dtype", "shape"}], "outputs": [...]}; a symbolic
        dimension is a string naming its size variable (or expression)."""
        if name not in self._contents.signatures:
            raise RunInputError(f"no entry function {name!r}; the pack has {self.entry_functions}")
        return copy.deepcopy(self._contents.signatures[name])

    def __getitem__(self, name: str) -> Function:
        if name not in self._contents.signatures:
            raise KeyError(f"no entry function {name!r}; the pack has {self.entry_functions}")
        return Function(self, name)

    def __getattr__(self, name: str) -> Function:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no entry function {name!r}") from None

    @property
    def kernel_origins(self) -> dict[str, list[str]]:
        """Kernel symbol -> the graph bindings (ONNX node outputs) that call it."""
        return copy.deepcopy(self._contents.kernel_origins)

    def profile(self, name: str = "main", inputs=(), runs: int = 1,
                warmup: int = 1) -> list[ProfileRow]:
        """Run `name` `warmup` times untimed, then `runs` times timing every kernel and
        builtin call; returns per-run rows (tcc.rt.vm.ProfileRow), largest share first.
        `inputs` is a sequence in signature order or a dict by input name."""
        if int(runs) < 1 or int(warmup) < 0:
            raise ValueError(f"profile needs runs >= 1 and warmup >= 0, got {runs} and {warmup}")
        machine = self._vm()
        args, named = ((), inputs) if isinstance(inputs, dict) else (tuple(inputs), None)
        for _ in range(int(warmup)):
            machine.run(name, args, named)
        # a machine of its own, so the module's plain runs never pay for timing
        profiler = VirtualMachine(self._contents, self._lib, profile=True)
        for _ in range(int(runs)):
            profiler.run(name, args, named)
        return profiler.profile_rows()

    def set_num_threads(self, n: int) -> None:
        """Threads the kernels may use (default: TCC_NUM_THREADS when set, else the
        machine's cores); at most tcc.rt.threads.thread_limit()."""
        n = checked_thread_count(n)
        if self._lib is not None and hasattr(self._lib, "set_num_threads"):
            self._lib.set_num_threads(n)

    def _vm(self) -> VirtualMachine:
        if self._machine is None:
            raise PackError(f"{self._contents.path}: the module is closed")
        return self._machine

    def close(self) -> None:
        self._machine = None
        if self._owns and self._lib is not None and hasattr(self._lib, "close"):
            self._lib.close()
        self._lib = None
        self._contents.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
