/**
 * The search request: one zod schema gives validation and the TypeScript types. The same shape
 * arrives as an HTTP body, a direct planner payload and a library argument.
 * @module
 */
import { z } from "zod";
import { FanoutError } from "./errors.js";
import { filterProblem } from "./filter.js";

/** Upper bounds that keep lancedb away from its abort paths (see lancedb-hazards). */
export const LIMITS = {
  maxK: 10_000,
  maxQueries: 10_000,
  maxDimension: 65_536,
  maxNprobes: 65_536,
  maxRefineFactor: 1_000,
  /** Candidates per query a task may return: (k + offset) × refineFactor. */
  maxCandidates: 100_000,
  maxTasks: 1_000,
  maxTimeoutMs: 900_000,
  maxFilterLength: 16_384,
  maxSelect: 256,
} as const;

const vector = z.array(z.number()).min(1).max(LIMITS.maxDimension);
const positiveInt = (max: number) => z.number().int().min(1).max(max);
const columnName = z.string().min(1).max(1024);

export const DISTANCE_TYPES = ["l2", "cosine", "dot"] as const;
export type DistanceType = (typeof DISTANCE_TYPES)[number];

/** What to do with live fragments the index does not cover. */
export const COVERAGE_MODES = ["require", "fallback", "indexed-only"] as const;
export type Coverage = (typeof COVERAGE_MODES)[number];

/** How the work is split into tasks: by group (of index segments), by query chunk, or both. */
export const STRATEGIES = ["auto", "single", "segments", "queries", "hybrid"] as const;
export type Strategy = (typeof STRATEGIES)[number];

export const searchRequestSchema = z
  .strictObject({
    /** `s3://bucket/prefix/name.lance`, or a local path in embedded mode. */
    dataset: z
      .string()
      .min(1)
      .max(2048)
      .refine((s) => !s.split(/[\\/]/).includes(".."), "must not contain '..' segments"),
    /** One vector, or a matrix of query vectors (one per row). */
    query: z.union([vector, z.array(vector).min(1).max(LIMITS.maxQueries)]),
    k: positiveInt(LIMITS.maxK),
    column: columnName.optional(),
    indexName: z.string().min(1).max(1024).optional(),
    version: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional(),
    filter: z
      .string()
      .trim()
      .min(1)
      .max(LIMITS.maxFilterLength)
      // Lance would apply the part of it it understands and ignore the rest: refuse instead.
      .superRefine((filter, ctx) => {
        const problem = filterProblem(filter);
        if (problem) ctx.addIssue({ code: "custom", message: problem });
      })
      .optional(),
    nprobes: positiveInt(LIMITS.maxNprobes).optional(),
    refineFactor: positiveInt(LIMITS.maxRefineFactor).optional(),
    distanceType: z.enum(DISTANCE_TYPES).optional(),
    select: z
      .array(columnName)
      .max(LIMITS.maxSelect)
      .refine((cols) => new Set(cols).size === cols.length, "must not repeat a column")
      .optional(),
    maxTasks: positiveInt(LIMITS.maxTasks).optional(),
    timeoutMs: positiveInt(LIMITS.maxTimeoutMs).optional(),
    /** Rows to skip per query, for paging: results are ranks offset+1 .. offset+k. */
    offset: z.number().int().min(0).max(LIMITS.maxK).optional(),
    coverage: z.enum(COVERAGE_MODES).optional(),
    strategy: z.enum(STRATEGIES).optional(),
    /** Return the plan without searching. */
    explain: z.boolean().optional(),
  })
  .refine((r) => r.k + (r.offset ?? 0) <= LIMITS.maxK, {
    message: `k + offset must be at most ${LIMITS.maxK}`,
    path: ["offset"],
  })
  .refine((r) => (r.k + (r.offset ?? 0)) * (r.refineFactor ?? 1) <= LIMITS.maxCandidates, {
    message: `(k + offset) × refineFactor must be at most ${LIMITS.maxCandidates}`,
    path: ["refineFactor"],
  })
  .refine((r) => !Array.isArray(r.query[0]) || isRectangular(r.query as number[][]), {
    message: "every query vector must have the same dimension",
    path: ["query"],
  });

/** The request as a caller writes it. */
export type SearchRequest = z.input<typeof searchRequestSchema>;

/** A validated request with its query vectors copied into a matrix the caller cannot change. */
export type ValidSearchRequest = Omit<z.output<typeof searchRequestSchema>, "query"> & {
  readonly queries: readonly Float32Array[];
};

function isRectangular(rows: readonly number[][]): boolean {
  return rows.every((row) => row.length === rows[0]?.length);
}

/**
 * Validates a request and copies its query vectors (as float32, the type Lance searches in),
 * so a caller that mutates its arrays later changes nothing.
 * @throws FanoutError `INVALID_REQUEST` naming the first offending fields.
 */
export function parseSearchRequest(input: unknown): ValidSearchRequest {
  const parsed = searchRequestSchema.safeParse(input);
  if (!parsed.success) {
    throw new FanoutError("INVALID_REQUEST", formatIssues(parsed.error.issues), {
      details: parsed.error.issues.map((i) => ({ path: i.path.join("."), message: i.message })),
    });
  }
  const { query, ...rest } = parsed.data;
  const matrix = (Array.isArray(query[0]) ? query : [query]) as number[][];
  const queries = matrix.map((row) => Float32Array.from(row));
  // A finite double can still overflow float32 (e.g. 1e39): Lance would see Infinity.
  if (queries.some((row) => row.some((x) => !Number.isFinite(x)))) {
    throw new FanoutError("INVALID_REQUEST", "query: values must be finite float32 numbers");
  }
  return { ...rest, queries };
}

function formatIssues(issues: readonly z.core.$ZodIssue[]): string {
  const shown = issues.slice(0, 3).map((i) => `${i.path.join(".") || "request"}: ${i.message}`);
  const more = issues.length > 3 ? ` (and ${issues.length - 3} more)` : "";
  return `${shown.join("; ")}${more}`;
}
