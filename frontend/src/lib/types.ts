// The JSON shapes of the dashboard's REST API (docs/dashboard-api.md) that the pages read.
// Fields an agent may not report are optional: the pages show "–" rather than guess.

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

export interface NodeRow {
  node_id: string;
  node_ip?: string;
  hostname?: string;
  state: string;
  is_head: boolean;
  start_time?: number;
  last_seen?: number;
  cpu_percent?: number;
  mem_used_bytes?: number;
  num_workers: number;
  resources_total: Resources;
  resources_available: Resources;
  lost_reason?: string | null;
}

export interface WorkerRow {
  node_id: string;
  pid: number;
  worker_id?: string;
  kind?: string;
  state?: string;
  current_task?: string | null;
  actor_class?: string | null;
  cpu_percent?: number;
  rss_bytes?: number;
  uss_bytes?: number;
  num_open_files?: number;
  start_time?: number;
  component?: string;
  job_id?: string | null;
}

export interface NodeDetail extends NodeRow {
  metrics: Record<string, unknown>;
  info: Record<string, unknown>;
  workers: WorkerRow[];
}

export interface ActorRow {
  actor_id: string;
  class_name?: string;
  name?: string;
  title?: string;
  state: string;
  node_id?: string;
  pid?: number;
  worker_id?: string;
  job_id?: string;
  num_restarts?: number;
  death_cause?: string | null;
  pending_reason?: string | null;
  creator_actor_id?: string | null;
  pending_calls?: number;
  executed_calls?: number;
  required_resources?: Resources;
  detached?: boolean;
  start_time?: number;
  end_time?: number;
  /** Added by /api/frontend/actors: how many actors this one created, and why it is pending. */
  num_children?: number;
  infeasible?: boolean;
}

export interface TaskRow {
  task_id: string;
  name: string;
  state: string;
  job_id?: string;
  actor_id?: string | null;
  node_id?: string | null;
  worker_id?: string | null;
  pid?: number | null;
  attempt?: number;
  type?: string;
  submitted_time?: number | null;
  start_time?: number | null;
  end_time?: number | null;
  duration_s?: number | null;
  error?: string | null;
  events?: { state: string; time: number }[];
}

export interface TaskSummary {
  total: number;
  by_state: Record<string, number>;
  by_function: { name: string; total: number; states: Record<string, number> }[];
  dropped: number;
}

export interface EventRow {
  time: number;
  severity: string;
  source: string;
  node_id?: string | null;
  pid?: number | null;
  kind?: string;
  message: string;
  detail?: string | null;
}

export interface ObjectRow {
  node_id: string;
  object_id: string;
  pid?: number;
  reference_type: string;
  object_size?: number | null;
  status?: string;
  call_site?: string;
  ip?: string;
  worker_id?: string;
}

export interface LogFile {
  node_id: string;
  name: string;
  component?: string;
  pid?: number | null;
  worker_id?: string | null;
  size?: number;
  mtime?: number;
  stream?: string;
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
