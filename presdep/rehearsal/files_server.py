"""A plain HTTP file server on loopback: the rehearsal's release URLs and prebuilt-index tarballs.

    python -m presdep.rehearsal.files_server --root DIR --port 18432

The standard library's server, threaded, read-only (GET and HEAD), bound to 127.0.0.1 unless
told otherwise; a query string is ignored, as a release host ignores ``?dl=1``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class _Files(SimpleHTTPRequestHandler):
    def list_directory(self, path):  # a release host serves files, not folder listings
        self.send_error(404, "no listing")
        return None

    def log_message(self, format, *args):  # one line per request, to the server's log
        sys.stderr.write("%s %s\n" % (self.address_string(), format % args))


def serve(root: str, host: str, port: int) -> None:
    handler = functools.partial(_Files, directory=root)
    with ThreadingHTTPServer((host, port), handler) as httpd:
        httpd.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m presdep.rehearsal.files_server", description=__doc__)
    parser.add_argument("--root", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    serve(args.root, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
