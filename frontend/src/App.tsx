import { useEffect, useState } from "preact/hooks";
import { href, useRoute } from "./lib/router";
import { stream, useStreamStatus } from "./lib/stream";
import { type VersionInfo, useVersion } from "./lib/session";
import { currentTheme, toggleTheme } from "./lib/theme";
import { Overview } from "./pages/Overview";
import { Machines } from "./pages/Machines";
import { Actors } from "./pages/Actors";
import { Tasks } from "./pages/Tasks";
import { Jobs } from "./pages/Jobs";
import { Timeline } from "./pages/Timeline";
import { Logs } from "./pages/Logs";
import { Memory } from "./pages/Memory";
import { Metrics } from "./pages/Metrics";
import { Events } from "./pages/Events";
import { Config } from "./pages/Config";
import { Tune } from "./pages/Tune";
import { Serve } from "./pages/Serve";

const PAGES: [string, string, (p: { params: URLSearchParams }) => preact.JSX.Element][] = [
  ["overview", "Overview", Overview],
  ["machines", "Machines", Machines],
  ["actors", "Actors", Actors],
  ["jobs", "Jobs", Jobs],
  ["tasks", "Tasks", Tasks],
  ["timeline", "Timeline", Timeline],
  ["logs", "Logs", Logs],
  ["events", "Events", Events],
  ["tune", "Tune", Tune],
  ["serve", "Serve", Serve],
  ["memory", "Memory", Memory],
  ["metrics", "Metrics", Metrics],
  ["config", "Config", Config],
];

function StreamBanner() {
  const status = useStreamStatus();
  const [, tick] = useState(0);
  useEffect(() => {
    if (status !== "down") return;
    const t = setInterval(() => tick((x) => x + 1), 1000);
    return () => clearInterval(t);
  }, [status]);
  if (status !== "down") return null;
  const secs = Math.round((Date.now() - stream.downSince) / 1000);
  return (
    <div class="banner" role="alert" data-testid="stream-banner">
      Lost the live connection to the dashboard {secs > 0 ? `${secs} s ago` : "just now"}; reconnecting
      (attempt {stream.attempts}). What you see may be stale.
      <button onClick={() => stream.retryNow()}>Retry now</button>
    </div>
  );
}

/** A stopped session's dashboard, read-only. */
function HistoryBanner({ info }: { info: VersionInfo | null }) {
  if (!info?.history) return null;
  const stopped = info.stopped_at ? new Date(info.stopped_at * 1000).toLocaleString() : "an unknown time";
  return (
    <div class="banner history" role="status" data-testid="history-banner">
      History of session {info.session_name}, stopped at {stopped}. Read-only: nothing here can be killed, stopped or
      submitted.
    </div>
  );
}

export function App() {
  const route = useRoute();
  const [theme, setTheme] = useState(currentTheme());
  const page = PAGES.find((p) => p[0] === route.page);
  const status = useStreamStatus();
  const version = useVersion();
  useEffect(() => {
    document.title = `${page ? page[1] : "Not found"} · Ember`;
  }, [page]);
  const Page = page?.[2];
  return (
    <div class="shell">
      <header class="top">
        <a class="brand" href={href("overview")}>
          <span class="logo">◆</span> Ember
        </a>
        <nav>
          {PAGES.map(([id, title]) => (
            <a key={id} href={href(id)} class={route.page === id ? "active" : ""} data-nav={id}>
              {title}
            </a>
          ))}
        </nav>
        {version?.history ? (
          <span class="live" title="a stopped session's history: nothing here changes" data-testid="stream-status" data-status="history">
            ● recorded session
          </span>
        ) : (
          <span class={`live ${status}`} title={`live stream: ${status}`} data-testid="stream-status" data-status={status}>
            ● {status === "open" ? "live" : status}
          </span>
        )}
        <button class="theme" onClick={() => setTheme(toggleTheme())} title="Switch light / dark" data-testid="theme-toggle">
          {theme === "dark" ? "☀ Light" : "☾ Dark"}
        </button>
      </header>
      <HistoryBanner info={version} />
      <StreamBanner />
      <main data-page={route.page}>
        {Page ? (
          <Page params={route.params} />
        ) : (
          <div class="error">
            No page named “{route.page}”. Pick one above, or go to the <a href={href("overview")}>overview</a>.
          </div>
        )}
      </main>
    </div>
  );
}
