/**
 * The search request of `fanout search` and `fanout plan`, from their options.
 * @module
 */
import { readFileSync } from "node:fs";
import { FanoutError } from "../shared/errors.js";
import { chooseIndex } from "../shared/index-choice.js";
import type { SearchRequest } from "../shared/request.js";
import { defaultRuntime } from "../shared/runtime.js";

export interface RequestOptions {
  dataset: string;
  query?: string;
  k: number;
  column?: string;
  indexName?: string;
  version?: number;
  filter?: string;
  nprobes?: number;
  refineFactor?: number;
  maxTasks?: number;
  select?: string;
  coverage?: "require" | "fallback" | "indexed-only";
  strategy?: "auto" | "single" | "segments" | "queries" | "hybrid";
  offset?: number;
}

/** The request; without `--query`, one random vector of the searched column's dimension. */
export async function toRequest(o: RequestOptions): Promise<SearchRequest> {
  const query = o.query ? parseQuery(o.query) : randomVector(await columnDimension(o));
  return {
    dataset: o.dataset,
    query: query as SearchRequest["query"],
    k: o.k,
    column: o.column,
    indexName: o.indexName,
    version: o.version,
    filter: o.filter,
    nprobes: o.nprobes,
    refineFactor: o.refineFactor,
    maxTasks: o.maxTasks,
    select: o.select?.split(",").map((s) => s.trim()),
    coverage: o.coverage,
    strategy: o.strategy,
    offset: o.offset,
  };
}

/** `--query`: JSON, or `@file` holding JSON; the request schema checks what it holds. */
function parseQuery(text: string): unknown {
  try {
    return JSON.parse(text.startsWith("@") ? readFileSync(text.slice(1), "utf8") : text);
  } catch (err) {
    throw new FanoutError("INVALID_REQUEST", `--query: ${(err as Error).message}`);
  }
}

function randomVector(dimension: number): number[] {
  return Array.from({ length: dimension }, () => Math.random());
}

/**
 * The dimension of the column the planner will choose (`--column`, else the only vector column),
 * read from the version's manifest: one small read, cached for a search in this process. Its
 * errors are the planner's own (several vector columns, unknown column, missing dataset).
 */
async function columnDimension(o: RequestOptions): Promise<number> {
  const runtime = defaultRuntime();
  const location = runtime.resolveDataset(o.dataset);
  const version = o.version ?? (await runtime.tables.latestVersion(location));
  const read = await runtime.versions.read(location, version);
  return chooseIndex(read, { column: o.column, indexName: o.indexName, allowMissing: true })
    .dimension;
}
