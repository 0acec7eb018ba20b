/**
 * Reads single objects (manifests) from a local directory or S3. Lance reads the data itself;
 * this is only for the few small files lance-fanout parses on its own.
 * @module
 */
import { readFile } from "node:fs/promises";
import { GetObjectCommand, NoSuchKey, S3Client } from "@aws-sdk/client-s3";
import type { S3Config } from "./config.js";
import { splitS3Uri } from "./dataset.js";

export interface ObjectReader {
  /** The object's bytes, or `undefined` when it does not exist. */
  read(uri: string): Promise<Uint8Array | undefined>;
}

export function createObjectReader(s3: S3Config): ObjectReader {
  let client: S3Client | undefined;
  const s3Client = () => {
    client ??= new S3Client({
      region: s3.region,
      endpoint: s3.endpoint,
      forcePathStyle: Boolean(s3.endpoint),
      credentials:
        s3.accessKeyId && s3.secretAccessKey
          ? {
              accessKeyId: s3.accessKeyId,
              secretAccessKey: s3.secretAccessKey,
              sessionToken: s3.sessionToken,
            }
          : undefined,
    });
    return client;
  };
  return {
    async read(uri) {
      if (!uri.startsWith("s3://")) return readLocal(uri);
      const { bucket, key } = splitS3Uri(uri);
      try {
        const out = await s3Client().send(new GetObjectCommand({ Bucket: bucket, Key: key }));
        return await out.Body?.transformToByteArray();
      } catch (err) {
        if (err instanceof NoSuchKey || (err as { name?: string }).name === "NotFound") return;
        throw err;
      }
    },
  };
}

async function readLocal(path: string): Promise<Uint8Array | undefined> {
  try {
    return await readFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
    throw err;
  }
}
