/**
 * Segment-search slots through the local stack: with two segment-search functions, group g's
 * tasks go to function g mod 2, so each function's workers keep serving the same groups (and
 * their indexes stay hot there); prepare loads each function's groups into its own workers.
 */
import { InvokeCommand, type LambdaClient } from "@aws-sdk/client-lambda";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { FUNCTIONS, type Stack, segmentSearchSlot } from "../local/stack.js";
import type { SearchResponse } from "../shared/search.js";
import { type Dataset, nativeSearch, queries } from "./support/fixtures.js";
import { type StackWithDataset, stackWithDataset } from "./support/stack.js";

let stack: Stack;
let ds: Dataset;
let lambda: LambdaClient;
const SLOTS = [segmentSearchSlot(0), segmentSearchSlot(1)];

let started: StackWithDataset | undefined;

beforeAll(async () => {
  started = await stackWithDataset("slots", {
    segmentSearchSlots: 2,
    concurrency: { segmentSearch: 2 },
  });
  ({ stack, ds, lambda } = started);
});

afterAll(async () => {
  await started?.stop();
});

async function invokePlanner<T>(payload: unknown): Promise<T> {
  const out = await lambda.send(
    new InvokeCommand({ FunctionName: FUNCTIONS.planner, Payload: JSON.stringify(payload) }),
  );
  expect(out.FunctionError).toBeUndefined();
  return JSON.parse(Buffer.from(out.Payload ?? []).toString("utf8")) as T;
}

const invocations = () => SLOTS.map((fn) => stack.lambda.stats()[fn]?.invocations ?? 0);

describe("segment-search slots", () => {
  test("prepare loads each slot's groups into that slot's workers", async () => {
    const before = invocations();
    const { prepared } = await invokePlanner<{ prepared: { environments: number }[] }>({
      prepare: { dataset: ds.uri },
    });
    // The typical query's plan is one group here: slot 0 holds it, in both of its workers.
    expect(prepared[0]?.environments).toBe(2);
    const [slot0 = 0, slot1 = 0] = invocations();
    expect(slot0).toBeGreaterThan(before[0] ?? 0);
    expect(slot1).toBe(before[1]);
  });

  test("group g's task runs in slot g mod 2, and the answer equals native's", async () => {
    const [query = []] = queries(1, 5);
    for (let round = 0; round < 3; round++) {
      const before = invocations();
      const response = await invokePlanner<SearchResponse>({
        dataset: ds.uri,
        query,
        k: 10,
        nprobes: 2,
        strategy: "segments",
        maxTasks: 4,
      });
      expect(response.plan.tasks).toBe(4);
      expect(invocations().map((n, i) => n - (before[i] ?? 0))).toEqual([2, 2]);
      const native = await nativeSearch(ds, query, 10, { nprobes: 2 });
      expect(response.results.map((r) => r._rowid)).toEqual(native.map((h) => h.rowid));
    }
  });
});
