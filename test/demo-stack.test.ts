/**
 * What `npm start` does on a real local stack: GET /health answers 503 "starting" with the reason
 * until the demo dataset is ready and the printed example search has run, then 200; a second
 * start on the same data directory reuses the finished demo.
 */
import { execFile } from "node:child_process";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, test } from "vitest";
import { exampleSearch, prepareDemo } from "../local/demo-stack.js";
import { type Stack, startStack } from "../local/stack.js";
import type { SearchResponse } from "../shared/search.js";
import { expectValid } from "./support/openapi.js";
import { readmeBlocks } from "./support/readme.js";
import { userShellEnv } from "./support/user-shell.js";

const run = promisify(execFile);

const DEMO = { rows: 5_000, segments: 3 };

interface Health {
  readonly status: number;
  readonly body: { status: string; reason?: string };
}

async function health(stack: Stack): Promise<Health> {
  const res = await fetch(`${stack.api.url}/health`);
  return { status: res.status, body: (await res.json()) as Health["body"] };
}

function start(dataDir: string, userEnv: NodeJS.ProcessEnv = {}): Promise<Stack> {
  return startStack({
    dataDir,
    apiPort: 0,
    s3Port: 0,
    lambdaPort: 0,
    starting: "starting the local stack",
    userEnv,
  });
}

/**
 * The README's shell commands for the local stack, as written but for the ports (this stack's
 * are free ones): health, the AWS CLI on the local S3 and a direct invoke with its log tail.
 * AWS CLI v2 gets the flag the README tells it to add.
 */
async function readmeShellCommands(stack: Stack): Promise<void> {
  const ports: Record<string, string> = {
    "3000": new URL(stack.api.url).port,
    "4569": new URL(stack.s3.endpoint).port,
    "9001": new URL(stack.lambda.endpoint).port,
  };
  const { stdout: version } = await run("aws", ["--version"]);
  const v2 = /aws-cli\/2/.test(version);
  const script = readmeBlocks("## The local stack (`npm start`)", "sh")
    .join("\n")
    .replace(/127\.0\.0\.1:(3000|4569|9001)/g, (_, port: string) => `127.0.0.1:${ports[port]}`)
    .replace(/answer\.json \|/, v2 ? "--cli-binary-format raw-in-base64-out answer.json |" : "$&");
  const cwd = await mkdtemp(join(tmpdir(), "fanout-readme-"));
  const { stdout } = await run("sh", ["-ec", script], { cwd, env: userShellEnv() });
  expect(stdout).toMatch(/PRE demo\.lance\//);
  expect(stdout).toMatch(/_versions\/\d+\.manifest/);
  expect(stdout).toMatch(/^START RequestId: [\s\S]*^END RequestId: [\s\S]*^REPORT RequestId: /m);
  const answer = JSON.parse(await readFile(join(cwd, "answer.json"), "utf8")) as SearchResponse;
  expect(answer.results).toHaveLength(3);
}

describe("npm start's demo on the local stack", () => {
  test("health says starting, and why, until the printed search answers; a restart reuses the demo", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "fanout-serve-"));
    const first = await start(dataDir);
    let built: Awaited<ReturnType<typeof prepareDemo>>;
    try {
      expect(await health(first)).toEqual({
        status: 503,
        body: { status: "starting", reason: "starting the local stack" },
      });
      const during: Promise<Health>[] = [];
      built = await prepareDemo(first, {
        ...DEMO,
        progress: () => during.push(health(first)),
      });
      const seen = await Promise.all(during);
      expect(seen.length).toBeGreaterThan(2);
      // Each check is answered a little after the progress line that sent it: the last ones may
      // already see the warm-up.
      for (const h of seen) {
        expect(h.status).toBe(503);
        expect(h.body).toEqual({
          status: "starting",
          reason: expect.stringMatching(/^(demo dataset: |warm-up: )/),
        });
        expectValid("Health", h.body);
      }
      expect(seen[0]?.body.reason).toMatch(/^demo dataset: creating demo: 1500 rows/);
      expect(built.demo.build?.segmentsPerRound).toEqual([2, 3]);

      const ready = await health(first);
      expect(ready).toEqual({ status: 200, body: { status: "ok" } });
      expectValid("Health", ready.body);
      const res = await fetch(`${first.api.url}/search`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(exampleSearch(built.demo.uri)),
      });
      expect(res.status).toBe(200);
      const answer = (await res.json()) as SearchResponse;
      expect(answer.results).toHaveLength(5);
      for (const row of answer.results) expect(row.category).toBe(3);
    } finally {
      await first.stop();
    }

    // Started by a user who set an allow-list: the functions keep it.
    const second = await start(dataDir, {
      LANCE_FANOUT_ALLOWED_DATASETS: "s3://lance-fanout/demo/",
    });
    try {
      const again = await prepareDemo(second, DEMO);
      expect(again.demo).toEqual({ ...built.demo, build: undefined });
      expect((await health(second)).status).toBe(200);
      expect(second.env.LANCE_FANOUT_ALLOWED_DATASETS).toBe("s3://lance-fanout/demo/");
      const outside = await fetch(`${second.api.url}/search`, {
        method: "POST",
        body: JSON.stringify({
          ...exampleSearch(built.demo.uri),
          dataset: "s3://lance-fanout/other/demo.lance",
        }),
      });
      expect(outside.status).toBe(403);
      expect(((await outside.json()) as { error: { code: string } }).error.code).toBe(
        "FORBIDDEN_DATASET",
      );
      await readmeShellCommands(second);
    } finally {
      await second.stop();
    }
  });
});
