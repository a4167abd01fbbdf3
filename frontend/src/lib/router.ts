// The view and its filters live in the URL hash (#/actors?state=ALIVE&q=Foo): a link can be
// shared, back/forward work, and hash routes need no server-side fallback under a URL prefix.
import { useEffect, useState } from "preact/hooks";

export interface Route {
  page: string;
  params: URLSearchParams;
}

export function parseHash(hash = location.hash): Route {
  const h = hash.replace(/^#\/?/, "");
  const q = h.indexOf("?");
  const page = (q < 0 ? h : h.slice(0, q)) || "overview";
  return { page, params: new URLSearchParams(q < 0 ? "" : h.slice(q + 1)) };
}

export function href(page: string, params?: Record<string, string | undefined>): string {
  const sp = new URLSearchParams();
  for (const [k, v] of Object.entries(params ?? {})) if (v) sp.set(k, v);
  const s = sp.toString();
  return `#/${page}${s ? `?${s}` : ""}`;
}

const listeners = new Set<() => void>();
window.addEventListener("hashchange", () => listeners.forEach((l) => l()));

export function navigate(page: string, params?: Record<string, string | undefined>, replace = false): void {
  const h = href(page, params);
  if (replace) {
    history.replaceState(null, "", h);
    listeners.forEach((l) => l());
  } else location.hash = h;
}

/** Changes some filters of the current view in place (replace: typing in a box is not history). */
export function setParams(updates: Record<string, string | undefined>): void {
  const r = parseHash();
  const next: Record<string, string | undefined> = Object.fromEntries(r.params.entries());
  Object.assign(next, updates);
  navigate(r.page, next, true);
}

export function useRoute(): Route {
  const [state, setState] = useState(() => ({ hash: location.hash, route: parseHash() }));
  useEffect(() => {
    const l = () =>
      setState((s) => (s.hash === location.hash ? s : { hash: location.hash, route: parseHash() }));
    listeners.add(l);
    // Effects run a frame after the first render: a hashchange in between (the next goto, a
    // typed address while the app loads) reached no listener, so read the address once more.
    l();
    return () => void listeners.delete(l);
  }, []);
  return state.route;
}
