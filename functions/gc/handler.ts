/**
 * The gc function: removes dead views (shared/gc.ts). Runs on an EventBridge schedule over every
 * dataset with views in the buckets of `LANCE_FANOUT_ALLOWED_DATASETS`, or on a direct invoke
 * `{ gc: { dataset?, dryRun? } }`. The only function allowed to delete, and only views.
 */
import { z } from "zod";
import { FanoutError, toFanoutError } from "../../shared/errors.js";
import { gc, gcOptionsSchema } from "../../shared/gc.js";
import { defaultRuntime } from "../../shared/runtime.js";
import { isScheduled } from "../common/events.js";
import { logEvent } from "../common/log.js";

/** A direct invoke chooses the dataset and a dry run; what gc keeps is the deployment's. */
const gcEventSchema = z.strictObject({
  gc: gcOptionsSchema.pick({ dataset: true, dryRun: true }),
});

export async function handler(event: unknown) {
  const parsed = gcEventSchema.safeParse(isScheduled(event) ? { gc: {} } : event);
  if (!parsed.success) {
    return new FanoutError("INVALID_REQUEST", `invalid gc event: ${parsed.error.message}`).toBody();
  }
  const { dataset, dryRun } = parsed.data.gc;
  const runtime = defaultRuntime();
  try {
    const roots = dataset ? [undefined] : buckets(runtime.config.allowedDatasets ?? []);
    const reports = [];
    for (const root of roots) reports.push(...(await gc({ dataset, dryRun, root }, { runtime })));
    logEvent({ fn: "gc", reports });
    return { reports };
  } catch (err) {
    const error = toFanoutError(err);
    logEvent({ fn: "gc", error: error.code, message: error.message });
    return error.toBody();
  }
}

/** `s3://bucket` of each allowed S3 prefix, once. */
function buckets(prefixes: readonly string[]): string[] {
  const names = prefixes.flatMap((p) => /^s3:\/\/([^/]+)/.exec(p)?.[1] ?? []);
  return [...new Set(names)].map((name) => `s3://${name}`);
}
