#!/usr/bin/env node
/**
 * The `fanout` command line: serve the local stack, search, plan, prepare views, collect dead
 * views, make datasets.
 */
import { existsSync, readFileSync } from "node:fs";
import { Command, CommanderError, Option } from "commander";
import { DEMO_S3_LATENCY_MS } from "../local/demo-stack.js";
import { toFanoutError } from "../shared/errors.js";
import {
  gcCommand,
  makeDatasetCommand,
  planCommand,
  prepareCommand,
  searchCommand,
  serveCommand,
  useLocalStack,
} from "./commands.js";
import { FORMATS } from "./output.js";
import { wholeNumber } from "./positive-integer.js";

/** The version: the workspace's package.json one folder up from the source, lance-fanout-cli's two up from `dist/cli`. */
function packageVersion(): string {
  const file = ["../package.json", "../../package.json"]
    .map((path) => new URL(path, import.meta.url))
    .find((url) => existsSync(url));
  return file ? (JSON.parse(readFileSync(file, "utf8")) as { version: string }).version : "unknown";
}

const program = new Command("fanout")
  .description("Serverless fan-out vector search over a Lance dataset")
  .version(packageVersion(), "-V, --version")
  // Usage mistakes read like every other error, and end with status 2 (see the end); subcommands
  // inherit both.
  .configureOutput({
    outputError: (text, write) => write(`fanout: INVALID_REQUEST: ${text.replace(/^error: /, "")}`),
  })
  .exitOverride();

program
  .command("serve")
  .description("run the local stack (S3, Lambda endpoint, HTTP API) with a demo dataset")
  .option("--port <n>", "HTTP API port (default: env PORT, else 3000)", wholeNumber)
  .option(
    "--s3-port <n>",
    "local S3 port (default: env LANCE_FANOUT_S3_PORT, else 4569)",
    wholeNumber,
  )
  .option(
    "--lambda-port <n>",
    "local Lambda port (default: env LANCE_FANOUT_LAMBDA_PORT, else 9001)",
    wholeNumber,
  )
  .option("--data-dir <dir>", "where the local S3 keeps its data", ".data")
  .option("--rows <n>", "rows of the demo dataset", wholeNumber, 200_000)
  .option("--no-freeze", "keep idle function workers running (Lambda freezes them)")
  .option(
    "--s3-latency-ms <n>",
    "the local S3's first-byte delay once the demo is built, as S3's (0: none)",
    wholeNumber,
    DEMO_S3_LATENCY_MS,
  )
  .option(
    "--log-file <path>",
    "where the functions' log lines go, - for this terminal (default: <data-dir>/functions.log)",
  )
  .action(serveCommand);

const requestOptions = (command: Command) =>
  command
    .requiredOption("--dataset <uri>", "s3://bucket/prefix/name.lance or a local path")
    .option("--query <json>", "a vector or matrix as JSON, or @file.json; default: a random vector")
    .option("-k, --k <n>", "results per query", wholeNumber, 10)
    .option("--column <name>", "vector column")
    .option("--index-name <name>", "vector index")
    .option("--version <n>", "dataset version", wholeNumber)
    .option("--filter <sql>", "SQL predicate applied before nearest-neighbour selection")
    .option("--nprobes <n>", "IVF partitions probed per segment", wholeNumber)
    .option("--refine-factor <n>", "exact re-ranking factor", wholeNumber)
    .option("--max-tasks <n>", "upper bound on tasks", wholeNumber)
    .option("--select <columns>", "comma-separated extra columns")
    .option("--offset <n>", "ranks to skip per query", wholeNumber)
    .option("--coverage <mode>", "require, fallback or indexed-only")
    .option("--strategy <name>", "auto, single, segments, queries or hybrid")
    .addOption(
      new Option("--format <format>", "table (plain aligned lines), csv, or json")
        .choices(FORMATS)
        .default("table"),
    );

/** Where a search or plan runs: in this process, or through the stack's planner. */
function viaOptions(command: Command): Command {
  return command
    .addOption(
      new Option("--via <mode>", "in-process, the HTTP API, or a direct invoke of the planner")
        .choices(["local", "http", "lambda"])
        .default("local"),
    )
    .option("--url <url>", "HTTP API base URL (--via http; default http://127.0.0.1:$PORT, 3000)")
    .option("--function <name>", "planner function name (--via lambda)", "lance-fanout-planner");
}

viaOptions(
  requestOptions(program.command("search").description("run a search and print the results")),
)
  .option("--json", "print the whole response as JSON (--format json)")
  .action(searchCommand);

viaOptions(
  requestOptions(
    program
      .command("plan")
      .description("show segments, groups, rows per group, balance, and why auto chose the plan"),
  ),
).action(planCommand);

program
  .command("prepare")
  .description("build and load the views a version's plans use, before its first query")
  .requiredOption("--dataset <uri>", "s3://bucket/prefix/name.lance or a local path")
  .option("--version <n>", "dataset version (default: the latest)", wholeNumber)
  .addOption(
    new Option("--via <mode>", "in-process, or a prepare invoke of the planner function")
      .choices(["local", "lambda"])
      .default("local"),
  )
  .option("--function <name>", "planner function name (--via lambda)", "lance-fanout-planner")
  .action(prepareCommand);

program
  .command("gc")
  .description("remove views no recent version uses (older than the grace period)")
  .option("--dataset <uri>", "one dataset (default: every dataset under --root)")
  .option("--root <where>", "s3://bucket (its view prefix) or local (LANCE_FANOUT_VIEW_ROOT)")
  .option("--dry-run", "list what would be removed, remove nothing")
  .option(
    "--keep-versions <n>",
    "versions whose views stay (env LANCE_FANOUT_GC_KEEP_VERSIONS, 3)",
    wholeNumber,
  )
  .option(
    "--grace-minutes <n>",
    "views younger than this stay; over 15 (env LANCE_FANOUT_GC_GRACE_MINUTES, 60)",
    wholeNumber,
  )
  .addOption(
    new Option("--via <mode>", "in-process, or an invoke of the gc function")
      .choices(["local", "lambda"])
      .default("local"),
  )
  .option("--function <name>", "gc function name (--via lambda)", "lance-fanout-gc")
  .action(gcCommand);

program
  .command("make-dataset")
  .description("build a demo or benchmark dataset (local directory or s3://)")
  .requiredOption("--db <uri>", "database directory or s3://bucket/prefix")
  .option("--table <name>", "table name", "demo")
  .option("--rows <n>", "rows, exactly", wholeNumber, 200_000)
  .option("--dimension <n>", "vector dimension (a multiple of 8)", wholeNumber, 64)
  .option("--segments <n>", "index segments, exactly", wholeNumber, 8)
  .option("--overwrite", "rebuild a table of that name that is not this dataset (it is lost)")
  .action(makeDatasetCommand);

program.option(
  "--aws",
  "talk to AWS with the SDK's default configuration instead of the local stack",
);
program.hook("preAction", (command) => {
  if (!command.opts().aws) useLocalStack();
});

await program.parseAsync().catch((err: unknown) => {
  // commander printed its own line already: --help and --version end with 0, usage mistakes 2.
  if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : 2);
  const { code, message } = toFanoutError(err).toBody().error;
  console.error(`fanout: ${code}: ${message}`);
  process.exit(1);
});
