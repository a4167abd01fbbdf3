// The JSON shapes of the dashboard's REST API (docs/dashboard-api.md) that the pages read.

export type Resources = Record<string, number>;

export interface ClusterStatus {
  nodes: { alive: string[]; dead: string[] };
  resources: { total: Resources; used: Resources; available: Resources };
  pending_demands: unknown[];
  tasks: Record<string, number>;
  actors: Record<string, number>;
  dropped: Record<string, number>;
  time: number;
}

export interface HistorySample {
  time: number;
  cpu_percent?: number;
  mem_used_bytes?: number;
  mem_total_bytes?: number;
  disk_read_bytes_per_s?: number;
  disk_write_bytes_per_s?: number;
  net_sent_bytes_per_s?: number;
  net_recv_bytes_per_s?: number;
  object_store_used_bytes?: number;
  object_store_capacity_bytes?: number;
  object_store_spilled_bytes?: number;
  object_store_spilled_objects?: number;
  object_store_restored_bytes_total?: number;
  num_workers?: number;
}

// The resources' rows are generated from their one declaration (dashboard/schemas.py):
// api-types.ts, rewritten by `python -m ember.dashboard.schema_ts`. Only shapes that are not
// a resource's row are kept by hand below.
export type {
  NodeRow,
  NodeDetail,
  WorkerRow,
  ActorRow,
  ActorDetail,
  TaskRow,
  TaskDetail,
  ObjectRow,
  ObjectPage,
  LogFileRow as LogFile,
  EventRow,
  PlacementGroupRow,
  JobRow as JobDetails,
} from "./api-types";
import type { JobRow } from "./api-types";

export interface TaskSummary {
  total: number;
  by_state: Record<string, number>;
  by_function: { name: string; total: number; states: Record<string, number> }[];
  dropped: number;
}

export interface UserMetricHistory {
  times: number[];
  series: { key: string; name: string; type: string; tags: Record<string, string>; values: (number | null)[] }[];
  dropped_series: number;
}

export interface TaskRates {
  bucket_s: number;
  times: number[];
  functions: { name: string; finished: number[]; failed: number[]; mean_duration_s: (number | null)[] }[];
  truncated: boolean;
}

/** A job (`GET /api/jobs/`: Ray's JobDetails, then Ember's fields). Times in milliseconds. */
export type JobStatus = JobRow["status"];
