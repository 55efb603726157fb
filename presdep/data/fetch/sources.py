"""Getting the original files: Hugging Face ``datasets`` at a pinned revision, or a release URL
with a pinned sha256 (zip members extracted). Local copies skip both and are verified instead.

A source may list ``published_files: {<file name>: {url, sha256}}``, the release's files a local
copy may be (RM-Bench publishes one JSON file per subset). :func:`file_entries` gives each file a
fetch read its own URL and checksum in the manifest: a download's URL, or for a local copy the
published file it is byte-identical to."""

from __future__ import annotations

import logging
import shutil
import urllib.request
import zipfile
from collections.abc import Mapping, MutableSequence
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


def published_files(source: Mapping[str, Any]) -> dict[str, dict]:
    """File name -> {url, sha256 (None: not pinned)}: the source's ``published_files`` and its own download."""
    out = {str(name): {"url": f.get("url"), "sha256": f.get("sha256")}
           for name, f in (source.get("published_files") or {}).items()}
    if source.get("url"):
        name = source.get("filename") or Path(str(source["url"]).split("?")[0]).name
        out.setdefault(name, {"url": source["url"], "sha256": source.get("sha256")})
    return out


def file_entries(source: Mapping[str, Any], sha256: Mapping[str, str], version: Mapping[str, Any],
                 local: Mapping[str, Any] | None, notes: MutableSequence[str]) -> dict[str, dict]:
    """Every checksummed file of a fetch with its own URL (see the module docstring); a local copy
    named like a published file but not byte-identical to it gets no URL, a note and a warning."""
    if not local:
        # A url download read one file (its URL is the version's); the hub's and Anserini's files
        # have no URL of their own here (version records the revision and endpoint).
        return {name: {"sha256": digest, "url": version.get("url")} for name, digest in sha256.items()}
    published = published_files(source)
    by_digest = {f["sha256"]: (name, f) for name, f in published.items() if f["sha256"]}
    out = {}
    for path, digest in sha256.items():
        url = None
        if digest in by_digest:
            url = by_digest[digest][1]["url"]
        elif Path(path).name in published:
            name, f = Path(path).name, published[Path(path).name]
            if f["sha256"] is None:
                url = f["url"]
                notes.append(f"{path}: named like the published {name}, whose sha256 is not pinned; "
                             "its URL is recorded unverified")
            else:
                notes.append(f"{path}: not the published {name} (sha256 {digest}, published {f['sha256']}); no URL recorded")
                log.warning("%s: named like the published %s but its sha256 %s differs from the published %s; "
                            "converted as given, with no URL in the manifest", path, name, digest, f["sha256"])
        out[path] = {"sha256": digest, "url": url}
    return out
