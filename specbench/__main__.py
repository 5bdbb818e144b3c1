"""`python -m specbench [+experiment=NAME] [GROUP=OPTION] [key=value] [-m sweeps]`."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf

from .config import ConfigError
from .methods.registry import register_configs
from .models import ModelPool
from .records import FAILURES, write_failure
from .runner import run


def config_dir() -> Path:
    """The YAML config tree, as an absolute path: `specbench/conf` where a wheel installed it,
    else the checkout's top-level `conf/` (a source tree or an editable install)."""
    package = Path(__file__).resolve().parent
    shipped = package / "conf"
    return shipped if (shipped / "config.yaml").is_file() else package.parent / "conf"


CONF = config_dir()
POOL = ModelPool()  # models live as long as this process: a K sweep loads its pair once
FAILED: list[str] = []  # "job: error" for each job of this process that raised
JOB_DIRS: list[Path] = []  # every job this process ran or skipped
log = logging.getLogger("specbench")
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.ENOSPC)
MAX_NAME = 200  # a job folder name, in characters (file systems allow 255 bytes)


def job_dirname(override_dirname: str) -> str:
    """Sweep folder name from Hydra's override_dirname; 'default' when nothing is overridden.
    A name past MAX_NAME characters (file paths among the overrides) is cut and suffixed with
    a hash of the whole, so it still names one job and fits a file system's 255 bytes."""
    name = re.sub(r"[^\w.,=@+-]", "_", override_dirname) or "default"
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 13]}-{hashlib.sha1(name.encode()).hexdigest()[:12]}"


@hydra.main(version_base="1.3", config_path=str(CONF), config_name="config")
def _job(cfg: DictConfig) -> None:
    """One job. A config mistake stops everything (exit 2); any other error is recorded in the
    job's failure.json (retried on the next run) and the sweep goes on."""
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run(cfg, POOL, job_dir, job_dir.name)
    except ConfigError as err:
        _exit_error(str(err), 2)
    except Exception as err:  # recorded with its traceback, counted, reported at the end
        log.exception("job %s failed", job_dir.name)
        row = write_failure(job_dir, job_dir.name, err)
        FAILED.append(f"{row['job']}: {row['error_type']}: {row['error']}"[:300])
        JOB_DIRS.append(job_dir)
        return
    JOB_DIRS.append(job_dir)


def failure_line() -> str | None:
    """'N of M jobs failed ...' when any job of this process failed, else None."""
    if not FAILED:
        return None
    where = JOB_DIRS[-1].parent / FAILURES if JOB_DIRS else FAILURES
    return (
        f"{len(FAILED)} of {len(JOB_DIRS)} jobs failed ({'; '.join(FAILED[:3])}"
        f"{'; ...' if len(FAILED) > 3 else ''}); errors in {where}; "
        "rerun the same command to retry them (finished jobs are skipped)"
    )


def hydra_error_line(err: HydraException) -> str:
    """One line for a composition mistake: what is wrong, then how to fix it."""
    first = str(err).strip().splitlines()[0].removeprefix("In 'config': ").rstrip(".")
    if isinstance(err, MissingConfigException) and err.options:
        return (
            f"{first}; choose one of: {', '.join(err.options)} "
            "(`python -m specbench --help` lists every group)"
        )
    cause = err.__cause__
    detail = f": {str(cause).strip().splitlines()[0]}" if cause and str(cause).strip() else ""
    return (
        f"{first}{detail}; check the key's spelling and the value's type "
        "(`python -m specbench --cfg job` prints every key with its value)"
    )


def _exit_error(line: str, code: int) -> NoReturn:
    print(f"specbench: error: {line}", file=sys.stderr)
    sys.exit(code)


def flags_first(argv: list[str]) -> list[str]:
    """Move -m/--multirun before the overrides, so `+experiment=x -m decoder.k=1,2` works
    (Hydra's argparse stops at the first positional otherwise)."""
    flags = [a for a in argv if a in ("-m", "--multirun")]
    return flags + [a for a in argv if a not in flags]


def main() -> None:
    sys.argv[1:] = flags_first(sys.argv[1:])
    OmegaConf.register_new_resolver("sb_jobdir", job_dirname, replace=True)
    register_configs()
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # Hydra raises; we print one line
    try:
        _job()
    except HydraException as err:
        _exit_error(hydra_error_line(err), 2)
    except OSError as err:
        if err.errno not in UNWRITABLE:
            raise
        _exit_error(
            f"cannot write the results directory ({err.strerror}: {err.filename}); "
            "set results_dir= to a directory you can write",
            2,
        )
    if line := failure_line():
        _exit_error(line, 1)


if __name__ == "__main__":
    main()
