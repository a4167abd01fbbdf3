"""``ember serve run|deploy|status|config|shutdown``: Ray Serve's CLI on Ember.

``run`` is a driver: it imports ``module:app`` (or a config file's applications) here, so an
import error is reported before anything starts, runs it with ``serve.run`` and, unless
``--non-blocking``, keeps it up until Ctrl-C, then shuts Serve down. The others talk to the
dashboard's Serve REST API (``/api/serve/applications/``), as Ray's ``serve`` CLI does.
"""

from __future__ import annotations

import json
import os
import sys
import time

import click
import cloudpickle
import yaml
from ember.cli.api_client import cluster_options, resolve
from ember.cli.errors import fail

PATH = "/api/serve/applications/"


@click.group(help="Ray Serve on Ember: run, deploy and inspect Serve applications.")
def serve() -> None:
    pass


def _load_config(path: str) -> dict:
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except OSError as e:
        fail(f"cannot read the config file {path}: {e.strerror}")
    except yaml.YAMLError as e:
        fail(f"{path} is not valid YAML: {e}")
    if not isinstance(config, dict):
        fail(f"{path}: a Serve config is a mapping with an 'applications' list")
    return config


@serve.command("run")
@click.argument("config_or_import_path")
@click.option("--address", default=None, help="The cluster's address (default: a local node).")
@click.option("--name", default="default", show_default=True, help="The application's name.")
@click.option("--route-prefix", default="/", show_default=True)
@click.option("--host", default=None, help="The HTTP proxy's host (default 127.0.0.1).")
@click.option("--port", default=None, type=int, help="The HTTP proxy's port (default 8000).")
@click.option(
    "--app-dir",
    "-d",
    default=".",
    show_default=True,
    help="Put this directory first on the import path.",
)
@click.option("--blocking/--non-blocking", default=True, show_default=True)
def run(
    config_or_import_path: str,
    address: str | None,
    name: str,
    route_prefix: str,
    host: str | None,
    port: int | None,
    app_dir: str,
    blocking: bool,
) -> None:
    """Runs an application (module:app) or a config file's applications."""
    import ember
    from ember import serve as serve_lib
    from ember.serve.schema import build_applications, import_attr

    sys.path.insert(0, os.path.abspath(app_dir))
    http_options = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    config = None
    if config_or_import_path.endswith((".yaml", ".yml", ".json")):
        config = _load_config(config_or_import_path)
        http_options = {**(config.get("http_options") or {}), **http_options}
        built = build_applications(config)  # imported here: errors before anything starts
        if isinstance(built, str):
            fail(built)
        bad = {k: v for k, v in built.items() if isinstance(v, str)}
        if bad:
            fail("; ".join(f"application {k!r}: {v}" for k, v in bad.items()))
    else:
        try:
            target = import_attr(config_or_import_path, os.path.abspath(app_dir))
        except (ImportError, AttributeError) as e:
            fail(str(e))
        # The app's module travels with its code (by value): the controller and the replicas
        # need not have the app's directory on their import path.
        module = (
            config_or_import_path.partition(":")[0]
            if ":" in config_or_import_path
            else config_or_import_path.rpartition(".")[0]
        )
        cloudpickle.register_pickle_by_value(sys.modules[module])
        if callable(target) and not isinstance(target, serve_lib.Application):
            target = target({})
        if not isinstance(target, serve_lib.Application):
            fail(
                f"{config_or_import_path} is not a bound application (call .bind() on the deployment)"
            )
    ember.init(
        address=address, runtime_env={"working_dir": os.path.abspath(app_dir)} if address else None
    )
    try:
        serve_lib.start(http_options=http_options or None)
        if config is not None:
            for app_name, (prefix, specs, ingress, app_cfg) in built.items():
                controller = serve_lib.client.get_controller()
                ember.get(
                    controller.deploy_application.remote(app_name, prefix, specs, ingress, app_cfg)
                )
                serve_lib.api.wait_for_app(app_name, serve_lib.api.RUN_TIMEOUT_S)
        else:
            serve_lib.run(target, name=name, route_prefix=route_prefix)
        click.echo("Deployed Serve app successfully.")
        if not blocking:
            return
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        click.echo("Got KeyboardInterrupt, shutting down...")
        serve_lib.shutdown()
    except serve_lib.RayServeException as e:
        fail(str(e))


@serve.command("deploy")
@click.argument("config_file")
@cluster_options
def deploy(config_file: str, address: str | None) -> None:
    """Deploys a config file's applications (declarative: apps it omits are deleted)."""
    from ember.serve.config import ConfigError
    from ember.serve.schema import validate

    config = _load_config(config_file)
    try:  # checked here first, as Ray's CLI does: the error names the field
        validate(config)
    except ConfigError as e:
        fail(f"{config_file}: {e}")
    api = resolve(address)
    with api.open("PUT", PATH, timeout=180, body=json.dumps(config).encode()) as resp:
        text = resp.read().decode()
    click.echo(f"Sent deploy request for {len(config.get('applications') or [])} application(s).")
    if text:
        click.echo(text)


@serve.command("status")
@click.option("--name", "-n", default=None, help="Only this application.")
@cluster_options
def status(name: str | None, address: str | None) -> None:
    """The applications' and deployments' statuses (YAML, as Ray's `serve status`)."""
    details = resolve(address).get(PATH, timeout=30)
    apps = {}
    for app_name, a in details.get("applications", {}).items():
        if name is not None and app_name != name:
            continue
        apps[app_name] = {
            "status": a["status"],
            "message": a["message"],
            "last_deployed_time_s": a["last_deployed_time_s"],
            "deployments": {
                d: {
                    "status": dd["status"],
                    "status_trigger": dd["status_trigger"],
                    "replica_states": _count(r["state"] for r in dd["replicas"]),
                    "message": dd["message"],
                }
                for d, dd in a["deployments"].items()
            },
        }
    proxies = {n: p["status"] for n, p in details.get("proxies", {}).items()}
    click.echo(
        yaml.safe_dump(
            {"proxies": proxies, "applications": apps, "target_capacity": None}, sort_keys=False
        ),
        nl=False,
    )


def _count(states) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in states:
        out[s] = out.get(s, 0) + 1
    return out


@serve.command("config")
@click.option("--name", "-n", default=None, help="Only this application.")
@cluster_options
def config(name: str | None, address: str | None) -> None:
    """The config each application was deployed with (declarative deploys only)."""
    details = resolve(address).get(PATH, timeout=30)
    configs = [
        a["deployed_app_config"]
        for n, a in details.get("applications", {}).items()
        if a.get("deployed_app_config") and (name is None or n == name)
    ]
    click.echo("\n---\n\n".join(yaml.safe_dump(c, sort_keys=False) for c in configs), nl=False)


@serve.command("shutdown")
@click.option("--yes", "-y", is_flag=True, help="Do not ask.")
@cluster_options
def shutdown(yes: bool, address: str | None) -> None:
    """Deletes every application and stops Serve."""
    if not yes:
        click.confirm(
            "This will shut down Serve on the cluster, deleting every application. Continue?",
            abort=True,
        )
    api = resolve(address)
    with api.open("DELETE", PATH, timeout=180) as resp:
        resp.read()
    click.echo("Sent shutdown request; applications will be deleted asynchronously.")
