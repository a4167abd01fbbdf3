// Human-readable numbers, shared by every page.
export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(i === 0 ? 0 : v < 10 ? 1 : 0)} ${units[i]}`;
}

export function pct(n: number | null | undefined): string {
  return n === null || n === undefined ? "–" : `${n.toFixed(n < 10 ? 1 : 0)}%`;
}

export function duration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || seconds < 0) return "–";
  if (seconds < 1) return `${(seconds * 1000).toFixed(seconds < 0.01 ? 2 : 0)} ms`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m}m ${Math.floor(seconds % 60)}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function time(ts: number | null | undefined): string {
  if (!ts) return "–";
  return new Date(ts * 1000).toLocaleTimeString();
}

export function shortId(id: string | null | undefined, n = 8): string {
  return id ? id.slice(0, n) : "–";
}

/** `{CPU: 1, GPU: 0.5}` -> "CPU: 1, GPU: 0.5". */
export function resources(r: Record<string, number> | null | undefined): string {
  if (!r) return "–";
  const parts = Object.entries(r).map(([k, v]) => `${k}: ${+v.toFixed(2)}`);
  return parts.length ? parts.join(", ") : "–";
}

// A log line written as JSON (EMBER_LOG_FORMAT=json; ember/log_format.py) shown as text: time,
// level, component, the short ids, message, then the traceback. Other lines are unchanged.
export function logLine(line: string): string {
  if (!line.startsWith("{")) return line;
  let r: Record<string, unknown>;
  try {
    r = JSON.parse(line);
  } catch {
    return line;
  }
  if (!r || typeof r !== "object" || !("message" in r)) return line;
  const ids = ["node_id", "job_id", "task_id", "actor_id"]
    .filter((k) => r[k])
    .map((k) => `${k.replace(/_id$/, "")}=${String(r[k]).slice(0, 12)}`)
    .join(" ");
  const head = `${r.time ?? ""} ${r.level ?? ""} ${r.component ?? ""}${ids ? ` [${ids}]` : ""}: ${r.message}`;
  return r.exc_info ? `${head}\n${r.exc_info}` : head;
}
