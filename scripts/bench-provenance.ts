// Where a bench figure comes from, and whether it still says anything: the
// commit it was measured at (saved by bench/_figures.ts), and whether any
// file of the code it measures changed after that commit. "The code it
// measures" is the bench's own files (bench/NAME.ts and the bench/ helpers it
// imports), the layers its row in scripts/readme-bench.ts names, and
// package-lock.json: a change to any of them may move the figure, so the
// figure is stale until the bench runs again. Computed from git, never typed
// (issue 37). The layers are named rather than followed through imports
// because every bench imports src/index.ts, which reaches every layer.
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'

export interface Provenance {
  /** The commit the figure was measured at (abbreviated), or undefined when unknown. */
  commit?: string
  /** True when the measured tree had uncommitted changes to the code it measures. */
  dirty: boolean
  /** The first later commit that changed the measured code, and one file it changed; undefined when none (or unknown). */
  staleBy?: { commit: string; file: string }
  /** Why staleness could not be computed (no git, a commit unknown to this clone). */
  unknown?: string
}

const IMPORT = /(?:from\s+|import\s*\(\s*|import\s+)['"](\.[^'"]+)['"]/g

// Writes the figure file after the measurement: a change to it moves no figure.
const NOT_MEASURED = new Set(['bench/_figures.ts'])

/** The files of bench/ that `entry` (a bench file, relative to `root`) reaches through relative imports, `entry` included. */
export function benchFiles(root: string, entry: string): string[] {
  const seen = new Set<string>()
  const queue = [entry]
  while (queue.length > 0) {
    const file = queue.pop()!
    if (seen.has(file) || NOT_MEASURED.has(file) || !file.startsWith('bench/') || !existsSync(join(root, file))) continue
    seen.add(file)
    for (const m of readFileSync(join(root, file), 'utf8').matchAll(IMPORT)) {
      queue.push(relative(root, resolve(dirname(join(root, file)), m[1]!)).replace(/\.js$/, '.ts'))
    }
  }
  return [...seen].sort()
}

/** The bench file a figure file stands for: the word after `npm run bench --` in its command, else its name. */
export function benchFileOf(name: string, command: unknown): string {
  const m = typeof command === 'string' ? /^npm run bench -- (\S+)/.exec(command) : null
  return `bench/${m?.[1] ?? name}.ts`
}

function git(root: string, args: string[]): string {
  return execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim()
}

/**
 * The provenance of one figure file: `commit` and `dirty` as the bench saved
 * them; a file saved before benches recorded their commit falls back to the
 * commit that last wrote the file (the figure cannot be newer than that).
 */
export function provenance(root: string, name: string, figures: Record<string, unknown>, layers: readonly string[]): Provenance {
  const dirty = figures.dirty === true
  let commit = typeof figures.commit === 'string' ? figures.commit : undefined
  try {
    // A shallow clone holds neither the commits before its tip nor the
    // history that would tell when a figure file was written.
    if (git(root, ['rev-parse', '--is-shallow-repository']) === 'true') return { commit: commit?.slice(0, 7), dirty, unknown: 'the clone is shallow' }
    if (commit === undefined) commit = git(root, ['log', '-1', '--format=%H', '--', `bench/results/${name}.json`]) || undefined
    if (commit === undefined) return { dirty, unknown: 'the figure file is not committed' }
    const full = git(root, ['rev-parse', '--verify', '--quiet', `${commit}^{commit}`])
    const files = [...benchFiles(root, benchFileOf(name, figures.command)), ...layers, 'package-lock.json']
    const later = git(root, ['log', '--format=%h', `${full}..HEAD`, '--', ...files]).split('\n').filter((l) => l !== '')
    const short = full.slice(0, 7)
    if (later.length === 0) return { commit: short, dirty }
    const oldest = later[later.length - 1]!
    const changed = git(root, ['diff-tree', '--no-commit-id', '--name-only', '-r', oldest, '--', ...files]).split('\n').filter((l) => l !== '')
    return { commit: short, dirty, staleBy: { commit: oldest, file: changed[0] ?? files[0]! } }
  } catch {
    // No git, or a commit this clone does not hold (a shallow clone).
    return { commit: commit?.slice(0, 7), dirty, unknown: 'git could not tell' }
  }
}
