/**
 * Every view the plans of one version can use, whatever the request: for each vector index (or,
 * on a vector column without one, its fragments searched flat), the groups at each width, and
 * the flat group of the unindexed tail. `fanout prepare` builds them before the first query;
 * `fanout gc` keeps them. Pure: no I/O.
 * @module
 */
import type { DatasetLocation } from "../dataset.js";
import type { DatasetVersion } from "../dataset-version.js";
import { FanoutError } from "../errors.js";
import { chooseIndex, type IndexChoice, vectorDimension } from "../index-choice.js";
import { workUnits } from "../planner.js";
import type { Coverage } from "../request.js";
import { powersOfTwoUpTo } from "../strategy.js";
import {
  type GroupOfSegments,
  pinnedVersion,
  type ViewSpec,
  viewName,
  viewSpecOfGroup,
} from "./identity.js";

export interface VersionViewsOptions {
  /** The widest plan: `LANCE_FANOUT_MAX_TASKS`. */
  readonly maxTasks: number;
  /** Coverages whose plans count: only "fallback" plans a flat group. */
  readonly coverages: readonly Coverage[];
  /**
   * `likely`: the widths `auto` weighs (powers of two) and the widest, for prepare;
   * `all`: every width a request's `maxTasks` can ask for, for gc.
   */
  readonly widths: "likely" | "all";
}

/** The distinct views of a version, by name. */
export function versionViews(
  read: DatasetVersion,
  dataset: DatasetLocation,
  options: VersionViewsOptions,
): Map<string, ViewSpec> {
  const views = new Map<string, ViewSpec>();
  const pinned = pinnedVersion(read, dataset);
  const add = (indexName: string, group: GroupOfSegments) => {
    const spec = viewSpecOfGroup(pinned, indexName, group);
    views.set(viewName(spec), spec);
  };
  for (const choice of indexChoices(read)) {
    for (const coverage of options.coverages) {
      const index = plannable(read, choice, coverage);
      if (!index) continue;
      const units = workUnits(index, coverage);
      const widest = Math.max(1, Math.min(units.count, options.maxTasks));
      const widths =
        options.widths === "all"
          ? Array.from({ length: widest }, (_, i) => i + 1)
          : powersOfTwoUpTo(widest);
      for (const width of widths) for (const group of units.group(width)) add(index.name, group);
      for (const group of units.flat) add(index.name, group);
    }
  }
  return views;
}

/** The index a request with this choice and coverage plans with, or none if it is refused. */
function plannable(
  read: DatasetVersion,
  choice: { column: string; indexName?: string },
  coverage: Coverage,
): IndexChoice | undefined {
  try {
    return chooseIndex(read, { ...choice, allowMissing: coverage === "fallback" });
  } catch (err) {
    // No index and no fallback, or a metric no request can search: no views.
    if (err instanceof FanoutError) return undefined;
    throw err;
  }
}

/** Each vector index by column and name, and each vector column without an index. */
function indexChoices(read: DatasetVersion): { column: string; indexName?: string }[] {
  const columns = read.manifest.fields.filter(
    (f) => f.parentId === -1 && vectorDimension(f) !== undefined,
  );
  return columns.flatMap((field) => {
    const names = new Set(read.indices.filter((i) => i.field.id === field.id).map((i) => i.name));
    if (names.size === 0) return [{ column: field.name }];
    return [...names].map((indexName) => ({ column: field.name, indexName }));
  });
}
