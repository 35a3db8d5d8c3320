"""A generation backend with its own section: transformers in-process, after a pause (``model.echo``),
each sample counted in ``echo.json`` beside the stage's output."""
import time
from dataclasses import dataclass

from martingale.core.settings import Int, Section, setting
from martingale.model.backend import backend
from martingale.model.hf import HFBackend

CALLS = {"sample": 0}


@dataclass
class EchoConfig:
    """The echo backend's section (``model.echo``)."""
    delay_ms: int = setting(0, Int(0, 1000), "a pause before every batch it samples")


@backend("echo", section=Section("echo", EchoConfig))
class EchoBackend(HFBackend):
    """HFBackend, pausing ``model.echo.delay_ms`` before each sample."""

    @classmethod
    def load(cls, folder, model_cfg):
        made = super().load(folder, model_cfg)
        made.delay = int(model_cfg.echo.delay_ms) / 1000
        return made

    def sample(self, *args, **kwargs):
        time.sleep(getattr(self, "delay", 0.0))
        CALLS["sample"] += 1
        return super().sample(*args, **kwargs)

    def verify(self, probes):
        """What played the model, in the stage's files: this backend."""
        return {"echo_delay_ms": round(getattr(self, "delay", 0.0) * 1000)}
