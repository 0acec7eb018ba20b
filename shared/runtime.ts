/**
 * Per-process state shared by every query: configuration, object reader, open tables and views.
 * On Lambda it lives as long as the execution environment, so warm invocations reuse it.
 * @module
 */
import { type FanoutConfig, loadConfig } from "./config.js";
import { type DatasetLocation, resolveDataset } from "./dataset.js";
import { VersionCache } from "./dataset-version.js";
import { TableCache } from "./lance/tables.js";
import { createObjectStore, type ObjectStore } from "./objects.js";
import { ViewCache } from "./views/cache.js";

export interface Runtime {
  readonly config: FanoutConfig;
  readonly objects: ObjectStore;
  /** Dataset versions as Lance reads them (manifest and lancedb's facts). */
  readonly versions: VersionCache;
  readonly tables: TableCache;
  readonly views: ViewCache;
  /** Parses and authorises a dataset URI against this runtime's configuration. */
  resolveDataset(dataset: string): DatasetLocation;
  /**
   * Keeps `work` running after the answer, and this environment from its next task until it
   * settles (on Lambda, an extension: functions/common/extension.ts). Absent, a task that must
   * finish work before a freeze awaits it before answering.
   */
  readonly afterAnswer?: (work: Promise<unknown>) => void;
}

export function createRuntime(config: FanoutConfig = loadConfig()): Runtime {
  const objects = createObjectStore(config.s3);
  const tables = new TableCache(config.s3, objects, config.metadataCacheBytes);
  return {
    config,
    objects,
    versions: new VersionCache(objects, tables),
    tables,
    views: new ViewCache(config, objects),
    resolveDataset: (dataset) => resolveDataset(dataset, config),
  };
}

let processRuntime: Runtime | undefined;

/** The runtime of this process, configured from the environment on first use. */
export function defaultRuntime(): Runtime {
  processRuntime ??= createRuntime();
  return processRuntime;
}
