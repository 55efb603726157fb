"""What pip sees of the package index while ``envs/resolve.py`` resolves: wheel metadata from a cache.

pip's dry run needs only each candidate wheel's METADATA. An index that does not publish it apart
(PEP 658) makes pip read it from the wheel itself, every run and once per resolution that meets it
(range requests into vLLM's, torch's and the CUDA wheels). ``MetadataIndex`` is a local PEP 691
index in front of the real one: it passes the project pages through, says each wheel has its
metadata apart, and serves that from ``$XDG_CACHE_HOME/presdep/wheel-metadata`` (keyed by the
wheel's sha256, so an entry never goes stale), reading it once from the wheel where it is missing.
It lists only the wheels that can install on CPython 3.11 on Linux x86_64 (pip spends most of its
time rejecting the others), and keeps each project page for 10 minutes, as pip does with PyPI's.

``StandIns``: a release published as source only (pyserini, connection_pool) has no wheel for pip
to read for another platform; a metadata-only wheel made from its PKG-INFO stands in for it.
"""

from __future__ import annotations

import email.parser
import hashlib
import io
import json
import os
import re
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "presdep" / "wheel-metadata"
JSON_V1 = "application/vnd.pypi.simple.v1+json"
PAGE_TTL = 600  # seconds a cached project page counts as current
BLOCK = 1 << 18  # range-request granularity: a wheel's central directory takes a few of these


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_files(index_url: str, project: str, tries: int = 3) -> list[dict]:
    """The files of a project's PEP 691 page (a failed connection is tried again: networks blink)."""
    req = urllib.request.Request(f"{index_url.rstrip('/')}/{norm(project)}/", headers={"Accept": JSON_V1})
    for attempt in range(tries):
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.load(resp)["files"]
        except urllib.error.HTTPError:
            raise  # the index answered
        except OSError:
            if attempt + 1 >= tries:
                raise
            time.sleep(0.5 * 2**attempt)
    return []


class _RemoteFile(io.RawIOBase):
    """A seekable view of a remote file that fetches only the blocks read (HTTP range requests)."""

    def __init__(self, url: str):
        self.url, self.pos, self.blocks = url, 0, {}
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as resp:
            self.size = int(resp.headers["Content-Length"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def _block(self, i: int) -> bytes:
        if i not in self.blocks:
            end = min(self.size, (i + 1) * BLOCK) - 1
            req = urllib.request.Request(self.url, headers={"Range": f"bytes={i * BLOCK}-{end}"})
            with urllib.request.urlopen(req, timeout=120) as resp:
                data = resp.read()
            if resp.status != 206:  # the server ignores ranges: this was the whole file
                self.blocks = {j: data[j * BLOCK:(j + 1) * BLOCK] for j in range(-(-self.size // BLOCK))}
            else:
                self.blocks[i] = data
        return self.blocks[i]

    def readinto(self, buf) -> int:
        n = min(len(buf), self.size - self.pos)
        if n <= 0:
            return 0
        out = b""
        while len(out) < n:
            at = self.pos + len(out)
            out += self._block(at // BLOCK)[at % BLOCK:at % BLOCK + n - len(out)]
        buf[:n] = out
        self.pos += n
        return n


def wheel_metadata(url: str) -> bytes:
    """The METADATA inside a remote wheel, read through its zip directory."""
    with zipfile.ZipFile(_RemoteFile(url)) as whl:
        name = next(n for n in whl.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return whl.read(name)


class MetadataIndex:
    """``with MetadataIndex(upstream) as index:`` pip's ``--index-url index.url`` sees upstream's files."""

    def __init__(self, upstream: str, cache: Path = CACHE, python: str = "3.11"):
        self.upstream, self.cache, self.python = upstream.rstrip("/"), cache, python
        self.pages: dict[str, bytes] = {}  # one fetch of a project page per run, whichever pip asks
        self.wheels: dict[str, str] = {}  # sha256 -> the wheel's upstream address
        self.errors: list[str] = []  # upstream failures, for the caller to tell "unreachable" apart
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        self.url = f"{self.base}/simple/"

    def __enter__(self) -> Self:
        self.cache.mkdir(parents=True, exist_ok=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def page(self, project: str) -> bytes:
        with self._lock:
            if project in self.pages:
                return self.pages[project]
        files = self._files(project)
        for f in files:
            f["url"] = urllib.parse.urljoin(f"{self.upstream}/{project}/", f["url"])
            sha = f.get("hashes", {}).get("sha256")
            if f["filename"].endswith(".whl") and sha and not f.get("core-metadata"):
                # Its metadata is asked of us (PEP 658/714); the wheel itself, of upstream (a redirect).
                with self._lock:
                    self.wheels[sha] = f["url"]
                f["url"] = f"{self.base}/files/{sha}/{f['filename']}"
                f["core-metadata"] = f["dist-info-metadata"] = True
        body = json.dumps({"meta": {"api-version": "1.0"}, "name": project, "files": files}).encode()
        with self._lock:
            self.pages[project] = body
        return body

    def _files(self, project: str) -> list[dict]:
        """A project's wheels for the target; a page younger than PAGE_TTL is read from the cache (what
        pip itself does with PyPI's pages, whose Cache-Control says 600 s): back-to-back runs ask once."""
        key = f"{self.upstream}/{project} {self.python}"
        path = self.cache / "pages" / hashlib.sha256(key.encode()).hexdigest()
        if path.exists() and time.time() - path.stat().st_mtime < PAGE_TTL:
            return json.loads(path.read_bytes())
        # Only the wheels pip could pick for the target: pip's time goes into the thousands of links of
        # numpy's or torch's page (every platform and Python), which it parses and rejects one by one.
        files = [f for f in project_files(self.upstream, project) if linux_x86_64_wheel(f["filename"], self.python)]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(files), encoding="utf-8")
        tmp.replace(path)
        return files

    def metadata(self, sha256: str) -> bytes:
        path = self.cache / f"{sha256}.metadata"
        if not path.exists():
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(wheel_metadata(self.wheels[sha256]))
            tmp.replace(path)  # atomic: concurrent runs may write the same entry
        return path.read_bytes()


def linux_x86_64_wheel(filename: str, python: str) -> bool:
    """Whether a wheel may install on CPython `python` on Linux x86_64 (its tags, not glibc's version)."""
    parts = filename.removesuffix(".whl").split("-")
    if not filename.endswith(".whl") or len(parts) < 5:
        return False
    py, abi, plat = (set(t.split(".")) for t in parts[-3:])
    if not ("any" in plat or any(p.startswith("manylinux") and p.endswith("_x86_64") for p in plat)):
        return False
    minor = int(python.split(".")[1])
    older = [m for m in (re.fullmatch(r"(py|cp)3(\d+)", t) for t in py) if m and int(m.group(2)) <= minor]
    return "py3" in py or f"cp3{minor}" in py or any(m.group(1) == "py" or "abi3" in abi for m in older)


def _handler(index: MetadataIndex) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: pip asks hundreds of pages and metadata files

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            parts = self.path.split("?")[0].strip("/").split("/")
            try:
                if parts[0] == "simple" and len(parts) == 2:
                    self._send(200, index.page(norm(parts[1])), JSON_V1)
                elif parts[0] == "files" and len(parts) == 3 and parts[1] in index.wheels:
                    if parts[2].endswith(".metadata"):
                        self._send(200, index.metadata(parts[1]), "text/plain")
                    else:
                        self.send_response(302)  # the wheel itself: from upstream
                        self.send_header("Location", index.wheels[parts[1]])
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                else:
                    self._send(404, b"", "text/plain")
            except urllib.error.HTTPError as exc:
                self._send(exc.code, b"", "text/plain")
            except OSError as exc:  # URLError included: the upstream could not be reached
                index.errors.append(f"{self.path}: {exc}")
                # 404, not 502: pip would retry a 502 for seconds; the caller reads `errors` instead.
                self._send(404, str(exc).encode(), "text/plain")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def sdist_metadata(name: str, version: str, index_url: str) -> str | None:
    """A METADATA for `name` `version` from its source archive (None: it has a wheel, or no such release).

    Requires-Dist comes from PKG-INFO where it is static (metadata 2.2+); an older setuptools archive
    lists its requirements in `*.egg-info/requires.txt`, and has none where that file is absent.
    """
    files = [f for f in project_files(index_url, name) if _file_version(f["filename"], name) == version]
    url = next((f["url"] for f in files if f["filename"].endswith(".tar.gz")), None)
    if url is None or any(f["filename"].endswith(".whl") for f in files):
        return None
    requires: list[str] = []
    url = urllib.parse.urljoin(f"{index_url.rstrip('/')}/{norm(name)}/", url)
    with urllib.request.urlopen(url, timeout=60) as resp, tarfile.open(fileobj=resp, mode="r|gz") as tar:
        for member in tar:  # a stream: PKG-INFO comes first, the rest (pyserini: 165 MB) is not read
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] == "PKG-INFO":
                meta = email.parser.Parser().parsestr(tar.extractfile(member).read().decode("utf-8"))
                requires = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
                if float(meta.get("Metadata-Version", "1.0")) >= 2.2 and "Requires-Dist" not in (
                        meta.get_all("Dynamic") or []):
                    break
            elif len(parts) == 3 and parts[1].endswith(".egg-info") and parts[2] == "requires.txt":
                requires = _egg_requires(tar.extractfile(member).read().decode("utf-8"))
                break
    return "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])


def _file_version(filename: str, name: str) -> str | None:
    m = re.match(r"^(.+?)-(\d[^-]*?)(?:\.tar\.gz|\.zip|-.*\.whl)$", filename)
    return m.group(2) if m and norm(m.group(1)) == norm(name) else None


def _egg_requires(text: str) -> list[str]:
    """requires.txt: bare lines are requirements, `[:marker]` sections marked ones, `[extra]` ones skipped."""
    out: list[str] = []
    marker: str | None = ""
    for line in map(str.strip, text.splitlines()):
        if line.startswith("["):
            section = line.strip("[]")
            marker = section[1:] if section.startswith(":") else None
        elif line and marker is not None:
            out.append(f"{line}; {marker}" if marker else line)
    return out


class StandIns:
    """A find-links folder of metadata-only wheels for releases published as source only."""

    def __init__(self, folder: Path, index_url: str):
        self.folder, self.index_url = folder, index_url
        self._lock = threading.Lock()
        self.done: dict[str, bool] = {}  # "name==version" -> whether it is a source-only release

    def add(self, name: str, version: str) -> bool:
        """Write the stand-in of `name` `version` if it is published as source only; whether it is."""
        key = f"{norm(name)}=={version}"
        with self._lock:
            if key not in self.done:
                meta = sdist_metadata(name, version, self.index_url)
                if meta is not None:
                    dist = f"{norm(name).replace('-', '_')}-{version}"
                    with zipfile.ZipFile(self.folder / f"{dist}-py3-none-any.whl", "w") as whl:
                        whl.writestr(f"{dist}.dist-info/METADATA", meta)
                        whl.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                                     "Tag: py3-none-any\n")
                        whl.writestr(f"{dist}.dist-info/RECORD", "")
                self.done[key] = meta is not None
            return self.done[key]
