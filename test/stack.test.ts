/**
 * The local stack end to end: HTTP API -> planner worker -> segment-search and merge workers
 * through the local Lambda endpoint, datasets and views on the local S3.
 */
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { InvokeCommand, type LambdaClient } from "@aws-sdk/client-lambda";
import { tableFromIPC } from "apache-arrow";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, test, vi } from "vitest";
import { FUNCTION_DEFAULTS } from "../functions/defaults.js";
import { isAlive } from "../local/loopback.js";
import { FUNCTIONS, type Stack } from "../local/stack.js";
import { loadConfig } from "../shared/config.js";
import { ERROR_STATUS } from "../shared/errors.js";
import { createRuntime } from "../shared/runtime.js";
import { type SearchResponse, vectorSearch } from "../shared/search.js";
import { badRequests } from "./support/bad-requests.js";
import { type Dataset, makeDataset, queries } from "./support/fixtures.js";
import { expectValid } from "./support/openapi.js";
import { type StackWithDataset, stackWithDataset } from "./support/stack.js";

let stack: Stack;
let ds: Dataset;
let lambda: LambdaClient;
const [q0 = [], q1 = []] = queries(2, 11);

let started: StackWithDataset | undefined;

beforeAll(async () => {
  started = await stackWithDataset("stack");
  ({ stack, ds, lambda } = started);
});

afterAll(async () => {
  await started?.stop();
});

async function httpSearch(
  body: unknown,
): Promise<{ status: number; json: SearchResponse & { error?: { code: string } } }> {
  const res = await fetch(`${stack.api.url}/search`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as never };
}

const request = () => ({
  dataset: ds.uri,
  query: [q0, q1],
  k: 10,
  nprobes: 2,
  select: ["id"],
  strategy: "segments" as const,
});

describe("the local stack", () => {
  test("HTTP, direct Lambda invoke and the in-process library give the same answer", async () => {
    const http = await httpSearch(request());
    expect(http.status).toBe(200);
    expectValid("SearchResponse", http.json);
    const out = await lambda.send(
      new InvokeCommand({ FunctionName: FUNCTIONS.planner, Payload: JSON.stringify(request()) }),
    );
    expect(out.FunctionError).toBeUndefined();
    const direct = JSON.parse(Buffer.from(out.Payload ?? []).toString("utf8")) as SearchResponse;
    const runtime = createRuntime(
      loadConfig({ ...process.env, LANCE_FANOUT_VIEW_ROOT: await mkdtemp(join(tmpdir(), "v-")) }),
    );
    const local = await vectorSearch({ ...request(), version: http.json.version }, { runtime });
    expect(http.json.results).toHaveLength(20);
    expect(http.json.results).toEqual(local.results);
    expect(direct.results).toEqual(local.results);
    expect(http.json.plan.tasks).toBe(ds.segments);
    for (const g of http.json.plan.groups) expect(g.searchedSegments).toBe(g.segments.length);
  });

  test("each function's workers run with its deployed memory size and are frozen while idle", async () => {
    expect((await httpSearch(request())).status).toBe(200);
    expect(stack.lambda.freeze).toBe(true);
    if (!existsSync("/proc/self/environ")) return; // Linux: workers are looked at through /proc
    const deployed = {
      [FUNCTIONS.planner]: FUNCTION_DEFAULTS.planner.memorySize,
      [FUNCTIONS.segmentSearch]: FUNCTION_DEFAULTS.segmentSearch.memorySize,
      [FUNCTIONS.merge]: FUNCTION_DEFAULTS.merge.memorySize,
    };
    for (const [fn, memorySize] of Object.entries(deployed)) {
      const pids = stack.lambda.workerPids(fn);
      expect(pids.length, fn).toBeGreaterThan(0);
      for (const pid of pids) {
        const environ = (await readFile(`/proc/${pid}/environ`, "utf8")).split("\0");
        expect(environ, fn).toContain(`AWS_LAMBDA_FUNCTION_MEMORY_SIZE=${memorySize}`);
        // SIGSTOP takes effect once every thread of the worker has stopped: soon, not at once.
        await expect.poll(() => processState(pid), { timeout: 5_000 }).toBe("T");
      }
    }
  });

  test("a search after its workers sat frozen past S3's keep-alive still answers", async () => {
    const expected = await httpSearch(request());
    // s3rver closes idle connections after Node's default 5 s keep-alive (later on a busy
    // machine); frozen workers cannot see it happen, so their pooled connections are dead when
    // they are thawed.
    await new Promise((r) => setTimeout(r, 5_500));
    if (existsSync("/proc/net/tcp")) {
      expect(await closedByServer(stack.s3.port)).toBeGreaterThan(0);
    }
    const after = await httpSearch(request());
    expect(after.status).toBe(200);
    expect(after.json.results).toEqual(expected.json.results);
  });

  test("a task answers first; its worker loads the view's index before it is frozen and before its next task", async () => {
    // A dataset of its own: no worker has a view of it yet.
    const fresh = await makeDataset({
      db: { uri: `s3://${stack.bucket}/prewarm`, storageOptions: stack.s3.storageOptions() },
      rounds: [3000, 2000],
    });
    const search = (nprobes: number) =>
      httpSearch({ dataset: fresh.uri, query: q0, k: 10, nprobes, strategy: "single" });
    // One partition probed: the search itself reads little of the index; the prewarm all of it,
    // after the answer, in the worker's post-invocation phase (which keeps it busy).
    expect((await search(1)).status).toBe(200);
    await vi.waitFor(() => expect(stack.lambda.stats()[FUNCTIONS.segmentSearch]?.busy).toBe(0), {
      timeout: 10_000,
    });
    const indexFiles = new RegExp(`^/${stack.bucket}/prewarm/items\\.lance/_indices/`);
    stack.s3.injectFault({ keys: indexFiles, status: 500 });
    try {
      // Every partition, from memory: the same warm worker (the pool reuses the last one freed).
      const all = await search(64);
      expect(all.status).toBe(200);
      expect(all.json.results).toHaveLength(10);
    } finally {
      stack.s3.injectFault(undefined);
    }
  });

  test("a straggling task is sent again once the planner knows tasks alike: the query does not wait for it", async () => {
    const fresh = await makeDataset({
      db: { uri: `s3://${stack.bucket}/straggler`, storageOptions: stack.s3.storageOptions() },
      rounds: [3000, 2000],
    });
    const search = () => httpSearch({ dataset: fresh.uri, query: q0, k: 10, strategy: "single" });
    const expected = await search();
    // Tasks alike, through the same warm planner: their times say when one is late.
    for (let i = 0; i < 24; i++) expect((await search()).status).toBe(200);
    const invocations = () => stack.lambda.stats()[FUNCTIONS.segmentSearch]?.invocations ?? 0;
    const before = invocations();
    stack.lambda.stallNext(FUNCTIONS.segmentSearch, 3_000);
    const started = performance.now();
    const answer = await search();
    expect(performance.now() - started).toBeLessThan(1_500);
    expect(answer.status).toBe(200);
    expect(answer.json.results).toEqual(expected.json.results);
    // The straggler and its hedge: one extra invoke.
    expect(invocations() - before).toBe(2);
    // The abandoned straggler still ends (and frees its worker for the next tests).
    await vi.waitFor(() => expect(stack.lambda.stats()[FUNCTIONS.segmentSearch]?.busy).toBe(0), {
      timeout: 15_000,
    });
  });

  test("prepare loads a typical query's views into every worker: no task of the next ones opens one", async () => {
    const fresh = await makeDataset({
      db: { uri: `s3://${stack.bucket}/everyworker`, storageOptions: stack.s3.storageOptions() },
      rounds: [3000, 2000, 2500],
    });
    const out = await lambda.send(
      new InvokeCommand({
        FunctionName: FUNCTIONS.planner,
        Payload: JSON.stringify({ prepare: { dataset: fresh.uri } }),
      }),
    );
    const { prepared } = JSON.parse(new TextDecoder().decode(out.Payload)) as {
      prepared: { views: number; created: number; environments: number }[];
    };
    expect(prepared[0]?.created).toBeGreaterThan(0);
    const workers = Number(stack.env.LANCE_FANOUT_PREPARE_ENVIRONMENTS);
    expect(prepared[0]?.environments).toBe(workers);
    // Typical queries (one vector, k = 10, `auto`), more at once than there are workers.
    const searches = () =>
      Promise.all(
        Array.from({ length: workers + 2 }, (_, i) =>
          httpSearch({ dataset: fresh.uri, query: i % 2 ? q1 : q0, k: 10, nprobes: 2 }),
        ),
      );
    // A task opening a view, or reading index files, reads under these keys: every worker
    // answers from the views prepare opened and loaded.
    const keys = new RegExp(
      `^/${stack.bucket}/(everyworker/items\\.lance/_indices/|lance-fanout-views/everyworker/)`,
    );
    stack.s3.injectFault({ keys, status: 500 });
    let answers: Awaited<ReturnType<typeof searches>>[];
    try {
      answers = [await searches(), await searches(), await searches()];
    } finally {
      stack.s3.injectFault(undefined);
    }
    expect(stack.s3.faulted).toEqual([]);
    const expected = await searches();
    for (const round of answers) {
      expect(round.map((a) => a.status)).toEqual(expected.map(() => 200));
      expect(round.map((a) => a.json.results)).toEqual(expected.map((a) => a.json.results));
    }
  });

  test("a one-task search without select pays two invokes: the planner merges it", async () => {
    const invocations = (fn: string) => stack.lambda.stats()[fn]?.invocations ?? 0;
    const before = [FUNCTIONS.segmentSearch, FUNCTIONS.merge].map(invocations);
    const { select: _, ...columnless } = request();
    const http = await httpSearch({ ...columnless, strategy: "single" });
    expect(http.status).toBe(200);
    expect(http.json.plan.tasks).toBe(1);
    expect([FUNCTIONS.segmentSearch, FUNCTIONS.merge].map(invocations)).toEqual([
      (before[0] ?? 0) + 1,
      before[1],
    ]);
    const fanned = await httpSearch({ ...columnless, version: http.json.version });
    expect(invocations(FUNCTIONS.merge)).toBe((before[1] ?? 0) + 1);
    expect(http.json.results).toEqual(fanned.json.results);
  });

  test("Accept: application/vnd.apache.arrow.stream answers an Arrow IPC stream of the same rows", async () => {
    const json = await httpSearch(request());
    const res = await fetch(`${stack.api.url}/search`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/vnd.apache.arrow.stream",
      },
      body: JSON.stringify(request()),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/vnd.apache.arrow.stream");
    const table = tableFromIPC(new Uint8Array(await res.arrayBuffer()));
    expect(table.schema.fields.map((f) => `${f.name}:${f.type}`).slice(0, 3)).toEqual([
      "_query_id:Int32",
      "_distance:Float32",
      "_rowid:Uint64",
    ]);
    const rows = table.toArray().map((r) => ({
      _query_id: r._query_id,
      _distance: r._distance,
      _rowid: String(r._rowid),
      id: r.id,
    }));
    expect(rows).toEqual(
      json.json.results.map((r) => ({ ...r, _distance: Math.fround(r._distance) })),
    );
  });

  test("caller mistakes come back as 4xx with their code, over HTTP and direct invoke", async () => {
    const http = await httpSearch({ ...request(), k: 0 });
    expect(http.status).toBe(400);
    expectValid("ErrorBody", http.json);
    expect(http.json.error?.code).toBe("INVALID_REQUEST");
    const missing = await httpSearch({
      ...request(),
      dataset: `s3://${stack.bucket}/db/none.lance`,
    });
    expect(missing.status).toBe(404);
    // API Gateway ends a request at 30 s: a longer deadline over HTTP is refused up front.
    const long = await httpSearch({ ...request(), timeoutMs: 60_000 });
    expect(long.status).toBe(400);
    expect(long.json.error?.code).toBe("INVALID_REQUEST");
    const out = await lambda.send(
      new InvokeCommand({
        FunctionName: FUNCTIONS.planner,
        Payload: JSON.stringify({ ...request(), filter: "x = = 1" }),
      }),
    );
    expect(JSON.parse(Buffer.from(out.Payload ?? []).toString("utf8")).error.code).toBe(
      "INVALID_REQUEST",
    );
  });

  test("an answer over Lambda's 6 MB is PAYLOAD_TOO_LARGE, over HTTP (JSON, Arrow) and direct invoke", async () => {
    // One task merged by the planner itself: no merge function sees the rows first.
    const big = {
      ...request(),
      select: undefined,
      query: queries(40, 5),
      k: 5000,
      strategy: "single",
    };
    const json = await httpSearch(big);
    expect(json.status).toBe(413);
    expect(json.json.error?.code).toBe("PAYLOAD_TOO_LARGE");
    const arrow = await fetch(`${stack.api.url}/search`, {
      method: "POST",
      headers: { accept: "application/vnd.apache.arrow.stream" },
      body: JSON.stringify({ ...big, query: queries(70, 5) }), // base64 Arrow: a third larger
    });
    expect(arrow.status).toBe(413);
    const out = await lambda.send(
      new InvokeCommand({ FunctionName: FUNCTIONS.planner, Payload: JSON.stringify(big) }),
    );
    expect(out.FunctionError).toBeUndefined();
    expect(JSON.parse(Buffer.from(out.Payload ?? []).toString("utf8")).error.code).toBe(
      "PAYLOAD_TOO_LARGE",
    );
  });

  test("20 concurrent HTTP searches all succeed with the right results", async () => {
    const expected = await httpSearch(request());
    const answers = await Promise.all(Array.from({ length: 20 }, () => httpSearch(request())));
    for (const answer of answers) {
      expect(answer.json.error).toBeUndefined();
      expect(answer.status).toBe(200);
      expect(answer.json.results).toEqual(expected.json.results);
    }
  });

  test("a segment-search worker killed mid-invocation is retried and the answer is still right", async () => {
    const expected = await httpSearch(request());
    const crashes = stack.lambda.stats()[FUNCTIONS.segmentSearch]?.crashes ?? 0;
    const heavy = { ...request(), query: queries(200, 3), k: 100, select: undefined };
    const full = await httpSearch(heavy);
    const pending = httpSearch(heavy);
    const killed = await killBusyWorkers();
    expect(killed.length).toBeGreaterThan(0);
    const answer = await pending;
    expect(answer.status).toBe(200);
    expect(answer.json.results).toEqual(full.json.results);
    expect(stack.lambda.stats()[FUNCTIONS.segmentSearch]?.crashes).toBeGreaterThan(crashes);
    for (const pid of killed) expect(isAlive(pid)).toBe(false);
    expect((await httpSearch(request())).json.results).toEqual(expected.json.results);
  });

  test("workers that keep crashing fail the query with SEGMENT_SEARCH_FAILED; the next one succeeds", async () => {
    let done = false;
    const pending = httpSearch({ ...request(), query: queries(200, 4), k: 100 }).finally(() => {
      done = true;
    });
    const killed = await killBusyWorkers(() => done);
    const failed = await pending;
    expect(killed.length).toBeGreaterThan(2);
    expect(failed.status).toBe(502);
    expect(failed.json.error?.code).toBe("SEGMENT_SEARCH_FAILED");
    expect((failed.json.error as { message?: string } | undefined)?.message).toMatch(/group\(s\) /);
    const next = await httpSearch(request());
    expect(next.status).toBe(200);
    for (const pid of killed) expect(isAlive(pid)).toBe(false);
    expect(stack.lambda.workerPids(FUNCTIONS.segmentSearch).length).toBeLessThanOrEqual(8);
  });

  test("a battery of malformed requests gets its documented 4xx over HTTP and direct invoke, crashing nothing", async () => {
    const cases = badRequests({ ...request(), query: [q0] }, stack.bucket);
    expect(cases.length).toBeGreaterThanOrEqual(60);
    const crashes = () =>
      Object.values(stack.lambda.stats()).reduce((sum, s) => sum + s.crashes, 0);
    const before = crashes();
    const tally = { tried: 0, "4xx": 0, "5xx": 0 };
    for (const { name, body, code } of cases) {
      const text = typeof body === "string" ? body : JSON.stringify(body);
      const res = await fetch(`${stack.api.url}/search`, { method: "POST", body: text });
      const json = (await res.json()) as { error?: { code: string } };
      tally.tried++;
      tally[res.status >= 500 ? "5xx" : "4xx"]++;
      expect({ name, status: res.status, code: json.error?.code }).toEqual({
        name,
        status: ERROR_STATUS[code],
        code,
      });
      if (code === "PAYLOAD_TOO_LARGE") continue; // over Lambda's invoke limit itself
      tally.tried++;
      const invoke = lambda.send(
        new InvokeCommand({ FunctionName: FUNCTIONS.planner, Payload: text }),
      );
      if (!isJson(text)) {
        // Lambda itself refuses a payload that is not JSON, with a 400.
        await expect(invoke).rejects.toMatchObject({ name: "InvalidRequestContentException" });
        tally["4xx"]++;
        continue;
      }
      const out = await invoke;
      const direct = JSON.parse(Buffer.from(out.Payload ?? []).toString("utf8") || "null");
      expect({ name, functionError: out.FunctionError, code: direct?.error?.code }).toEqual({
        name,
        functionError: undefined,
        code,
      });
      tally["4xx"]++;
    }
    console.log(
      `bad input: ${tally.tried} tried, ${tally["4xx"]} answered 4xx, ${tally["5xx"]} 5xx`,
    );
    expect(tally["5xx"]).toBe(0);
    expect(crashes()).toBe(before);
  });

  test.each([null, "x", 7, { dataset: "s3://lance-fanout/demo/../other/demo.lance" }])(
    "a prepare event of %j by direct invoke answers an INVALID_REQUEST body, never Unhandled",
    async (prepare) => {
      const out = await lambda.send(
        new InvokeCommand({
          FunctionName: FUNCTIONS.planner,
          Payload: JSON.stringify({ prepare }),
        }),
      );
      expect(out.FunctionError).toBeUndefined();
      const body = JSON.parse(Buffer.from(out.Payload ?? []).toString("utf8"));
      expect(body.prepared).toEqual([
        expect.objectContaining({ error: expect.objectContaining({ code: "INVALID_REQUEST" }) }),
      ]);
    },
  );

  test("the hostile requests all at once take no function down; the next search answers warm", async () => {
    const hostile = badRequests({ ...request(), query: [q0] }, stack.bucket).filter(
      (c) => c.name.startsWith("filter") || c.name.startsWith("dataset"),
    );
    const planners = stack.lambda.workerPids(FUNCTIONS.planner);
    const crashes = () =>
      Object.values(stack.lambda.stats()).reduce((sum, s) => sum + s.crashes + s.outOfMemory, 0);
    const before = crashes();
    const answers = await Promise.all(
      hostile.map(({ body }) =>
        fetch(`${stack.api.url}/search`, { method: "POST", body: JSON.stringify(body) }),
      ),
    );
    expect(answers.map((a) => a.status).filter((s) => s >= 500)).toEqual([]);
    expect(crashes()).toBe(before);
    for (const pid of planners) expect(isAlive(pid)).toBe(true);
    const started = performance.now();
    const next = await httpSearch(request());
    expect(next.status).toBe(200);
    // Warm: no environment had to start again.
    expect(performance.now() - started).toBeLessThan(3_000);
  });

  test("random JSON never gets a 5xx or an unstructured answer (fast-check)", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.jsonValue(),
          fc.record({ dataset: fc.string(), query: fc.jsonValue(), k: fc.jsonValue() }),
        ),
        async (value) => {
          const res = await fetch(`${stack.api.url}/search`, {
            method: "POST",
            body: JSON.stringify(value),
          });
          const json = (await res.json()) as { error?: { code: string; message: string } };
          return res.status >= 400 && res.status < 500 && typeof json.error?.code === "string";
        },
      ),
      { numRuns: 60 },
    );
  });

  test("nothing listens on anything but 127.0.0.1", async () => {
    const ports = new Set([stack.s3.port, stack.lambda.port, stack.api.port]);
    const listening = await listeningSockets();
    const ours = listening.filter((s) => ports.has(s.port));
    expect(ours.map((s) => s.port).sort()).toEqual([...ports].sort());
    for (const socket of ours) expect(socket.address).toBe("127.0.0.1");
  });
});

/**
 * Kills the segment-search workers as soon as one is busy: one round of kills, or, with `until`,
 * round after round until it says stop. Returns the killed pids.
 */
async function killBusyWorkers(until?: () => boolean): Promise<number[]> {
  const killed: number[] = [];
  for (let i = 0; i < 20_000 && !until?.(); i++) {
    if ((stack.lambda.stats()[FUNCTIONS.segmentSearch]?.busy ?? 0) > 0) {
      for (const pid of stack.lambda.workerPids(FUNCTIONS.segmentSearch)) {
        if (killed.includes(pid)) continue;
        process.kill(pid, "SIGKILL");
        killed.push(pid);
      }
      if (!until) return killed;
    }
    await new Promise((r) => setTimeout(r, 2));
  }
  return killed;
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** The process state letter of /proc/<pid>/stat: `T` is stopped by a signal (frozen). */
function processState(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.charAt(stat.lastIndexOf(")") + 2);
}

/** The kernel's TCP state of a connection whose peer closed it and that has not closed its end. */
const CLOSE_WAIT = "08";

/** Connections to `port` its server closed, waiting up to 10 s for the first. */
async function closedByServer(port: number): Promise<number> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const closed = await socketsToPort(port, CLOSE_WAIT);
    if (closed > 0 || Date.now() > deadline) return closed;
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** TCP connections in `state` whose remote end is 127.0.0.1:`port` (from /proc/net/tcp). */
async function socketsToPort(port: number, state: string): Promise<number> {
  const suffix = `:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  const text = await readFile("/proc/net/tcp", "utf8");
  return text
    .split("\n")
    .slice(1)
    .filter((line) => {
      const [, , remote, st] = line.trim().split(/\s+/);
      return remote?.endsWith(suffix) && st === state;
    }).length;
}

/** Listening TCP sockets from /proc/net/tcp{,6}: address and port. */
async function listeningSockets(): Promise<{ address: string; port: number }[]> {
  const sockets: { address: string; port: number }[] = [];
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    const text = await readFile(file, "utf8").catch(() => "");
    for (const line of text.split("\n").slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      if (state !== "0A" || !local) continue; // 0A = LISTEN
      const [hex = "", portHex = "0"] = local.split(":");
      const address =
        hex.length === 8
          ? (hex
              .match(/../g)
              ?.reverse()
              .map((b) => Number.parseInt(b, 16))
              .join(".") ?? hex)
          : hex === "00000000000000000000000000000000"
            ? "::"
            : hex;
      sockets.push({ address, port: Number.parseInt(portHex, 16) });
    }
  }
  return sockets;
}
