// What `/api/version` says of the session, read once per page load and shared: on `ember
// dashboard --history` it is a stopped session, and no page may then call a figure "live" or
// "now".
import { useEffect, useState } from "preact/hooks";
import { getJSON } from "./api";

export interface VersionInfo {
  history?: boolean;
  session_name?: string;
  stopped_at?: number | null;
}

let asked: Promise<VersionInfo | null> | null = null;

export function useVersion(): VersionInfo | null {
  const [info, setInfo] = useState<VersionInfo | null>(null);
  useEffect(() => {
    asked ??= getJSON<VersionInfo>("api/version").catch(() => null);
    let live = true;
    asked.then((v) => live && setInfo(v));
    return () => {
      live = false;
    };
  }, []);
  return info;
}

/** "ended 28/11/2026, 10:02:11" for a stopped session. */
export function endedText(info: VersionInfo | null): string {
  return info?.stopped_at ? `ended ${new Date(info.stopped_at * 1000).toLocaleString()}` : "ended at an unknown time";
}
