// REST client. Every URL is relative to the page (document.baseURI), never absolute, so the app
// works under whatever URL prefix a reverse proxy puts in front of the dashboard.

import { signInAgain } from "./auth";

type Scalar = string | number | boolean | undefined | null;
/** Query parameters; an array repeats the key (the list endpoints' `filter=K=V&filter=...`). */
export type Params = Record<string, Scalar | Scalar[]>;

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** A page of a list endpoint: the server filters and sorts before it cuts the page. */
export interface Page<T> {
  items: T[];
  total: number;
}

export function apiUrl(path: string, params?: Params): string {
  const url = new URL(path, document.baseURI);
  for (const [k, v] of Object.entries(params ?? {})) {
    for (const one of Array.isArray(v) ? v : [v]) {
      if (one !== undefined && one !== null && one !== "") url.searchParams.append(k, String(one));
    }
  }
  return url.toString();
}

async function parse<T>(res: Response): Promise<T> {
  if (res.status === 401) signInAgain(); // the token cookie no longer works: the sign-in form
  if (!res.ok) {
    // FastAPI says what is wrong in "detail" (a string, or a list of field errors for 422).
    let msg = `${res.status} ${res.statusText}`;
    try {
      const body = await res.json();
      if (typeof body.detail === "string") msg = body.detail;
      else if (Array.isArray(body.detail))
        msg = body.detail.map((d: { loc?: unknown[]; msg?: string }) => `${(d.loc ?? []).join(".")}: ${d.msg}`).join("; ");
      else if (body.error) msg = String(body.error);
    } catch {
      /* not JSON: keep the status line */
    }
    throw new ApiError(res.status, msg);
  }
  return (await res.json()) as T;
}

/** Every request has a deadline: a dashboard that stops answering becomes an error, not a hang. */
const TIMEOUT_MS = 15_000;

function withDeadline(signal?: AbortSignal, ms = TIMEOUT_MS): AbortSignal {
  const t = AbortSignal.timeout(ms);
  return signal ? AbortSignal.any([signal, t]) : t;
}

export async function getJSON<T>(path: string, params?: Params, signal?: AbortSignal, timeoutMs?: number): Promise<T> {
  const res = await fetch(apiUrl(path, params), { signal: withDeadline(signal, timeoutMs) });
  return parse<T>(res);
}

/** getJSON, with the reply's headers (some replies say more there than in Ray's body). */
export async function getJSONAndHeaders<T>(path: string, signal?: AbortSignal, timeoutMs?: number): Promise<{ body: T; headers: Headers }> {
  const res = await fetch(apiUrl(path), { signal: withDeadline(signal, timeoutMs) });
  return { body: await parse<T>(res), headers: res.headers };
}

export async function postJSON<T>(path: string, body?: unknown, params?: Params, timeoutMs?: number): Promise<T> {
  const res = await fetch(apiUrl(path, params), {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: withDeadline(undefined, timeoutMs),
  });
  return parse<T>(res);
}

export async function deleteJSON<T>(path: string, params?: Params, timeoutMs?: number): Promise<T> {
  const res = await fetch(apiUrl(path, params), { method: "DELETE", signal: withDeadline(undefined, timeoutMs) });
  return parse<T>(res);
}

/** A WebSocket URL relative to the page, as apiUrl (ws: or wss: as the page's scheme). */
export function wsUrl(path: string): string {
  const u = new URL(path, document.baseURI);
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  return u.toString();
}

export function errorText(e: unknown): string {
  if (e instanceof DOMException && (e.name === "TimeoutError" || e.name === "AbortError")) return "the dashboard did not answer in time";
  return e instanceof Error ? e.message : String(e);
}
