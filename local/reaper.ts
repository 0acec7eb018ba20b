/**
 * Kills the local Lambda's workers if the process serving them dies without doing it.
 *
 * A running worker notices its parent's death (its IPC channel closes) and exits; a frozen one
 * (SIGSTOP) notices nothing and would stay stopped for good. So a tiny shell process holds the
 * current worker pids, one line per change on its stdin: when stdin closes, because the service
 * stopped or its process died however it died (even SIGKILL), it SIGKILLs the last list and exits.
 * @module
 */
import { spawn } from "node:child_process";

export interface Reaper {
  /** The pids to kill if this process dies: replaces the previous list. */
  track(pids: readonly number[]): void;
  /** Ends the reaper (with an empty list, so it kills nothing). */
  close(): void;
}

/**
 * Ctrl-C and the like go to the whole process group: the reaper ignores them, so it outlives the
 * service's process and can still do its job.
 */
const SCRIPT = `trap '' INT TERM HUP
pids=
while IFS= read -r line; do pids=$line; done
[ -z "$pids" ] || kill -9 $pids 2>/dev/null
exit 0`;

export function startReaper(): Reaper {
  const child = spawn("/bin/sh", ["-c", SCRIPT], { stdio: ["pipe", "ignore", "ignore"] });
  const { stdin } = child;
  // A reaper that failed to start or died leaves only the lesser guard (the IPC channel).
  stdin.on("error", () => undefined);
  child.on("error", () => undefined);
  // Neither the reaper nor its pipe keeps this process alive.
  child.unref();
  (stdin as unknown as { unref(): void }).unref();
  let closed = false;
  return {
    track(pids) {
      if (!closed && stdin.writable) stdin.write(`${pids.join(" ")}\n`);
    },
    close() {
      if (closed) return;
      closed = true;
      stdin.end("\n");
    },
  };
}
