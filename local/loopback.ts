/**
 * Process-wide defaults that keep every AWS SDK and lancedb code path on loopback (no credential
 * chain, no instance metadata) and quiet, for tests and benchmarks. Values already set win.
 * @module
 */
export function keepOnLoopback(env: NodeJS.ProcessEnv = process.env): void {
  env.AWS_EC2_METADATA_DISABLED = "true";
  env.AWS_ACCESS_KEY_ID ??= "S3RVER";
  env.AWS_SECRET_ACCESS_KEY ??= "S3RVER";
  env.AWS_REGION ??= "us-east-1";
  env.LANCEDB_LOG ??= "error";
  env.LANCE_FANOUT_LOG ??= "off";
  // Tests and benchmarks may run on a Node other than Lambda's.
  env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
}

/** Whether a process with this pid is alive. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
