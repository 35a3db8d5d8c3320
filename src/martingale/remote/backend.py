"""The store's bytes: a key-value view over an fsspec filesystem (``s3://bucket/prefix`` through
s3fs, any other fsspec URL), or a folder on a mounted filesystem. Many transfers run at once: on
the filesystem's event loop when it is asynchronous (s3fs), in threads otherwise. Two writes are
atomic: a blob (a PUT, or a temp file renamed) and a record, created once and never overwritten
(``If-None-Match: *`` on S3, a hard link on a folder): the first record of a key is the store's."""
from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar

from ..store.files import write_bytes
from .settings import StoreError


class StoreUnreachable(StoreError):
    """The store did not answer (no route, refused, timed out): the build goes on locally."""


class StoreDenied(StoreError):
    """The store refused the credentials (403): one line naming the URL, never the key."""


def _is_local(url: str) -> bool:
    return url.startswith("/") or url.startswith("file://") or url.startswith(".")


def open_store(url: str, jobs: int = 32) -> "Backend":
    """The backend for a store URL: a folder for a path (``/mnt/shared/store``, ``file://…``),
    fsspec for any other URL. One per URL and credentials for the process's life: s3fs closes its
    session when collected, which inside Snakemake's own event loop fails noisily."""
    if _is_local(url):
        return LocalBackend(url, jobs)
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    return _fsspec_backend(url, jobs, env)


@functools.lru_cache(maxsize=16)
def _fsspec_backend(url: str, jobs: int, env: tuple[tuple[str, str], ...]) -> "FsspecBackend":
    return FsspecBackend(url, jobs)


def explain(url: str, e: BaseException) -> StoreError:
    """A library's exception as one of ours, in one line naming the URL and never a credential."""
    if isinstance(e, StoreError):
        return e
    if isinstance(e, PermissionError):
        return StoreDenied(f"store {url}: access denied (check the credentials in the environment or profile)")
    name = type(e).__name__
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    unreachable = ("Connect", "Timeout", "Endpoint", "ServerDisconnected", "ClientOSError")
    if any(word in name for word in unreachable) or isinstance(e, (ConnectionError, TimeoutError)) \
            or (isinstance(e, OSError) and getattr(e, "errno", None) in (errno.ECONNREFUSED, errno.EHOSTUNREACH)):
        return StoreUnreachable(f"store {url}: unreachable ({name}: {text[:160]})")
    return StoreError(f"store {url}: {name}: {text[:200]}")


T = TypeVar("T")
U = TypeVar("U")


class Backend:
    """Keys are ``/``-separated paths under the store's root."""

    url: str
    jobs: int

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix/`` (a few listing requests: a thousand keys a page on S3)."""
        raise NotImplementedError

    def read(self, key: str) -> Optional[bytes]:
        """The bytes at ``key``, or None when there is none."""
        raise NotImplementedError

    def create(self, key: str, data: bytes) -> bool:
        """Write ``data`` at ``key`` unless something is there: True if this call created it."""
        raise NotImplementedError

    def exists_many(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key is there, asked all at once."""
        raise NotImplementedError

    def upload_many(self, pairs: Sequence[tuple[Path, str]]) -> None:
        """Each local file to its key, all at once; each write atomic."""
        raise NotImplementedError

    def download_many(self, pairs: Sequence[tuple[str, Path]]) -> None:
        """Each key to its local file, all at once (the caller verifies the bytes)."""
        raise NotImplementedError

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove each key (gc)."""
        raise NotImplementedError

    def call(self, fn: Callable[[], T]) -> T:
        """fn(), its library errors turned into ours (explain)."""
        try:
            return fn()
        except StoreError:
            raise
        except Exception as e:
            raise explain(self.url, e) from None


class LocalBackend(Backend):
    """A folder on a mounted filesystem (NFS, a shared disk): blobs written to a temp file and
    renamed, a record hard-linked into place (fails if one is there), both atomic on POSIX."""

    def __init__(self, url: str, jobs: int = 32):
        self.url = url
        self.jobs = jobs
        self.root = Path(url[len("file://"):] if url.startswith("file://") else url).resolve()
        if not self.root.is_dir():
            raise StoreUnreachable(f"store {url}: no such folder (mount it, or create it with mkdir -p)")

    def _path(self, key: str) -> Path:
        return self.root / key

    def list_keys(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*")
                      if p.is_file() and not p.name.startswith("."))

    def read(self, key: str) -> Optional[bytes]:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def _temp(self, key: str) -> Path:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        return Path(tmp)

    def create(self, key: str, data: bytes) -> bool:
        tmp = self._temp(key)
        try:
            write_bytes(tmp, data)          # the project's one writer: atomic, fsynced, redacted
            os.link(tmp, self._path(key))
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def _map(self, fn: Callable[[T], U], items: Iterable[T]) -> list[U]:
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            return list(pool.map(fn, items))

    def exists_many(self, keys: Sequence[str]) -> list[bool]:
        return [self._path(k).is_file() for k in keys]

    def _put(self, pair: tuple[Path, str]) -> None:
        src, key = pair
        tmp = self._temp(key)
        try:
            shutil.copyfile(src, tmp)
            os.replace(tmp, self._path(key))
        finally:
            tmp.unlink(missing_ok=True)

    def upload_many(self, pairs: Sequence[tuple[Path, str]]) -> None:
        self._map(self._put, pairs)

    def download_many(self, pairs: Sequence[tuple[str, Path]]) -> None:
        self._map(lambda p: shutil.copyfile(self._path(p[0]), p[1]), pairs)

    def delete_many(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)


class FsspecBackend(Backend):
    """An fsspec URL. On s3:// the endpoint comes from ``AWS_ENDPOINT_URL`` (MinIO, R2, a local
    server) and the credentials from botocore's usual chain; listings are never cached (another
    machine may have pushed since)."""

    def __init__(self, url: str, jobs: int = 32):
        import fsspec

        self.url = url
        self.jobs = jobs
        options: dict[str, object] = {"skip_instance_cache": True, "use_listings_cache": False}
        if url.startswith("s3://"):
            options["config_kwargs"] = {"connect_timeout": 5, "read_timeout": 60,
                                        "retries": {"max_attempts": 3, "mode": "standard"}}
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint:
                options["endpoint_url"] = endpoint
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **options)
        except (ImportError, ValueError) as e:
            raise StoreError(f"store {url}: {e}") from None
        self.root = root.rstrip("/")
        if url.startswith("s3://"):
            self.fs.retries = 2   # s3fs's own retries on top of botocore's: a dead store fails fast

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def list_keys(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        found = self.call(lambda: self.fs.find(base))
        return sorted(p[len(self.root) + 1:] for p in found)

    def read(self, key: str) -> Optional[bytes]:
        try:
            return self.call(lambda: self.fs.cat_file(self._path(key)))
        except StoreError as e:
            if isinstance(e.__context__, FileNotFoundError) or "FileNotFoundError" in str(e):
                return None
            raise

    def create(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        try:
            self.fs.pipe_file(path, data, mode="create")
            return True
        except FileExistsError:
            return False
        except (NotImplementedError, TypeError):   # a backend without exclusive writes: check, then write
            if self.read(key) is not None:
                return False
            self.call(lambda: self.fs.pipe_file(path, data))
            return True
        except OSError as e:
            if e.errno == errno.EINVAL and self.read(key) is not None:   # 412 without the condition named
                return False
            raise explain(self.url, e) from None
        except Exception as e:
            raise explain(self.url, e) from None

    def _many(self, name: str, args: Sequence[tuple[str, ...]]) -> list[Any]:
        """``fs.<name>(*a)`` for each a, ``jobs`` at a time (fsspec has no types)."""
        if not args:
            return []
        if getattr(self.fs, "async_impl", False):
            from fsspec.asyn import sync

            async def run_all() -> list[object]:
                sem = asyncio.Semaphore(self.jobs)
                method = getattr(self, name) if name.startswith("_head") else getattr(self.fs, f"_{name}")

                async def one(a: tuple[str, ...]) -> object:
                    async with sem:
                        return await method(*a)
                return list(await asyncio.gather(*(one(a) for a in args)))
            return self.call(lambda: sync(self.fs.loop, run_all))
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            return self.call(lambda: list(pool.map(lambda a: getattr(self.fs, name)(*a), args)))

    def exists_many(self, keys: Sequence[str]) -> list[bool]:
        """One listing of each ``cas/<ab>/`` folder the keys fall in when that is fewer requests than
        one a key (a stage of many small files), else one HEAD a key (s3fs's exists() also lists
        a missing key)."""
        folders = sorted({k.rsplit("/", 1)[0] for k in keys})
        if len(folders) < len(keys):
            found: set[str] = set()
            for paths in self._many("find", [(self._path(f),) for f in folders]):
                found.update(p[len(self.root) + 1:] for p in paths)
            return [k in found for k in keys]
        if hasattr(self.fs, "_call_s3"):
            return [bool(x) for x in self._many("_head_exists", [(self._path(k),) for k in keys])]
        return [bool(x) for x in self._many("exists", [(self._path(k),) for k in keys])]

    async def _head_exists(self, path: str) -> bool:
        bucket, key, _ = self.fs.split_path(path)
        try:
            await self.fs._call_s3("head_object", Bucket=bucket, Key=key)
            return True
        except FileNotFoundError:
            return False

    def upload_many(self, pairs: Sequence[tuple[Path, str]]) -> None:
        self._many("put_file", [(str(src), self._path(key)) for src, key in pairs])

    def download_many(self, pairs: Sequence[tuple[str, Path]]) -> None:
        self._many("get_file", [(self._path(key), str(dst)) for key, dst in pairs])

    def delete_many(self, keys: Sequence[str]) -> None:
        if keys:
            with contextlib.suppress(FileNotFoundError):
                self.call(lambda: self.fs.rm([self._path(k) for k in keys]))
