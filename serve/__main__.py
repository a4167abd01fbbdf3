"""``python -m ember.serve start --address ADDR [--temp-dir DIR] [--http-options JSON]``:
starts Serve (its controller and proxy) on a running cluster and exits, leaving them running.
The dashboard runs this to start Serve for a ``PUT /api/serve/applications/`` without
importing the library itself."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ember.serve")
    parser.add_argument("command", choices=["start"])
    parser.add_argument("--address", required=True, help="the cluster's GCS address HOST:PORT")
    parser.add_argument("--temp-dir", default=None)
    parser.add_argument("--http-options", default="{}", help="JSON: host, port, ...")
    args = parser.parse_args(argv)
    try:
        http_options = json.loads(args.http_options)
    except ValueError as e:
        print(f"--http-options is not JSON: {e}", file=sys.stderr)
        return 2
    import ember
    from ember import serve

    kwargs = {"address": args.address, "log_to_driver": False}
    if args.temp_dir:
        kwargs["temp_dir"] = args.temp_dir
    ember.init(**kwargs)
    try:
        serve.start(
            http_options={k: v for k, v in http_options.items() if k in serve.api.HTTP_OPTIONS}
        )
    except Exception as e:
        print(f"Serve could not start: {e}", file=sys.stderr)
        return 1
    finally:
        ember.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
