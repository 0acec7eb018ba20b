/**
 * Minimal types for the parts of `s3rver` 3.7.1 (pinned exactly) that `local/s3.ts` uses. s3rver ships
 * no types; the internals below (`store`, `middleware`, the filesystem store's methods) were read from
 * `node_modules/s3rver/lib` and must be re-checked when s3rver is upgraded.
 */
declare module "s3rver" {
  import type { IncomingMessage, Server, ServerResponse } from "node:http";
  import type { AddressInfo } from "node:net";
  import type { Readable } from "node:stream";

  namespace S3rver {
    interface BucketConfig {
      readonly name: string;
      /** CORS or website configuration XML documents. */
      readonly configs?: readonly (string | Buffer)[];
    }

    interface Options {
      readonly address?: string;
      readonly port?: number;
      readonly directory?: string;
      readonly silent?: boolean;
      readonly resetOnClose?: boolean;
      readonly vhostBuckets?: boolean;
      readonly serviceEndpoint?: string;
      readonly allowMismatchedSignatures?: boolean;
      readonly configureBuckets?: readonly BucketConfig[];
    }

    /** `FilesystemStore#getMetadata`: stored headers plus `etag` (a quoted hex MD5). */
    interface ObjectMetadata {
      readonly etag: string;
      readonly "last-modified": string;
      readonly "content-length": number;
      readonly [header: string]: string | number | undefined;
    }

    /** `S3Object` (lib/models/object.js) as handed to `FilesystemStore#putObject`. */
    interface StoreObject {
      readonly bucket: string;
      readonly key: string;
      readonly content: Readable | Buffer;
      readonly metadata: Record<string, string>;
    }

    interface WriteResult {
      readonly size: number;
      readonly md5: string;
    }

    /** lib/stores/filesystem.js */
    interface FilesystemStore {
      readonly rootDirectory: string;
      getResourcePath(bucket: string, key: string | undefined, resource: string): string;
      existsObject(bucket: string, key: string): Promise<boolean>;
      /** Rejects with an `ENOENT` error when the object does not exist. */
      getMetadata(bucket: string, key: string): Promise<ObjectMetadata>;
      putMetadata(
        bucket: string,
        key: string,
        metadata: Record<string, string>,
        md5?: string,
      ): Promise<void>;
      putObject(object: StoreObject): Promise<WriteResult>;
      putPart(
        bucket: string,
        uploadId: string,
        partNumber: string | number,
        content: Readable,
      ): Promise<WriteResult>;
    }

    /** The subset of a Koa 2 context used by local middleware and controllers. */
    interface Context {
      readonly method: string;
      readonly path: string;
      /** Path and query string, as requested. */
      readonly url: string;
      readonly hostname: string;
      readonly query: Readonly<Record<string, string | string[] | undefined>>;
      /** @koa/router's decoded route parameters (`bucket`, `key`); set for controllers. */
      readonly params: Readonly<Record<string, string | undefined>>;
      /** The server's store (Koa's context prototype). */
      readonly store: FilesystemStore;
      readonly req: IncomingMessage;
      readonly res: ServerResponse;
      status: number;
      type: string;
      body: unknown;
      get(field: string): string;
      set(field: string, value: string): void;
    }

    type Next = () => Promise<void>;
    type Middleware = (ctx: Context, next: Next) => Promise<void> | void;
  }

  /** A Koa application; `run()` configures the buckets, then listens. */
  class S3rver {
    constructor(options?: S3rver.Options);
    readonly store: S3rver.FilesystemStore;
    /** Koa's middleware array; entries added before `run()` take part in every request. */
    readonly middleware: S3rver.Middleware[];
    /** Set by `run()`. */
    readonly httpServer?: Server;
    run(): Promise<AddressInfo>;
    close(): Promise<void>;
    reset(): void;
  }

  export = S3rver;
}

/** lib/controllers/bucket.js: s3rver's router looks `getBucket` (the list controller) up here per request. */
declare module "s3rver/lib/controllers/bucket.js" {
  const bucketController: { getBucket: (ctx: import("s3rver").Context) => Promise<void> };
  export = bucketController;
}

/** lib/models/error.js: errors of this class become S3 error responses with their status. */
declare module "s3rver/lib/models/error.js" {
  class S3Error extends Error {
    constructor(code: string, message: string, detail?: Readonly<Record<string, string>>);
    readonly code: string;
    readonly status: number;
  }
  export = S3Error;
}
