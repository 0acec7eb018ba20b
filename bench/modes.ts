/**
 * The benchmarked modes and the two execution paths (in-process, local stack).
 *
 When the request has a `strategy` field (detected from shared/request.ts STRATEGIES), every
 * product mode is sent as `strategy: <mode>` with `maxTasks: G`, and `auto` is measured too.
 * Without it, the modes are emulated: `single` = `maxTasks: 1`, `segments` = `maxTasks: G`, and
 * `queries` = the harness splits the query matrix into C chunks and sends one `maxTasks: 1` search
 * per chunk, concurrently. `BENCH_STRATEGY=off` forces the emulation (the one-line switch).
 * @module
 */
import { createHash } from "node:crypto";
import { InvokeCommand, type LambdaClient } from "@aws-sdk/client-lambda";
import * as lancedb from "@lancedb/lancedb";
import { readInvokeOutput } from "../functions/common/invoke-output.js";
import { FUNCTIONS } from "../local/stack.js";
import { decodeCandidates } from "../shared/codec.js";
import { isErrorBody } from "../shared/errors.js";
import type { Invoker } from "../shared/invoker.js";
import { inProcessInvoker } from "../shared/invoker.js";
import type { SearchRequest } from "../shared/request.js";
import * as requestModule from "../shared/request.js";
import type { Runtime } from "../shared/runtime.js";
import { type SearchResponse, vectorSearch } from "../shared/search.js";
import { viewSpecOf } from "../shared/segment-search.js";
import type { DatasetInfo, SearchParams } from "./datasets.js";
import { TABLE } from "./datasets.js";
import { type BenchStack, loopbackLambdaClient } from "./stack.js";

/** Whether the product takes `strategy` ("auto" | "single" | "segments" | "queries" | "hybrid"). */
export const PRODUCT_HAS_STRATEGY =
  process.env.BENCH_STRATEGY !== "off" &&
  Array.isArray((requestModule as Record<string, unknown>).STRATEGIES);

export type ModeName = "native" | "single" | "segments" | "queries" | "auto";
export const ALL_MODES: readonly ModeName[] = ["native", "single", "segments", "queries", "auto"];

export interface Mode {
  readonly name: ModeName;
  /** Fan-out width: tasks (segments), chunks (queries); 1 for native and single. */
  readonly width: number;
}

export function modeId(mode: Mode): string {
  return mode.name === "native" || mode.name === "single" || mode.name === "auto"
    ? mode.name
    : `${mode.name}/${mode.width}`;
}

/**
 * The work a product answer was split into, whatever the mode that asked for it: two modes with
 * the same plan ran the same tasks, so what tells their timings apart is the run's spread.
 */
export interface PlanRecord {
  readonly groups: number;
  readonly chunks: number;
  readonly refine: string;
  /** The groups' segments, hashed: which segments went together. */
  readonly signature: string;
}

export function planRecordOf({ plan }: SearchResponse): PlanRecord {
  const segments = JSON.stringify(plan.groups.map((g) => [g.kind, g.segments]));
  return {
    groups: plan.groups.length,
    chunks: plan.queryChunks,
    refine: plan.refine,
    signature: createHash("sha256").update(segments).digest("hex").slice(0, 12),
  };
}

/** The distinct plans among `plans`, in the order first seen. */
export function distinctPlans(plans: readonly (PlanRecord | undefined)[]): PlanRecord[] {
  return [...new Map(plans.flatMap((p) => (p ? [[JSON.stringify(p), p] as const] : []))).values()];
}

/** What one search answered, per query: row ids best first. */
export interface Answer {
  readonly ids: string[][];
  /** Tasks the product ran (0 for native). */
  readonly tasks: number;
  /** The product's plan (none for native, or for the emulated `queries` mode's several requests). */
  readonly plan?: PlanRecord;
  /** Per-phase milliseconds, where the path can see them. */
  readonly phases?: Phases;
}

export interface Phases {
  /** Planning: version, manifest, grouping (vectorSearch total minus tasks and merge). */
  plan: number;
  /** Opening (or creating) the groups' views, max over tasks. */
  views: number;
  /** The Lance search of the slowest task, view opening excluded. */
  search: number;
  merge: number;
}

export interface Target {
  readonly path: "in-process" | "stack";
  search(mode: Mode, queries: readonly number[][]): Promise<Answer>;
  /** Brings a mode to its steady state before it is timed (every worker holds its views). */
  warmUp?(mode: Mode, queries: readonly number[][]): Promise<void>;
  close(): Promise<void>;
}

/** The product request of one mode (without the query), or undefined if not measurable yet. */
export function productRequest(
  info: DatasetInfo,
  uri: string,
  params: SearchParams,
  mode: Mode,
): Record<string, unknown> | undefined {
  const base = {
    dataset: uri,
    k: params.k,
    nprobes: params.nprobes,
    ...(params.refineFactor === undefined ? {} : { refineFactor: params.refineFactor }),
    version: info.version,
  };
  if (PRODUCT_HAS_STRATEGY) {
    if (mode.name === "auto") return { ...base, strategy: "auto" };
    if (mode.name === "single") return { ...base, strategy: "single", maxTasks: 1 };
    return { ...base, strategy: mode.name, maxTasks: mode.width };
  }
  if (mode.name === "auto") return undefined;
  if (mode.name === "segments") return { ...base, maxTasks: mode.width };
  return { ...base, maxTasks: 1 };
}

/** Chunks of the query matrix for the emulated `queries` mode: C nearly equal parts. */
export function chunk<T>(items: readonly T[], parts: number): T[][] {
  const n = Math.min(parts, items.length);
  const out: T[][] = [];
  let start = 0;
  for (let i = 0; i < n; i++) {
    const size = Math.floor(items.length / n) + (i < items.length % n ? 1 : 0);
    out.push(items.slice(start, start + size));
    start += size;
  }
  return out;
}

function idsOf(response: SearchResponse, queryCount: number): string[][] {
  const ids: string[][] = Array.from({ length: queryCount }, () => []);
  for (const row of response.results) ids[row._query_id]?.push(row._rowid);
  return ids;
}

/** Runs a product mode through `send` (one request -> response), emulating `queries` if needed. */
async function productSearch(
  request: Record<string, unknown>,
  mode: Mode,
  queries: readonly number[][],
  send: (request: Record<string, unknown>) => Promise<SearchResponse>,
): Promise<Omit<Answer, "phases">> {
  if (mode.name === "queries" && !PRODUCT_HAS_STRATEGY && queries.length > 1) {
    const parts = chunk(queries, mode.width);
    const responses = await Promise.all(parts.map((part) => send({ ...request, query: part })));
    return {
      ids: responses.flatMap((r, i) => idsOf(r, parts[i]?.length ?? 0)),
      tasks: responses.reduce((s, r) => s + r.plan.tasks, 0),
    };
  }
  const query = queries.length === 1 ? queries[0] : queries;
  const response = await send({ ...request, query });
  return {
    ids: idsOf(response, queries.length),
    tasks: response.plan.tasks,
    plan: planRecordOf(response),
  };
}

/**
 * Native lancedb: one table handle, one query (multi-vector for a batch). `prewarm` loads the
 * whole index into memory first, as the product's workers do with their views in warm runs.
 */
export async function openNative(
  dbUri: string,
  storageOptions: Record<string, string>,
  version: number,
  prewarm = false,
): Promise<lancedb.Table> {
  const db = await lancedb.connect(dbUri, { storageOptions });
  const table = await db.openTable(TABLE);
  await table.checkout(version);
  if (prewarm) {
    for (const index of await table.listIndices()) await table.prewarmIndex(index.name);
  }
  return table;
}

export async function nativeSearch(
  table: lancedb.Table,
  params: SearchParams,
  queries: readonly number[][],
): Promise<string[][]> {
  let q = table
    .vectorSearch(queries[0] as number[])
    .column("vector")
    .limit(params.k)
    .nprobes(params.nprobes)
    .withRowId()
    .select(["_distance"]);
  if (params.refineFactor !== undefined) q = q.refineFactor(params.refineFactor);
  for (const v of queries.slice(1)) q = q.addQueryVector(v);
  const batch = await q.toArrow();
  const ids: { id: string; d: number }[][] = queries.map(() => []);
  const qi = batch.getChild("query_index");
  const rid = batch.getChild("_rowid");
  const dist = batch.getChild("_distance");
  for (let i = 0; i < batch.numRows; i++) {
    const q = qi ? Number(qi.get(i)) : 0;
    ids[q]?.push({ id: String(rid?.get(i)), d: Number(dist?.get(i)) });
  }
  return ids.map((l) => l.sort((a, b) => a.d - b.d).map((x) => x.id));
}

/**
 * An in-process invoker that times each task's view opening and search apart (the view is
 * opened first through the same cache, so the product's own open is then a cache hit).
 */
function timingInvoker(runtime: Runtime, sink: { tasks: Phases[]; merge: number }): Invoker {
  const inner = inProcessInvoker(runtime);
  return {
    profile: inner.profile,
    async searchSegments(task) {
      const t0 = performance.now();
      await runtime.views.open(viewSpecOf(task, runtime.resolveDataset(task.dataset)));
      const t1 = performance.now();
      const out = await inner.searchSegments(task);
      sink.tasks.push({ plan: 0, views: t1 - t0, search: performance.now() - t1, merge: 0 });
      // Sanity: candidates decode (as the merge will).
      decodeCandidates(out.candidates);
      return out;
    },
    async merge(input) {
      const t0 = performance.now();
      const out = await inner.merge(input);
      sink.merge += performance.now() - t0;
      return out;
    },
    prepareView: inner.prepareView,
    warmViews: inner.warmViews,
  };
}

/** Where a target reads the dataset: the table URI, its database URI and lancedb storage options. */
export interface DataLocation {
  readonly uri: string;
  readonly dbUri: string;
  readonly storageOptions: Record<string, string>;
}

/** The dataset's local build under bench/cache. */
export function localData(info: DatasetInfo): DataLocation {
  return { uri: info.uri, dbUri: info.dir, storageOptions: {} };
}

/**
 * Native and the product in this process, on `data` (local files by default; the local S3 for
 * request counts), with the dataset's search parameters unless `params` says otherwise.
 */
export async function inProcessTarget(
  info: DatasetInfo,
  runtime: Runtime,
  data: DataLocation = localData(info),
  params: SearchParams = info.spec.search,
): Promise<Target> {
  const table = await openNative(
    data.dbUri,
    data.storageOptions,
    info.version,
    runtime.config.prewarm !== "off",
  );
  return {
    path: "in-process",
    async search(mode, queries) {
      if (mode.name === "native") {
        return { ids: await nativeSearch(table, params, queries), tasks: 0 };
      }
      const request = productRequest(info, data.uri, params, mode);
      if (!request) throw new Error(`mode ${mode.name} is not available in this product version`);
      const sink = { tasks: [] as Phases[], merge: 0 };
      const invoker = timingInvoker(runtime, sink);
      const started = performance.now();
      const out = await productSearch(request, mode, queries, (r) =>
        vectorSearch(r as SearchRequest, { runtime, invoker }),
      );
      const total = performance.now() - started;
      const slowest = sink.tasks.reduce(
        (a, b) => (b.views + b.search > a.views + a.search ? b : a),
        { plan: 0, views: 0, search: 0, merge: 0 },
      );
      return {
        ...out,
        phases: {
          plan: Math.max(0, total - slowest.views - slowest.search - sink.merge),
          views: slowest.views,
          search: slowest.search,
          merge: sink.merge,
        },
      };
    },
    async close() {
      table.close();
    },
  };
}

/** Invokes the planner function with `payload`; an error body or a function error throws. */
export async function invokePlanner<T>(
  client: LambdaClient,
  payload: Record<string, unknown>,
): Promise<T> {
  const out = await client.send(
    new InvokeCommand({ FunctionName: FUNCTIONS.planner, Payload: JSON.stringify(payload) }),
  );
  const { body, failure } = readInvokeOutput(out, FUNCTIONS.planner);
  if (failure) throw new Error(failure);
  if (isErrorBody(body)) throw new Error(`${body.error.code}: ${body.error.message}`);
  return body as T;
}

/** The local stack: product modes invoke the planner function; native reads the same S3. */
export async function stackTarget(
  info: DatasetInfo,
  s3Uri: string,
  stack: Pick<BenchStack, "lambdaEndpoint" | "storageOptions" | "prewarm" | "warmEveryWorker">,
  params: SearchParams = info.spec.search,
): Promise<Target> {
  const { lambdaEndpoint } = stack;
  const dbUri = s3Uri.slice(0, s3Uri.lastIndexOf("/"));
  let table: lancedb.Table | undefined;
  const client = loopbackLambdaClient(lambdaEndpoint);
  const send = (request: Record<string, unknown>) => invokePlanner<SearchResponse>(client, request);
  return {
    path: "stack",
    async search(mode, queries) {
      if (mode.name === "native") {
        table ??= await openNative(
          dbUri,
          stack.storageOptions(),
          info.version,
          stack.prewarm !== "off",
        );
        return { ids: await nativeSearch(table, params, queries), tasks: 0 };
      }
      const request = productRequest(info, s3Uri, params, mode);
      if (!request) throw new Error(`mode ${mode.name} is not available in this product version`);
      return productSearch(request, mode, queries, send);
    },
    async warmUp(mode, queries) {
      // Prewarming workers hold the whole index of a view, whatever query opened it; workers that
      // do not prewarm stay warm by use (what earlier queries touched), as native does.
      if (mode.name === "native" || stack.prewarm === "off") return;
      const request = productRequest(info, s3Uri, params, mode);
      if (!request) return;
      await stack.warmEveryWorker({
        ...request,
        query: queries.length === 1 ? queries[0] : queries,
      });
    },
    async close() {
      table?.close();
      table = undefined;
      client.destroy();
    },
  };
}
