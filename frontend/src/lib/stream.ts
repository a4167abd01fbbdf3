// The live stream: one connection per page load (a WebSocket, or server-sent events where
// WebSockets do not get through), its messages dispatched by "type" to whoever listens. A
// dropped connection shows a banner (via the status listeners) and reconnects with a capped
// backoff; on every (re)connect each listener is told to resync, since what changed before the
// subscription began was never sent to it.
import { useEffect, useState } from "preact/hooks";
import { signInAgain } from "./auth";

export type StreamStatus = "connecting" | "open" | "down";
export interface StreamMessage {
  type: string;
  [k: string]: unknown;
}
type Handler = (msg: StreamMessage) => void;

const RESYNC = "__resync__";
const WS_HANDSHAKE_MS = 3000;
const SSE_OPEN_MS = 5000;
// The stream's message types (docs/dashboard-api.md); SSE delivers each as a named event.
const SSE_TYPES = ["node_metrics", "node", "actor", "tasks", "event", "log", "dropped"];

class LiveStream {
  status: StreamStatus = "connecting";
  downSince = 0;
  attempts = 0;
  private ws: WebSocket | null = null;
  private es: EventSource | null = null;
  /** WebSocket first; server-sent events when WebSockets do not get through. */
  // Server-sent events first: plain HTTP, through any proxy, and in the browser tests the
  // steadier of the two (a WebSocket handshake was seen to stall there); a WebSocket when
  // they fail. The choice is remembered for the tab's session.
  transport: "ws" | "sse" = sessionStorage.getItem("ember.stream") === "ws" ? "ws" : "sse";
  private handlers = new Map<string, Set<Handler>>();
  private statusListeners = new Set<(s: StreamStatus) => void>();
  private retryTimer = 0;
  private stopped = false;

  url(): string {
    const u = new URL("api/stream", document.baseURI);
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    return u.toString();
  }

  start(): void {
    this.stopped = false;
    this.connect();
  }

  private connect(): void {
    clearTimeout(this.retryTimer);
    if (this.transport === "sse") this.connectSse();
    else this.connectWs();
  }

  private opened(): void {
    this.attempts = 0;
    this.setStatus("open");
    // Whatever changed before this subscription began (at page load, or while the connection
    // was down) was never announced: every listener reloads once.
    this.dispatch({ type: RESYNC });
  }

  private receive(data: string): void {
    let msg: StreamMessage | StreamMessage[];
    try {
      msg = JSON.parse(data);
    } catch {
      return; // the server only sends JSON; anything else is not ours to guess at
    }
    // The WebSocket sends {"type": "batch", "messages": [...]}: whatever queued since the last send.
    const list = Array.isArray(msg) ? msg : msg.type === "batch" && Array.isArray(msg.messages) ? (msg.messages as StreamMessage[]) : [msg];
    for (const m of list) if (m && typeof m.type === "string") this.dispatch(m);
  }

  private connectWs(): void {
    let ws: WebSocket;
    let didOpen = false;
    try {
      ws = new WebSocket(this.url());
    } catch {
      this.useSse();
      this.scheduleRetry();
      return;
    }
    this.ws = ws;
    // A handshake has a deadline: one that neither opens nor fails (a proxy holding it, a
    // browser queueing it behind another) gives way to server-sent events.
    const deadline = window.setTimeout(() => {
      if (didOpen || this.ws !== ws) return;
      this.ws = null;
      ws.onclose = null;
      ws.close();
      this.useSse();
      this.connect();
    }, WS_HANDSHAKE_MS);
    ws.onopen = () => {
      didOpen = true;
      clearTimeout(deadline);
      this.opened();
    };
    ws.onmessage = (ev) => this.receive(ev.data as string);
    ws.onclose = (ev) => {
      if (ev.code === 4401) signInAgain(); // refused for want of the token: the sign-in form
      if (this.ws !== ws) return;
      this.ws = null;
      // A WebSocket refused outright (a proxy or server without WebSocket support) while the
      // dashboard still answers: use server-sent events from now on.
      clearTimeout(deadline);
      if (!didOpen) this.useSse();
      if (!this.stopped) this.scheduleRetry();
    };
    ws.onerror = () => ws.close();
  }

  private useSse(): void {
    this.transport = "sse";
    sessionStorage.setItem("ember.stream", "sse");
  }

  private connectSse(): void {
    const es = new EventSource(new URL("api/stream/sse", document.baseURI).toString());
    this.es = es;
    let didOpen = false;
    // Opening has a deadline too: a request that neither opens nor fails (held by a proxy, or
    // queued in the browser behind other requests to the host) is dropped and retried with
    // the banner showing, instead of leaving the page "connecting" for good.
    const deadline = window.setTimeout(() => {
      if (didOpen || this.es !== es) return;
      es.close();
      this.es = null;
      if (!this.stopped) this.scheduleRetry();
    }, SSE_OPEN_MS);
    es.onopen = () => {
      didOpen = true;
      clearTimeout(deadline);
      this.opened();
    };
    for (const t of SSE_TYPES) es.addEventListener(t, (ev) => this.receive((ev as MessageEvent).data as string));
    es.onerror = () => {
      // EventSource would retry on its own at its own pace; we retry with our backoff and banner.
      if (this.es !== es) return;
      clearTimeout(deadline);
      es.close();
      this.es = null;
      if (!didOpen && navigator.onLine) {
        this.transport = "ws"; // refused outright: try a WebSocket next
        sessionStorage.setItem("ember.stream", "ws");
      }
      if (!this.stopped) this.scheduleRetry();
    };
  }

  private scheduleRetry(): void {
    if (this.status !== "down") this.downSince = Date.now();
    this.setStatus("down");
    this.attempts++;
    // 0.5 s, 1 s, 2 s, 4 s, then every 5 s: quick after a blip, gentle on a dead server.
    const delay = Math.min(5000, 500 * 2 ** Math.min(this.attempts - 1, 4));
    this.retryTimer = window.setTimeout(() => this.connect(), delay);
  }

  /** Retry now (the banner's button), instead of waiting out the backoff. */
  retryNow(): void {
    if (this.status === "down") this.connect();
  }

  /** Closes the socket as a network failure would; used by the tests' "dropped stream" case. */
  drop(): void {
    if (this.ws) this.ws.close();
    else if (this.es) this.es.onerror?.(new Event("error"));
  }

  private setStatus(s: StreamStatus): void {
    this.status = s;
    this.statusListeners.forEach((l) => l(s));
  }

  private dispatch(msg: StreamMessage): void {
    this.handlers.get(msg.type)?.forEach((h) => h(msg));
    this.handlers.get("*")?.forEach((h) => h(msg));
  }

  on(type: string, h: Handler): () => void {
    let set = this.handlers.get(type);
    if (!set) this.handlers.set(type, (set = new Set()));
    set.add(h);
    return () => void set!.delete(h);
  }

  onStatus(l: (s: StreamStatus) => void): () => void {
    this.statusListeners.add(l);
    return () => void this.statusListeners.delete(l);
  }
}

export const stream = new LiveStream();

export function useStreamStatus(): StreamStatus {
  const [s, set] = useState(stream.status);
  useEffect(() => {
    const off = stream.onStatus(set);
    // Effects run after the first paint: a change between that render and this subscription
    // (the stream opening, on a busy machine) was announced to nobody. Read it now.
    set(stream.status);
    return off;
  }, []);
  return s;
}

/** Calls `h` for each message of these types, and with {type: "__resync__"} after a reconnect. */
export function useStream(types: string[], h: Handler, deps: unknown[] = []): void {
  useEffect(() => {
    const offs = [...types, RESYNC].map((t) => stream.on(t, h));
    return () => offs.forEach((o) => o());
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [types.join(","), ...deps]);
}
