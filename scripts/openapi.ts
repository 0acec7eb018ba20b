/**
 * Builds the OpenAPI document of the HTTP API: the request schema comes from the zod schema the
 * service validates with, so the document cannot drift from the code; `npm run docs:openapi`
 * writes it to docs/openapi.json and a test checks the file is current.
 * @module
 */
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { ARROW_STREAM } from "../shared/arrow.js";
import { ERROR_STATUS } from "../shared/errors.js";
import { STRATEGIES, searchRequestSchema } from "../shared/request.js";

const group = (withSearched: boolean) => ({
  type: "object",
  required: ["kind", "segments", "rows", "cost", ...(withSearched ? ["searchedSegments"] : [])],
  additionalProperties: false,
  properties: {
    kind: {
      enum: ["index", "flat"],
      description: "index segments, or unindexed fragments searched exactly",
    },
    segments: { type: "array", items: { type: "string", format: "uuid" } },
    rows: { type: "integer", minimum: 0, description: "live rows of the group" },
    cost: { type: "number", description: "estimated cost in row-equivalents" },
    ...(withSearched
      ? {
          searchedSegments: {
            type: "integer",
            minimum: 0,
            description: "index segments the task's Lance search covered",
          },
        }
      : {}),
  },
});

const planResponse = (withResults: boolean) => ({
  type: "object",
  required: [
    "version",
    "writer",
    "index",
    "plan",
    "partial",
    "unsearchedRows",
    ...(withResults ? ["results"] : []),
  ],
  additionalProperties: false,
  properties: {
    version: { type: "integer", minimum: 1, description: "the dataset version searched (pinned)" },
    writer: {
      type: ["string", "null"],
      description:
        "the Lance library and version that wrote the version (e.g. `lance 0.21.0`); null when its manifest does not record one (writers before Lance 0.8)",
    },
    index: {
      type: "object",
      required: ["name", "type", "column", "metric", "segmentCount", "rows"],
      additionalProperties: false,
      properties: {
        name: { type: "string", description: "empty when the column has no vector index" },
        type: {
          type: ["string", "null"],
          description:
            "lancedb's index type (e.g. `IvfPq`); null without an index, or where lancedb does not list it",
        },
        column: { type: "string" },
        metric: { enum: ["l2", "cosine", "dot"] },
        segmentCount: {
          type: "integer",
          minimum: 0,
          description: "index segments of the version, as Lance counts them",
        },
        rows: {
          type: "object",
          required: ["indexed", "unindexed"],
          additionalProperties: false,
          description: "live rows the index covers (each once) and live rows it does not",
          properties: {
            indexed: { type: "integer", minimum: 0 },
            unindexed: { type: "integer", minimum: 0 },
          },
        },
      },
    },
    plan: {
      type: "object",
      required: [
        "strategy",
        "tasks",
        "queryChunks",
        "estimatedMs",
        "refine",
        "reason",
        "considered",
        "groups",
      ],
      additionalProperties: false,
      properties: {
        strategy: { enum: STRATEGIES.filter((s) => s !== "auto") },
        tasks: { type: "integer", minimum: 0 },
        queryChunks: { type: "integer", minimum: 1 },
        estimatedMs: { type: "number" },
        refine: {
          enum: ["task", "merge", "none"],
          description: "where index candidates get exact distances (see Refine)",
        },
        reason: {
          type: "string",
          description:
            "why the plan has this shape, in words: the index's bytes against one segment-search's cache, the segments, the slots, the estimate of each plan weighed",
        },
        considered: {
          type: "array",
          description: "every plan the cost model weighed (one for a fixed strategy)",
          items: {
            type: "object",
            required: ["strategy", "groups", "queryChunks", "estimatedMs"],
            additionalProperties: false,
            properties: {
              strategy: { enum: STRATEGIES.filter((s) => s !== "auto") },
              groups: { type: "integer", minimum: 1 },
              queryChunks: { type: "integer", minimum: 1 },
              estimatedMs: { type: "number" },
            },
          },
        },
        groups: { type: "array", items: group(withResults) },
      },
    },
    partial: {
      type: "boolean",
      description: "rows were left out on purpose (coverage indexed-only)",
    },
    unsearchedRows: { type: "integer", minimum: 0 },
    ...(withResults
      ? {
          results: {
            type: "array",
            description: "sorted by _query_id, _distance, _rowid",
            items: {
              type: "object",
              required: ["_query_id", "_distance", "_rowid"],
              properties: {
                _query_id: { type: "integer", minimum: 0 },
                _distance: { type: "number" },
                _rowid: {
                  type: "string",
                  pattern: "^[0-9]+$",
                  description: "u64 as a decimal string",
                },
              },
              additionalProperties: { description: "a `select` column" },
            },
          },
        }
      : {}),
  },
});

/**
 * What the HTTP API itself answers, before the planner: no such route, and a throttled planner
 * (the local stack's bodies; API Gateway answers these with `{ "message": ... }` of its own).
 */
const HTTP_API_ERRORS = { NOT_FOUND: 404, TOO_MANY_REQUESTS: 429 } as const;

const errorBody = {
  type: "object",
  required: ["error"],
  additionalProperties: false,
  properties: {
    error: {
      type: "object",
      required: ["code", "message"],
      additionalProperties: false,
      properties: {
        code: { enum: [...Object.keys(ERROR_STATUS), ...Object.keys(HTTP_API_ERRORS)] },
        message: { type: "string" },
        details: {},
      },
    },
  },
};

/** GET /health of the local stack: `reason` says what it still does while it is starting. */
const health = {
  type: "object",
  required: ["status"],
  additionalProperties: false,
  properties: {
    status: { enum: ["ok", "starting"] },
    reason: { type: "string" },
  },
};

export function openApiDocument() {
  const statuses: Record<string, number> = { ...ERROR_STATUS, ...HTTP_API_ERRORS };
  const errorResponses = Object.fromEntries(
    [...new Set(Object.values(statuses))].map((status) => [
      String(status),
      {
        description: Object.entries(statuses)
          .filter(([, s]) => s === status)
          .map(([code]) => code)
          .join(", "),
        content: { "application/json": { schema: { $ref: "#/components/schemas/ErrorBody" } } },
      },
    ]),
  );
  return {
    openapi: "3.1.0",
    info: {
      title: "lance-fanout",
      version: "0.1.0",
      description: "Serverless fan-out vector search over a Lance dataset. See docs/api.md.",
    },
    paths: {
      "/search": {
        post: {
          operationId: "search",
          security: [{ sigv4: [] }],
          summary: "k-nearest-neighbour search, fanned out over the index segments",
          requestBody: {
            required: true,
            content: {
              "application/json": { schema: { $ref: "#/components/schemas/SearchRequest" } },
            },
          },
          responses: {
            "200": {
              description: "the results, or the plan when `explain` is true",
              content: {
                "application/json": {
                  schema: {
                    oneOf: [
                      { $ref: "#/components/schemas/SearchResponse" },
                      { $ref: "#/components/schemas/PlanResponse" },
                    ],
                  },
                },
                [ARROW_STREAM]: {
                  schema: { type: "string", format: "binary" },
                  description:
                    "when `Accept` prefers it to `application/json` by q-value: the results as an Arrow IPC stream, `select` columns with the dataset's own types",
                },
              },
            },
            ...errorResponses,
          },
        },
      },
      "/health": {
        get: {
          operationId: "health",
          responses: {
            "200": {
              description: "the local stack is ready: it answers the search `npm start` printed",
              content: { "application/json": { schema: { $ref: "#/components/schemas/Health" } } },
            },
            "503": {
              description:
                "still starting (building the demo dataset, warming up): `reason` says what",
              content: { "application/json": { schema: { $ref: "#/components/schemas/Health" } } },
            },
          },
        },
      },
    },
    components: {
      securitySchemes: {
        sigv4: {
          type: "apiKey",
          name: "Authorization",
          in: "header",
          description:
            "On AWS the API is IAM-authorised: requests are signed with AWS Signature Version 4 by a principal allowed execute-api:Invoke (docs/deploy.md). The local stack takes unsigned requests.",
        },
      },
      schemas: {
        SearchRequest: z.toJSONSchema(searchRequestSchema, { io: "input", unrepresentable: "any" }),
        SearchResponse: planResponse(true),
        PlanResponse: planResponse(false),
        ErrorBody: errorBody,
        Health: health,
      },
    },
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const target = new URL("../docs/openapi.json", import.meta.url);
  await writeFile(target, `${JSON.stringify(openApiDocument(), null, 2)}\n`);
  console.log(`wrote ${fileURLToPath(target)}`);
}
