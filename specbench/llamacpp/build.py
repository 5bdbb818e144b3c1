"""llama-server: found ($LLAMA_SERVER, PATH, the specbench cache) or compiled once from PyPI.

    python -m specbench.llamacpp.build      # fetch the sdist, compile, print the binary's path

The source is llama-cpp-python's sdist (its vendored llama.cpp), fetched with pip so the user's
index settings apply; it is compiled natively (GGML_NATIVE: this CPU's ISA) with no network
features and no web UI, only the targets specbench runs, into
<cache>/llama.cpp/<version>-<cpu kind>/bin. A build is used only when its marker file exists.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from ..errors import ConfigError
from ..packaged import cache_root
from ..provenance import cpu_flags, cpu_kind

SDIST = "llama-cpp-python"
VERSION = "0.3.36"
TARGETS = ("llama-server", "llama-bench")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
)  # fmt: skip
DONE = "specbench-built"
PROGRESS = re.compile(r"^\[\s*\d+%\]|^\[\d+/\d+\]")


def build_dir(version: str = VERSION) -> Path:
    """Where this version is built for this CPU kind (a native build runs only on its kind)."""
    kind = cpu_kind(cpu_flags(), "").split("@")[0]
    return cache_root() / "llama.cpp" / f"{version}-{kind}"


def find_binary(name: str = "llama-server") -> Path | None:
    """$LLAMA_SERVER (for llama-server), then PATH, then a finished build in the cache."""
    override = os.environ.get("LLAMA_SERVER") if name == "llama-server" else None
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(f"LLAMA_SERVER={override} is not an executable file")
        return path
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    built = build_dir() / "bin" / name
    return built if (build_dir() / DONE).is_file() and built.is_file() else None


def require_binary(name: str = "llama-server") -> Path:
    """The binary, or a ConfigError saying how to get it (before any model loads)."""
    found = find_binary(name)
    if found is None:
        raise ConfigError(
            f"{name} not found: run `python -m specbench.llamacpp.build` once (compiles "
            f"llama.cpp {SDIST} {VERSION} for this CPU, minutes on 2 cores), or set "
            "LLAMA_SERVER=/path/to/llama-server, or put it on PATH"
        )
    return found


def fetch_sdist(into: Path) -> Path:
    """The sdist through pip (the user's index and proxies), unpacked under `into`."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--quiet", "-d", str(into), f"{SDIST}=={VERSION}"],
        check=True,
    )  # fmt: skip
    archive = next(into.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return next(into.glob("llama_cpp_python-*/vendor/llama.cpp"))


def build(jobs: int | None = None, log=print) -> Path:
    """Compile llama-server (and llama-bench) into the cache once; its bin directory."""
    out = build_dir()
    if (out / DONE).is_file():
        return out / "bin"
    jobs = jobs or os.cpu_count() or 1
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="specbench-llamacpp-") as tmp:
        log(f"llama.cpp: fetching {SDIST}=={VERSION} (its vendored llama.cpp) ...")
        source = fetch_sdist(Path(tmp))
        work = Path(tmp) / "build"
        log(f"llama.cpp: configuring and compiling {', '.join(TARGETS)} with {jobs} jobs ...")
        subprocess.run(["cmake", "-S", source, "-B", work, *CMAKE_FLAGS], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        _compile(["cmake", "--build", work, "-j", str(jobs), "--target", *TARGETS])
        (out / "bin").mkdir(parents=True, exist_ok=True)
        for target in TARGETS:
            shutil.copy2(work / "bin" / target, out / "bin" / target)
    seconds = time.perf_counter() - start
    (out / DONE).write_text(f"{SDIST}=={VERSION} built in {seconds:.0f} s with {jobs} jobs\n")
    log(f"llama.cpp: built in {seconds / 60:.1f} min -> {out / 'bin'}")
    return out / "bin"


def _compile(command: list) -> None:
    """Run the build, its progress ("[ 45%]" from make, "[12/345]" from ninja) on one line."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout:
            found = PROGRESS.match(line)
            if found:
                print(f"\rllama.cpp: compiling {found.group(0)}", end="", file=sys.stderr)
    print(file=sys.stderr)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, command)


if __name__ == "__main__":
    if shutil.which("cmake") is None:
        sys.exit("cmake not found: pip install -e '.[llamacpp]' (or your system's cmake)")
    print(build() / "llama-server")
