"""Issue 5 §3: the browser dashboard's speed, measured in Debian's chromium.

A real dashboard process (``ember.dashboard.server``) gets 20,000 actors and 100,000 tasks
through the agents' real ingestion path (the gRPC stream, as ``dashboard_scale.py`` sends
them). Then, in headless chromium driven by Playwright:

- **first paint** of each page from a cold load (a fresh browser context, so an empty cache):
  the browser's first contentful paint, and the moment the page's own data is on screen;
- **scrolling** the Actors (20,000, as a list and as the tree of creators: each actor created
  by an earlier one, 4 children apiece) and Tasks (100,000) tables to random rows: the time
  from the scroll until every row in view shows its data (the pages of rows come from the
  server, which builds the tree once per change of the actor table, not per page);
- **filtering**: changing a filter until the table shows the filtered rows (the state
  selects apply at once; the search box waits 200 ms for typing to pause, reported apart).

    .venv/bin/python benchmarks/frontend_bench.py [--actors N] [--tasks N] [--json out.json]

Targets: first paint under 1 s for every page; scroll and filter under 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The browser tests' chromium and flags: the same browser, set up the same way.
sys.path.insert(0, os.path.join(HERE, "..", "tests", "frontend"))
from browser_utils import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402
from dashboard_scale import FakeAgent, actor_batches, start_dashboard, task_batches  # noqa: E402

# The element that says each page's own data is on screen.
PAGES = {
    "overview": "[data-testid=stat-actors] .value a",
    "machines": "[data-testid=nodes-table] tbody tr[data-row-key]",
    "actors": "[data-testid=actors-table] .vrow[data-row-key]",
    "tasks": "[data-testid=tasks-table] .vrow[data-row-key]",
    "timeline": "[data-testid=timeline][data-slices]:not([data-slices='0'])",
    "logs": "[data-testid=log-files] a[data-log-file]",
    "memory": "[data-testid=memory-groups]",
    "metrics": "[data-testid=metrics-cpu_percent] canvas",
}

# In the page: scroll the table's body to a row and time until every row in view has data.
SCROLL_JS = """
async ([testid, targets]) => {
  const table = document.querySelector(`[data-testid=${testid}]`);
  const body = table.querySelector('.vbody');
  const out = [];
  // Ready: every row slot in view is rendered, and with its data (not a placeholder).
  const want = Math.floor(body.clientHeight / 28) - 1;
  const ready = () => {
    const top = body.scrollTop, bottom = top + body.clientHeight;
    let shown = 0;
    for (const r of body.querySelectorAll('.vrow')) {
      const y = new DOMMatrixReadOnly(getComputedStyle(r).transform).m42;
      if (y + r.offsetHeight > top && y < bottom) {
        if (!r.dataset.rowKey) return false;
        shown++;
      }
    }
    return shown >= want;
  };
  for (const row of targets) {
    const t0 = performance.now();
    body.scrollTop = row * 28;
    body.dispatchEvent(new Event('scroll'));
    while (!ready()) {
      await new Promise(requestAnimationFrame);
      if (performance.now() - t0 > 10000) break;
    }
    await new Promise(requestAnimationFrame);  // the frame that shows it
    out.push(performance.now() - t0);
  }
  return out;
}
"""

# In the page: change a <select> and time until the table shows rows of the new filter.
FILTER_JS = """
async ([testid, select, value, check]) => {
  const table = document.querySelector(`[data-testid=${testid}]`);
  const el = document.querySelector(select);
  const t0 = performance.now();
  el.value = value;
  el.dispatchEvent(new Event('change', {bubbles: true}));
  const ok = () => {
    const rows = [...table.querySelectorAll('.vrow')];
    return rows.length > 0 && rows.every(r => r.dataset.rowKey && r.innerText.includes(check));
  };
  while (!ok()) {
    await new Promise(requestAnimationFrame);
    if (performance.now() - t0 > 10000) return -1;
  }
  await new Promise(requestAnimationFrame);
  return performance.now() - t0;
}
"""

# In the page: type into a search box and time until the table shows only matching rows.
SEARCH_JS = """
async ([testid, input, text]) => {
  const table = document.querySelector(`[data-testid=${testid}]`);
  const el = document.querySelector(input);
  const before = table.dataset.total;
  const t0 = performance.now();
  el.value = text;
  el.dispatchEvent(new Event('input', {bubbles: true}));
  const ok = () => {
    const rows = [...table.querySelectorAll('.vrow')];
    return table.dataset.total !== before && rows.length > 0
      && rows.every(r => r.dataset.rowKey && r.innerText.includes(text));
  };
  while (!ok()) {
    await new Promise(requestAnimationFrame);
    if (performance.now() - t0 > 10000) return -1;
  }
  await new Promise(requestAnimationFrame);
  return performance.now() - t0;
}
"""


def stats(values: list[float]) -> dict:
    v = sorted(values)
    return {
        "n": len(v),
        "p50_ms": round(statistics.median(v), 1),
        "p95_ms": round(v[min(len(v) - 1, int(len(v) * 0.95))], 1),
        "max_ms": round(v[-1], 1),
    }


async def inject(url: str, address: str, actors: int, tasks: int, nodes: int):
    agents = [FakeAgent(address, i) for i in range(nodes)]
    stop = asyncio.Event()
    runners = [asyncio.ensure_future(a.run(stop)) for a in agents]
    n = 0
    for msg in actor_batches(actors, fanout=4):
        agents[n % nodes].queue.put_nowait(msg)
        n += 1
    for msg in task_batches(tasks):
        agents[n % nodes].queue.put_nowait(msg)
        n += 1
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        deadline = time.monotonic() + 600
        while True:
            st = (await c.get("/api/cluster_status")).json()
            if st["ingested"]["task_events"] >= 2 * tasks and sum(st["actors"].values()) >= actors:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"ingestion did not finish in 600 s: {st['ingested']}")
            await asyncio.sleep(0.5)
    return stop, runners


async def measure(url: str, rounds: int, pages: list[str] | None = None) -> dict:
    from playwright.async_api import async_playwright

    res: dict = {"first_paint": {}, "scroll": {}, "filter": {}}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            for name, selector in PAGES.items():
                if pages and name not in pages:
                    continue
                fcp, ready = [], []
                for _ in range(rounds):
                    ctx = await browser.new_context(viewport={"width": 1400, "height": 900})
                    page = await ctx.new_page()
                    await page.goto(f"{url}/#/{name}")
                    await page.wait_for_selector(selector, timeout=30_000)
                    ready.append(await page.evaluate("performance.now()"))
                    fcp.append(
                        await page.evaluate(
                            "performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? -1"
                        )
                    )
                    await ctx.close()
                res["first_paint"][name] = {
                    "first_contentful_paint": stats(fcp),
                    "data_on_screen": stats(ready),
                }
                print(
                    f"  {name:9s} paint {stats(fcp)['p50_ms']:7.1f} ms, data {stats(ready)['p50_ms']:7.1f} ms",
                    flush=True,
                )

            if pages and not {"actors", "tasks"} <= set(pages):
                return res  # scrolling and filtering are the Actors and Tasks pages'
            ctx = await browser.new_context(viewport={"width": 1400, "height": 900})
            page = await ctx.new_page()
            for name, route, testid in (
                ("actors", "actors", "actors-table"),
                ("actors_tree", "actors?view=tree", "actors-table"),
                ("tasks", "tasks", "tasks-table"),
            ):
                await page.goto(f"{url}/#/{route}")
                await page.wait_for_selector(f"[data-testid={testid}] .vrow[data-row-key]")
                total = int(await page.get_attribute(f"[data-testid={testid}]", "data-total"))
                rnd = __import__("random").Random(7)
                targets = [rnd.randrange(0, max(1, total - 40)) for _ in range(30)]
                res["scroll"][name] = {
                    "rows": total,
                    **stats(await page.evaluate(SCROLL_JS, [testid, targets])),
                }
                print(f"  scroll {name} ({total} rows): {res['scroll'][name]}", flush=True)

            cases = [
                (
                    "actors_state_DEAD",
                    "actors",
                    "actors-table",
                    "[data-testid=actor-state]",
                    "DEAD",
                    "DEAD",
                ),
                (
                    "actors_state_ALIVE",
                    "actors",
                    "actors-table",
                    "[data-testid=actor-state]",
                    "ALIVE",
                    "ALIVE",
                ),
                (
                    "tasks_state_FAILED",
                    "tasks",
                    "tasks-table",
                    "[data-testid=task-state]",
                    "FAILED",
                    "FAILED",
                ),
                (
                    "tasks_function",
                    "tasks",
                    "tasks-table",
                    "[data-testid=task-function]",
                    "module.func_7",
                    "module.func_7",
                ),
            ]
            for label, name, testid, select, value, check in cases:
                times = []
                for _ in range(max(3, rounds)):
                    await page.goto(f"{url}/#/{name}")
                    await page.reload()
                    await page.wait_for_selector(f"[data-testid={testid}] .vrow[data-row-key]")
                    await page.wait_for_selector(
                        f"{select} option[value='{value}']", state="attached"
                    )
                    times.append(await page.evaluate(FILTER_JS, [testid, select, value, check]))
                res["filter"][label] = stats(times)
                print(f"  filter {label}: {res['filter'][label]}", flush=True)
            times = []
            for _ in range(max(3, rounds)):
                await page.goto(f"{url}/#/actors")
                await page.reload()
                await page.wait_for_selector("[data-testid=actors-table] .vrow[data-row-key]")
                times.append(
                    await page.evaluate(
                        SEARCH_JS, ["actors-table", "[data-testid=actor-search]", "Actor13"]
                    )
                )
            res["filter"]["actors_search_typed"] = {**stats(times), "includes_debounce_ms": 200}
            print(
                f"  search (incl. 200 ms debounce): {res['filter']['actors_search_typed']}",
                flush=True,
            )
            await ctx.close()
        finally:
            await browser.close()
    return res


async def main_async(args: argparse.Namespace) -> dict:
    session = tempfile.mkdtemp(prefix="ember-frontend-bench-")
    proc, url, address = start_dashboard(session)
    try:
        t0 = time.perf_counter()
        stop, runners = await inject(url, address, args.actors, args.tasks, args.nodes)
        print(
            f"ingested {args.actors} actors, {args.tasks} tasks in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        res = await measure(url, args.rounds, args.pages.split(",") if args.pages else None)
        stop.set()
        await asyncio.gather(*runners, return_exceptions=True)
        return {"actors": args.actors, "tasks": args.tasks, "nodes": args.nodes, **res}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except Exception:
            proc.kill()
        shutil.rmtree(session, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--actors", type=int, default=20_000)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3, help="cold loads per page")
    p.add_argument("--json", default=None)
    p.add_argument(
        "--pages",
        default=None,
        help=f"only these pages' first paint, comma-separated ({','.join(PAGES)}); scrolling "
        "and filtering run when actors and tasks are both in",
    )
    args = p.parse_args()
    if not os.path.exists(
        os.path.join(os.path.dirname(__file__), "..", "frontend", "dist", "index.html")
    ):
        raise SystemExit("the browser app is not built: run scripts/dev.sh setup")
    res = asyncio.run(main_async(args))
    worst_paint = max(v["data_on_screen"]["p50_ms"] for v in res["first_paint"].values())
    worst_scroll = max((v["p95_ms"] for v in res["scroll"].values()), default=float("nan"))
    worst_filter = max(
        (v["p95_ms"] for k, v in res["filter"].items() if k != "actors_search_typed"),
        default=float("nan"),
    )
    print(json.dumps(res, indent=2))
    print(
        f"\nslowest page to data on screen (p50): {worst_paint:.0f} ms (target < 1000); "
        f"scroll p95 {worst_scroll:.0f} ms, filter p95 {worst_filter:.0f} ms (target < 100)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
