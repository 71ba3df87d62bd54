import { readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const README = join(dirname(fileURLToPath(import.meta.url)), '..', 'README.md')

/**
 * Replaces the README's generated block between the `start` and `end` markers
 * (both included in `block`). The README's figures are only ever written this
 * way, from a bench's or a test run's output, never by hand; a README without
 * the markers exits 2 rather than appending somewhere unexpected.
 */
export function writeReadmeBlock(start: string, end: string, block: string, from: string): void {
  const readme = readFileSync(README, 'utf8')
  const i = readme.indexOf(start)
  const j = readme.indexOf(end)
  if (i === -1 || j === -1 || j < i) {
    console.error(`README.md has no ${start} ... ${end} block`)
    process.exit(2)
  }
  writeFileSync(README, readme.slice(0, i) + block + readme.slice(j + end.length))
  console.log(`README.md: ${from}`)
}
