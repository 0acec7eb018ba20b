/**
 * The S3 objects lance-fanout may touch, as IAM statements. Datasets are read only, under the
 * configured prefixes. Segment views are written under one key prefix in each dataset's own
 * bucket (lancedb writes cross-bucket shallow clones to the wrong store): only the
 * segment-search function writes them, and only the gc function deletes them. No statement has a
 * wildcard action or a bucket-wide resource.
 * @module
 */
import { Stack, Token, Validations } from "aws-cdk-lib";
import { type IGrantable, PolicyStatement } from "aws-cdk-lib/aws-iam";
import { Construct } from "constructs";

/** One allowed dataset prefix, `s3://bucket/prefix/`. */
export interface DatasetPrefix {
  readonly bucket: string;
  /** Key prefix, non-empty, ending with `/`. */
  readonly prefix: string;
  /** `s3://bucket/prefix/`, as `LANCE_FANOUT_ALLOWED_DATASETS` lists it. */
  readonly uri: string;
}

/** The view prefix when none is given. */
export const DEFAULT_VIEW_PREFIX = "lance-fanout-views";

const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
/** Characters with a meaning in IAM ARNs (wildcards, policy variables) or in the env var list. */
const UNSAFE_KEY_CHARS = /[*?$,\s]/;

/**
 * Parses `s3://bucket/prefix/` (the trailing `/` is added when missing).
 * @throws TypeError for another scheme, an invalid bucket name, a missing prefix (a whole
 *   bucket is never granted) or wildcard characters.
 */
export function parseDatasetPrefix(value: string): DatasetPrefix {
  const match = /^s3:\/\/([^/]*)\/(.*)$/.exec(value.trim());
  const bucket = match?.[1] ?? "";
  const key = (match?.[2] ?? "").replace(/\/+$/, "");
  if (!match) {
    throw new TypeError(`Expected a dataset prefix s3://bucket/prefix/, got "${value}"`);
  }
  if (!BUCKET.test(bucket) || bucket.includes("..") || /^\d+\.\d+\.\d+\.\d+$/.test(bucket)) {
    throw new TypeError(`Expected a valid S3 bucket name in "${value}", got "${bucket}"`);
  }
  if (key === "") {
    throw new TypeError(
      `Expected a key prefix in "${value}": a whole bucket is never granted, use s3://${bucket}/<prefix>/`,
    );
  }
  if (UNSAFE_KEY_CHARS.test(key) || key.startsWith("/") || key.includes("//")) {
    throw new TypeError(
      `Expected a plain key prefix in "${value}" (no wildcards, "$", ",", spaces or empty segments)`,
    );
  }
  const prefix = `${key}/`;
  return { bucket, prefix, uri: `s3://${bucket}/${prefix}` };
}

/**
 * Normalises the view key prefix (no leading or trailing `/`).
 * @throws TypeError when empty or with wildcard characters.
 */
export function parseViewPrefix(value: string): string {
  const prefix = value.trim().replace(/^\/+|\/+$/g, "");
  if (prefix === "" || UNSAFE_KEY_CHARS.test(prefix) || prefix.includes("//")) {
    throw new TypeError(
      `Expected viewPrefix to be a plain key prefix such as "${DEFAULT_VIEW_PREFIX}", got "${value}"`,
    );
  }
  return prefix;
}

export interface DatasetAccessProps {
  /** Dataset prefixes that may be searched, read only. */
  readonly datasets: readonly DatasetPrefix[];
  /** Key prefix of the views in each dataset bucket (see {@link parseViewPrefix}). @default "lance-fanout-views" */
  readonly viewPrefix?: string;
  /**
   * KMS keys that encrypt the dataset buckets (SSE-KMS). Readers get `kms:Decrypt` and the view
   * writer `kms:GenerateDataKey`, both only through S3 in this stack's region.
   * @default none (SSE-S3 buckets need no KMS permission)
   */
  readonly kmsKeyArns?: readonly string[];
}

const KMS_KEY_ARN = /^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key\/[A-Za-z0-9-]+$/;

/**
 * Grants on the dataset buckets. Not a construct: it creates no resource, it only adds
 * statements to the roles it is given.
 */
export class DatasetAccess {
  readonly datasets: readonly DatasetPrefix[];
  readonly viewPrefix: string;
  readonly kmsKeyArns: readonly string[];
  readonly #stack: Stack;
  /** Statement id suffix of each bucket (Sids are alphanumeric and unique in a policy). */
  readonly #sids = new Map<string, string>();

  /** @throws TypeError when a view prefix overlaps a dataset prefix, or for an invalid KMS key ARN. */
  constructor(scope: Construct, props: DatasetAccessProps) {
    this.#stack = Stack.of(scope);
    this.viewPrefix = parseViewPrefix(props.viewPrefix ?? DEFAULT_VIEW_PREFIX);
    this.datasets = [...new Map(props.datasets.map((d) => [d.uri, d])).values()];
    const views = `${this.viewPrefix}/`;
    for (const dataset of this.datasets) {
      if (views.startsWith(dataset.prefix) || dataset.prefix.startsWith(views)) {
        throw new TypeError(
          `viewPrefix "${this.viewPrefix}" overlaps dataset prefix ${dataset.uri}: views are written, datasets are read only; choose a separate prefix`,
        );
      }
    }
    for (const bucket of this.buckets) {
      const clean = bucket.replace(/[^A-Za-z0-9]/g, "");
      const taken = [...this.#sids.values()].includes(clean);
      this.#sids.set(bucket, taken ? `${clean}${this.#sids.size}` : clean);
    }
    this.kmsKeyArns = props.kmsKeyArns ?? [];
    for (const arn of this.kmsKeyArns) {
      if (!KMS_KEY_ARN.test(arn)) {
        throw new TypeError(
          `Expected a KMS key ARN arn:aws:kms:<region>:<account>:key/<id>, got "${arn}"`,
        );
      }
    }
  }

  /** Buckets that hold datasets (and therefore views), sorted. */
  get buckets(): string[] {
    return [...new Set(this.datasets.map((d) => d.bucket))].sort();
  }

  /** `LANCE_FANOUT_ALLOWED_DATASETS`: the prefixes, comma-separated. */
  get allowList(): string {
    return this.datasets.map((d) => d.uri).join(",");
  }

  /** Read-only access to the dataset prefixes: objects, and listings under the prefixes only. */
  readStatements(): PolicyStatement[] {
    const statements: PolicyStatement[] = [];
    for (const bucket of this.buckets) {
      const prefixes = this.datasets.filter((d) => d.bucket === bucket).map((d) => d.prefix);
      statements.push(
        new PolicyStatement({
          sid: this.#sid("ReadDatasets", bucket),
          actions: ["s3:GetObject"],
          resources: prefixes.map((prefix) => this.#objectArn(bucket, `${prefix}*`)),
        }),
        this.#list(this.#sid("ListDatasets", bucket), bucket, prefixes),
      );
    }
    return [...statements, ...this.#kms(["kms:Decrypt"])];
  }

  /**
   * Read and write access to the view prefix of every dataset bucket, without delete: Lance
   * creates views with conditional PUTs and lists their `_versions/`. The one delete
   * Lance asks for, the transaction file of a commit that lost a race to create the same view,
   * is refused harmlessly (test/no-delete.test.ts); gc removes the orphan with its view.
   */
  viewStatements(): PolicyStatement[] {
    const statements: PolicyStatement[] = [];
    for (const bucket of this.buckets) {
      statements.push(
        new PolicyStatement({
          sid: this.#sid("WriteViews", bucket),
          actions: ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
          resources: [this.#objectArn(bucket, `${this.viewPrefix}/*`)],
        }),
        this.#list(this.#sid("ListViews", bucket), bucket, [`${this.viewPrefix}/`]),
      );
    }
    return [...statements, ...this.#kms(["kms:Decrypt", "kms:GenerateDataKey"])];
  }

  /**
   * What gc needs beyond reading the datasets: list the view prefix of every dataset bucket and
   * delete under it. It reads no view object (it lists them), so it gets no `s3:GetObject` there.
   */
  collectStatements(): PolicyStatement[] {
    return this.buckets.flatMap((bucket) => [
      new PolicyStatement({
        sid: this.#sid("DeleteViews", bucket),
        actions: ["s3:DeleteObject"],
        resources: [this.#objectArn(bucket, `${this.viewPrefix}/*`)],
      }),
      this.#list(this.#sid("ListViews", bucket), bucket, [`${this.viewPrefix}/`]),
    ]);
  }

  /** Adds {@link readStatements} to the grantee's policy. */
  grantRead(grantee: IGrantable): void {
    this.#grant(
      grantee,
      this.readStatements(),
      "Read only (s3:GetObject) under a dataset prefix the deployer allowed (datasets): a Lance dataset's keys (data files, deletion files, manifests, indexes) are known only at run time, so every object under the prefix; never a whole bucket or a wildcard action",
    );
  }

  /** Adds {@link viewStatements} to the grantee's policy. */
  grantViews(grantee: IGrantable): void {
    this.#grant(
      grantee,
      this.viewStatements(),
      `Segment views are created at run time, named by content, under ${this.viewPrefix}/ of each dataset bucket, a prefix no dataset prefix overlaps: segment-search reads and writes (no delete) only there`,
    );
  }

  /** Adds {@link collectStatements} to the grantee's policy. */
  grantCollect(grantee: IGrantable): void {
    this.#grant(
      grantee,
      this.collectStatements(),
      `gc deletes views no query can use, named at run time, only under ${this.viewPrefix}/ of each dataset bucket (no dataset prefix overlaps it): the stack's one delete grant`,
    );
  }

  /**
   * Adds the statements to the grantee's policy and acknowledges, on its role, cdk-nag's
   * AwsSolutions-IAM5 finding of each object wildcard they hold, one finding at a time: a
   * wildcard granted elsewhere, or to another role, is still reported.
   */
  #grant(grantee: IGrantable, statements: readonly PolicyStatement[], reason: string): void {
    const principal = grantee.grantPrincipal;
    for (const statement of statements) {
      principal.addToPrincipalPolicy(statement);
      if (!Construct.isConstruct(principal)) continue;
      for (const resource of statement.resources) {
        if (!resource.endsWith("*")) continue;
        Validations.of(principal).acknowledge({
          id: `AwsSolutions-IAM5[Resource::${this.#findingName(resource)}]`,
          reason,
        });
      }
    }
  }

  /** An ARN as cdk-nag names it: a token such as the partition becomes `<AWS::Partition>`. */
  #findingName(arn: string): string {
    if (!Token.isUnresolved(arn)) return arn;
    const flat = (node: unknown): string => {
      if (typeof node === "string") return node;
      const join = (node as { "Fn::Join"?: [string, unknown[]] })["Fn::Join"];
      if (join) return join[1].map(flat).join(join[0]);
      return `<${(node as { Ref: string }).Ref}>`;
    };
    return flat(this.#stack.resolve(arn));
  }

  #sid(kind: string, bucket: string): string {
    return `${kind}${this.#sids.get(bucket)}`;
  }

  #objectArn(bucket: string, keyPattern: string): string {
    return this.#stack.formatArn({
      service: "s3",
      region: "",
      account: "",
      resource: bucket,
      resourceName: keyPattern,
    });
  }

  #list(statementId: string, bucket: string, prefixes: readonly string[]): PolicyStatement {
    return new PolicyStatement({
      sid: statementId,
      actions: ["s3:ListBucket"],
      resources: [
        this.#stack.formatArn({ service: "s3", region: "", account: "", resource: bucket }),
      ],
      conditions: { StringLike: { "s3:prefix": prefixes.map((prefix) => `${prefix}*`) } },
    });
  }

  #kms(actions: string[]): PolicyStatement[] {
    if (this.kmsKeyArns.length === 0 || this.datasets.length === 0) return [];
    return [
      new PolicyStatement({
        actions,
        resources: [...this.kmsKeyArns],
        conditions: {
          StringEquals: { "kms:ViaService": `s3.${this.#stack.region}.amazonaws.com` },
        },
      }),
    ];
  }
}
