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
} from "./api-types";

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

/** A submitted job: Ray's JobDetails (`GET /api/jobs/`, Ray's shape, so not declared in
 * dashboard/schemas.py) and Ember's extra fields. Times in milliseconds. */
export type JobStatus = "PENDING" | "RUNNING" | "STOPPED" | "SUCCEEDED" | "FAILED";
export interface JobDetails {
  type: string;
  /** The entrypoint driver's job (hex), once it called init(). */
  job_id: string | null;
  submission_id: string;
  driver_info: { id: string; node_ip_address: string; pid: string } | null;
  status: JobStatus;
  entrypoint: string;
  message: string | null;
  error_type: string | null;
  start_time: number | null;
  end_time: number | null;
  metadata: Record<string, string> | null;
  runtime_env: Record<string, unknown> | null;
  driver_node_id: string | null;
  driver_exit_code: number | null;
  entrypoint_num_cpus?: number | null;
  entrypoint_num_gpus?: number | null;
  entrypoint_memory?: number | null;
  entrypoint_resources?: Record<string, number> | null;
  driver_pid?: number | null;
  driver_node_ip?: string | null;
  log_name?: string | null;
}
