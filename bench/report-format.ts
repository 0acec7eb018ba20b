/**
 * What the report's parts share: the record type, number formatting, the goal rows and the
 * frame of an SVG chart.
 * @module
 */
import type { PlanRecord } from "./modes.js";

/** One JSON line of bench/results, as the report reads it. */
export type Rec = Record<string, unknown> & { type: string; runId: string };

export interface Goal {
  goal: string;
  measured: string;
  verdict: string;
}

/** The commit a report is of: that of the newest run without uncommitted changes. */
export function reportCommit(runs: readonly Rec[]): string | undefined {
  const clean = runs.filter((r) => !(r.sources as { dirty?: boolean }).dirty);
  const newestRun = [...clean].sort((a, b) => b.runId.localeCompare(a.runId))[0];
  return newestRun ? String((newestRun.sources as { commit?: string }).commit) : undefined;
}

/** Whether run `runId` is of the report's commit, clean: only such runs judge goals. */
export function isCurrent(
  runs: readonly Rec[],
  commit: string | undefined,
  runId: string,
): boolean {
  const run = runs.find((r) => r.runId === runId);
  const src = (run?.sources ?? {}) as { commit?: string; dirty?: boolean };
  return commit !== undefined && src.commit === commit && !src.dirty;
}

export const fmt = (v: number | null | undefined, d = 2) =>
  v === undefined || v === null || Number.isNaN(v) ? "–" : v.toFixed(d);

export const tasksText = (n: number) => `${n} ${n === 1 ? "task" : "tasks"}`;

/** Plot area: width, height and the left, right, top and bottom margins, in pixels. */
export interface SvgBox {
  readonly W: number;
  readonly H: number;
  readonly L: number;
  readonly R: number;
  readonly T: number;
  readonly B: number;
}

/** The opening elements of a chart: background, title, both axes and their labels. */
export function svgFrame(title: string, box: SvgBox, xLabel: string, yLabel: string): string[] {
  const { W, H, L, R, T, B } = box;
  const mid = (T + H - B) / 2;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11" role="img" aria-label="${escapeXml(title)}">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="18" text-anchor="middle" font-size="13">${escapeXml(title)}</text>`,
    `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="black"/>`,
    `<line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="black"/>`,
    `<text x="${(L + W - R) / 2}" y="${H - 8}" text-anchor="middle">${escapeXml(xLabel)}</text>`,
    `<text x="14" y="${mid}" text-anchor="middle" transform="rotate(-90 14 ${mid})">${escapeXml(yLabel)}</text>`,
  ];
}

export function escapeXml(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

/** A row with the plans it ran (recorded since the runs after f048c3e). */
interface Planned {
  readonly p50: number;
  readonly plans?: readonly PlanRecord[];
}

/** The row's plan, if it ran one and only one. */
const onlyPlan = (r: Planned) => (r.plans?.length === 1 ? r.plans[0] : undefined);

/** A row's one plan, in words ("2 groups x 1 chunk, refine in the merge"), if it had one. */
export function planText(r: Planned): string | undefined {
  const plan = onlyPlan(r);
  if (!plan) return undefined;
  const refine = plan.refine === "none" ? "no refine" : `refine in the ${plan.refine}`;
  return `${plan.groups} group${plan.groups === 1 ? "" : "s"} x ${plan.chunks} chunk${plan.chunks === 1 ? "" : "s"}, ${refine}`;
}

/**
 * The fixed mode, of those within 1.1x of the best (`bestP50`), that ran the one plan `auto`
 * ran, if any. Such a pair ran the same tasks, so what tells their p50s apart is the spread of
 * one plan over the run, not `auto`'s choice: the auto goals count it as met, and say so.
 */
export function planTwin<T extends Planned>(
  auto: T,
  fixed: readonly T[],
  bestP50: number,
): T | undefined {
  const key = JSON.stringify(onlyPlan(auto));
  if (key === undefined) return undefined;
  return fixed
    .filter((r) => JSON.stringify(onlyPlan(r)) === key && r.p50 <= 1.1 * bestP50)
    .sort((a, b) => a.p50 - b.p50)[0];
}

/** The verdict of an `auto` goal met through {@link planTwin}: whose plan, and the gap it explains. */
export const twinVerdict = (mode: string, p50: string, ratio: number) =>
  `met: the plan of ${mode} (${p50} ms); ${fmt(ratio)}x is one plan's spread`;
