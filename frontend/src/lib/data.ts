// Loading REST data into a component, refreshed when the stream says it changed.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { errorText, getJSON, type Params } from "./api";
import { useStream } from "./stream";

export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  loading: boolean;
  reload: () => void;
}

/**
 * GET `path` now, again when `params` change, when any stream message of `liveTypes` arrives
 * (at most once per `minGapMs`, so a burst of events costs one request), and every `pollMs`
 * as a fallback for data the stream does not announce.
 */
export function useApi<T>(
  path: string | null,
  params: Params = {},
  opts: { liveTypes?: string[]; minGapMs?: number; pollMs?: number } = {},
): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [loading, setLoading] = useState(true);
  const key = path + JSON.stringify(params);
  const inflight = useRef<AbortController | null>(null);
  const lastAt = useRef(0);
  const pending = useRef(0);

  const load = useCallback(() => {
    if (!path) return;
    inflight.current?.abort();
    const ctl = new AbortController();
    inflight.current = ctl;
    lastAt.current = Date.now();
    getJSON<T>(path, params, ctl.signal)
      .then((d) => {
        if (ctl.signal.aborted) return;
        setData(d);
        setError(undefined);
      })
      .catch((e) => {
        if (!ctl.signal.aborted) setError(errorText(e));
      })
      .finally(() => {
        if (!ctl.signal.aborted) setLoading(false);
      });
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key]);

  useEffect(() => {
    setLoading(true);
    load();
    return () => inflight.current?.abort();
  }, [load]);

  // The refresh a live message schedules runs the load of the moment it fires: one that ran
  // the load it was scheduled with would, after a filter changed meanwhile, abort the new
  // query and show the old one's rows until the next message.
  const latest = useRef(load);
  latest.current = load;
  const minGap = opts.minGapMs ?? 1000;
  useStream(
    opts.liveTypes ?? [],
    () => {
      if (pending.current) return;
      const wait = Math.max(0, lastAt.current + minGap - Date.now());
      pending.current = window.setTimeout(() => {
        pending.current = 0;
        latest.current();
      }, wait);
    },
    [load],
  );
  useEffect(() => () => clearTimeout(pending.current), []);

  useEffect(() => {
    if (!opts.pollMs) return;
    const t = setInterval(load, opts.pollMs);
    return () => clearInterval(t);
  }, [load, opts.pollMs]);

  return { data, error, loading, reload: load };
}

/**
 * A counter that grows when stream messages of `types` arrive (and on a resync), at most once
 * per `minGapMs`: a table passes it as its refresh token to refetch the rows in view.
 */
export function useLiveToken(types: string[], minGapMs = 1000): number {
  const [token, setToken] = useState(0);
  const last = useRef(0);
  const timer = useRef(0);
  useStream(types, () => {
    if (timer.current) return; // a refresh is already due
    const wait = Math.max(0, last.current + minGapMs - Date.now());
    timer.current = window.setTimeout(() => {
      timer.current = 0;
      last.current = Date.now();
      setToken((t) => t + 1);
    }, wait);
  });
  useEffect(() => () => clearTimeout(timer.current), []);
  return token;
}

/** Date.now(), re-read every second while `active` (durations and "N s ago" tick). */
export function useNow(active: boolean): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!active) return;
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, [active]);
  return now;
}
