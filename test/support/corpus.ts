/**
 * The compatibility corpus: each folder of test/fixtures/writers/ holds one Lance dataset
 * (`<table>.lance/`) written by another tool, a `source.json` saying which tool wrote it and
 * where it comes from, and optionally the writer's own answers to a few queries (`expected.json`).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";

export const CORPUS_DIR = join(import.meta.dirname, "..", "fixtures", "writers");

const sourceSchema = z.strictObject({
  /** The tool and release that wrote it, e.g. "pylance 0.21.0". */
  writer: z.string().min(1),
  /** The Lance version its manifest names as writer (`lance <version>`), or null when it names none. */
  lance: z.string().min(1).nullable(),
  /** A public repository's copy (at a commit), or a script in the folder that wrote it here. */
  source: z.union([
    z.strictObject({
      repository: z.string().regex(/^[\w.-]+\/[\w.-]+$/),
      commit: z.string().regex(/^[0-9a-f]{40}$/),
      path: z.string().min(1),
    }),
    z.strictObject({ script: z.string().min(1), package: z.string().min(1) }),
  ]),
  /** What it shows that other datasets of the corpus may not. */
  features: z.array(z.string().min(1)).min(1),
});
export type CorpusSource = z.infer<typeof sourceSchema>;

/** Answers the writer itself gave when it wrote the dataset (`expected.json`, where recorded). */
const writerAnswersSchema = z.strictObject({
  writer: z.string(),
  version: z.number().int().min(1),
  k: z.number().int().min(1),
  nprobes: z.number().int().min(1),
  queries: z.array(z.array(z.number())),
  /** Row ids per query, as decimal strings. */
  answers: z.array(z.array(z.string())),
});
export type WriterAnswers = z.infer<typeof writerAnswersSchema>;

export interface CorpusDataset {
  /** The folder's name. */
  readonly name: string;
  readonly dir: string;
  /** The dataset folder's name (`<table>.lance`) and its table name. */
  readonly file: string;
  readonly table: string;
  readonly source: CorpusSource;
  readonly writerAnswers: WriterAnswers | undefined;
}

/** Every dataset of the corpus (each folder with a `source.json`), by folder name. */
export function corpus(): CorpusDataset[] {
  return readdirSync(CORPUS_DIR, { withFileTypes: true })
    .filter(
      (entry) => entry.isDirectory() && existsSync(join(CORPUS_DIR, entry.name, "source.json")),
    )
    .map((entry) => entry.name)
    .sort()
    .map((name) => {
      const folder = join(CORPUS_DIR, name);
      const tables = readdirSync(folder).filter((f) => f.endsWith(".lance"));
      if (tables.length !== 1 || !tables[0]) {
        throw new Error(`${folder} must hold exactly one <table>.lance, found ${tables.length}`);
      }
      const json = (file: string) => JSON.parse(readFileSync(join(folder, file), "utf8"));
      return {
        name,
        dir: join(folder, tables[0]),
        file: tables[0],
        table: tables[0].slice(0, -".lance".length),
        source: sourceSchema.parse(json("source.json")),
        writerAnswers: existsSync(join(folder, "expected.json"))
          ? writerAnswersSchema.parse(json("expected.json"))
          : undefined,
      };
    });
}
