"""Getting the original files: Hugging Face ``datasets`` at a pinned revision, or a release URL
with a pinned sha256 (zip members extracted). Local copies skip both and are verified instead."""

from __future__ import annotations

import logging
import shutil
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from presdep.contracts.schemas import atomic_path, atomic_write
from presdep.data.fetch.common import FetchError, verify_sha256
from presdep.runtime.hashing import sha256_file
from presdep.runtime.hub_errors import hub_errors

log = logging.getLogger(__name__)


def hf_rows_file(source: Mapping[str, Any], download_dir: str | Path) -> tuple[Path, dict]:
    """The split as a Parquet file of the published rows, and {revision, sha256 of the cached data}."""
    import datasets
    from huggingface_hub import HfApi, constants

    revision = source.get("revision")
    if not revision:
        log.warning("%s: no revision pinned in the catalogue; using the current one and recording it", source["id"])
    try:
        resolved = HfApi().dataset_info(source["id"], revision=revision).sha
        ds = datasets.load_dataset(source["id"], source.get("config"), split=source["split"], revision=resolved)
    except hub_errors() as exc:
        raise FetchError(f"could not read {source['id']}@{revision or 'main'} from the hub at {constants.ENDPOINT}: "
                         f"{type(exc).__name__}: {exc}; when the hub answers again, re-run (finished fetches are kept)") from exc
    out = Path(download_dir) / f"{source['id'].replace('/', '__')}-{source.get('config') or 'default'}-{source['split']}.parquet"
    atomic_write(out, lambda tmp: ds.to_parquet(str(tmp)))
    cache = {Path(f["filename"]).name: sha256_file(f["filename"]) for f in ds.cache_files}
    return out, {"revision": resolved, "pinned": bool(revision), "endpoint": constants.ENDPOINT, "sha256": cache}


def url_file(source: Mapping[str, Any], download_dir: str | Path) -> tuple[Path, dict]:
    """Download ``source.url`` (once; verified against ``source.sha256``), extract ``member`` from a zip."""
    url = source["url"]
    dest = Path(download_dir) / (source.get("filename") or Path(url.split("?")[0]).name or "download")
    if not dest.is_file():
        tmp = atomic_path(dest)
        try:
            with urllib.request.urlopen(url, timeout=120) as resp, open(tmp, "wb") as fh:
                shutil.copyfileobj(resp, fh)
            tmp.replace(dest)
        except OSError as exc:
            raise FetchError(f"could not download {url}: {exc}; on an offline machine give local_path instead") from exc
        finally:
            if tmp.exists():
                tmp.unlink()
    digest = verify_sha256(dest, source.get("sha256"))
    return extract_member(dest, source.get("member"), download_dir), {"url": url, "sha256": {dest.name: digest},
                                                                       "pinned": bool(source.get("sha256"))}


def extract_member(path: Path, member: str | None, download_dir: str | Path) -> Path:
    """``path`` itself, or the zip member whose name ends with ``member``."""
    if not member or not zipfile.is_zipfile(path):
        return path
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n == member or n.endswith("/" + member)]
        if len(names) != 1:
            raise FetchError(f"{path}: expected exactly one member named {member!r}, found {names or 'none'}")
        out = Path(download_dir) / Path(member).name
        atomic_write(out, lambda tmp: tmp.write_bytes(zf.read(names[0])))
        return out
