"""`presdep rehearsal build | start | stop | env`: the paper matrix's sources on loopback."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from presdep.rehearsal.servers import Ports

SERVERS = ("hub", "files")


def _ports(args: argparse.Namespace) -> Ports:
    return Ports(hub=args.hub_port, files=args.files_port)


def _build(args: argparse.Namespace) -> int:
    from presdep.rehearsal.build import build

    pins = build(Path(args.root), _ports(args), paper_config=Path(args.paper_config),
                 rebuild_indexes=args.rebuild_indexes)
    print(f"rehearsal sources built under {args.root}: {len(pins['catalogue_overrides'])} catalogue sources "
          f"and {len(pins['models'])} models pinned in {Path(args.root) / 'pins.yaml'}")
    return 0


def _start(args: argparse.Namespace) -> int:
    from presdep.rehearsal.servers import start

    root = Path(args.root)
    state = start(root / "servers", root / "hub", root / "files", Path(args.olah), _ports(args), tuple(args.only))
    for name in args.only:
        print(f"{name}: {state[name]['url']} (pid {state[name]['pid']}, log {state[name]['log']})")
    return 0


def _stop(args: argparse.Namespace) -> int:
    from presdep.rehearsal.servers import stop

    stopped = stop(Path(args.root) / "servers", tuple(args.only))
    print("stopped: " + (", ".join(stopped) or "nothing was running"))
    return 0


def _env(args: argparse.Namespace) -> int:
    from presdep.rehearsal.build import client_env

    env = client_env(Path(args.root), _ports(args))
    if args.json:
        print(json.dumps(env, indent=2, sort_keys=True))
    else:
        print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items()))
    return 0


def register(sub) -> None:
    p = sub.add_parser("rehearsal", help="the paper matrix rehearsed offline: sources on loopback, tiny models",
                       description=__doc__)
    p.add_argument("--root", default="resources/rehearsal", help="where the sources, caches and servers live")
    p.add_argument("--hub-port", type=int, default=Ports.hub)
    p.add_argument("--files-port", type=int, default=Ports.files)
    verbs = p.add_subparsers(dest="verb", required=True)
    b = verbs.add_parser("build", help="write the originals, publish the hub repositories, pack the indexes, pin them")
    b.add_argument("--paper-config", default="configs/paper.yaml", help="the config whose models are stood in for")
    b.add_argument("--rebuild-indexes", action="store_true", help="repack the Lucene tarballs (new md5 pins)")
    b.set_defaults(func=_build)
    s = verbs.add_parser("start", help="start the hub (olah) and the file server on 127.0.0.1")
    s.add_argument("--olah", default=".venv-hub/bin/olah-cli", help="the hub server's command (make hub-env)")
    s.add_argument("--only", nargs="+", choices=SERVERS, default=list(SERVERS))
    s.set_defaults(func=_start)
    t = verbs.add_parser("stop", help="stop exactly the servers `start` started")
    t.add_argument("--only", nargs="+", choices=SERVERS, default=list(SERVERS))
    t.set_defaults(func=_stop)
    e = verbs.add_parser("env", help="the clients' settings (HF_ENDPOINT, caches) as shell exports")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_env)
