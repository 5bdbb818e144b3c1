"""`python -m specbench [+experiment=NAME] [GROUP=OPTION] [key=value] [-m sweeps]`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from .config import ConfigError, register_configs
from .models import ModelPool
from .runner import run

POOL = ModelPool()  # models live as long as this process: a K sweep loads its pair once


def job_dirname(override_dirname: str) -> str:
    """Sweep folder name from Hydra's override_dirname; 'default' when nothing is overridden."""
    return re.sub(r"[^\w.,=@+-]", "_", override_dirname) or "default"


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def _job(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    try:
        job_dir = Path(hydra_cfg.runtime.output_dir)
        run(cfg, POOL, job_dir, job_dir.name)
    except ConfigError as err:
        print(f"specbench: error: {err}", file=sys.stderr)
        sys.exit(2)


def flags_first(argv: list[str]) -> list[str]:
    """Move -m/--multirun before the overrides, so `+experiment=x -m decoder.k=1,2` works
    (Hydra's argparse stops at the first positional otherwise)."""
    flags = [a for a in argv if a in ("-m", "--multirun")]
    return flags + [a for a in argv if a not in flags]


def main() -> None:
    sys.argv[1:] = flags_first(sys.argv[1:])
    OmegaConf.register_new_resolver("sb_jobdir", job_dirname, replace=True)
    register_configs()
    _job()


if __name__ == "__main__":
    main()
