/**
 * Living datasets (paths `living` and `stack-living`): a writer commits every T seconds, the
 * kinds of `--cycle` in turn, while queries run. The data is on the local S3 behind the bench
 * proxy (`--latency-ms`, which also counts requests); the product runs in this process
 * (`living`) or through the local stack (`stack-living`) with the product's default
 * configuration; native lancedb follows the latest version in this process. After each commit,
 * in this order: `prepare` (with `--prepare on`, as the commit's event would start it), native's
 * first query (`checkoutLatest` and a search) and `--steady` more, the product's first query
 * (it pins the latest version itself) and `--steady` more, the views under the view prefix,
 * memory, and every `--gc-every` commits gc. One `living-commit` record per commit.
 * @module
 */

import { rm } from "node:fs/promises";
import { loadavg } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import * as lancedb from "@lancedb/lancedb";
import { FUNCTIONS, localEnv } from "../local/stack.js";
import { loadConfig } from "../shared/config.js";
import { gc } from "../shared/gc.js";
import { type Invoker, inProcessInvoker } from "../shared/invoker.js";
import type { Manifest } from "../shared/manifest.js";
import { readManifest } from "../shared/manifest-store.js";
import type { ObjectStore } from "../shared/objects.js";
import { type PrepareResponse, prepare } from "../shared/prepare.js";
import { createRuntime, type Runtime } from "../shared/runtime.js";
import { type SearchResponse, vectorSearch } from "../shared/search.js";
import { viewFolder, viewRoot } from "../shared/views/identity.js";
import type { DatasetContext, LivingOptions, LivingPath } from "./context.js";
import { CACHE_DIR, recallAtK, type SearchParams, TABLE } from "./datasets.js";
import { currentRssMiB, threadEnv } from "./env.js";
import { type CommitKind, openWriter, type Writer } from "./living-writer.js";
import { invokePlanner, nativeSearch } from "./modes.js";
import { type PhaseCounter, type PhaseCounts, phaseCounter } from "./s3-phases.js";
import {
  type BenchS3,
  BUCKET,
  directObjectStore,
  loopbackLambdaClient,
  prewarmProcesses,
  startBenchS3,
  startBenchStack,
  uploadDataset,
} from "./stack.js";
import { round } from "./stats.js";
import { manifestChange, shapeOf, type ViewCensus, viewCensus, viewKinds } from "./view-census.js";

/** The kind of commit `i` (0-based): the cycle in turn, a reindex every `reindexEvery`. */
export function commitKind(
  options: Pick<LivingOptions, "cycle" | "reindexEvery">,
  i: number,
): CommitKind {
  const every = options.reindexEvery;
  if (every > 0 && (i + 1) % every === 0) return "reindex";
  const turn = every > 0 ? i - Math.floor((i + 1) / every) : i;
  return options.cycle[turn % options.cycle.length] as CommitKind;
}

/** The product's own defaults, over the bench stack's (which widens plans for other paths). */
const PRODUCT_DEFAULTS = (() => {
  const config = loadConfig({});
  return {
    LANCE_FANOUT_MAX_TASKS: String(config.maxTasks),
    LANCE_FANOUT_VIEW_CACHE_SIZE: String(config.viewCacheSize),
  };
})();

const MIB = 1024 * 1024;

/** The product as the harness drives it: one search, one prepare, its memory now. */
export interface Product {
  search(query: readonly number[]): Promise<ProductAnswer>;
  prepare(): Promise<PrepareResponse>;
  memory(): Memory;
  close(): void;
}

export interface ProductAnswer {
  readonly response: SearchResponse;
  /** Where an in-process search's time went (the stack's tasks run where this cannot see). */
  readonly phases?: Phases;
}

/** Milliseconds: planning (the rest), the slowest task (its view opened too), the merge. */
export interface Phases {
  readonly plan: number;
  readonly tasks: number;
  readonly merge: number;
}

interface Memory {
  /** Processes that run segment-search tasks (this one in-process). */
  readonly processes: number;
  readonly sumMiB: number;
  readonly maxMiB: number;
  /** Index bytes the product's views hold prewarmed (in-process only). */
  readonly prewarmedMiB?: number;
}

/** A fresh copy of the dataset on the local S3 behind the proxy, and the product on it. */
export interface Setup {
  readonly storage: BenchS3;
  readonly uri: string;
  readonly product: Product;
  /** Resolves the dataset, names its view folder and runs gc, through the proxy. */
  readonly runtime: Runtime;
  stop(): Promise<void>;
}

export async function measureLiving(ctx: DatasetContext, path: LivingPath): Promise<void> {
  const options = ctx.options.living;
  await withSetup(ctx, path === "living" ? "in-process" : "stack", (setup, counter) =>
    new LivingRun(ctx, path, setup, counter).run(options),
  );
}

/**
 * Runs `work` on a fresh copy of the dataset (its own local S3 directory, removed after) with
 * the product in this process or through the local stack; `counter` sees every S3 request.
 */
export async function withSetup(
  ctx: DatasetContext,
  where: "in-process" | "stack",
  work: (setup: Setup, counter: PhaseCounter) => Promise<void>,
): Promise<void> {
  const dataDir = join(CACHE_DIR, "living-s3", `${where}-${Date.now()}`);
  let bytesServed = () => 0;
  const counter = phaseCounter(localEnv("", "").LANCE_FANOUT_S3_VIEW_PREFIX as string, () =>
    bytesServed(),
  );
  const setup = await (where === "in-process"
    ? inProcessSetup(ctx, dataDir, counter)
    : stackSetup(ctx, dataDir, counter));
  bytesServed = () => setup.storage.proxy.stats().bytes;
  try {
    await work(setup, counter);
  } finally {
    await setup.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

async function inProcessSetup(
  ctx: DatasetContext,
  dataDir: string,
  counter: PhaseCounter,
): Promise<Setup> {
  const storage = await startBenchS3({
    dataDir,
    latencyMs: ctx.options.latencyMs,
    bandwidthMBps: ctx.options.bandwidthMBps,
    onRequest: counter.onRequest,
  });
  const uri = await uploadDataset(storage, ctx.info);
  const runtime = createRuntime(
    loadConfig({ ...localEnv(storage.proxy.endpoint, "", BUCKET), ...PRODUCT_DEFAULTS }),
  );
  const invoker = inProcessInvoker(runtime);
  const params = ctx.spec.search;
  return {
    storage,
    uri,
    runtime,
    product: {
      async search(query) {
        const clock = { tasks: 0, merge: 0 };
        const started = performance.now();
        const response = await vectorSearch(
          { dataset: uri, query: [...query], ...params },
          { runtime, invoker: timed(invoker, clock) },
        );
        const total = performance.now() - started;
        const phases = { plan: total - clock.tasks - clock.merge, ...clock };
        return { response, phases };
      },
      prepare: () => prepare({ dataset: uri }, { runtime, invoker }),
      memory() {
        const rss = round(process.memoryUsage().rss / MIB, 1);
        const prewarmedMiB = round(runtime.views.prewarmedBytes / MIB, 1);
        return { processes: 1, sumMiB: rss, maxMiB: rss, prewarmedMiB };
      },
      close() {},
    },
    stop: () => storage.stop(),
  };
}

/** `invoker`, timing its slowest task and its merges into `clock`. */
function timed(invoker: Invoker, clock: { tasks: number; merge: number }): Invoker {
  const since = (t0: number) => performance.now() - t0;
  return {
    ...invoker,
    async searchSegments(task) {
      const t0 = performance.now();
      try {
        return await invoker.searchSegments(task);
      } finally {
        clock.tasks = Math.max(clock.tasks, since(t0));
      }
    },
    async merge(input) {
      const t0 = performance.now();
      try {
        return await invoker.merge(input);
      } finally {
        clock.merge += since(t0);
      }
    },
  };
}

async function stackSetup(
  ctx: DatasetContext,
  dataDir: string,
  counter: PhaseCounter,
): Promise<Setup> {
  const stack = await startBenchStack({
    dataDir,
    latencyMs: ctx.options.latencyMs,
    bandwidthMBps: ctx.options.bandwidthMBps,
    workers: ctx.options.workers,
    workerEnv: { ...threadEnv(), ...PRODUCT_DEFAULTS },
    prewarm: loadConfig({}).prewarm,
    onRequest: counter.onRequest,
  });
  const uri = await uploadDataset(stack, ctx.info);
  // Every worker started before anything is measured: memory is sampled from all of them.
  await prewarmProcesses(stack.lambdaEndpoint, ctx.options.workers);
  const client = loopbackLambdaClient(stack.lambdaEndpoint);
  const params = ctx.spec.search;
  return {
    storage: stack,
    uri,
    runtime: createRuntime(loadConfig(stack.env)),
    product: {
      search: async (query) => ({
        response: await invokePlanner<SearchResponse>(client, {
          dataset: uri,
          query: [...query],
          ...params,
        }),
      }),
      async prepare() {
        const out = await invokePlanner<{
          prepared: (PrepareResponse | { error: { code: string; message: string } })[];
        }>(client, { prepare: { dataset: uri } });
        const [report] = out.prepared;
        if (!report || "error" in report) throw new Error(`prepare: ${JSON.stringify(report)}`);
        return report;
      },
      memory() {
        const rss = stack
          .workerPids(FUNCTIONS.segmentSearch)
          .flatMap((pid) => currentRssMiB(pid) ?? []);
        return {
          processes: rss.length,
          sumMiB: round(
            rss.reduce((s, v) => s + v, 0),
            1,
          ),
          maxMiB: Math.max(0, ...rss),
        };
      },
      close: () => client.destroy(),
    },
    stop: () => stack.stop(),
  };
}

/** Native lancedb following the latest version: one handle, its index prewarmed at the start. */
export async function openFollower(
  dbUri: string,
  storageOptions: Record<string, string>,
): Promise<lancedb.Table> {
  const db = await lancedb.connect(dbUri, { storageOptions, manifestEnabled: false });
  const table = await db.openTable(TABLE);
  for (const index of await table.listIndices()) await table.prewarmIndex(index.name);
  return table;
}

/** A first query or one of the steady ones: its time, S3 requests and answer. */
interface Timed {
  readonly ms: number;
  readonly counts: PhaseCounts;
  readonly ids: readonly string[];
  readonly tasks?: number;
  readonly version?: number;
  readonly phases?: Phases;
}

/** Runs work that may fail without ending the run: failures are collected as `errors`. */
type Attempt = <T>(what: string, work: () => Promise<T>) => Promise<T | undefined>;

function attempts(): { errors: string[]; attempt: Attempt } {
  const errors: string[] = [];
  const attempt: Attempt = async (what, work) => {
    try {
      return await work();
    } catch (err) {
      errors.push(`${what}: ${String(err).slice(0, 500)}`);
      return undefined;
    }
  };
  return { errors, attempt };
}

/** `work` on each item, one after the other. */
async function sequence<T, U>(items: readonly T[], work: (item: T) => Promise<U>): Promise<U[]> {
  const out: U[] = [];
  for (const item of items) out.push(await work(item));
  return out;
}

const defined = <T>(values: readonly (T | undefined)[]): T[] =>
  values.filter((v): v is T => v !== undefined);

function sumCounts(list: readonly Timed[]): PhaseCounts {
  const out: PhaseCounts = {};
  for (const t of list) for (const [k, v] of Object.entries(t.counts)) out[k] = (out[k] ?? 0) + v;
  return out;
}

function censusOf(c: ViewCensus): { views: number; objects: number; bytes: number } {
  return { views: c.views.size, objects: c.objects, bytes: c.bytes };
}

function roundPhases(p: Phases): Phases {
  return { plan: round(p.plan, 1), tasks: round(p.tasks, 1), merge: round(p.merge, 1) };
}

class LivingRun {
  readonly #ctx: DatasetContext;
  readonly #path: LivingPath;
  readonly #setup: Setup;
  readonly #counter: PhaseCounter;
  readonly #census: ObjectStore;
  readonly #folder: string;
  #next = 0;

  constructor(ctx: DatasetContext, path: LivingPath, setup: Setup, counter: PhaseCounter) {
    this.#ctx = ctx;
    this.#path = path;
    this.#setup = setup;
    this.#counter = counter;
    // Listing the views costs no injected latency and no counted request.
    this.#census = directObjectStore(setup.storage);
    const location = setup.runtime.resolveDataset(setup.uri);
    this.#folder = `${viewRoot(setup.runtime.config, location)}/${viewFolder(location)}`;
  }

  #query(): number[] {
    const q = this.#ctx.queries[this.#next % this.#ctx.queries.length] as number[];
    this.#next++;
    return q;
  }

  #manifest(version: number): Promise<Manifest> {
    return readManifest(this.#census, this.#setup.uri, version);
  }

  async #product(query: readonly number[]): Promise<Timed> {
    const { value, ms, counts } = await this.#counter.measure(() =>
      this.#setup.product.search(query),
    );
    const { response, phases } = value;
    return {
      ms,
      counts,
      ids: response.results.map((r) => r._rowid),
      tasks: response.plan.tasks,
      version: response.version,
      phases,
    };
  }

  async #native(table: lancedb.Table, query: number[], first: boolean): Promise<Timed> {
    const params: SearchParams = this.#ctx.spec.search;
    const { value, ms, counts } = await this.#counter.measure(async () => {
      if (first) await table.checkoutLatest();
      return nativeSearch(table, params, [query]);
    });
    return { ms, counts, ids: value[0] ?? [], version: first ? await table.version() : undefined };
  }

  async run(options: LivingOptions): Promise<void> {
    const ctx = this.#ctx;
    const setup = this.#setup;
    const dbUri = setup.uri.slice(0, setup.uri.lastIndexOf("/"));
    const storageOptions = setup.storage.storageOptions();
    const writer = await openWriter(dbUri, storageOptions, ctx.spec, options);
    const native = await openFollower(dbUri, storageOptions);
    try {
      let manifest = await this.#manifest(await writer.version());
      const warm = await this.#warmUp(native, options);
      let census = await viewCensus(this.#census, this.#folder);
      await ctx.emit({
        type: "living-start",
        dataset: ctx.info.name,
        path: this.#path,
        prepare: options.prepare,
        options: { ...options, latencyMs: ctx.options.latencyMs, workers: ctx.options.workers },
        version: manifest.version,
        shape: shapeOf(manifest),
        config: {
          maxTasks: setup.runtime.config.maxTasks,
          coverage: setup.runtime.config.coverage,
          prewarm: setup.runtime.config.prewarm,
          viewCacheSize: setup.runtime.config.viewCacheSize,
          gcGraceMinutes: setup.runtime.config.gc.graceMs / 60_000,
        },
        warmUp: warm,
        census: censusOf(census),
        memory: setup.product.memory(),
      });
      const started = performance.now();
      for (let i = 0; i < options.commits; i++) {
        const due = started + i * options.intervalMs;
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
        const kind = commitKind(options, i);
        const step = await this.#commit(i, kind, writer, native, manifest, census, options);
        manifest = step.manifest;
        census = step.census;
        await ctx.emit({
          ...step.record,
          lagMs: round(Math.max(0, -wait)),
          atS: round((performance.now() - started) / 1000, 1),
        });
        ctx.options.log(step.line);
      }
    } finally {
      writer.close();
      native.close();
      setup.product.close();
    }
  }

  /** Both sides warm on the first version: native prewarmed, the product's views built. */
  async #warmUp(native: lancedb.Table, options: LivingOptions) {
    const prepared = options.prepare ? await this.#setup.product.prepare() : undefined;
    const product: number[] = [];
    const nativeMs: number[] = [];
    for (let i = 0; i < this.#ctx.options.warmup; i++) {
      const q = this.#query();
      nativeMs.push(round((await this.#native(native, q, false)).ms));
      product.push(round((await this.#product(q)).ms));
    }
    return { prepared, productMs: product, nativeMs };
  }

  async #commit(
    index: number,
    kind: CommitKind,
    writer: Writer,
    native: lancedb.Table,
    before: Manifest,
    censusBefore: ViewCensus,
    options: LivingOptions,
  ) {
    const setup = this.#setup;
    const { errors, attempt } = attempts();
    const commit = await this.#counter.measure(() => writer.commit(kind));
    const manifest = await this.#manifest(commit.value.to);
    const prepared = options.prepare
      ? await attempt("prepare", () => this.#counter.measure(() => setup.product.prepare()))
      : undefined;
    const afterPrepare = await viewCensus(this.#census, this.#folder);
    const queries = await this.#queries(native, options.steady, attempt);
    const afterQueries = await viewCensus(this.#census, this.#folder);
    const memory = setup.product.memory();
    const gc =
      options.gcEvery > 0 && (index + 1) % options.gcEvery === 0
        ? await this.#collect(options.gcKeep, afterQueries, attempt)
        : undefined;
    const census = gc?.after ?? afterQueries;
    const location = setup.runtime.resolveDataset(setup.uri);
    const created = (from: ViewCensus, to: ViewCensus) =>
      viewKinds(
        [...to.views].filter((v) => !from.views.has(v)),
        manifest,
        location,
        setup.runtime.config.maxTasks,
      );
    const { productFirst, nativeFirst } = queries;
    const record = {
      type: "living-commit",
      dataset: this.#ctx.info.name,
      path: this.#path,
      prepare: options.prepare,
      commit: index,
      kind,
      from: commit.value.from,
      to: commit.value.to,
      commitMs: round(commit.ms),
      shape: shapeOf(manifest),
      change: manifestChange(before, manifest),
      prepared: prepared
        ? { ms: round(prepared.ms), views: prepared.value.views, created: prepared.value.created }
        : null,
      viewsCreated: {
        prepare: created(censusBefore, afterPrepare),
        queries: created(afterPrepare, afterQueries),
      },
      first: {
        product: productFirst && {
          ms: round(productFirst.ms),
          tasks: productFirst.tasks,
          version: productFirst.version,
          phases: productFirst.phases && roundPhases(productFirst.phases),
        },
        native: nativeFirst && { ms: round(nativeFirst.ms), version: nativeFirst.version },
        agreement:
          productFirst && nativeFirst
            ? round(recallAtK([productFirst.ids], [[...nativeFirst.ids]]), 3)
            : undefined,
      },
      steady: {
        productMs: queries.productSteady.map((t) => round(t.ms)),
        productPhases: queries.productSteady.flatMap((t) =>
          t.phases ? [roundPhases(t.phases)] : [],
        ),
        nativeMs: queries.nativeSteady.map((t) => round(t.ms)),
      },
      requests: {
        commit: commit.counts,
        prepare: prepared?.counts,
        productFirst: productFirst?.counts,
        nativeFirst: nativeFirst?.counts,
        productSteady: sumCounts(queries.productSteady),
        nativeSteady: sumCounts(queries.nativeSteady),
      },
      census: censusOf(census),
      gc: gc ? { ...gc, before: censusOf(afterQueries), after: censusOf(gc.after) } : null,
      memory,
      errors,
      loadAverage: loadavg().map((l) => round(l, 2)),
    };
    const line =
      `${this.#path} #${index} ${kind.padEnd(8)} v${commit.value.from}->v${commit.value.to} ` +
      `${record.shape.segments} segs ${record.shape.unindexedRows} unindexed | commit ${round(commit.ms, 0)} ms` +
      `${prepared ? ` prepare ${round(prepared.ms, 0)} ms (${prepared.value.created} new)` : ""} | ` +
      `first native ${round(nativeFirst?.ms ?? Number.NaN, 1)} product ${round(productFirst?.ms ?? Number.NaN, 1)} ms ` +
      `(${productFirst?.tasks} tasks) | views ${census.views.size} (${census.objects} objects)` +
      `${gc ? " after gc" : ""} | rss ${memory.sumMiB} MiB${errors.length ? ` | ERRORS ${errors.join("; ")}` : ""}`;
    return { record, line, manifest, census };
  }

  /**
   * Native's first query after the commit (it checks out the latest version) and the steady
   * ones, then the product's on the same query vectors.
   */
  async #queries(native: lancedb.Table, steady: number, attempt: Attempt) {
    const first = this.#query();
    const rest = Array.from({ length: steady }, () => this.#query());
    const nativeFirst = await attempt("native first", () => this.#native(native, first, true));
    const nativeSteady = defined(
      await sequence(rest, (q) => attempt("native steady", () => this.#native(native, q, false))),
    );
    const productFirst = await attempt("product first", () => this.#product(first));
    const productSteady = defined(
      await sequence(rest, (q) => attempt("product steady", () => this.#product(q))),
    );
    return { nativeFirst, nativeSteady, productFirst, productSteady };
  }

  /**
   * gc of the dataset's views. The grace period cannot be shortened in production (over 15
   * minutes): gc is told it is later than it is, so every view no kept version uses is past it.
   */
  async #collect(keepVersions: number, before: ViewCensus, attempt: Attempt) {
    const { runtime, uri } = this.#setup;
    const now = new Date(Date.now() + runtime.config.gc.graceMs + 60_000);
    const run = await attempt("gc", () =>
      this.#counter.measure(() => gc({ dataset: uri, keepVersions, now }, { runtime })),
    );
    const after = run ? await viewCensus(this.#census, this.#folder) : before;
    const [report] = run?.value ?? [];
    return {
      ms: run ? round(run.ms) : null,
      counts: run?.counts,
      removed: report?.removed.length ?? 0,
      keptVersions: report?.versions ?? [],
      after,
    };
  }
}
