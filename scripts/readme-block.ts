import { readFileSync, writeFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..')

/**
 * Replaces the generated block between the `start` and `end` markers (both
 * included in `block`) of `doc`, a path from the repository's root (a page of
 * docs/). Figures in the documentation are only ever written this way, from a
 * bench's or a test run's output, never by hand; a page without the markers
 * exits 2 rather than appending somewhere unexpected.
 */
export function writeDocBlock(doc: string, start: string, end: string, block: string, from: string): void {
  const path = join(ROOT, doc)
  const text = readFileSync(path, 'utf8')
  const i = text.indexOf(start)
  const j = text.indexOf(end)
  if (i === -1 || j === -1 || j < i) {
    console.error(`${doc} has no ${start} ... ${end} block`)
    process.exit(2)
  }
  writeFileSync(path, text.slice(0, i) + block + text.slice(j + end.length))
  console.log(`${relative(ROOT, path)}: ${from}`)
}
