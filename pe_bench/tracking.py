"""Tracking a run where researchers already look, besides train.csv and eval.csv (always written): TensorBoard
event files or a Weights & Biases run (offline by default), both inside the run directory. One interface — log a
step's metrics, record the final ones, close — chosen by ``logger=`` (configs/logger/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class Tracker:
    """logger=csv: the CSVs are all; every call is a no-op."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """The metrics of a training step (loss, learning rate, throughput, validation loss)."""

    def summary(self, metrics: dict[str, float]) -> None:
        """The run's final numbers (evaluation at every length)."""

    def close(self) -> None:
        """Flush and close (the run's files are complete after this)."""


class TensorBoard(Tracker):
    """Event files in <run>/tensorboard/ (torch.utils.tensorboard); the final numbers as scalars at the last step."""

    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        self.writer.add_text("config", "```\n" + _yaml(config) + "\n```")
        self.last = 0

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.last = step

    def summary(self, metrics: dict[str, float]) -> None:
        self.log(self.last, metrics)

    def close(self) -> None:
        self.writer.close()


class Wandb(Tracker):
    """A W&B run in <run>/wandb/ named after the run directory, with its config; offline unless logger.mode=online."""

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any], project: str, mode: str,
                 group: str | None = None) -> None:
        import wandb

        self.run = wandb.init(project=project, name=name, dir=str(run_dir), mode=mode, config=config, group=group,
                              reinit="finish_previous", settings=wandb.Settings(silent=True))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def summary(self, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.run.summary[k] = v

    def close(self) -> None:
        self.run.finish()


def open_tracker(logger: Any, run_dir: Path, name: str, config: dict[str, Any]) -> Tracker:
    """The tracker of ``logger`` (a config's LoggerConfig) for the run directory ``run_dir``."""
    if logger.name == "tensorboard":
        return TensorBoard(run_dir, config)
    if logger.name == "wandb":
        return Wandb(run_dir, name, config, logger.project, logger.mode, logger.group)
    return Tracker()


def _yaml(d: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(d, sort_keys=False).rstrip()
