// Shared by the CLI tests: main() with captured output, the bin as a child
// process, and a store with snapshots made by the library itself.
import { execFile } from 'node:child_process'
import { readdirSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { main } from '../../src/cli/main.js'
import { FsSnapshotStore, mapState, openFileLog, PartitionStore, Snapshotter, valueState } from '../../src/index.js'
import { tempDir } from '../helpers/tmp.js'

const run = promisify(execFile)
const MAIN = join(import.meta.dirname, '../../src/cli/main.ts')

/** The bin in a child process (through tsx): for what only a process shows (exit code, stdin, environment). */
export function cli(args: string[], options: { env?: NodeJS.ProcessEnv; input?: string } = {}): Promise<{ stdout: string; stderr: string }> {
  const child = run(process.execPath, ['--import', 'tsx', MAIN, ...args], { env: options.env ?? process.env })
  if (options.input !== undefined) {
    child.child.stdin!.end(options.input)
  } else {
    child.child.stdin!.end()
  }
  return child
}

export interface Result {
  code: number
  stdout: string
  stderr: string
}

/** Runs main() in this process with captured output: the exit code and what it wrote. */
export async function tidemark(...argv: string[]): Promise<Result> {
  return tidemarkWith({}, ...argv)
}

export async function tidemarkWith(options: { tty?: boolean; stdin?: string }, ...argv: string[]): Promise<Result> {
  let stdout = ''
  let stderr = ''
  const code = await main(argv, {
    stdout: { write: (t: string) => (stdout += t) },
    stderr: { write: (t: string) => (stderr += t), ...(options.tty === true ? { isTTY: true, columns: 100 } : {}) },
    ...(options.stdin === undefined ? {} : { stdin: Readable.from([Buffer.from(options.stdin)]) }),
    env: {},
  })
  return { code, stdout, stderr }
}

/** JSON lines of a state or log command. */
export function lines(stdout: string): unknown[] {
  return stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as unknown)
}

export const counts = valueState<number>('counts')
export const visits = mapState<number>('visits')

export interface Fixture {
  dir: string
  store: string
  url: string
  log: string
  /** Newest first. */
  snapshotIds: string[]
}

/**
 * A partition store of job j, partition 0 (topic t) with two snapshots: at
 * offset 41 (counts a=1, ab=2, b=3; visits u1/x=5) and at offset 43 (a=3),
 * and a file log of 50 events (0..49) { k } whose handler (handlerModule)
 * adds 1 to counts[k].
 */
export async function fixture(): Promise<Fixture> {
  const dir = tempDir()
  const store = await PartitionStore.open({ path: join(dir, 'store'), states: [counts, visits] })
  const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
  const snapshotter = new Snapshotter({ snapshotStore: snapshots, partitionStore: store, job: 'j', partition: 0 })
  let tx = store.transaction()
  tx.value(counts).put('a', 1)
  tx.value(counts).put('ab', 2)
  tx.value(counts).put('b', 3)
  tx.value(counts).put(Buffer.from([0xff, 0xfe]) as unknown as string, 7)
  tx.map(visits).put('u1', 'x', 5)
  tx.map(visits).put('u2', 'y', 6)
  await tx.commit({ topic: 't', partition: 0, offset: 41n })
  const first = await snapshotter.takeSnapshot()
  tx = store.transaction()
  tx.value(counts).put('a', 3)
  await tx.commit({ topic: 't', partition: 0, offset: 43n })
  const second = await snapshotter.takeSnapshot()
  await store.close()
  const log = await openFileLog(join(dir, 'log'))
  // Concurrent appends: the file log writes them in call order with one fsync.
  await Promise.all(Array.from({ length: 50 }, (_, i) => log.append(Buffer.from(JSON.stringify({ k: i % 2 === 0 ? 'a' : 'b' })))))
  await log.close()
  return { dir, store: join(dir, 'store'), url: pathToFileURL(join(dir, 'snapshots')).href, log: join(dir, 'log'), snapshotIds: [second.id, first.id] }
}

/** A --handler module for the fixture: counts[event.k] += 1. */
export function handlerModule(dir: string): string {
  const path = join(dir, 'handler.mjs')
  const index = pathToFileURL(join(import.meta.dirname, '../../src/index.ts')).href
  writeFileSync(path, `import { valueState, mapState } from ${JSON.stringify(index)}
const counts = valueState('counts')
export const states = [counts, mapState('visits')]
export function handler(tx, event) { const v = tx.value(counts); v.put(event.k, (v.getSync(event.k) ?? 0) + 1) }
`)
  return path
}

/** Names, sizes and mtimes of everything under dir: equal before and after means nothing was changed. */
export function tree(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).sort().map((name) => {
    const s = statSync(join(dir, name))
    return `${name} ${s.isDirectory() ? 'dir' : s.size} ${s.mtimeMs}`
  })
}

/**
 * A store (and one snapshot of it, job j partition 0) whose dump is some
 * megabytes of JSON lines: more than a pipe and the reader's buffers hold,
 * so a dump into a pipe that nobody reads, or that was closed, is still
 * writing.
 */
export async function largeFixture(entries = 40_000): Promise<{ dir: string; store: string; url: string }> {
  const dir = tempDir()
  const store = await PartitionStore.open({ path: join(dir, 'store'), states: [counts] })
  const value = 'v'.repeat(100)
  for (let i = 0; i < entries; i += 10_000) {
    const tx = store.transaction()
    const end = Math.min(entries, i + 10_000)
    for (let j = i; j < end; j++) tx.value(counts).put(`key-${String(j).padStart(8, '0')}-${value}`, j)
    await tx.commit({ topic: 't', partition: 0, offset: BigInt(end - 1) })
  }
  const snapshots = new FsSnapshotStore({ root: join(dir, 'snapshots') })
  await new Snapshotter({ snapshotStore: snapshots, partitionStore: store, job: 'j', partition: 0 }).takeSnapshot()
  await snapshots.close()
  await store.close()
  return { dir, store: join(dir, 'store'), url: pathToFileURL(join(dir, 'snapshots')).href }
}

