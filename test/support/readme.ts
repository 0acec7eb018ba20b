/**
 * The README's code blocks, as a test runs them: a section's fenced blocks of one language.
 * @module
 */
import { readFileSync } from "node:fs";

const README = new URL("../../README.md", import.meta.url);

/** The fenced `lang` blocks of the README section under `heading` (to the next heading). */
export function readmeBlocks(heading: string, lang: string): string[] {
  const lines = readFileSync(README, "utf8").split("\n");
  const start = lines.indexOf(heading);
  if (start < 0) throw new Error(`README.md has no heading ${heading}`);
  const blocks: string[] = [];
  let block: string[] | undefined;
  let fenced = false;
  for (const line of lines.slice(start + 1)) {
    if (line.startsWith("```")) {
      if (fenced && block) blocks.push(block.join("\n"));
      block = !fenced && line === `\`\`\`${lang}` ? [] : undefined;
      fenced = !fenced;
    } else if (fenced) {
      block?.push(line);
    } else if (/^#{1,3} /.test(line)) {
      break;
    }
  }
  if (blocks.length === 0) throw new Error(`README.md's ${heading} has no ${lang} block`);
  return blocks;
}
