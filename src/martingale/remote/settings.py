"""Where the store is and how it behaves: ``store:`` of conf/config.yaml, ``MARTINGALE_STORE`` (and
``MARTINGALE_STORE_ON_CORRUPT``) in the environment winning. Credentials never come from here: the
backend's own configuration gives them (AWS variables, a profile, an instance role)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from ..config.sections import StoreConfig

ENV_URL = "MARTINGALE_STORE"
ENV_ON_CORRUPT = "MARTINGALE_STORE_ON_CORRUPT"
ON_CORRUPT = ("rebuild", "stop")


class StoreError(RuntimeError):
    """The store cannot be used as configured (a bad URL, a credential in it): one line."""


@dataclass(frozen=True)
class StoreSettings:
    """A configured store: its URL (``s3://bucket/prefix``, ``/mnt/shared/store``, any fsspec URL),
    what a corrupted blob does (rebuild the stage here, or stop the build) and how many transfers
    run at once."""
    url: str
    on_corrupt: str = "rebuild"
    jobs: int = 32


def check_url(url: str) -> str:
    """The URL as given, refused in one line when it carries a credential (``s3://key:secret@…``)
    or is no URL at all."""
    parts = urlsplit(url)
    if parts.password is not None or (parts.username is not None and parts.scheme not in ("", "file")):
        raise StoreError(f"store.url: a credential in the URL is refused ({parts.scheme}://…@{parts.hostname}/…): "
                         "give it through the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, a role)")
    if not url.strip():
        raise StoreError("store.url: empty")
    return url


def resolve(conf: Optional[StoreConfig] = None) -> Optional[StoreSettings]:
    """The store this process uses, or None (the default: this machine only). ``conf``: the
    ``store`` section of the composed base config."""
    conf = conf or StoreConfig()
    url = os.environ.get(ENV_URL) or conf.url
    if not url:
        return None
    on_corrupt = os.environ.get(ENV_ON_CORRUPT) or conf.on_corrupt
    if on_corrupt not in ON_CORRUPT:
        raise StoreError(f"store.on_corrupt: {on_corrupt!r} is not one of {', '.join(ON_CORRUPT)}")
    return StoreSettings(check_url(url), on_corrupt, conf.jobs)


def export(settings: Optional[StoreSettings]) -> None:
    """Put the store in this process's environment, so the jobs it starts (locally, in the warm
    worker, or through sbatch, which exports the environment) push to the same one."""
    if settings is not None:
        os.environ[ENV_URL] = settings.url
        os.environ[ENV_ON_CORRUPT] = settings.on_corrupt
