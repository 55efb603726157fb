"""Start and stop the rehearsal's loopback servers: the hub (olah) and the file server.

Each server runs in its own session (process group); its pid, port and log are written to a
state file, and ``stop`` ends exactly the processes that file names, so nothing else on the
machine is touched and nothing of ours is left running.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from presdep.contracts.errors import PresdepError
from presdep.contracts.schemas import write_text_atomic

HOST = "127.0.0.1"
STARTUP_S = 60.0


class ServerError(PresdepError, RuntimeError):
    """A rehearsal server could not start (port taken, program missing) or stop."""


@dataclass(frozen=True)
class Ports:
    hub: int = 18431
    files: int = 18432


def port_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex((host, port)) != 0


def _wait_listening(port: int, proc: subprocess.Popen, log: Path, what: str) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"{what} exited ({proc.returncode}) while starting; see {log}:\n"
                              + log.read_text(errors="replace")[-2000:])
        if not port_free(port):
            return
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGTERM)
    raise ServerError(f"{what} did not listen on {HOST}:{port} within {STARTUP_S:.0f} s; see {log}")


def olah_config(state_dir: Path, mirrors: Path, port: int) -> Path:
    """olah's TOML: serve the git repositories under ``mirrors``, never reach huggingface.co."""
    text = (f'[basic]\nhost = "{HOST}"\nport = {port}\nmirrors-path = ["{mirrors.resolve()}"]\n'
            f'repos-path = "{(state_dir / "olah-cache").resolve()}"\n'
            f'mirror-netloc = "{HOST}:{port}"\nmirror-lfs-netloc = "{HOST}:{port}"\n'
            "[accessibility]\noffline = true\n")
    path = (state_dir / "olah.toml").resolve()  # olah runs in state_dir: give it absolute paths
    write_text_atomic(path, text)
    return path


def _spawn(name: str, cmd: list[str], state_dir: Path, port: int) -> dict:
    if not port_free(port):
        raise ServerError(f"{name}: {HOST}:{port} is already in use; stop what holds it "
                          f"(or `presdep rehearsal stop`) or choose other ports")
    log = state_dir / f"{name}.log"
    with open(log, "ab") as fh:
        # Own session: stop signals the whole group (uvicorn's workers included).
        proc = subprocess.Popen(cmd, cwd=state_dir, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    _wait_listening(port, proc, log, name)
    return {"pid": proc.pid, "port": port, "url": f"http://{HOST}:{port}", "log": str(log), "cmd": cmd}


def start(state_dir: Path, mirrors: Path, files_root: Path, olah_bin: Path, ports: Ports = Ports(),
          only: tuple[str, ...] = ("hub", "files")) -> dict:
    """Start the servers named in ``only``; their state (also written to ``state_dir/servers.json``)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    state = read_state(state_dir)
    if "hub" in only and "hub" not in state:
        if not Path(olah_bin).exists():
            raise ServerError(f"{olah_bin} not found: `make hub-env` installs the hub server (olah)")
        state["hub"] = _spawn("hub", [str(Path(olah_bin).resolve()), "-c", str(olah_config(state_dir, mirrors, ports.hub))],
                              state_dir, ports.hub)
        _write_state(state_dir, state)
    if "files" in only and "files" not in state:
        state["files"] = _spawn("files", [sys.executable, "-m", "presdep.rehearsal.files_server",
                                          "--root", str(files_root.resolve()), "--port", str(ports.files)],
                                state_dir, ports.files)
        _write_state(state_dir, state)
    return state


def stop(state_dir: Path, only: tuple[str, ...] = ("hub", "files")) -> list[str]:
    """Stop the servers the state file names (and only those); the names stopped."""
    state = read_state(state_dir)
    stopped = []
    for name in only:
        info = state.pop(name, None)
        if info is None:
            continue
        try:
            os.killpg(info["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass  # already gone
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(info["pid"]):
            time.sleep(0.1)
        if _alive(info["pid"]):
            os.killpg(info["pid"], signal.SIGKILL)
        stopped.append(name)
        _write_state(state_dir, state)
    return stopped


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own exited child) still has a group entry: reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return Path(f"/proc/{pid}").exists()


def read_state(state_dir: Path) -> dict:
    path = state_dir / "servers.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _write_state(state_dir: Path, state: dict) -> None:
    write_text_atomic(state_dir / "servers.json", json.dumps(state, indent=2, sort_keys=True) + "\n")
