/**
 * Events that start background work instead of a search: `fanout prepare` payloads, S3
 * "Object Created" events from EventBridge (a commit wrote a manifest under `_versions/`) and
 * EventBridge schedules. Declares the few fields it reads instead of depending on `aws-lambda`.
 * @module
 */
import type { PrepareRequest } from "../../shared/prepare.js";

interface S3ObjectCreated {
  readonly source: "aws.s3";
  readonly "detail-type": "Object Created";
  readonly detail: {
    readonly bucket: { readonly name: string };
    readonly object: { readonly key: string };
  };
}

interface Scheduled {
  readonly source: "aws.events";
  readonly "detail-type": "Scheduled Event";
}

function isS3ObjectCreated(event: unknown): event is S3ObjectCreated {
  const e = event as Partial<S3ObjectCreated> | null;
  return (
    e?.source === "aws.s3" &&
    e["detail-type"] === "Object Created" &&
    typeof e.detail?.bucket?.name === "string" &&
    typeof e.detail.object?.key === "string"
  );
}

/** An EventBridge schedule's event. */
export function isScheduled(event: unknown): event is Scheduled {
  const e = event as Partial<Scheduled> | null;
  return e?.source === "aws.events" && e["detail-type"] === "Scheduled Event";
}

/**
 * The prepare requests an event asks for, or undefined when it is not a prepare event:
 * `{ prepare: { dataset, version? } }`; a manifest written under `<dataset>.lance/_versions/`
 * (the latest version is prepared: commits may have come since); a schedule (every dataset of
 * `scheduled()`, the configuration's `LANCE_FANOUT_PREPARE_DATASETS`, at its latest version).
 */
export function prepareRequests(
  event: unknown,
  scheduled: () => readonly string[],
): PrepareRequest[] | undefined {
  if (typeof event === "object" && event !== null && "prepare" in event) {
    return [(event as { prepare: PrepareRequest }).prepare];
  }
  if (isS3ObjectCreated(event)) {
    const key = /^(.+\.lance)\/_versions\/[^/]+\.manifest$/.exec(event.detail.object.key)?.[1];
    return key ? [{ dataset: `s3://${event.detail.bucket.name}/${key}` }] : [];
  }
  if (isScheduled(event)) {
    return scheduled().map((dataset) => ({ dataset }));
  }
  return undefined;
}
