#!/usr/bin/env node
/**
 * `tidemark`: operator commands for partition stores and snapshots.
 * Every command prints one JSON document on stdout; progress and errors go
 * to stderr. Exit codes: 0 success; 1 the command failed (a TidemarkError,
 * printed as `tidemark: CODE: message`, or any other error, by its message);
 * 2 a usage error (bad command, option or argument), printed with the usage.
 * No command creates or changes anything it only reads: positions and
 * snapshots refuse a path that is not there rather than create it.
 */
import { realpathSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import { isTidemarkError } from '../errors.js'
import { openSnapshotStore } from '../dfs/open.js'
import type { SnapshotStore } from '../dfs/snapshot-store.js'
import { PartitionStore } from '../store/partition-store.js'
import { collectGarbage } from '../snapshot/gc.js'
import { listManifests, readManifest } from '../snapshot/catalog.js'
import { SnapshotLayout } from '../snapshot/layout.js'
import { SNAPSHOT_DEFAULTS } from '../snapshot/options.js'
import { restoreSnapshot } from '../snapshot/restore.js'

const USAGE = `usage:
  tidemark positions <store-dir>
      the source positions committed in a partition store
  tidemark snapshots <snapshot-store-url> --job J --partition P
      the partition's snapshots, newest first
  tidemark restore <snapshot-store-url> --job J --partition P --target DIR [--snapshot ID] [--no-local] [--allow-empty]
      restores the newest usable snapshot (or ID) into DIR, with progress on stderr
  tidemark gc <snapshot-store-url> --job J --partition P [--retain N] [--grace-ms MS]
      deletes snapshots beyond the newest N (N >= 1) and objects no kept snapshot references
  tidemark --help
      this text

snapshot store URLs: file:///abs/path or s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1`

const OPTIONS = {
  job: { type: 'string' }, partition: { type: 'string' }, target: { type: 'string' }, snapshot: { type: 'string' },
  'no-local': { type: 'boolean' }, 'allow-empty': { type: 'boolean' }, retain: { type: 'string' }, 'grace-ms': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const

type OptionName = keyof typeof OPTIONS

/** The options each command takes; any other is a usage error rather than silently ignored. */
const COMMAND_OPTIONS: Record<string, ReadonlySet<OptionName>> = {
  positions: new Set(),
  snapshots: new Set(['job', 'partition']),
  restore: new Set(['job', 'partition', 'target', 'snapshot', 'no-local', 'allow-empty']),
  gc: new Set(['job', 'partition', 'retain', 'grace-ms']),
}

/** A mistake in the command line: exit 2, with the usage. Only the CLI's own argument handling raises it. */
class UsageError extends Error {}

/** Where main() writes; process by default, captured by tests. */
export interface CliOutput {
  stdout: { write(text: string): unknown }
  stderr: { write(text: string): unknown }
}

function json(value: unknown): string {
  return JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2)
}

function need(value: string | undefined, name: string): string {
  if (value === undefined) throw new UsageError(`missing ${name}`)
  if (value === '') throw new UsageError(`${name} must not be empty`)
  return value
}

function int(value: string | undefined, name: string, fallback: number, min: number): number {
  if (value === undefined) return fallback
  const n = Number(value)
  if (value.trim() === '' || !Number.isSafeInteger(n) || n < min) throw new UsageError(`${name} must be an integer of at least ${min}, got ${JSON.stringify(value)}`)
  return n
}

/** The layout of --job and --partition; checked before anything is opened, so a bad name is a usage error. */
function layoutOf(values: { job?: string | undefined; partition?: string | undefined }): SnapshotLayout {
  const job = need(values.job, '--job')
  const partition = need(values.partition, '--partition')
  try {
    return new SnapshotLayout(job, partition)
  } catch (err) {
    throw new UsageError(`--job ${JSON.stringify(job)} --partition ${JSON.stringify(partition)}: ${(err as Error).message}`, { cause: err })
  }
}

/**
 * Opens the snapshot store named by the command's URL argument for the
 * duration of fn. mustExist: every command here reads, and a mistyped path
 * must fail rather than list nothing. openSnapshotStore throws TypeError and
 * RangeError only for the URL itself, which is a command-line argument here.
 */
async function withSnapshotStore<T>(url: string, fn: (store: SnapshotStore) => Promise<T>): Promise<T> {
  let store: SnapshotStore
  try {
    store = await openSnapshotStore(url, { mustExist: true })
  } catch (err) {
    if (err instanceof TypeError || err instanceof RangeError) throw new UsageError(err.message, { cause: err })
    throw err
  }
  try {
    return await fn(store)
  } finally {
    await store.close()
  }
}

/** Checks the command line and returns the command to run, or 'help'; throws UsageError. */
function parseCommand(argv: string[], out: CliOutput): 'help' | (() => Promise<unknown>) {
  let parsed
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, strict: true, options: OPTIONS })
  } catch (err) {
    // parseArgs reports unknown options, missing option values and the like
    // as TypeErrors with an ERR_PARSE_ARGS_* code.
    if ((err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS_')) throw new UsageError((err as Error).message, { cause: err })
    throw err
  }
  const { positionals, values } = parsed
  if (values.help === true) return 'help'
  const [command, arg, ...extra] = positionals
  if (command === undefined) throw new UsageError('missing <command>')
  // hasOwn: 'toString' is no command.
  const allowed = Object.hasOwn(COMMAND_OPTIONS, command) ? COMMAND_OPTIONS[command] : undefined
  if (allowed === undefined) throw new UsageError(`unknown command ${JSON.stringify(command)}`)
  for (const name of Object.keys(values) as OptionName[]) {
    if (!allowed.has(name)) throw new UsageError(`${command} takes no option --${name}`)
  }
  if (extra.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])}`)

  switch (command) {
    case 'positions': {
      const path = need(arg, '<store-dir>')
      return async () => {
        // create: false, so that a mistyped path or a directory that holds
        // something else is refused and left as it was, never made a store.
        const store = await PartitionStore.open({ path, create: false })
        try {
          return { path: store.path, positions: store.positions() }
        } finally {
          await store.close()
        }
      }
    }
    case 'snapshots': {
      const url = need(arg, '<snapshot-store-url>')
      const layout = layoutOf(values)
      return () => withSnapshotStore(url, async (store) => {
        const listed = []
        for (const ref of await listManifests(store, layout)) {
          try {
            const m = await readManifest(store, layout, ref)
            listed.push({ id: m.id, epoch: m.epoch, sequence: m.sequence, createdAt: m.createdAt, full: m.full, positions: m.positions, stateBytes: m.stateBytes, files: m.files.length, objects: m.objects.length })
          } catch (err) {
            listed.push({ id: ref.id, unreadable: (err as Error).message })
          }
        }
        return listed
      })
    }
    case 'restore': {
      const url = need(arg, '<snapshot-store-url>')
      const layout = layoutOf(values)
      const target = need(values.target, '--target')
      return () => withSnapshotStore(url, (store) => restoreSnapshot({
        snapshotStore: store,
        job: layout.job,
        partition: layout.partition,
        target,
        ...(values.snapshot === undefined ? {} : { snapshot: values.snapshot }),
        useLocal: values['no-local'] !== true,
        allowEmpty: values['allow-empty'] === true,
        onProgress: (p) => out.stderr.write(`restore ${p.snapshot}: ${p.bytesDownloaded}/${p.bytesTotal} bytes, ${p.filesDone}/${p.filesTotal} files\n`),
        onEvent: (e) => { if (e.type === 'snapshot-skipped') out.stderr.write(`skipped ${e.skipped.id}: ${e.skipped.message}\n`) },
      }))
    }
    case 'gc': {
      const url = need(arg, '<snapshot-store-url>')
      const layout = layoutOf(values)
      // At least 1: gc with nothing retained would delete every snapshot.
      const retain = int(values.retain, '--retain', SNAPSHOT_DEFAULTS.retain, 1)
      const graceMs = int(values['grace-ms'], '--grace-ms', SNAPSHOT_DEFAULTS.graceMs, 0)
      return () => withSnapshotStore(url, (store) => collectGarbage(store, layout, { retain, graceMs, now: Date.now(), protect: new Set(), cache: new Map() }))
    }
    default:
      throw new UsageError(`unknown command ${JSON.stringify(command)}`)
  }
}

function describeError(err: unknown): string {
  if (isTidemarkError(err)) return `${err.code}: ${err.message}`
  return err instanceof Error ? err.message : String(err)
}

/** Runs one command line and returns the exit code; it never throws. */
export async function main(argv: string[], out: CliOutput = process): Promise<number> {
  try {
    const run = parseCommand(argv, out)
    if (run === 'help') {
      out.stdout.write(`${USAGE}\n`)
      return 0
    }
    out.stdout.write(`${json(await run())}\n`)
    return 0
  } catch (err) {
    if (err instanceof UsageError) {
      // No arguments at all is a request for the usage, not a mistake to name.
      out.stderr.write(argv.length === 0 ? `${USAGE}\n` : `tidemark: ${err.message}\n${USAGE}\n`)
      return 2
    }
    out.stderr.write(`tidemark: ${describeError(err)}\n`)
    return 1
  }
}

// Run when executed (the bin), not when imported by a test.
if (process.argv[1] !== undefined && pathToFileURL(realpathSync(process.argv[1])).href === import.meta.url) {
  process.exitCode = await main(process.argv.slice(2))
}
